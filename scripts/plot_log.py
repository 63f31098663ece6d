"""
Plot a run's train.log: train and val loss, and throughput, over iterations.

    python scripts/plot_log.py out/gpt3_6b/train.log [--out loss.png]

Reads the lines train.py writes ('iter N: loss X, time Yms, ..., tok/s T, ...' and
'eval iter N: val loss X ...'). A resume from an older checkpoint repeats iterations: the
later run's lines replace the abandoned ones from there on, so the plot shows the run as it
continued. Writes a PNG (default: loss.png beside the log) without needing a display.
"""
import argparse
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")  # render to a file: no display on a GPU server
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

NUMBER = r"([-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf)"
TRAIN_RE = re.compile(rf"iter (\d+): loss {NUMBER}, time \S+, mfu \S+, tok/s (\d[\d,]*)")  # all GPUs' tok/s
EVAL_RE = re.compile(rf"eval iter (\d+): val loss {NUMBER}")


def parse_log(lines):
    """({iter: (train loss, tokens/s)}, {iter: val loss}) with later runs replacing what they repeat."""
    train, val = {}, {}
    for line in lines:
        m = TRAIN_RE.match(line)
        if m:
            n = int(m.group(1))
            if train and n <= max(train):  # a resume from an older checkpoint: drop the abandoned steps
                train = {k: v for k, v in train.items() if k < n}
                val = {k: v for k, v in val.items() if k < n}
            train[n] = (float(m.group(2)), float(m.group(3).replace(",", "")))  # 10,044, -> 10044
            continue
        m = EVAL_RE.match(line)
        if m:
            val[int(m.group(1))] = float(m.group(2))
    return train, val


def plot(train, val, path, title):
    iters = sorted(train)
    fig, (ax_loss, ax_speed) = plt.subplots(2, 1, figsize=(10, 7), sharex=True, height_ratios=[2, 1])
    ax_loss.plot(iters, [train[i][0] for i in iters], lw=0.8, alpha=0.8, label="train loss")
    if val:
        ax_loss.plot(sorted(val), [val[i] for i in sorted(val)], "o-", ms=3, label="val loss")
    ax_loss.set_ylabel("loss")
    ax_loss.set_title(title)
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_speed.plot(iters, [train[i][1] for i in iters], lw=0.8, color="tab:green")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.set_xlabel("iteration")
    ax_speed.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="a train.log written by train.py")
    p.add_argument("--out", help="the PNG to write (default: loss.png beside the log)")
    args = p.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(args.log), "loss.png")
    try:
        with open(args.log) as f:
            train, val = parse_log(f)
    except OSError as e:
        sys.exit(f"plot_log: cannot read {args.log}: {e.strerror}")
    if not train:
        sys.exit(f"plot_log: no 'iter N: loss X' lines in {args.log}: is it a train.py log?")
    try:
        plot(train, val, out, args.log)
    except OSError as e:
        sys.exit(f"plot_log: cannot write {out}: {e.strerror}")
    last = f", last val loss {val[max(val)]:.4f} at iter {max(val)}" if val else ""
    print(f"wrote {out}: {len(train)} iterations ({min(train)}..{max(train)}), {len(val)} evals{last}")


if __name__ == "__main__":
    main()
