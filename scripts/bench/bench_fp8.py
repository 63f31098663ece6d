"""
Loss parity of fp8 training: the same small GPT, data and seed trained under bf16 autocast, then with
the blocks' matmuls in fp8 (trainer/precision.py: torchao's tensorwise and rowwise recipes), final
validation loss against bf16's, step time on this machine, and the curves in one PNG.

    python data/quickstart/prepare.py            # real text: Python's standard library, bytes
    python scripts/bench/bench_fp8.py                  # 2 layers x 64 wide, context 32, 1,000 steps each
    python scripts/bench/bench_fp8.py --steps 200 --modes bf16,tensorwise

Not a test: minutes per mode on a CPU, whose fp8 matmuls are emulated by torch._scaled_mm's CPU kernel
(so the step times say nothing about a GPU's). It trains in this process rather than through train.py,
with train.py's data order (bins.WindowSampler) and AdamW.
"""
import argparse
import os
import sys
import time
import types

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
import configurator  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402
from trainer import bins, cli, optim, precision, schedule  # noqa: E402
from bench_optim import plot_curves  # noqa: E402  (beside this script)

MODES = ("bf16", *precision.RECIPES)  # bf16: fp8 off, the baseline


def run(mode, args):
    """{iteration: val loss} and the median step in seconds of one mode."""
    # train.py's schedule: 50 warmup steps, then cosine decay to min_lr at the last step
    lr_schedule = types.SimpleNamespace(**dict(configurator.DEFAULTS, learning_rate=1e-3, min_lr=1e-4, warmup_iters=50,
                                               lr_decay_iters=args.steps, lr_schedule="cosine", decay_lr=True))
    config = GPTConfig(n_layer=args.n_layer, n_head=4, n_embd=args.n_embd, block_size=args.block_size,
                       vocab_size=320, bias=False, dropout=0.0)
    train = bins.open_split(args.data_dir, "train", config.block_size, config.vocab_size)
    val = bins.open_split(args.data_dir, "val", config.block_size, config.vocab_size)
    sampler = bins.WindowSampler(train.num_windows(config.block_size), args.seed)
    val_windows = bins.WindowSampler(val.num_windows(config.block_size), args.seed).next_indices(
        args.eval_iters * args.batch_size).reshape(args.eval_iters, args.batch_size)
    torch.manual_seed(args.seed)  # the same initial weights in every mode
    model = GPT(config)
    if mode != "bf16":
        converted, total = precision.convert(model, mode)
        print(f"  {precision.describe(mode, converted, total)}", flush=True)
    optimizer = optim.build(model, "adamw", 0.1, 1e-3, (0.9, 0.95), "cpu")
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False)

    def batch(token_bin, indices):
        windows = torch.from_numpy(token_bin.windows(indices, config.block_size))
        return windows[:, :-1], windows[:, 1:]

    @torch.no_grad()
    def evaluate():
        model.eval()
        losses = []
        for indices in val_windows:
            with autocast:
                losses.append(model(*batch(val, indices))[1].item())
        model.train()
        return sum(losses) / len(losses)

    curve, times = {}, []
    for it in range(args.steps + 1):
        if it % args.eval_interval == 0 or it == args.steps:
            curve[it] = evaluate()
        if it == args.steps:
            break
        t0 = time.perf_counter()
        optim.set_lr(optimizer, schedule.learning_rate(it, lr_schedule))
        with autocast:
            loss = model(*batch(train, sampler.next_indices(args.batch_size)))[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - t0)
    return curve, sorted(times)[len(times) // 2]


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated, the first the baseline (default: %(default)s)")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--n_layer", type=int, default=2)
    p.add_argument("--n_embd", type=int, default=64)
    p.add_argument("--block_size", type=int, default=32)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--eval_interval", type=int, default=100)
    p.add_argument("--eval_iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--data_dir", default="data/quickstart")
    p.add_argument("--out", default="fp8_parity.png")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s: a small model gains "
                   "little from more, and they spin against whatever else runs)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    modes = args.modes.split(",")
    if unknown := [m for m in modes if m not in MODES]:
        sys.exit(f"bench_fp8: unknown mode {unknown[0]!r}: use {', '.join(MODES)}")
    try:
        bins.open_split(args.data_dir, "train", args.block_size, 320)
    except bins.BinError as e:
        sys.exit(f"bench_fp8: {e}")
    results = {}
    for mode in modes:
        print(f"{mode}:", flush=True)
        results[mode] = run(mode, args)
        curve, step = results[mode]
        print(f"  final val loss {curve[args.steps]:.4f}, median step {step * 1000:.0f} ms", flush=True)
    base_curve, base_step = results[modes[0]]
    base = base_curve[args.steps]
    print(f"against {modes[0]} (val loss {base:.4f}, {base_step * 1000:.0f} ms a step):")
    for mode in modes[1:]:
        curve, step = results[mode]
        print(f"  {mode:10s} val loss {curve[args.steps]:.4f} (ratio {curve[args.steps] / base:.4f}, "
              f"{100 * (curve[args.steps] / base - 1):+.2f}%), step time {step / base_step:.2f}x")
    plot_curves(results, f"fp8 against bf16, {args.steps} steps, {args.n_layer} x {args.n_embd}, context {args.block_size}",
                args.out)


if __name__ == "__main__":
    main()
