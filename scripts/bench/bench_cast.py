"""
Weights cast to bf16 once per step (trainer/precision.py) against once per micro-batch (autocast without
its cache): the bytes the casts move in one optimizer step and the step's peak memory, on
fake tensors (shapes without storage: PyTorch's MemTracker counts the bytes), then the same arithmetic
at GPT-3 6.7B's shape with 160 micro-batches a step.

    python scripts/bench/bench_cast.py
    python scripts/bench/bench_cast.py --n_layer 8 --micro_steps 8

A cast reads 4 B and writes 2 B per weight. Compiled blocks are not measured: their graphs cast inside,
once per call, whatever the cache (precision.py).
"""
import os
import sys
from contextlib import nullcontext

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from model import GPT, GPTConfig  # noqa: E402
from trainer import cli, precision  # noqa: E402


class CastBytes(TorchDispatchMode):
    """Bytes read and written by fp32 -> bf16 casts of the model's parameters."""

    def __init__(self, model):
        super().__init__()
        self.params, self.bytes = {id(p) for p in model.parameters()}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and id(args[0]) in self.params \
                and kwargs.get("dtype") == torch.bfloat16:
            self.bytes += 6 * args[0].numel()
        return func(*args, **(kwargs or {}))


def step(config, batch_size, micro_steps, once):
    """One optimizer step's micro-batches, forward and backward: (cast bytes, peak bytes)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        model = GPT(config).train()
        step_context, forward = precision.step_cast_contexts("cpu") if once else \
            (nullcontext(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False))
        idx = torch.zeros(batch_size, config.block_size, dtype=torch.long)
        tracker = MemTracker()
        tracker.track_external(model, idx)
        casts = CastBytes(model)
        with tracker, step_context, casts:
            for _ in range(micro_steps):
                tracker.reset_mod_stats()  # per-module figures only; the peak is kept across micro-batches
                with forward:
                    loss = model(idx, idx)[1]
                (loss / micro_steps).backward()
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))["Total"]
    return casts.bytes, peak


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n_layer", type=int, default=4)
    parser.add_argument("--n_embd", type=int, default=256)
    parser.add_argument("--block_size", type=int, default=256)
    parser.add_argument("--vocab_size", type=int, default=4096)
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--micro_steps", type=int, default=4)
    args = parser.parse_args(argv)
    for policy in ("none", "selective", "full"):
        config = GPTConfig(block_size=args.block_size, vocab_size=args.vocab_size, n_layer=args.n_layer,
                           n_head=8, n_embd=args.n_embd, bias=False, activation_checkpointing=policy)
        (cast_a, peak_a), (cast_b, peak_b) = (step(config, args.batch_size, args.micro_steps, once)
                                              for once in (False, True))
        print(f"small ({args.n_layer} x {args.n_embd}, {args.micro_steps} micro-batches), {policy:9s}: casts move "
              f"{cast_a / 1e6:7.1f} MB a step every micro-batch, {cast_b / 1e6:6.1f} MB once: "
              f"ratio {cast_b / cast_a:.3f}; "
              f"peak {peak_a / 1e6:.1f} -> {peak_b / 1e6:.1f} MB (+{(peak_b - peak_a) / 1e6:.1f})")
    # GPT-3 6.7B, micro-batch 4 x 160: the blocks' matmul weights, and the head's, which casts per micro-batch
    with torch.device("meta"):
        big = GPT(GPTConfig(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False))
    blocks = sum(m.weight.numel() for m in big.transformer.h.modules() if isinstance(m, nn.Linear))
    head, micro_steps = big.lm_head.weight.numel(), 160
    for policy, forwards in (("none", 1), ("selective", 2), ("full", 2)):  # a recompute casts again
        before = 6 * micro_steps * (forwards * blocks + head)
        after = 6 * (blocks + micro_steps * head)
        print(f"6.7B, {micro_steps} micro-batches, {policy:9s}: {before / 1e12:.2f} TB of casts a step -> "
              f"{after / 1e12:.3f} TB: ratio {after / before:.3f}; the step keeps the blocks' bf16 copies, "
              f"{2 * blocks / 1e9:.1f} GB{' (kept for backward anyway)' if policy == 'none' else ''}")


if __name__ == "__main__":
    main()
