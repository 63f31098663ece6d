"""
Plot a run from its metrics.jsonl: train and val loss, throughput and HellaSwag accuracy over iterations.

    python scripts/plot_log.py out/gpt3_6b [--out loss.png]     (the out_dir, or its train.log or metrics.jsonl)

Every figure comes from the run's records (docs/metrics.md): step, eval (and each data_mixture source's,
dashed), hellaswag against the GPT-3 paper's figure for the run's size, and forecasts with their error
bars beside the val curve. Resumes, rollbacks and weight changes are vertical lines; a resume or rollback
at N replaces what the run recorded past N, so the plot shows the run as it continued. scripts/eval.py
--watch's eval.jsonl beside it adds each lm-eval task's curve. The loss axis leaves out the first 5% of
steps, whose ~11 nats would squash the rest. Writes a PNG (default: loss.png in the out_dir).
"""
import math
import os
import sys

import matplotlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer import checkpoint, cli, metrics  # noqa: E402
from trainer.evaluation import GPT3_ZERO_SHOT, gpt3_reference, read_watch_log  # noqa: E402

matplotlib.use("Agg")  # render to a file: no display on a GPU server
import matplotlib.pyplot as plt  # noqa: E402  (after choosing the backend)
from matplotlib.backend_bases import FigureCanvasBase  # noqa: E402

WARMUP_SHARE = 0.05  # the loss axis leaves out this first share of the steps
CURVES = ("step", "eval", "hellaswag", "forecast")  # what a resume or rollback replaces past its iteration
EVENTS = {"start": ("resumed", ":", "tab:gray"), "rollback": ("rolled back", "-.", "tab:red"),
          "weights_changed": ("weights changed", "--", "tab:purple"),
          "val_set_changed": ("val set changed", "--", "tab:brown"),
          "schedule_changed": ("schedule changed", "--", "tab:orange")}  # vertical lines: label, style, colour
# what curves() reads of each kind's records beyond kind and iter: a record without them is skipped
FIGURES = {"step": ("loss",), "eval": ("val_loss",), "hellaswag": ("acc_norm",), "forecast": ("at_iter", "val_loss")}
RUN_FILES = ("train.log", metrics.FILE)  # a file in an out_dir that stands for it


def continued(records):
    """The records of the run as it continued: a 'start' or 'rollback' at iteration N drops the curves'
    earlier records past N (the steps a resume from an older checkpoint, or a rollback, abandoned)."""
    kept = []
    for r in records:
        if r["kind"] in ("start", "rollback"):
            kept = [k for k in kept if k["kind"] not in CURVES or k["iter"] <= r["iter"]]
        kept.append(r)
    return kept


def curves(records):
    """What plot() draws, from metrics.jsonl's records: {name: {iter: value}} for the curves, the
    parameter count, and the events' iterations {kind: [iter, ...]}."""
    records = continued(records)
    of = {kind: [r for r in records if r["kind"] == kind] for kind in (*CURVES, *EVENTS)}
    sources = {}
    for r in of["eval"]:
        for name, loss in (r.get("sources") or {}).items():
            sources.setdefault(name, {})[r["iter"]] = loss
    nan = float("nan")  # a skipped step's figures are null in the file
    return {
        "train": {r["iter"]: nan if r["loss"] is None else r["loss"] for r in of["step"]},
        "speed": {r["iter"]: r["tokens_per_sec"] for r in of["step"] if r.get("tokens_per_sec") is not None},
        "val": {r["iter"]: r["val_loss"] for r in of["eval"] if r["val_loss"] is not None},
        "sources": sources,
        "hellaswag": {r["iter"]: r["acc_norm"] for r in of["hellaswag"] if r["acc_norm"] is not None},
        # a forecast's figures are numbers as train.py writes them; another writer's nulls are no point to draw
        "forecast": [(r["at_iter"], r["val_loss"], r.get("error")) for r in of["forecast"]
                     if r["at_iter"] is not None and r["val_loss"] is not None],
        "params": next((r["params"] for r in reversed(of["start"]) if r.get("params")), None),
        "events": {kind: [r["iter"] for r in of[kind] if kind != "start" or r["iter"] > 0] for kind in EVENTS},
    }


