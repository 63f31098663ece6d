"""
The LM head's loss, today's way against model.py's chunked one: the peak bytes its forward and backward
allocate (PyTorch's MemTracker, on fake tensors: shapes without storage, so the 6.7B shape runs on a
laptop in seconds), as a ratio, and against the formulas for trainer/cost.py.

    python scripts/bench/bench_lm_head.py                  # micro-batch 4 x 2048 tokens, 4096 wide, vocab 50304
    python scripts/bench/bench_lm_head.py --batch_size 8 --chunk_rows 2048

"Full logits" is F.cross_entropy on the (B*T, V) logits of an nn.Linear, as model.py did before the
chunked head; both run under bf16 autocast over an fp32 weight, as train.py does. The peak counts
what the head itself adds to its input and weight: the logits and their gradients, the bf16 casts,
the fp32 weight gradient and the gradient of the hidden states.
"""
import os
import sys

import torch
from torch.nn import functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from trainer import cli  # noqa: E402
from model import LOSS_CHUNK_ROWS, lm_head_loss, mask_padding  # noqa: E402


def full_logits_loss(x, weight, targets, n_tokens, chunk_rows):
    logits = mask_padding(F.linear(x, weight), n_tokens)
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


def peak_bytes(loss_fn, rows, C, V, chunk_rows):
    """Peak bytes of the head's forward and backward, inputs and weight excluded."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    with FakeTensorMode():
        x = torch.randn(rows, C, requires_grad=True)
        weight = torch.randn(V, C, requires_grad=True)
        targets = torch.randint(0, V, (rows,))
        tracker = MemTracker()
        tracker.track_external(x, weight, targets)
        with tracker:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = loss_fn(x, weight, targets, 0, chunk_rows)
            loss.backward()
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    return peak["Total"] - (4 * rows * C + 4 * V * C + 8 * rows)


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch_size", type=int, default=4)
    parser.add_argument("--block_size", type=int, default=2048)
    parser.add_argument("--n_embd", type=int, default=4096)
    parser.add_argument("--vocab_size", type=int, default=50304)
    parser.add_argument("--chunk_rows", type=int, default=LOSS_CHUNK_ROWS)
    args = parser.parse_args(argv)
    rows, C, V = args.batch_size * args.block_size, args.n_embd, args.vocab_size
    print(f"today's logits arithmetic: {rows} x {V} = {rows * V / 1e6:.0f}M logits, {4 * rows * V / 1e9:.2f} GB "
          f"per fp32 copy; 12 B a logit at the start of backward = {12 * rows * V / 1e9:.2f} GB")
    small = (2048, 256, 4096, 256)  # rows, width, vocab, chunk rows: seconds on a CPU
    for label, (r, c, v, chunk) in (("model", (rows, C, V, args.chunk_rows)), ("small", small)):
        full, chunked = (peak_bytes(fn, r, c, v, chunk) for fn in (full_logits_loss, lm_head_loss))
        print(f"{label} shape ({r} rows, {c} wide, vocab {v}, chunks of {chunk} rows): peak the head adds "
              f"{full / 1e9:.3f} GB full logits, {chunked / 1e9:.3f} GB chunked: ratio {chunked / full:.3f}")

if __name__ == "__main__":
    main()
