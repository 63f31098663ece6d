"""
Plot a run's train.log: train and val loss, throughput and HellaSwag accuracy over iterations.

    python scripts/plot_log.py out/gpt3_6b/train.log [--out loss.png]

Reads the lines train.py writes ('iter N: loss X, time Yms, ..., tok/s T, ...' and
'eval iter N: val loss X ...'). A resume from an older checkpoint repeats iterations: the
later run's lines replace the abandoned ones from there on, so the plot shows the run as it
continued. HellaSwag's acc_norm ('hellaswag iter N: acc_norm X') is drawn against the GPT-3 paper's
zero-shot figure for the model size nearest the run's ('built N parameters'); so is each task's curve in
eval.jsonl beside the log (scripts/eval.py --watch), against the paper's line for that task. Each resume
('resuming after N completed steps') is a dotted vertical line at N. A run on a data_mixture also has each
source's val loss ('source NAME: ... val loss X', logged just before its 'eval iter N' line), dashed. The loss axis spans the losses
after the first 5% of steps, so the first iterations' ~11 nats do not squash the rest. Writes a PNG
(default: loss.png beside the log) without needing a display.
"""
import argparse
import math
import os
import re
import sys

import matplotlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer.evaluation import GPT3_ZERO_SHOT, gpt3_reference, read_watch_log  # noqa: E402

matplotlib.use("Agg")  # render to a file: no display on a GPU server
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)

NUMBER = r"([-+]?\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf)"
TRAIN_RE = re.compile(rf"iter (\d+): loss {NUMBER}, time \S+, mfu \S+, tok/s (\d[\d,]*)")  # all GPUs' tok/s
EVAL_RE = re.compile(rf"eval iter (\d+): val loss {NUMBER}")
HELLASWAG_RE = re.compile(rf"hellaswag iter (\d+): acc_norm {NUMBER}")
PARAMS_RE = re.compile(r"built ([\d,]+) parameters")
RESUME_RE = re.compile(r"resuming after (\d+) completed steps")
SOURCE_RE = re.compile(rf"source (\S+): .*, val loss {NUMBER}$")
WARMUP_SHARE = 0.05  # the loss axis leaves out this first share of the steps


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


def parse_hellaswag(lines):
    """({iter: acc_norm}, the model's parameter count or None) from a train.log's lines."""
    points, params = {}, None
    for line in lines:
        if m := HELLASWAG_RE.match(line):
            points[int(m.group(1))] = float(m.group(2))
        elif m := PARAMS_RE.match(line):
            params = int(m.group(1).replace(",", ""))
    return points, params


def parse_evals(path):
    """({(task, metric): {iter: score in %}} for the metrics the paper's table has, the model's parameter
    count or None) from scripts/eval.py --watch's eval.jsonl; {} and None where there is none."""
    curves, params = {}, None
    for step, record in read_watch_log(path).items():
        results, params = record.get("results", {}), record.get("params", params)
        for (task, metric) in GPT3_ZERO_SHOT:
            if metric.startswith("acc") and metric in results.get(task, {}):
                curves.setdefault((task, metric), {})[step] = 100 * results[task][metric]
    return curves, params


def parse_sources(lines):
    """{source name: {iter: val loss}} of a data_mixture run: each source line belongs to the eval line after it."""
    sources, pending = {}, {}
    for line in lines:
        if m := SOURCE_RE.match(line.rstrip("\n")):
            pending[m.group(1)] = float(m.group(2))
        elif m := EVAL_RE.match(line):
            for name, loss in pending.items():
                sources.setdefault(name, {})[int(m.group(1))] = loss
            pending = {}
    return sources


def parse_resumes(lines):
    """The iterations a run resumed after, in the order they happened."""
    return [int(m.group(1)) for line in lines if (m := RESUME_RE.match(line))]


def loss_limits(train, val):
    """(low, high) for the loss axis: the range of the finite losses after the first WARMUP_SHARE of the
    logged steps, with a margin; None when there are too few steps to leave any out."""
    iters = sorted(train)
    first = iters[int(len(iters) * WARMUP_SHARE)]
    if first == iters[0]:
        return None
    losses = [train[i][0] for i in iters if i >= first] + [v for i, v in val.items() if i >= first]
    losses = [x for x in losses if math.isfinite(x)]
    if not losses:
        return None
    low, high = min(losses), max(losses)
    pad = 0.05 * (high - low) or 0.1
    return low - pad, high + pad


