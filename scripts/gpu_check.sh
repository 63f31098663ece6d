#!/usr/bin/env bash
# Training speed on one H200 or MI300X in under 8 minutes, as one JSON file:
#
#     scripts/gpu_check.sh [OUT_JSON]        (default gpu_check.json)
#
# 1. the environment: nvidia-smi or rocm-smi, then scripts/check_env.py on the first run's config
#    (its data check fails where no data was prepared; the benchmarks use random tokens);
# 2. one `scripts/bench.py --json --simulate` per line of GPU_CHECK_RUNS, each setting a train.py
#    subprocess with a timeout, its measured peak (allocated and reserved) beside memory.py's
#    estimate and simulated peak. By default, GPT-3 6.7B: what activation_checkpointing=auto picks
#    here, then micro-batch 4 with no recompute (fits an MI300X, not an H200), selective and full,
#    then micro-batch 8 x 80 selective and full, then compiled with auto's choice if time is left;
# 3. OUT_JSON: {"date", "host", "commit", "env", "env_report", "env_exit", "budget_s", "runs": [{"args",
#    "exit", "skipped", "seconds", "bench"}]}, "bench" being bench.py's JSON (null if skipped or killed).
#
# Settings: GPU_CHECK_STEPS (timed steps, default 3) after GPU_CHECK_WARMUP (default 1) of
# GPU_CHECK_GRAD_ACCUM micro-batches (default 4; a full 6.7B step of 160 takes ~100 s and throughput
# per micro-batch is what matters), GPU_CHECK_TIMEOUT seconds per setting (default 150),
# GPU_CHECK_BUDGET seconds for all the benchmarks (default 480; what is left when it runs out is
# skipped), PYTHON (default python). On a CPU, with a tiny config (tests/test_bench.py does this):
#     GPU_CHECK_RUNS="config/train_tiny.py --device=cpu --sweep --batch_sizes=4 --recompute=none,all" \
#         GPU_CHECK_STEPS=1 scripts/gpu_check.sh /tmp/check.json
set -uo pipefail  # no -e: a failed check or setting is recorded, and the rest still run
cd "$(dirname "$0")/.."

out=${1:-gpu_check.json}
python=${PYTHON:-python}
runs=${GPU_CHECK_RUNS:-"config/train_gpt3_6b.py
config/train_gpt3_6b.py --sweep --batch_sizes=4 --recompute=none,selective,all
config/train_gpt3_6b.py --sweep --batch_sizes=8 --recompute=selective,all
config/train_gpt3_6b.py --compile=True"}
budget=${GPU_CHECK_BUDGET:-480}
common=(--steps="${GPU_CHECK_STEPS:-3}" --warmup="${GPU_CHECK_WARMUP:-1}" --grad_accum="${GPU_CHECK_GRAD_ACCUM:-4}"
        --timeout="${GPU_CHECK_TIMEOUT:-150}" --json --simulate)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== environment"
{ nvidia-smi || rocm-smi --showproductname --showmeminfo vram; } 2>/dev/null | head -30 | tee "$work/env.txt"
read -r first_config _ <<< "$runs"
timeout 90 "$python" scripts/check_env.py "$first_config" < /dev/null 2>&1 | tee -a "$work/env.txt"
echo "${PIPESTATUS[0]}" > "$work/env.exit"

SECONDS=0  # the budget counts the benchmarks only
n=0
while IFS= read -r line; do
    [ -z "$line" ] && continue
    n=$((n + 1))
    read -ra args <<< "$line"
    echo "$line" > "$work/run_$n.args"
    left=$((budget - SECONDS))
    echo "== bench.py $line ($left s of the budget left)"
    if [ "$left" -le 0 ]; then
        echo "skipped: out of time" | tee "$work/run_$n.skipped"
        continue
    fi
    start=$SECONDS
    # bench.py stops its own settings at --time_limit; timeout is the backstop for bench.py itself
    timeout -k 10 $((left + 60)) "$python" scripts/bench.py "${args[@]}" "${common[@]}" --time_limit="$left" \
        < /dev/null > "$work/run_$n.json"
    echo "$?" > "$work/run_$n.exit"
    echo $((SECONDS - start)) > "$work/run_$n.seconds"
done <<< "$runs"

"$python" - "$out" "$work" "$n" "$budget" <<'EOF'
import json, os, socket, subprocess, sys, time

out, work, n, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])


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
    return {"args": read(f"run_{i}.args"), "exit": None if exit_status is None else int(exit_status),
            "skipped": read(f"run_{i}.skipped"), "seconds": None if seconds is None else int(seconds),
            "bench": bench_json(i)}


def summary(run):
    best = (run["bench"] or {}).get("best")
    if not best:
        return run["skipped"] or f"nothing fits or ran (exit {run['exit']})"
    mfu = "n/a" if best["mfu"] is None else f"{100 * best['mfu']:.1f}%"
    memory = f", peak {best['peak_memory_gb']:.1f} GB"
    if best.get("simulated_gb") is not None:
        memory += f" (simulated {best['simulated_gb']:.1f} GB)"
    return f"fastest that fits: {best['label']}, {best['tokens_per_s']:,.0f} tokens/s, MFU {mfu}{memory}" + (
        f"; {best['auto']}" if best.get("auto") else "")


commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
report = {
    "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    "host": socket.gethostname(),
    "commit": commit or None,
    # the knobs that change speed or memory without changing the code
    "env": {k: v for k, v in sorted(os.environ.items())
            if k.startswith(("PYTORCH_", "TORCH_", "HIP_", "HSA_", "ROCBLAS_", "HIPBLASLT_", "CUDA_VISIBLE"))},
    "env_report": (read("env.txt") or "").splitlines(),
    "env_exit": int(read("env.exit")),
    "budget_s": budget,
    "runs": [run(i) for i in range(1, n + 1)],
}
with open(out, "w") as f:
    json.dump(report, f, indent=1)
print(f"== wrote {out}")
for r in report["runs"]:
    print(f"{r['args']}: {summary(r)}")
EOF
