#!/usr/bin/env bash
# Training speed, memory and checkpoint I/O on one H200 or MI300X as one JSON file, all of it (the
# environment check included) within GPU_CHECK_BUDGET seconds: default 540, 9 minutes of a 10-minute slot.
#
#     scripts/gpu_check.sh [OUT_JSON]        (default gpu_check.json)
#
# 1. the environment: nvidia-smi or rocm-smi, then scripts/check_env.py on the first run's config, at
#    most 60 s (its data check fails where no data was prepared; the benchmarks use random tokens);
# 2. the lines of GPU_CHECK_RUNS, one `scripts/bench.py --json` each, the riskiest and most valuable
#    first. By default, on GPU_CHECK_MODEL (GPT-3 6.7B's config): (1) what activation_checkpointing=auto
#    picks, compiled; (2) the same with fp8=tensorwise; (3) with fp8=rowwise; (4) one checkpoint save and
#    its load (bench.py --save_resume: seconds and GB/s), of a smaller config when 6.7B's checkpoint does
#    not fit the free disk; (5) auto's pick eager (--compile=False); (6) the sweep: micro-batch 4 x 160
#    with no recompute, selective and full, then 8 x 80 with the same three. Each setting: tokens/s for a
#    step of the config's real 4 x 160 x 2048 tokens (micro-batches and the optimizer step timed apart),
#    MFU, the measured allocated and reserved peaks, and whether the peak fits the budget by cost.fits;
# 3. OUT_JSON: {"date", "host", "commit", "env", "env_report", "env_exit", "budget_s", "seconds",
#    "finished", "runs": [{"args", "status", "exit", "skipped", "note", "seconds", "bench"}]}, "bench"
#    being bench.py's JSON (null if skipped or killed), "status" one of ok, failed, timeout (killed at the
#    end of the budget), skipped, not run. It is rewritten (a temp file, then a rename) after the
#    environment check and after every line, so a kill keeps what finished; "finished" is true in the
#    last write only.
#
# Before the lines run, one Python (lines.py below) reads them all: a line whose setting cost.py's
# estimate refuses on the device's whole memory is skipped, saying why (train.py, which measures what
# is free, would refuse it too, after its start-up); a --save_resume line whose checkpoint does not fit
# 90% of the free disk takes the largest config/train_gpt3_*.py whose checkpoint does; and the first line
# that names its policy (--activation_checkpointing=none, selective or full) gets --simulate, cost.py's
# simulated peak beside the measured one (tens of seconds at 6.7B: once, its time kept back from the line).
# The time: each line's timeout is what is left of the budget (bench.py gets 30 s less, 90 s on the line
# that simulates, for its start-up and simulation), so the script cannot overrun; a line with less than
# GPU_CHECK_MIN_S seconds left (default 60) is skipped. A TERM or INT stops the running line and writes
# the JSON before exiting. Settings: GPU_CHECK_STEPS (timed steps, default 3) after GPU_CHECK_WARMUP
# (default 1) of GPU_CHECK_GRAD_ACCUM micro-batches (default 4), GPU_CHECK_TIMEOUT seconds per train.py
# (default 180), PYTHON (default python). On a CPU, with a tiny config (tests/test_gpu_check.py does this):
#     GPU_CHECK_RUNS="config/train_tiny.py --device=cpu --sweep --batch_sizes=4 --recompute=none,all" \
#         GPU_CHECK_STEPS=1 scripts/gpu_check.sh /tmp/check.json
set -uo pipefail  # no -e: a failed check or setting is recorded, and the rest still run
SECONDS=0  # the budget counts everything from here
cd "$(dirname "$0")/.."

out=${1:-gpu_check.json}
python=${PYTHON:-python}
budget=${GPU_CHECK_BUDGET:-540}
min_s=${GPU_CHECK_MIN_S:-60}
# GPT-3 6.7B's global batch is 4 x 160 sequences, so micro-batch 8 is 8 x 80
model=${GPU_CHECK_MODEL:-config/train_gpt3_6b.py}
default_runs="$model --compile=True
$model --compile=True --fp8=tensorwise
$model --compile=True --fp8=rowwise
$model --save_resume
$model --compile=False
$model --batch_size=4 --activation_checkpointing=none
$model --batch_size=4 --activation_checkpointing=selective
$model --batch_size=4 --activation_checkpointing=full
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=none
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=selective
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=full"
runs=${GPU_CHECK_RUNS:-$default_runs}
common=(--steps="${GPU_CHECK_STEPS:-3}" --warmup="${GPU_CHECK_WARMUP:-1}" --grad_accum="${GPU_CHECK_GRAD_ACCUM:-4}"
        --timeout="${GPU_CHECK_TIMEOUT:-180}" --json)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

n=0
while IFS= read -r line; do
    [ -z "$line" ] && continue
    n=$((n + 1))
    echo "$line" > "$work/run_$n.args"
