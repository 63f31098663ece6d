"""How a ladder's rule for measuring a size (`seeds`, `seeded_rates`) holds out its largest size: the runs of a
ladder trained with more seeds and rates than a rule uses, read as if trained under that rule, and the fits
and held-out checks made again for each. Trains nothing; seconds.

    python scripts/bench/seed_rules.py out/ladder_tiny_sr2/ladder.json out/ladder_seed2_sr2/ladder.json

A rule K x R: each size's R lowest swept rates at K seeds (the sweep's run and the first K - 1 replicas), the
size's loss the rate of lowest mean (trainer/ladder.best_runs). 1 x 1 is one seed; 3 x 1 the lowest swept
run's rate at three seeds. K x Ra (3x2a): the second and later rates' seeds only where the rates before them,
at K seeds, have a mean above that rate's one run: a rate whose seeds stay below the next rate's run is not
challenged. The minutes column sums the wall time of the runs a rule keeps (their metrics.jsonl, where on
disk): what it costs in training, one slot's minutes. Prints, per ladder, recipe and rule, the largest size's
prediction from the sizes below, its measurement (the mean of its seeds, at its rate), the error, whether the interval holds it, and the
recommended rate over the sweep's best; the same one step further out (the two largest held out).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainer import cli, ladder, ladder_analysis, metrics  # noqa: E402


def under_rule(runs, ratio, seeds, rates, adaptive=False):
    """The runs a ladder trained with `seeds` seeds at each size's `rates` lowest swept rates would hold
    (adaptive: a rate's seeds only where the best mean of the rates before it is above its one run)."""
    kept = [r for r in runs if not r["replica"]]
    for size in {r["size"] for r in kept if r["tokens_per_param"] == ratio}:
        swept = [r for r in kept if r["size"] == size and r["tokens_per_param"] == ratio]
        first = swept[0]["seed"]
        for lr in ladder.seeded_rates(swept, rates):
            if adaptive and not ladder.challenges(kept, size, ratio, lr):
                break
            kept += [r for r in runs if r["replica"] and r["size"] == size and r["tokens_per_param"] == ratio
                     and r["lr"] == lr and 0 < r["seed"] - first < seeds]
    return kept


def parse_rule(text):
    """'KxR' or 'KxRa' -> (seeds, seeded rates, adaptive), or a one-line error."""
    k, sep, r = text.partition("x")
    if not (sep and k.isdigit() and r.rstrip("a").isdigit() and int(k) >= 1 and int(r.rstrip("a")) >= 1):
        raise SystemExit(f"error: rule {text!r}: write SEEDSxRATES, e.g. 1x1, 3x2 or 3x2a (a: adaptive)")
    return int(k), int(r.rstrip("a")), r.endswith("a")


def minutes(runs):
    """The wall time of these runs' training, from their metrics.jsonl (nan where one is not on disk)."""
    total = 0.0
    for r in runs:
        try:
            records = metrics.read(r["out_dir"])  # read once for its first start and its last done
            start = next(x for x in records if x["kind"] == "start")
            total += [x for x in records if x["kind"] == "done"][-1]["time"] - start["time"]
        except (KeyError, OSError, IndexError, StopIteration):
            return float("nan")
    return total / 60


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ladders", nargs="+", help="ladder.json files of ladders trained with seeds and seeded_rates")
    p.add_argument("--rules", nargs="+", default=["1x1", "3x1", "2x2", "3x2", "3x2a"],
                   help="K x R: seeds x seeded rates; KxRa: adaptive")
    args = p.parse_args(argv)
    rules = [parse_rule(rule) for rule in args.rules]
    print("| ladder | recipe | rule | predicted [±2σ] | measured (seeds) | error | lr / sweep's best | "
          "two held out: error | runs | minutes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for path in args.ladders:
        result = json.loads(Path(path).read_text())
        ratio = result["tokens_per_param"][0]
        trained = result["settings"]
        for seeds, rates, _ in rules:
            if seeds > trained["seeds"] or rates > trained.get("seeded_rates", 1):
                raise SystemExit(f"error: {path} was trained with seeds = {trained['seeds']}, seeded_rates = "
                                 f"{trained.get('seeded_rates', 1)}: rule {seeds}x{rates} asks for more")
        for name, rec in result["recipes"].items():
            for seeds, rates, adaptive in rules:
                runs = under_rule(rec["runs"], ratio, seeds, rates, adaptive)
                h = ladder_analysis.held_out(runs, ratio)
                two = ladder_analysis.held_out(runs, ratio, 2)
                measured = ", ".join(f"{v:.4f}" for v in h["seed_losses"].values()) or f"{h['measured_val_loss']:.4f}"
                print(f"| {Path(path).parent.name} | {name} | {seeds}x{rates}{'a' if adaptive else ''} | "
                      f"{h['predicted_val_loss']:.4f} "
                      f"{ladder.interval_text(h['interval'], '.4f')} | {h['measured_val_loss']:.4f} ({measured}) | "
                      f"{h['relative_error']:+.1%}, {ladder_analysis.where(h)} | "
                      f"{h['lr_ratio']:.2f}x | {two.get('relative_error', float('nan')):+.1%} | {len(runs)} | "
                      f"{minutes(runs):.0f} |")


if __name__ == "__main__":
    main()
