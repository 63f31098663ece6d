"""
Loss parity of the memory modes: the same small model, data and seed trained with each mode side by
side, final validation loss against the first mode's (fp32 AdamW), step time on this machine, and the
curves in one PNG. A mode is an `optimizer`, with `+bf16` for master_weights='bfloat16' (which needs
dtype='bfloat16'; compare it against a baseline under the same autocast, --args=--dtype=bfloat16) and
`+offload` for optimizer_offload=True (adamw only).

    python data/quickstart/prepare.py                 # real text: Python's standard library, bytes
    python scripts/bench/bench_optim.py                     # 4 layers x 256 wide, context 256, 1,000 steps
    python scripts/bench/bench_optim.py --steps 200 --modes adamw,adamw8bit
    python scripts/bench/bench_optim.py --args=--dtype=bfloat16 --modes adamw,adamw+bf16,adamw8bit+bf16,adamw4bit+bf16
    python scripts/bench/bench_optim.py --step_memory       # the step's temporaries per mode (optim.STEP_TEMP_BYTES)
    python scripts/bench/bench_optim.py --host_step         # offload's AdamW step on this host: seconds at 6.7B

Not a test: minutes per mode on a CPU. Each run is train.py itself (see --args for the rest).
"""
import argparse
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from trainer import cli, metrics, optim, runlog  # noqa: E402
from trainer.optim import OPTIMIZERS  # noqa: E402



def mode_flags(mode):
    optimizer, *extras = mode.split("+")
    if optimizer not in OPTIMIZERS or not set(extras) <= {"bf16", "offload"}:
        sys.exit(f"bench_optim: unknown mode {mode!r}: an optimizer ({', '.join(OPTIMIZERS)}), optionally "
                 f"+bf16 and +offload")
    return ([f"--optimizer={optimizer}"] + (["--master_weights=bfloat16", "--dtype=bfloat16"] if "bf16" in extras else [])
            + (["--optimizer_offload=True"] if "offload" in extras else []))


def run(mode, args, out_dir):
    command = [sys.executable, "train.py", "config/train_tiny.py", *mode_flags(mode), f"--out_dir={out_dir}",
               f"--data_dir={args.data_dir}", "--n_layer=4", "--n_head=4", "--n_embd=256", "--block_size=256",
               "--batch_size=8", "--gradient_accumulation_steps=1", f"--max_iters={args.steps}",
               f"--lr_decay_iters={args.steps}", "--warmup_iters=50", "--learning_rate=1e-3", "--min_lr=1e-4",
               "--eval_interval=100", "--eval_iters=20", "--log_interval=10", "--checkpoint_interval=0",
               "--seed=1337", *args.args.split()]
    result = subprocess.run(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if result.returncode:
        sys.exit(f"bench_optim: {mode} failed: {runlog.why_it_failed(result.returncode, result.stderr)}")
    curve = {r["iter"]: r["val_loss"] for r in metrics.read(out_dir, "eval")}
    times = sorted(r["step_time"] for r in metrics.read(out_dir, "step"))
    return curve, times[len(times) // 2]  # the median step: robust to the first step's compilation


def _memory_kb(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def step_temporaries(optimizer, master_weights, shape):
    """Bytes per value the step allocates beyond the parameter, its gradient and its state: the peak
    resident memory of this (fresh) process during a second step, the first having compiled it."""
    import torch
    param = torch.nn.Parameter(torch.randn(shape))
    model = torch.nn.ParameterList([param])
    if master_weights == "bfloat16":
        optim.use_bf16_weights(model)
    step = optim.build(model, optimizer, 0.1, 1e-4, (0.9, 0.95), "cpu", master_weights)
    param.grad = torch.randn(shape)
    step.step()
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # peak resident memory := current
    before = _memory_kb("VmRSS")
    step.step()
    return (_memory_kb("VmHWM") - before) * 1024 / param.numel()


def measure_step_memory(shape):
    print(f"optimizer step temporaries for a {shape[0]} x {shape[1]} parameter (GPT-3's embedding), on this CPU:")
    context = multiprocessing.get_context("spawn")  # a fresh process each: peak memory of that step alone
    for optimizer, master_weights, _ in [r for r in optim.RECIPES if not r[2]]:  # offload's step is not on the GPU
        with context.Pool(1) as pool:
            per_value = pool.apply(step_temporaries, (optimizer, master_weights, shape))
        cpu_only = " (PyTorch's CPU loop; fused on a GPU, it makes none)" if (optimizer, master_weights) == optim.RECIPES[0] else ""
        print(f"  {optimizer:10s} {master_weights:9s} {per_value:5.1f} B per value "
              f"(optim.STEP_TEMP_BYTES: {optim.STEP_TEMP_BYTES[optimizer]}){cpu_only}", flush=True)


def measure_host_step(shape, n_params=6_657_150_976):
    """offload.HostAdamW's step on this machine (on a CPU the host-device copies are plain copies): values
    per second, and what that makes of a 6.7B model's step."""
    import torch
    param = torch.nn.Parameter(torch.randn(shape))
    step = optim.build(torch.nn.ParameterList([param]), "adamw", 0.1, 1e-4, (0.9, 0.95), "cpu", offload=True)
    param.grad = torch.randn(shape)
    step.step()  # the first takes fp32 weights' masters from the weights: not timed
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        step.step()
        times.append(time.perf_counter() - t0)
    rate = param.numel() / min(times)
    print(f"host AdamW step (offload.HostAdamW) on {torch.get_num_threads()} threads: {rate / 1e9:.2f}e9 values/s, "
          f"{n_params / rate:.1f} s per step at 6.7B")


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(OPTIMIZERS), help="comma-separated (default: %(default)s)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--data_dir", default="data/quickstart")
    p.add_argument("--args", default="", help="more train.py overrides, space-separated")
    p.add_argument("--out", default="optim_parity.png")
    p.add_argument("--step_memory", action="store_true", help="measure the step's temporaries per mode instead")
    p.add_argument("--host_step", action="store_true", help="measure offload's host AdamW step instead")
    args = p.parse_args(argv)
    if args.step_memory:
        return measure_step_memory((50304, 4096))
    if args.host_step:
        return measure_host_step((50304, 4096))
    modes = args.modes.split(",")
    for mode in modes:
        mode_flags(mode)  # a typo stops here, not after the first runs
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in modes:
            results[mode] = run(mode, args, os.path.join(tmp, mode))
            curve, step = results[mode]
            print(f"{mode:16s} final val loss {curve[max(curve)]:.4f}, median step {step * 1000:.0f} ms", flush=True)
    base_curve, base_step = results[modes[0]]
    base = base_curve[max(base_curve)]
    print(f"against {modes[0]} (val loss {base:.4f}, {base_step * 1000:.0f} ms a step):")
    for mode in modes[1:]:
        curve, step = results[mode]
        final = curve[max(curve)]
        print(f"  {mode:16s} val loss {final:.4f} ({100 * (final / base - 1):+.2f}%), step time {step / base_step:.2f}x")
    plot_curves(results, f"memory modes, {args.steps} steps, 4 x 256, context 256 {args.args}".strip(), args.out)


def plot_curves(results, title, out):
    """Validation-loss curves, {mode: ({iteration: loss}, step seconds)}, into one figure (bench_fp8.py too)."""
    fig, ax = plt.subplots(figsize=(8, 5))
    for mode, (curve, _) in results.items():
        ax.plot(sorted(curve), [curve[i] for i in sorted(curve)], "o-", ms=3, label=mode)
    ax.set_xlabel("iteration")
    ax.set_ylabel("val loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