done <<< "$runs"

cat > "$work/lines.py" <<'EOF'
"""Each line before it runs: skipped where the estimate refuses it, a save sized to the free disk, one --simulate."""
import os
import shutil
import sys
import tempfile

sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "scripts")]
import bench  # noqa: E402
import configurator  # noqa: E402
from trainer import cost, machine, optim  # noqa: E402

work, n = sys.argv[1], int(sys.argv[2])
# the configs a save and resume may fall back to, largest first
SAVES = ["config/train_gpt3_6b.py", "config/train_gpt3_2_7b.py", "config/train_gpt3_1_3b.py",
         "config/train_gpt3_760m.py", "config/train_gpt3_350m.py", "config/train_gpt3_125m.py"]


def write(i, kind, text):
    with open(os.path.join(work, f"run_{i}.{kind}"), "w") as f:
        f.write(text + "\n")


def checkpoint_bytes(config_args):
    cfg = configurator.load_config(config_args)
    return optim.checkpoint_bytes(cost.meta_model(cfg).get_num_params(non_embedding=False),
                                  optim.mode_of(vars(cfg)))


simulating = False
for i in range(1, n + 1):
    args = open(os.path.join(work, f"run_{i}.args")).read().split()
    try:
        _, flags, config_args = bench.parse_args(args)
        cfg = configurator.load_config(config_args)
    except (SystemExit, configurator.ConfigError):  # bench.py will say what is wrong with it
        continue
    if flags.save_resume:
        free, need = shutil.disk_usage(tempfile.gettempdir()).free, checkpoint_bytes(config_args)
        if need > 0.9 * free and config_args[0] in SAVES:
            smaller = next((c for c in SAVES[SAVES.index(config_args[0]) + 1:]
                            if checkpoint_bytes([c, *config_args[1:]]) <= 0.9 * free), None)
            if smaller:
                write(i, "args", " ".join([smaller, *args[1:]]))
                write(i, "note", f"{config_args[0]}'s {cost.size_text(need)} checkpoint does not fit 90% of the "
                                 f"{cost.size_text(free)} free in {tempfile.gettempdir()}: {smaller}'s instead")
        continue
    if flags.sweep or flags.reference:  # several settings: bench.py skips what does not fit
        continue
    device = machine.resolve_device(cfg.device)[0]
    budget = cost.stated_budget(machine.memory_capacity(device), "the device's whole memory", cfg.memory_budget_gb)
    try:  # on the whole memory: what this refuses, train.py (which measures what is free) refuses too
        cost.settle(cost.meta_model(cfg, "none"), cfg, budget)
    except cost.DoesNotFit as e:
        write(i, "skipped", f"skipped: the estimate refuses it: {e}")
        continue
    if not simulating and cfg.activation_checkpointing != "auto" and any(
            a.startswith("--activation_checkpointing=") for a in config_args):
        simulating = True
        write(i, "simulate", "--simulate")
EOF
cat > "$work/report.py" <<'EOF'
import json, os, socket, subprocess, sys, time

out, work, n, budget, seconds, finished = sys.argv[1:]


def read(name):
    path = os.path.join(work, name)
    return open(path).read().strip() if os.path.exists(path) else None


def bench_json(i):
    try:
        return json.loads(read(f"run_{i}.json") or "")
    except json.JSONDecodeError:  # skipped, or killed before it printed
        return None


TIMED_OUT = (124, 137)  # timeout's status when it ended the line: TERM, or KILL 5 s after it


def status(exit_status, skipped):
    if skipped is not None:
        return "skipped" if skipped.startswith("skipped") else "not run"
    return "ok" if exit_status == 0 else "timeout" if exit_status in TIMED_OUT else "failed"


def run(i):
    seconds, exit_status = read(f"run_{i}.seconds"), read(f"run_{i}.exit")
    exit_status = None if exit_status is None else int(exit_status)
    skipped = read(f"run_{i}.skipped")
    if exit_status is None and skipped is None:  # the line running at this write, or one after it
        skipped = f"not run: gpu_check.sh {read('stopped') or 'had not finished'} when this file was written"
    return {"args": read(f"run_{i}.args") + (" --simulate" if read(f"run_{i}.simulate") else ""),
            "status": status(exit_status, skipped), "exit": exit_status, "skipped": skipped,
            "note": read(f"run_{i}.note"), "seconds": None if seconds is None else int(seconds),
            "bench": bench_json(i)}


