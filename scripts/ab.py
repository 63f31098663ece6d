"""A/B: two settings over one config, the same tokens, K seeds; which reaches the lower val loss, and how much sooner.

    python scripts/ab.py config/train_tiny.py --a "--lr_schedule=cosine" --b "--lr_schedule=wsd" \\
        --seeds 2 --common "--max_iters=200 --lr_decay_iters=200" --out out/ab_wsd

Each side trains once per seed (seeds 1337, 1338, ...) in OUT/a_SEED and OUT/b_SEED, checkpoints off unless a
side turns them on; a run already done is not repeated (one begun or done with other settings, by its config.json,
is refused: another --out, or delete it). In B's settings "{a}" stands for A's out_dir of the same
seed, so B can be a cooldown fork of A: --common "--lr_schedule=wsd" --a "--checkpoint_interval=100"
--b "--init_from={a}/ckpt_100.pt --cooldown_iters=20". From each run's metrics.jsonl it reports:
  - each side's final val loss, mean ± standard deviation over the seeds (and the range);
  - A's val loss at the tokens B ended with (for a fork: the run it forked from, at the fork's end);
  - tokens-to-target: the tokens B's mean curve needs to reach A's mean final val loss (interpolated between
    evaluations), as the ratio A_tokens / B_tokens (above 1: B is that many times faster; null: B never got there).
It writes OUT/ab.json and OUT/ab.png (val loss against tokens, every seed and the mean).
"""
import json
import os
import shlex
import statistics
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
import configurator  # noqa: E402
import ladder  # noqa: E402  (scripts/ladder.py, beside this file: its runs are reused as these are)
from trainer import cli, metrics, runlog  # noqa: E402


RUN_KEYS = ("seed", "out_dir")  # run() sets them for each run, after the sides' overrides


def overrides(flag, text):
    """--a's, --b's or --common's text as a list of --key=value; ValueError on an unbalanced quote or a key
    that run() sets itself, which would be overridden without a word."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise ValueError(f"{flag} {text!r}: {e}") from None
    if own := next((arg for arg in argv if arg[2:].partition("=")[0] in RUN_KEYS), None):
        raise ValueError(f"{flag} sets {own}, which ab.py sets for each run (--seeds, --out): drop it")
    return argv


def load_settings(argv):
    """train.py's settings for its argv, as a dict; a bad config is train.py's one line and exit status."""
    return vars(configurator.load_config_or_exit(argv))


def run(config, common, side, seed, out_dir, a_dir):
    """Train one side for one seed, unless its run is already done; its eval curve [(tokens, val_loss)].
    common, side: lists of overrides (overrides())."""
    argv = [config, "--checkpoint_interval=0", *common, *(arg.replace("{a}", str(a_dir)) for arg in side),
            f"--seed={seed}", f"--out_dir={out_dir}"]
    if problem := reuse_problem(out_dir, argv):
        sys.exit(f"error: {problem}")
    if not (out_dir / metrics.FILE).is_file() or not metrics.read(out_dir, "done"):
        command = [sys.executable, "train.py", *argv]
        print("+ " + " ".join(command[1:]), flush=True)
        # train.log keeps what stdout says; stderr holds why a run failed (trainer/runlog.py)
        result = subprocess.run(command, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if result.returncode != 0:
            why = runlog.why_it_failed(result.returncode, result.stderr)
            sys.exit(f"error: train.py for {out_dir} failed: {why}")
    return [(r["tokens"], r["val_loss"]) for r in metrics.latest_per_iter(metrics.read(out_dir, "eval"))
            if r.get("val_loss") is not None]


def reuse_problem(out_dir, argv):
    """Why the run begun or done in out_dir cannot stand for the one train.py's argv asks for, as one line, or
    None: ladder.reuse_problem's comparison of its config.json, without what train.py settles for itself."""
    if not (out_dir / "config.json").is_file():  # nothing trained there yet
        return None
    settings = load_settings(argv)
    if settings["cooldown_iters"] > 0:  # a cooldown fork saves its own end as max_iters (trainer/checkpointer.py)
        del settings["max_iters"]
        forked_from = json.loads((out_dir / "config.json").read_text()).get("init_from")
        # the ladder's runs start from scratch, a fork from its own checkpoint ('resume' once it went on from its own)
        if forked_from not in (settings["init_from"], "resume"):
            return (f"{out_dir} was forked from {forked_from} where this A/B forks from {settings['init_from']}: use "
                    "another --out, or delete the run to train it again")
    return ladder.reuse_problem(out_dir, types.SimpleNamespace(**settings), asker="this A/B")


def mean_curve(curves):
    """The seeds' mean val loss at the evaluations they all share."""
    shared = sorted(set.intersection(*(set(t for t, _ in c) for c in curves)))
    return [(t, statistics.fmean(dict(c)[t] for c in curves)) for t in shared]