def parse_evals(path):
    """({(task, metric): {iter: score in %}} for the metrics the paper's table has, the model's parameter
    count or None) from scripts/eval.py --watch's eval.jsonl; {} and None where there is none."""
    found, params = {}, None
    for step, record in read_watch_log(path).items():
        results, params = record.get("results", {}), record.get("params", params)
        for (task, metric) in GPT3_ZERO_SHOT:
            if metric.startswith("acc") and metric in results.get(task, {}):
                found.setdefault((task, metric), {})[step] = 100 * results[task][metric]
    return found, params


def drawable(record):
    """Whether curves() can read record: an object with a kind and, for a kind it draws, an integer iter and
    that kind's figures (a record a writer other than train.py left, or an edit, may lack them)."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return False
    kind = record["kind"]
    return kind not in (*CURVES, *EVENTS) or (
        type(record.get("iter")) is int and all(key in record for key in FIGURES.get(kind, ())))


def run_folder(path):
    """The out_dir that path names (the folder, or its train.log or metrics.jsonl), or exits with one line: a
    mistyped name is never taken for the folder above it, whose metrics would be another run's."""
    if os.path.isdir(path):
        return path
    if not os.path.exists(path):
        sys.exit(f"plot_log: {path} does not exist: give a run's out_dir (or its train.log or metrics.jsonl)")
    if os.path.basename(path) not in RUN_FILES:
        sys.exit(f"plot_log: {path} is not a run's out_dir, train.log or metrics.jsonl: give the run's out_dir")
    return os.path.dirname(path) or "."


def format_problem(path):
    """Why matplotlib cannot write path, by its extension, as one line, or None. (Without an extension it would
    write path + '.png', not the file named.)"""
    extension, supported = os.path.splitext(path)[1][1:].lower(), FigureCanvasBase.get_supported_filetypes()
    if extension in supported:
        return None
    what = f"matplotlib cannot write .{extension} files" if extension else "it has no extension"
    return f"--out {path}: {what}; end it in one of {', '.join('.' + e for e in sorted(supported))}"


def loss_limits(train, val):
    """(low, high) for the loss axis: the range of the finite losses after the first WARMUP_SHARE of the
    logged steps, with a margin; None when there are too few steps to leave any out."""
    iters = sorted(train)
    first = iters[int(len(iters) * WARMUP_SHARE)]
    if first == iters[0]:
        return None
    losses = [train[i] for i in iters if i >= first] + [v for i, v in val.items() if i >= first]
    losses = [x for x in losses if math.isfinite(x)]
    if not losses:
        return None
    low, high = min(losses), max(losses)
    pad = 0.05 * (high - low) or 0.1
    return low - pad, high + pad


def line(ax, points, *style, **kwargs):
    ax.plot(sorted(points), [points[i] for i in sorted(points)], *style, **kwargs)


