"""
What Muon's Newton-Schulz orthogonalisation costs, measured on this machine's CPU at a few matrix sizes,
beside the FLOPs plan.py prices it at (optim.matrix_newton_schulz_flops: ns_steps x (4 m^2 n + 2 m^3) on
an m x n matrix, m <= n), and the same for one fp32 matmul of equal FLOPs, to show how far bf16 lags here.

    python scripts/bench/bench_muon.py [--sizes 256x256,256x1024,512x2048] [--repeats 3] [--threads 1]

The CPU figures say what a CPU test run pays (bf16 matmuls have no fast path on most CPUs); on a GPU the
step runs at the bf16 matmul rate, which plan.py assumes at the run's MFU: an estimate until measured.
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from torch.optim import _muon  # noqa: E402

from trainer import cli  # noqa: E402
from trainer.optim import matrix_newton_schulz_flops as flops  # noqa: E402

COEFFICIENTS = (_muon.DEFAULT_A, _muon.DEFAULT_B, _muon.DEFAULT_C)


def seconds(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="64x64,128x128,128x512,256x256,256x1024")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"Newton-Schulz ({_muon.DEFAULT_NS_STEPS} steps, bf16) on the CPU, {args.threads} thread(s), "
          f"median of {args.repeats}:")
    print(f"{'matrix':>11} {'GFLOP':>8} {'NS ms':>9} {'GFLOP/s':>8} {'fp32 matmul GFLOP/s':>20}")
    for size in args.sizes.split(","):
        rows, cols = map(int, size.split("x"))
        g = torch.randn(rows, cols)
        t = seconds(lambda: _muon._zeropower_via_newtonschulz(g, COEFFICIENTS, _muon.DEFAULT_NS_STEPS, _muon.EPS),
                    args.repeats)
        m, n = sorted((rows, cols))
        a, b = torch.randn(m, n), torch.randn(n, m)
        t32 = seconds(lambda: a @ b, args.repeats)
        print(f"{size:>11} {flops(rows, cols) / 1e9:8.3f} {t * 1e3:9.1f} {flops(rows, cols) / t / 1e9:8.2f} "
              f"{2 * m * m * n / t32 / 1e9:20.2f}")


if __name__ == "__main__":
    main()