def tokens_to_reach(curve, target):
    """The first tokens at which the curve is at or below target, interpolated linearly; None if never."""
    for (t0, l0), (t1, l1) in zip([curve[0]] + curve, curve):
        if l1 <= target:
            return t1 if l0 == l1 or t0 == t1 else t0 + (l0 - target) / (l0 - l1) * (t1 - t0)
    return None


def summary(finals):
    return {"mean": statistics.fmean(finals), "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
            "min": min(finals), "max": max(finals), "per_seed": finals}


def plot(curves, path, labels):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for side, color in (("a", "tab:blue"), ("b", "tab:orange")):
        for c in curves[side]:
            ax.plot([t for t, _ in c], [v for _, v in c], color=color, alpha=0.3, linewidth=0.8)
        m = mean_curve(curves[side])
        ax.plot([t for t, _ in m], [v for _, v in m], color=color, linewidth=2, label=f"{side.upper()}: {labels[side]}")
    ax.set_xlabel("tokens")
    ax.set_ylabel("val loss")
    ax.legend(fontsize=8)
    low = min(v for side in curves for c in curves[side] for _, v in c)
    ax.set_ylim(low - 0.05, low + 1.0)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def joined(argv):
    """--a "--x=1" as --a=--x=1: argparse takes a separate value that starts with '--' for another option."""
    out, rest = [], list(argv)
    while rest:
        arg = rest.pop(0)
        out.append(f"{arg}={rest.pop(0)}" if arg in ("--a", "--b", "--common") and rest else arg)
    return out


def main():
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config")
    p.add_argument("--a", required=True, help="A's overrides, e.g. \"--optimizer=adamw\"")
    p.add_argument("--b", required=True, help="B's overrides; {a} is A's out_dir of the same seed")
    p.add_argument("--common", default="", help="overrides for both sides, e.g. \"--max_iters=200\"")
    p.add_argument("--seeds", type=int, default=2, help="how many seeds (from 1337 on)")
    p.add_argument("--out", required=True, help="folder for the runs, ab.json and ab.png")
    args = p.parse_args(joined(sys.argv[1:]))
    if problem := cli.below_least(args, {"seeds": 1}):  # no run, no mean to report
        p.error(problem)
    try:
        common, a, b = (overrides(f"--{k}", getattr(args, k)) for k in ("common", "a", "b"))
    except ValueError as e:
        p.error(str(e))
    if load_settings([args.config, *common, *a]) == load_settings([args.config, *common, *b]):  # a 1.00x by design
        p.error(f"--a {args.a!r} and --b {args.b!r} give the same settings over {args.config}: give B what it changes")
    out = Path(args.out)
    seeds = [1337 + i for i in range(args.seeds)]
    curves = {"a": [], "b": []}
    for seed in seeds:
        curves["a"].append(run(args.config, common, a, seed, out / f"a_{seed}", None))
        curves["b"].append(run(args.config, common, b, seed, out / f"b_{seed}", out / f"a_{seed}"))
    if not all(curves["a"]) or not all(curves["b"]):
        sys.exit("error: a run has no evaluation in its metrics.jsonl; set eval_interval > 0")
    a_final, b_final = summary([c[-1][1] for c in curves["a"]]), summary([c[-1][1] for c in curves["b"]])
    a_mean, b_mean = mean_curve(curves["a"]), mean_curve(curves["b"])
    b_end = b_mean[-1][0]
    a_at_b_end = float(np.interp(b_end, [t for t, _ in a_mean], [v for _, v in a_mean]))
    reached = tokens_to_reach(b_mean, a_final["mean"])
    result = {
        "config": args.config, "a": args.a, "b": args.b, "common": args.common, "seeds": seeds,
        "a_final_val_loss": a_final, "b_final_val_loss": b_final,
        "a_tokens": a_mean[-1][0], "b_tokens": b_end, "a_val_loss_at_b_tokens": a_at_b_end,
        "b_tokens_to_a_final": reached, "tokens_ratio": a_mean[-1][0] / reached if reached else None,
        "curves": curves,
    }
    (out / "ab.json").write_text(json.dumps(result, indent=1))
    plot(curves, out / "ab.png", {"a": args.a, "b": args.b})
    print(f"A ({args.a}): final val loss {a_final['mean']:.4f} ± {a_final['std']:.4f} "
          f"[{a_final['min']:.4f}, {a_final['max']:.4f}] at {a_mean[-1][0]:,} tokens")
    print(f"B ({args.b}): final val loss {b_final['mean']:.4f} ± {b_final['std']:.4f} "
          f"[{b_final['min']:.4f}, {b_final['max']:.4f}] at {b_end:,} tokens; A there: {a_at_b_end:.4f}")
    print(f"tokens-to-target: B reaches A's final {a_final['mean']:.4f} "
          + (f"at {reached:,.0f} tokens, ratio A/B {result['tokens_ratio']:.2f}x" if reached else "never (ratio: none)"))
    print(f"wrote {out / 'ab.json'} and {out / 'ab.png'}")


if __name__ == "__main__":
    main()