def plot(train, val, path, title, hellaswag=None, params=None, resumes=(), sources=None, evals=None):
    iters = sorted(train)
    rows = 2 + bool(hellaswag) + bool(evals)
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.5 * rows), sharex=True, height_ratios=[2, 1, 1, 1][:rows])
    ax_loss, ax_speed = axes[:2]
    ax_loss.plot(iters, [train[i][0] for i in iters], lw=0.8, alpha=0.8, label="train loss")
    if val:
        ax_loss.plot(sorted(val), [val[i] for i in sorted(val)], "o-", ms=3, label="val loss")
    for name, points in (sources or {}).items():
        ax_loss.plot(sorted(points), [points[i] for i in sorted(points)], "--", lw=0.9, label=f"val {name}")
    if limits := loss_limits(train, val):
        ax_loss.set_ylim(*limits)
    for k, n in enumerate(resumes):
        for ax in axes:
            ax.axvline(n, ls=":", color="tab:gray", label="resumed" if k == 0 and ax is ax_loss else None)
    ax_loss.set_ylabel("loss")
    ax_loss.set_title(title)
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    ax_speed.plot(iters, [train[i][1] for i in iters], lw=0.8, color="tab:green")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.grid(alpha=0.3)
    if hellaswag:
        ax = axes[2]
        ax.plot(sorted(hellaswag), [100 * hellaswag[i] for i in sorted(hellaswag)], "o-", ms=3, label="acc_norm")
        if params:
            name, reference = gpt3_reference(params)
            ax.axhline(reference, ls="--", color="tab:red", label=f"{name} zero-shot ({reference}%)")
        ax.set_ylabel("HellaSwag %")
        ax.grid(alpha=0.3)
        ax.legend()
    if evals:
        plot_evals(axes[-1], *evals, params)
    axes[-1].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_evals(ax, curves, eval_params, params):
    """Each task's lm-eval curve, and the paper's figure for the run's size as a dashed line of its colour."""
    for k, ((task, metric), points) in enumerate(sorted(curves.items())):
        color = f"C{k % 10}"
        ax.plot(sorted(points), [points[i] for i in sorted(points)], "o-", ms=3, color=color, label=f"{task} {metric}")
        name, reference = gpt3_reference(params or eval_params, task, metric)
        ax.axhline(reference, ls="--", lw=0.8, color=color)
    ax.set_ylabel(f"lm-eval %\n(dashed: {name})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", help="a train.log written by train.py")
    p.add_argument("--out", help="the PNG to write (default: loss.png beside the log)")
    args = p.parse_args(argv)
    out = args.out or os.path.join(os.path.dirname(args.log), "loss.png")
    try:
        with open(args.log) as f:
            lines = f.readlines()
        train, val = parse_log(lines)
    except OSError as e:
        sys.exit(f"plot_log: cannot read {args.log}: {e.strerror}")
    if not train:
        sys.exit(f"plot_log: no 'iter N: loss X' lines in {args.log}: is it a train.py log?")
    evals = parse_evals(os.path.join(os.path.dirname(args.log), "eval.jsonl"))
    try:
        plot(train, val, out, args.log, *parse_hellaswag(lines), parse_resumes(lines), sources=parse_sources(lines),
             evals=evals if evals[0] else None)
    except OSError as e:
        sys.exit(f"plot_log: cannot write {out}: {e.strerror}")
    last = f", last val loss {val[max(val)]:.4f} at iter {max(val)}" if val else ""
    resumes = parse_resumes(lines)
    resumed = f", resumed {len(resumes)} time(s)" if resumes else ""
    scored = f", lm-eval curves for {len(evals[0])} task metric(s)" if evals[0] else ""
    print(f"wrote {out}: {len(train)} iterations ({min(train)}..{max(train)}), {len(val)} evals{last}{resumed}{scored}")


if __name__ == "__main__":
    main()
