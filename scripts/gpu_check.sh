#!/usr/bin/env bash
# Training speed, memory and checkpoint I/O on one H200 or MI300X as one JSON file, all of it (the
# environment check included) within GPU_CHECK_BUDGET seconds: default 540, 9 minutes of a 10-minute slot.
#
#     scripts/gpu_check.sh [OUT_JSON]        (default gpu_check.json)
#
# 1. the environment: nvidia-smi or rocm-smi, then scripts/check_env.py on the first run's config, at
#    most 60 s (its data check fails where no data was prepared; the benchmarks use random tokens);
# 2. one `scripts/bench.py --json --simulate` per line of GPU_CHECK_RUNS, the most valuable first. By
#    default, GPT-3 6.7B: what activation_checkpointing=auto picks here, compiled (--compile=True),
#    then eager; micro-batch 4 x 160 with no recompute (fits an MI300X, not an H200), selective and
#    full; micro-batch 8 x 80 with the same three; one checkpoint save and its load
#    (bench.py --save_resume: seconds and GB/s); then auto's pick with fp8=tensorwise and
#    fp8=rowwise, if configurator.py has the fp8 key. Each setting: tokens/s for a step of the config's
#    real 4 x 160 x 2048 tokens (micro-batches and the optimizer step timed apart), MFU, the measured
#    allocated and reserved peaks beside memory.py's estimate and simulation, and whether the peak
#    fits the budget by memory.fits;
# 3. OUT_JSON: {"date", "host", "commit", "env", "env_report", "env_exit", "budget_s", "seconds",
#    "finished", "runs": [{"args", "exit", "skipped", "seconds", "bench"}]}, "bench" being bench.py's
#    JSON (null if skipped or killed). It is rewritten (a temp file, then a rename) after the environment
#    check and after every line, so a kill keeps what finished; "finished" is true in the last write only,
#    and a line not run says why in "skipped".
#
# The time: each line's timeout is what is left of the budget (bench.py gets 30 s less, for its start-up
# and simulation), so the script cannot overrun; a line with less than GPU_CHECK_MIN_S seconds left
# (default 60) is skipped. A TERM or INT stops the running line and writes the JSON before exiting.
# Settings: GPU_CHECK_STEPS (timed steps, default 3) after GPU_CHECK_WARMUP (default 1) of
# GPU_CHECK_GRAD_ACCUM micro-batches (default 4), GPU_CHECK_TIMEOUT seconds per train.py (default 180),
# PYTHON (default python). On a CPU, with a tiny config (tests/test_gpu_check.py does this):
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
model=config/train_gpt3_6b.py
default_runs="$model --compile=True
$model --compile=False
$model --batch_size=4 --activation_checkpointing=none
$model --batch_size=4 --activation_checkpointing=selective
$model --batch_size=4 --activation_checkpointing=full
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=none
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=selective
$model --batch_size=8 --gradient_accumulation_steps=80 --activation_checkpointing=full
$model --save_resume"
if grep -q "fp8=" configurator.py; then
    default_runs+="
$model --fp8=tensorwise
$model --fp8=rowwise"
fi
runs=${GPU_CHECK_RUNS:-$default_runs}
common=(--steps="${GPU_CHECK_STEPS:-3}" --warmup="${GPU_CHECK_WARMUP:-1}" --grad_accum="${GPU_CHECK_GRAD_ACCUM:-4}"
        --timeout="${GPU_CHECK_TIMEOUT:-180}" --json --simulate)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

n=0
while IFS= read -r line; do
    [ -z "$line" ] && continue
    n=$((n + 1))
    echo "$line" > "$work/run_$n.args"
done <<< "$runs"

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


def run(i):
    seconds, exit_status = read(f"run_{i}.seconds"), read(f"run_{i}.exit")
    skipped = read(f"run_{i}.skipped")
    if exit_status is None and skipped is None:  # the line running at this write, or one after it
        skipped = f"not run: gpu_check.sh {read('stopped') or 'had not finished'} when this file was written"
    return {"args": read(f"run_{i}.args"), "exit": None if exit_status is None else int(exit_status),
            "skipped": skipped, "seconds": None if seconds is None else int(seconds), "bench": bench_json(i)}


def summary(run):
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
write_json

for i in $(seq 1 "$n"); do
    read -ra args < "$work/run_$i.args"
    left=$((budget - SECONDS - reserve))
    echo "== bench.py ${args[*]} ($left s of the budget left)"
    if [ "$left" -lt "$min_s" ]; then
        echo "skipped: out of time ($left s of the $budget s budget left, a line needs GPU_CHECK_MIN_S=$min_s)" \
            | tee "$work/run_$i.skipped"
        continue
    fi
    start=$SECONDS
    bench_s=$((left > 31 ? left - 30 : 1))
    # in the background, so that a TERM reaches the trap at once instead of after the line
    timeout -k 5 "$left" "$python" scripts/bench.py "${args[@]}" "${common[@]}" --time_limit="$bench_s" \
        < /dev/null > "$work/run_$i.json" &
    line_pid=$!
    wait "$line_pid"
    echo "$?" > "$work/run_$i.exit"
    line_pid=
    echo $((SECONDS - start)) > "$work/run_$i.seconds"
    write_json
done
write_json 1
