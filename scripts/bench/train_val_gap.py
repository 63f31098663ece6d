"""How far a run's train loss fell below its val loss over the end of the run: trains nothing.

    python scripts/bench/train_val_gap.py out/beyond_seed63/runs/*/w320* out/full_seed65/runs/*/w320*

For each finished run folder: the mean loss of its training steps and the mean of its val losses, both over
the steps from --since (a share of the run, default its last quarter), and their ratio less one. A step's loss
is on text the run sees for the first time only while it has not yet passed over its data once, so a gap that
opens as a run repeats its data, and stays shut where it does not, is memorisation rather than a law bending
(docs/ladder_evidence.md, "Unrepeated data"). Writes the table as JSON to --out.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from trainer import cli, metrics  # noqa: E402


def gap(run, since=0.75):
    """{"train", "val", "gap"} over the run's steps from since × its max_iters on; None if it has not ended."""
    records = metrics.read(run)  # one pass over the file, split by kind below
    of = lambda kind: [r for r in records if r.get("kind") == kind]
    if not of("start") or not of("done"):
        return None
    max_iters = of("start")[-1]["max_iters"]
    first = since * max_iters
    evals = [r["val_loss"] for r in metrics.latest_per_iter(of("eval"))
             if r["iter"] >= first and r.get("val_loss") is not None]
    steps = [r["loss"] for r in metrics.latest_per_iter(of("step")) if r["iter"] >= first]
    if not evals or not steps:
        return None
    train, val = float(np.mean(steps)), float(np.mean(evals))
    return {"run": str(run), "max_iters": max_iters, "train": train, "val": val, "gap": train / val - 1}


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders (each with its metrics.jsonl)")
    p.add_argument("--since", type=float, default=0.75, help="from this share of each run on (default: %(default)s)")
    p.add_argument("--out", help="write the table as JSON here")
    args = p.parse_args(argv)
    rows = [row for run in args.runs if (row := gap(run, args.since))]
    for row in rows:
        print(f"{row['run']:60s} train {row['train']:.4f}  val {row['val']:.4f}  gap {row['gap']:+.1%}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
