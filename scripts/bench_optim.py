"""
Loss parity of the memory-lean optimizers: the same small model, data and seed trained with each
`optimizer` mode side by side, final validation loss against fp32 AdamW's, step time on this machine,
and the curves in one PNG.

    python data/quickstart/prepare.py                 # real text: Python's standard library, bytes
    python scripts/bench_optim.py                     # 4 layers x 256 wide, context 256, 1,000 steps
    python scripts/bench_optim.py --steps 200 --modes adamw,adamw8bit

Not a test: minutes per mode on a CPU. Each run is train.py itself (see --args for the rest).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from optim import OPTIMIZERS  # noqa: E402

EVAL_RE = re.compile(r"eval iter (\d+): val loss ([\d.]+)")
TIME_RE = re.compile(r"iter \d+: loss [\d.]+, time (\d+)ms")


def run(mode, args, out_dir):
    command = [sys.executable, "train.py", "config/train_tiny.py", f"--optimizer={mode}", f"--out_dir={out_dir}",
               f"--data_dir={args.data_dir}", "--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=256",
               "--batch_size=8", "--gradient_accumulation_steps=1", f"--max_iters={args.steps}",
               f"--lr_decay_iters={args.steps}", "--warmup_iters=50", "--learning_rate=1e-3", "--min_lr=1e-4",
               "--eval_interval=100", "--eval_iters=20", "--log_interval=10", "--checkpoint_interval=0",
               "--seed=1337", *args.args.split()]
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"bench_optim: {mode} failed: {(result.stdout + result.stderr).strip().splitlines()[-1]}")
    curve = {int(i): float(loss) for i, loss in EVAL_RE.findall(result.stdout)}
    times = sorted(int(t) for t in TIME_RE.findall(result.stdout))
    return curve, times[len(times) // 2] / 1000  # the median step: robust to the first step's compilation


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(OPTIMIZERS), help="comma-separated (default: %(default)s)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--data_dir", default="data/quickstart")
    p.add_argument("--args", default="", help="more train.py overrides, space-separated")
    p.add_argument("--out", default="optim_parity.png")
    args = p.parse_args()
    modes = args.modes.split(",")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            results[mode] = run(mode, args, os.path.join(tmp, mode))
            curve, step = results[mode]
            print(f"{mode:10s} final val loss {curve[max(curve)]:.4f}, median step {step * 1000:.0f} ms", flush=True)
    base_curve, base_step = results[modes[0]]
    base = base_curve[max(base_curve)]
    print(f"against {modes[0]} (val loss {base:.4f}, {base_step * 1000:.0f} ms a step):")
    for mode in modes[1:]:
        curve, step = results[mode]
        final = curve[max(curve)]
        print(f"  {mode:10s} val loss {final:.4f} ({100 * (final / base - 1):+.2f}%), step time {step / base_step:.2f}x")
    fig, ax = plt.subplots(figsize=(8, 5))
    for mode, (curve, _) in results.items():
        ax.plot(sorted(curve), [curve[i] for i in sorted(curve)], "o-", ms=3, label=mode)
    ax.set_xlabel("iteration")
    ax.set_ylabel("val loss")
    ax.set_title(f"optimizer modes, {args.steps} steps, 4 x 256, context 256")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
