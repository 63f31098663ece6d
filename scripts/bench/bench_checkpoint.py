"""
Throughput of save_checkpoint against the disk's own: a plain open/write/fsync of the same bytes.
Not a test. The target is save_checkpoint at >= 0.7x the plain write. Then the training stall per
save: how long train.py's loop waits in a synchronous save (the whole write) against an asynchronous
one (checkpoint_async=True: the copy to host memory; the write goes on in the background).

    python scripts/bench/bench_checkpoint.py --mb 1000 --dir /path/on/the/checkpoint/disk
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from trainer import cli  # noqa: E402
from trainer.checkpoint import save_checkpoint  # noqa: E402
from trainer.checkpoint import Saver  # noqa: E402


def make_state(mb, n_tensors):
    # random floats, so a compressing filesystem cannot make either side look faster
    numel = mb * 2**20 // 4 // n_tensors
    model = {f'h.{i}.weight': torch.randn(numel) for i in range(n_tensors)}
    return {'model': model, 'iter_num': 0}


def plain_write(tensors, path):
    with open(path, 'wb') as f:
        for t in tensors:
            f.write(t.numpy())
        f.flush()
        os.fsync(f.fileno())


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def report(label, seconds, nbytes):
    gbs = nbytes / 1e9 / statistics.median(seconds)
    print(f"{label + ':':19s}{gbs:.2f} GB/s (median of " + ", ".join(f"{t:.2f}s" for t in seconds) + ")")
    return gbs


def main(argv=None):
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--mb', type=int, default=1000, help='size of the state in MiB')
    parser.add_argument('--tensors', type=int, default=100, help='number of tensors the state is split into')
    parser.add_argument('--dir', default=None, help='a folder on the disk to measure (default: the temp dir)')
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args(argv)

    state = make_state(args.mb, args.tensors)
    tensors = list(state['model'].values())
    nbytes = sum(t.nbytes for t in tensors)
    work = tempfile.mkdtemp(prefix='bench_checkpoint_', dir=args.dir)
    print(f"{nbytes / 1e9:.2f} GB in {len(tensors)} tensors, writing in {work}")
    plain, saves = [], []
    try:
        for i in range(args.repeats):  # alternate, so both see the same disk and page-cache state
            plain_path = os.path.join(work, 'plain.bin')
            plain.append(timed(lambda: plain_write(tensors, plain_path)))
            os.remove(plain_path)
            saves.append(timed(lambda: save_checkpoint(state, work, i, keep_last_n=1, log=lambda *a: None)))
        plain_gbs = report('plain write+fsync', plain, nbytes)
        save_gbs = report('save_checkpoint', saves, nbytes)
        print(f"ratio: {save_gbs / plain_gbs:.2f}x (target >= 0.70x)")
        stalls(state, work, args.repeats)
    finally:
        shutil.rmtree(work)


def stalls(state, work, repeats):
    """The loop's stall per save, each mode saving `repeats` times; the asynchronous write is waited for
    before the next save (as it would be, its interval being longer than a write), off the clock."""
    quiet = lambda *a: None  # noqa: E731
    for label, asynchronous in (("sync save", False), ("async save", True)):
        saver, stalled, written = Saver(asynchronous, log=quiet), [], []
        for i in range(repeats):
            t0 = time.perf_counter()
            saver.save_checkpoint(state, work, 100 + i, keep_last_n=1)
            stalled.append(time.perf_counter() - t0)
            saver.wait()
            written.append(time.perf_counter() - t0)
        print(f"{label + ' stall:':19s}{statistics.median(stalled):.2f}s per save (median; the save done after "
              f"{statistics.median(written):.2f}s)")


if __name__ == '__main__':
    main()
