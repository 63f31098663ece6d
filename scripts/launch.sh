#!/usr/bin/env bash
# Run train.py inside a tmux session, so a dropped SSH connection never stops training:
#
#     scripts/launch.sh config/train_gpt3_6b.py [--key=value ...]
#
# The session is named after the run's out_dir (out/gpt3_6b -> train_out_gpt3_6b; set SESSION to
# choose another), so two runs never share one. If it is already training, this attaches to it
# instead of starting a second run on the same out_dir (train.py's lock refuses that too). A run
# that dies within LAUNCH_WAIT seconds (default 10: a misspelled key, a missing data_dir) is
# reported with its last lines and a non-zero exit.
# If its run has ended (finished, crashed, or the machine rebooted), this starts train.py again,
# which resumes from the newest checkpoint: after a reboot, re-run the same command.
# NPROC=8 runs it under torchrun on 8 GPUs. Detach with Ctrl-b d; stop safely (train.py saves
# first) with: tmux send-keys -t SESSION C-c
set -euo pipefail

if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
    echo "usage: scripts/launch.sh CONFIG [--key=value ...]   (env: SESSION, NPROC, PYTHON)" >&2
    exit 2
fi
config=$1
if [ ! -f "$config" ]; then
    echo "launch.sh: config file not found: $config" >&2
    exit 1
fi
if ! command -v tmux >/dev/null; then
    echo "launch.sh: tmux is not installed (apt-get install -y tmux)" >&2
    exit 1
fi
config=$(cd "$(dirname "$config")" && pwd)/$(basename "$config")  # the pane starts in the repo root
repo=$(cd "$(dirname "$0")/.." && pwd)
# the tmux server may have been started from another shell (another venv, another PATH):
# pass the interpreter by its absolute path
python=$("${PYTHON:-python}" -c 'import sys; print(sys.executable)')
shift
# the config as train.py will read it: a bad key stops here, with the configurator's one line
out_dir=$(cd "$repo" && "$python" -c 'import sys, configurator; print(configurator.load_config_or_exit(sys.argv[1:]).out_dir)' "$config" "$@")
session=${SESSION:-train_${out_dir#./}}
session=${session//[.:\/ ]/_}  # tmux forbids . and : in session names
if [ "${NPROC:-1}" -gt 1 ]; then
    # torchrun SIGKILLs its workers 30 s after forwarding a stop signal, mid-save at 6.7B: give a
    # save 15 minutes where this torchrun has the flag (recent PyTorch)
    cmd=("$python" -m torch.distributed.run --standalone "--nproc_per_node=$NPROC")
    if "$python" -m torch.distributed.run --help 2>/dev/null | grep -q -- --shutdown-timeout; then
        cmd+=(--shutdown-timeout=900)
    else
        echo "warning: this torchrun has no --shutdown-timeout: a stop signal kills a save after 30 s" >&2
    fi
    cmd+=(train.py "$config" "$@")
else
    cmd=("$python" train.py "$config" "$@")
fi

# the last lines of the run that ended: what it wrote to train.log, where it wrote any (under torchrun the pane
# ends with torchrun's own report, a traceback even after a clean stop; LOG_FROM, the log's size when the run
# started, is kept in the session), else the dead pane's whole history (-S -) with wrapped lines joined (-J),
# less the command's header and tmux's "Pane is dead": an error before train.log opened (the lock, an import)
log=$out_dir/train.log
[[ $out_dir = /* ]] || log=$repo/$log  # train.py runs in the repo root
log_size() { if [ -f "$log" ]; then wc -c < "$log"; else echo 0; fi; }
last_lines() {
    local from
    from=$(tmux show-environment -t "=$session" LOG_FROM 2>/dev/null | cut -d= -f2)
    if [ -n "$from" ] && [ "$(log_size)" -gt "$from" ]; then
        tail -c +"$((from + 1))" "$log" | grep -v -e '^$' -e '^=== ' | tail -n 5
    else
        tmux capture-pane -p -J -S - -t "=$session:" | grep -v -e '^$' -e '^=== ' -e '^Pane is dead' | tail -n 5
    fi
}

if tmux has-session -t "=$session" 2>/dev/null; then
    if [ "$(tmux display-message -p -t "=$session:" '#{pane_dead}')" = 1 ]; then
        echo "the last run in tmux session $session has ended; its final lines:"
        last_lines
        tmux kill-session -t "=$session"
    else
        echo "tmux session $session is already running"
    fi
fi
if ! tmux has-session -t "=$session" 2>/dev/null; then
    # GPU selection, collectives, allocator and wandb settings from this shell, which a tmux
    # server started earlier from another shell would not have
    env_args=()
    while IFS= read -r var; do
        env_args+=(-e "$var=${!var}")
    done < <(compgen -e | grep -E '^(CUDA_|HIP_|ROCR_|NCCL_|TORCH_|PYTORCH_|WANDB_|OMP_NUM_THREADS$)' || true)
    # remain-on-exit keeps a finished or crashed run's output on screen until the next launch
    started_at=$(log_size)
    tmux new-session -d -s "$session" -c "$repo" "${env_args[@]}" "$(printf '%q ' "${cmd[@]}")" \; \
        set-option -w -t "=$session:" remain-on-exit on \; set-environment -t "=$session" LOG_FROM "$started_at"
    for _ in $(seq "${LAUNCH_WAIT:-10}"); do  # a run that dies at once must not look started
        sleep 1
        if [ "$(tmux display-message -p -t "=$session:" '#{pane_dead}')" = 1 ]; then
            echo "launch.sh: train.py exited at start-up; its last lines:" >&2
            last_lines >&2
            tmux kill-session -t "=$session"
            exit 1
        fi
    done
    [ "$PWD" = "$repo" ] && shown=$out_dir/train.log || shown=$log  # a path that works from here
    echo "started ${cmd[*]} in tmux session $session (log: $shown)"
fi
if [ -t 0 ] && [ -t 1 ] && [ -z "${TMUX:-}" ]; then
    exec tmux attach -t "=$session"
fi
echo "attach with: tmux attach -t $session"