def summary(run):
    if run["status"] == "timeout":
        return f"timeout: killed after {run['seconds']} s, at the end of the {budget} s budget"
    bench = run["bench"] or {}
    if "save_resume" in bench:
        r = bench["save_resume"]
        return (f"checkpoint {r['checkpoint_gb']:.1f} GB, saved in {r['save_s']:.1f}s, loaded in {r['load_s']:.1f}s"
                if r["status"] == "ok" else f"{r['status']}: {r['message']}")
    best = bench.get("best")
    if not best:
        return run["skipped"] or f"nothing fits or ran (exit {run['exit']})"
    mfu = "n/a" if best["mfu"] is None else f"{100 * best['mfu']:.1f}%"
    peak = best["peak_reserved_gb" if best["compared"] == "reserved" else "peak_memory_gb"]
    memory = f", {best['compared']} peak {peak:.1f} GB"
    if best.get("simulated_gb") is not None:
        memory += f" (estimated {best['estimated_gb']:.1f} GB, simulated {best['simulated_gb']:.1f} GB)"
    return f"{best['label']}, {best['tokens_per_s']:,.0f} tokens/s, MFU {mfu}{memory}" + (
        f"; {best['auto']}" if best.get("auto") else "")


commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
env_exit = read("env.exit")
report = {
    "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    "host": socket.gethostname(),
    "commit": commit or None,
    # the knobs that change speed or memory without changing the code
    "env": {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("PYTORCH_", "TORCH_", "HIP_", "HSA_", "ROCBLAS_", "HIPBLASLT_", "CUDA_VISIBLE"))},
    "env_report": (read("env.txt") or "").splitlines(),
    "env_exit": None if env_exit is None else int(env_exit),
    "budget_s": int(budget),
    "seconds": int(seconds),
    "finished": finished == "1",
    "runs": [run(i) for i in range(1, int(n) + 1)],
}
tmp = f"{out}.tmp-{os.getpid()}"
with open(tmp, "w") as f:
    json.dump(report, f, indent=1)
os.replace(tmp, out)  # atomic: a kill leaves the previous write or this one, whole
if report["finished"]:
    print(f"== wrote {out} ({report['seconds']} s of the {budget} s budget)")
    for r in report["runs"]:
        print(f"{r['args']}: {summary(r)}")
EOF
write_json() {  # $1: 1 in the last write
    "$python" "$work/report.py" "$out" "$work" "$n" "$budget" "$SECONDS" "${1:-0}"
}

line_pid=
stop() {  # the slot ending: stop the line running (timeout leads its own process group), keep what finished
    [ -n "$line_pid" ] && kill -TERM -- "-$line_pid" 2>/dev/null
    echo "was stopped by a signal" > "$work/stopped"
    write_json
    exit 143
}
trap stop TERM INT

reserve=10  # seconds kept back at every step: timeout's 5 s from TERM to KILL, and the JSON's last write
echo "== environment"
{ nvidia-smi || rocm-smi --showproductname --showmeminfo vram; } 2>/dev/null | head -30 | tee "$work/env.txt"
env_s=$((budget - SECONDS - reserve < 60 ? budget - SECONDS - reserve : 60))
if [ "$env_s" -gt 0 ]; then
    read -r first_config _ <<< "$runs"
    timeout -k 5 "$env_s" "$python" scripts/check_env.py "$first_config" < /dev/null 2>&1 | tee -a "$work/env.txt"
    echo "${PIPESTATUS[0]}" > "$work/env.exit"
fi
lines_s=$((budget - SECONDS - reserve))
[ "$lines_s" -gt 0 ] && timeout -k 5 "$lines_s" "$python" "$work/lines.py" "$work" "$n" < /dev/null
write_json

for i in $(seq 1 "$n"); do
    read -ra args < "$work/run_$i.args"
    simulate=()
    [ -f "$work/run_$i.simulate" ] && simulate=(--simulate)
    left=$((budget - SECONDS - reserve))
    echo "== bench.py ${args[*]} ${simulate[*]} ($left s of the budget left)"
    if [ -f "$work/run_$i.skipped" ]; then
        cat "$work/run_$i.skipped"
        continue
    fi
    if [ "$left" -lt "$min_s" ]; then
        echo "skipped: out of time ($left s of the $budget s budget left, a line needs GPU_CHECK_MIN_S=$min_s)" \
            | tee "$work/run_$i.skipped"
        continue
    fi
    start=$SECONDS
    keep=$(( ${#simulate[@]} ? 90 : 30 ))  # bench.py's start-up, and the simulation where it runs
    bench_s=$((left > keep + 1 ? left - keep : 1))
    # in the background, so that a TERM reaches the trap at once instead of after the line
    timeout -k 5 "$left" "$python" scripts/bench.py "${args[@]}" "${common[@]}" "${simulate[@]}" \
        --time_limit="$bench_s" < /dev/null > "$work/run_$i.json" &
    line_pid=$!
    wait "$line_pid"
    echo "$?" > "$work/run_$i.exit"
    line_pid=
    echo $((SECONDS - start)) > "$work/run_$i.seconds"
    write_json
done
write_json 1
