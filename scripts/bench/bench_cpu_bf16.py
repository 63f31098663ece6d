"""
bf16 against fp32 on the CPU, at the CPU ladder's largest size (config/ladder_tiny.py's w160: 2 layers, width
160, 52 sequences of 128 byte tokens a step), one thread: a training step (forward, backward, AdamW) and, alone,
the attention's forward and backward. For a bf16 run on the CPU train.py has the attention run in fp32
(precision.fp32_attention_on_cpu), because torch's CPU attention kernel is slower in bf16; the last line shows
what that choice saves.

    OMP_NUM_THREADS=1 python scripts/bench/bench_cpu_bf16.py
    OMP_NUM_THREADS=1 python scripts/bench/bench_cpu_bf16.py --n_embd 32 --batch_size 3   # the ladder's w32

bf16 matmuls are fast only where the CPU has bf16 instructions (AVX512-BF16 or AMX); elsewhere the ratios
go the other way.
"""
import os
import sys
from contextlib import nullcontext

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from model import GPT, GPTConfig  # noqa: E402
from trainer import cli, precision  # noqa: E402
from bench_muon import seconds as median_seconds  # noqa: E402  (beside this script: warm-up, then the median)


def step_seconds(args, bf16, repeats):
    """Median seconds of one training step, bf16 autocast as train.py uses it or fp32."""
    torch.manual_seed(0)
    config = GPTConfig(n_layer=args.n_layer, n_head=args.n_embd // 16, n_embd=args.n_embd,
                       block_size=args.block_size, vocab_size=320, bias=False, dropout=0.0)
    model = GPT(config)
    precision.fp32_attention_on_cpu(model, "cpu", "bfloat16" if bf16 else "float32")  # as train.py does
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 257, (args.batch_size, args.block_size))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else nullcontext():
            loss = model(idx, idx)[1]
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return median_seconds(step, repeats)


def attention_seconds(args, dtype, repeats):
    """Median seconds of torch's causal attention, forward and backward, at one layer's shape."""
    shape = (args.batch_size, args.n_embd // 16, args.block_size, 16)
    q, k, v = (torch.randn(shape, dtype=dtype, requires_grad=True) for _ in range(3))
    return median_seconds(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward(), repeats)


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument("--n_layer", type=int, default=2)
    parser.add_argument("--n_embd", type=int, default=160, help="a multiple of 16 (head size 16)")
    parser.add_argument("--block_size", type=int, default=128)
    parser.add_argument("--batch_size", type=int, default=52)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), width {args.n_embd}, "
          f"{args.batch_size}x{args.block_size} tokens a step")
    fp32, bf16 = (step_seconds(args, b, args.repeats) for b in (False, True))
    print(f"training step: fp32 {1e3 * fp32:.0f} ms, bf16 {1e3 * bf16:.0f} ms: bf16/fp32 {bf16 / fp32:.2f}x")
    fp32, bf16 = (attention_seconds(args, d, args.repeats) for d in (torch.float32, torch.bfloat16))
    print(f"attention alone, fwd+bwd: fp32 {1e3 * fp32:.1f} ms, bf16 {1e3 * bf16:.1f} ms: "
          f"bf16/fp32 {bf16 / fp32:.2f}x (train.py's bf16 step runs it in fp32)")


if __name__ == "__main__":
    main()