def plot(c, path, title, evals=None):
    rows = 2 + bool(c["hellaswag"]) + bool(evals)
    fig, axes = plt.subplots(rows, 1, figsize=(10, 3.5 * rows), sharex=True, height_ratios=[2, 1, 1, 1][:rows])
    ax_loss, ax_speed = axes[:2]
    line(ax_loss, c["train"], lw=0.8, alpha=0.8, label="train loss")
    if c["val"]:
        line(ax_loss, c["val"], "o-", ms=3, label="val loss")
    if c["forecast"]:
        at, loss, error = zip(*c["forecast"])
        ax_loss.errorbar(at, loss, yerr=[e or 0 for e in error], fmt="s", ms=4, mfc="none", capsize=3,
                         color="tab:orange", label="forecast val loss")
    for name, points in c["sources"].items():
        line(ax_loss, points, "--", lw=0.9, label=f"val {name}")
    if limits := loss_limits(c["train"], c["val"]):
        ax_loss.set_ylim(*limits)
    for kind, (label, style, color) in EVENTS.items():
        for k, n in enumerate(c["events"][kind]):
            for ax in axes:
                ax.axvline(n, ls=style, color=color, label=label if k == 0 and ax is ax_loss else None)
    ax_loss.set_ylabel("loss")
    ax_loss.set_title(title)
    ax_loss.grid(alpha=0.3)
    ax_loss.legend()
    line(ax_speed, c["speed"], lw=0.8, color="tab:green")
    ax_speed.set_ylabel("tokens/s")
    ax_speed.grid(alpha=0.3)
    if c["hellaswag"]:
        ax = axes[2]
        line(ax, {i: 100 * v for i, v in c["hellaswag"].items()}, "o-", ms=3, label="acc_norm")
        if c["params"]:
            name, reference = gpt3_reference(c["params"])
            ax.axhline(reference, ls="--", color="tab:red", label=f"{name} zero-shot ({reference}%)")
        ax.set_ylabel("HellaSwag %")
        ax.grid(alpha=0.3)
        ax.legend()
    if evals:
        plot_evals(axes[-1], *evals, c["params"])
    axes[-1].set_xlabel("iteration")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_evals(ax, found, eval_params, params):
    """Each task's lm-eval curve, and the paper's figure for the run's size as a dashed line of its colour."""
    for k, ((task, metric), points) in enumerate(sorted(found.items())):
        color = f"C{k % 10}"
        line(ax, points, "o-", ms=3, color=color, label=f"{task} {metric}")
        name, reference = gpt3_reference(params or eval_params, task, metric)
        ax.axhline(reference, ls="--", lw=0.8, color=color)
    ax.set_ylabel(f"lm-eval %\n(dashed: {name})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", help="a train.py out_dir, or a file in it (metrics.jsonl, train.log)")
    p.add_argument("--out", help="the PNG to write (default: loss.png in the out_dir)")
    args = p.parse_args(argv)
    out_dir = run_folder(args.run)
    out = args.out or os.path.join(out_dir, "loss.png")
    if problem := format_problem(out):
        sys.exit(f"plot_log: {problem}")
    path = os.path.join(out_dir, metrics.FILE)
    try:
        records = metrics.read(path)
    except OSError as e:
        sys.exit(f"plot_log: cannot read {e.filename}: {e.strerror}")
    # skipped with a warning, not refused: someone tailing a live run wants its plot despite a stray line (and
    # metrics.read already skips the torn last line a kill leaves, or a write still under way)
    if malformed := sum(not drawable(r) for r in records):
        print(f"plot_log: warning: skipped {malformed} malformed record(s) in {path} (not an object with a kind, "
              f"an iter and its figures)", file=sys.stderr)
        records = [r for r in records if drawable(r)]
    c = curves(records)
    train = c["train"]
    if not train:
        sys.exit(f"plot_log: no 'step' records in {path}: is it a train.py out_dir?")
    evals = parse_evals(os.path.join(out_dir, checkpoint.SCORES_LOG))
    try:
        plot(c, out, args.run, evals=evals if evals[0] else None)
    except OSError as e:
        sys.exit(f"plot_log: cannot write {out}: {e.strerror}")
    val, events = c["val"], c["events"]
    last = f", last val loss {val[max(val)]:.4f} at iter {max(val)}" if val else ""
    resumed = f", resumed {len(events['start'])} time(s)" if events["start"] else ""
    rolled = f", rolled back {len(events['rollback'])} time(s)" if events["rollback"] else ""
    forecast = f", {len(c['forecast'])} forecast(s)" if c["forecast"] else ""
    scored = f", lm-eval curves for {len(evals[0])} task metric(s)" if evals[0] else ""
    print(f"wrote {out}: {len(train)} iterations ({min(train)}..{max(train)}), {len(val)} evals"
          f"{last}{resumed}{rolled}{forecast}{scored}")


if __name__ == "__main__":
    main()
