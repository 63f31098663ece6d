"""How well train.log's forecast (trainer/forecast.py) predicts a run's final val loss from 25% and 50% of it.

    OMP_NUM_THREADS=1 python scripts/bench/forecast_accuracy.py --seeds 1337 1338 --schedules cosine wsd

Trains the tiny config once per (schedule, seed) for --iters steps, evaluating every --eval_interval steps,
then fits the law train.py fits at 25% and 50% of the run (forecast.Forecaster over the eval records of its
metrics.jsonl up to there) and sets its forecast beside the final measured val loss, with whether train.log
printed it or why not (too few points, no backtest yet, a WSD run's stable phase, an error over 2% of the
forecast), whether the final val loss fell inside forecast ± E, and the first forecast train.log printed.
Then, over every forecast train.log printed, how many bars held the final val loss. Prints a markdown table
and writes it as JSON to --out.

    python scripts/bench/forecast_accuracy.py --ladder out/ladder_tiny/ladder.json [--runs muon=out/w160 ...]

With --ladder it trains nothing: for each recipe of a scaling ladder (scripts/ladder.py) it takes the largest
size's best run (and each run of --runs, against its recipe's prior) and sets beside its final val loss, at
25% and 50% of that run, the law's fit, the forecast with the ladder's prior (forecast.Prior, from the sizes
below it: the ladder's shape at the run's level) and "the val loss now", each with its error against the final.
A ladder kept without its runs' folders (docs/ladder_runs/) still has each run's curve in its ladder.json: the
prior and the val loss now are read off it; the law, which needs the run's schedule, says its folder is gone.

    python scripts/bench/forecast_accuracy.py --across docs/ladder_runs/{warmup,bf16}_seed*/ladder.json

With --across, each ladder's prior is read against every other ladder's largest best run (same sizes and
steps, another seed or schedule), per recipe, at 25% and 50% of that run; then the mean absolute miss per
pair of warmup shares (the prior's, the run's): what a run off its ladder's schedule costs the prior
(docs/scaling_ladder.md, "In the run: forecast_prior").
"""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import configurator  # noqa: E402
from trainer import cli, forecast, ladder, metrics, runlog  # noqa: E402
from trainer.schedule import learning_rate  # noqa: E402


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="config/train_tiny.py")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--eval_interval", type=int, default=5)
    p.add_argument("--eval_iters", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[1337])
    p.add_argument("--schedules", nargs="+", default=["cosine", "wsd"])
    p.add_argument("--work", default="/tmp/forecast_accuracy", help="where the runs' out_dirs go")
    p.add_argument("--out", default="/tmp/forecast_accuracy/results.json")
    p.add_argument("--args", default="", help="more train.py overrides for every run, e.g. a smaller model")
    p.add_argument("--ladder", help="a ladder.json: measure its largest runs with and without its prior instead")
    p.add_argument("--rule", metavar="KxR[a]", help="with --ladder: its runs read as a ladder trained with K seeds at "
                   "R rates would hold them (scripts/bench/seed_rules.py), e.g. 1x1: one seed a size")
    p.add_argument("--runs", nargs="*", default=[], metavar="RECIPE=OUT_DIR",
                   help="with --ladder, these runs too (sizes beyond the ladder), each against its recipe's prior")
    p.add_argument("--across", nargs="+", metavar="LADDER_JSON", help="each ladder's prior against the others' runs")
    args = p.parse_args(argv)
    if args.across:
        return across_ladders(args.across)
    if args.ladder:
        return ladder_table(args.ladder, args.out, args.runs, args.rule)
    rows, coverage = [], []
    for schedule in args.schedules:
        for seed in args.seeds:
            out_dir = Path(args.work) / f"{schedule}_{seed}"
            if not (out_dir / metrics.FILE).is_file() or not metrics.read(out_dir, "done"):
                command = [sys.executable, "train.py", args.config, f"--out_dir={out_dir}", f"--seed={seed}",
                           f"--max_iters={args.iters}", f"--lr_decay_iters={args.iters}", f"--lr_schedule={schedule}",
                           f"--eval_interval={args.eval_interval}", f"--eval_iters={args.eval_iters}",
                           "--checkpoint_interval=0", "--init_from=auto", *args.args.split()]
                result = subprocess.run(command, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"),
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                if result.returncode:
                    raise SystemExit(f"error: train.py for {out_dir} failed: "
                                     f"{runlog.why_it_failed(result.returncode, result.stderr)}")
            evals = [(r["iter"], r["val_loss"]) for r in metrics.latest_per_iter(metrics.read(out_dir, "eval"))]
            final = evals[-1][1]
            cfg = configurator.load_config([args.config, *args.args.split(), f"--max_iters={args.iters}",
                                            f"--lr_decay_iters={args.iters}", f"--lr_schedule={schedule}"])
            forecaster = forecast.Forecaster([learning_rate(it, cfg) for it in range(args.iters)], cfg.warmup_iters)
            for share in (0.25, 0.5):  # the fit train.py makes there, printed or not
                points = [(it, loss) for it, loss in evals if it <= share * args.iters]
                made, printed = forecaster.fit(points), forecaster.predict(points)
                rows.append(row(schedule, seed, share, final, made,
                                printed if isinstance(printed, str) else "printed"))
            printed = [(it, forecaster.predict([(i, loss) for i, loss in evals if i <= it]))
                       for it, _ in evals if it < args.iters]
            printed = [(it, made) for it, made in printed if not isinstance(made, str)]
            if printed:  # the first forecast train.log printed
                rows.append(row(schedule, seed, printed[0][0] / args.iters, final, printed[0][1], "the first printed"))
            held = int(sum(abs(value - final) <= bar for _, (value, bar) in printed))
            coverage.append({"schedule": schedule, "seed": seed, "printed": len(printed), "held": held})
    print("| schedule | seed | fit made at | fit's forecast (±E) | final val loss | forecast − final | final in ±E | train.log |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        made = f"{r['forecast']:.4f} (±{r['error_bar']:.4f})" if r["forecast"] is not None else f"none: {r['error_bar']}"
        diff = f"{r['error']:+.4f}" if r["error"] is not None else "—"
        within = "—" if r["within"] is None else "yes" if r["within"] else "no"
        print(f"| {r['schedule']} | {r['seed']} | {r['at']:.0%} of {args.iters} | {made} | {r['final_val_loss']:.4f} "
              f"| {diff} | {within} | {r['printed']} |")
    for c in coverage:
        print(f"{c['schedule']} {c['seed']}: {c['held']} of the {c['printed']} forecasts train.log printed held "
              "the final val loss within ±E")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows, "coverage": coverage}, indent=2))


def ladder_table(path, out, runs=(), rule=None):
    """Each recipe's largest best run, and each of runs ('RECIPE=OUT_DIR'): its forecasts at 25% and 50% with
    and without the ladder's prior (rule: the ladder read as if trained with fewer seeds, seed_rules.py's)."""
    (result, _), rows = ladder.load(path), []
    if rule:
        import seed_rules  # scripts/bench/seed_rules.py, beside this file
        seeds, rates, adaptive = seed_rules.parse_rule(rule)
        for rec in result["recipes"].values():
            rec["runs"] = seed_rules.under_rule(rec["runs"], result["tokens_per_param"][0], seeds, rates, adaptive)
    largest = {name: ladder.best_runs(rec["runs"], result["tokens_per_param"][0])[-1]
               for name, rec in result["recipes"].items()}
    targets = [(name, run["size"], run["out_dir"], run["params"]) for name, run in largest.items()]
    for spec in runs:
        name, sep, out_dir = spec.partition("=")
        if not sep or name not in result["recipes"]:
            raise SystemExit(f"error: --runs {spec!r}: write RECIPE=OUT_DIR, RECIPE one of "
                             f"{sorted(result['recipes'])}")
        records = metrics.read(out_dir) if (Path(out_dir) / metrics.FILE).is_file() else []
        finished = {"start", "eval", "done"} <= {r["kind"] for r in records}
        if not finished or not (Path(out_dir) / "config.json").is_file():
            raise SystemExit(f"error: --runs {spec!r}: {out_dir} is not a finished train.py run (its config.json, "
                             "and start, eval and done records in metrics.jsonl)")
        targets.append((name, Path(out_dir).name, out_dir, [r for r in records if r["kind"] == "start"][-1]["params"]))
    for name, size, out_dir, params in targets:
        if (Path(out_dir) / "config.json").is_file() and (Path(out_dir) / metrics.FILE).is_file():
            cfg = types.SimpleNamespace(**json.loads((Path(out_dir) / "config.json").read_text()))
            evals = [(r["iter"], r["val_loss"]) for r in metrics.latest_per_iter(metrics.read(out_dir, "eval"))]
            end = cfg.max_iters
            law = forecast.Forecaster([learning_rate(it, cfg) for it in range(end)], cfg.warmup_iters).fit
        else:  # a kept ladder.json without its runs' folders: the run's own curve, in fractions of the run
            evals, end = [tuple(point) for point in run_curve(result["recipes"][name]["runs"], out_dir)], 1.0
            law = lambda points: f"{out_dir} is not on disk, and the law needs the run's schedule (its config.json)"
        final = evals[-1][1]
        try:
            prior = forecast.Prior(result, name, params)
        except ladder.FitError as e:
            raise SystemExit(f"error: {out_dir}: {e}")
        for share in (0.25, 0.5):
            points = [(it, loss) for it, loss in evals if 0 < it <= share * end]
            if not points:  # no evaluation by then: nothing to set beside the final
                continue
            for method, made in (("law", law(points)), ("ladder prior", prior.forecast(points, end)),
                                 ("val loss now", (points[-1][1], 0.0))):
                value = None if isinstance(made, str) else made[0]
                rows.append({"recipe": name, "size": size, "at": points[-1][0] / end, "method": method,
                             "forecast": value, "error_bar": made if value is None else made[1],
                             "final_val_loss": final, "relative_error": None if value is None else value / final - 1})
        rows.append({"recipe": name, "size": size, "method": "the ladder's prediction (sizes below)",
                     "at": 0.0, "forecast": prior.predicted[0], "error_bar": (prior.predicted[2] - prior.predicted[1]) / 2,
                     "final_val_loss": final, "relative_error": prior.predicted[0] / final - 1})
    print("| recipe | size | at | method | forecast (±error) | final val loss | forecast / final − 1 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        made = f"{r['forecast']:.4f} (±{r['error_bar']:.4f})" if r["forecast"] is not None else f"none: {r['error_bar']}"
        diff = "—" if r["relative_error"] is None else f"{r['relative_error']:+.2%}"
        print(f"| {r['recipe']} | {r['size']} | {r['at']:.0%} | {r['method']} | {made} | {r['final_val_loss']:.4f} | {diff} |")
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"ladder": path, "rows": rows}, indent=2))


def across_ladders(paths):
    """Each ladder's prior (its sizes below the run) forecasting each other ladder's largest best run from its
    curve at 25% and 50%; per (the prior's warmup share, the run's), the mean absolute miss of the final loss."""
    ladders = {path: ladder.load(path)[0] for path in paths}
    misses = {}
    print("| prior from | run from | recipe | warmup: prior, run | at 25% | at 50% |")
    print("|---|---|---|---|---|---|")
    for path, result in ladders.items():
        for other, run_result in ladders.items():
            if other == path:
                continue
            shares = (result["settings"]["warmup_fraction"], run_result["settings"]["warmup_fraction"])
            for name in result["recipes"]:
                run = ladder.best_runs(run_result["recipes"][name]["runs"], run_result["tokens_per_param"][0])[-1]
                prior, curve = forecast.Prior(result, name, run["params"]), [tuple(c) for c in run["curve"]]
                made = [prior.forecast([c for c in curve if 0 < c[0] <= share], 1.0)[0] / curve[-1][1] - 1
                        for share in (0.25, 0.5)]
                misses.setdefault((*shares, name), []).append(np.abs(made))
                print(f"| {Path(path).parent.name} | {Path(other).parent.name} | {name} | {shares[0]:g}, {shares[1]:g} "
                      f"| {made[0]:+.1%} | {made[1]:+.1%} |")
    print("\n| warmup: prior, run | recipe | pairs | mean miss at 25% | at 50% |")
    print("|---|---|---|---|---|")
    for (prior_share, run_share, name), rows in sorted(misses.items()):
        at25, at50 = np.mean(rows, axis=0)
        print(f"| {prior_share:g}, {run_share:g} | {name} | {len(rows)} | {at25:.1%} | {at50:.1%} |")


def run_curve(runs, out_dir):
    """The val-loss curve ladder.json keeps of the run trained in out_dir (the sweep's run, not a seeds' mean)."""
    for run in runs:
        if run["out_dir"] == out_dir and not run.get("replica"):
            return run["curve"]
    raise SystemExit(f"error: {out_dir} is neither on disk nor among the ladder's runs")


def row(schedule, seed, at, final, made, printed):
    """One table row: a fit's forecast (or the reason there is none) beside the final val loss."""
    value, bar = (None, made) if isinstance(made, str) else made
    return {"schedule": schedule, "seed": seed, "at": at, "final_val_loss": final, "forecast": value,
            "error_bar": bar, "error": None if value is None else value - final,
            "within": None if value is None else bool(abs(value - final) <= bar), "printed": printed}


if __name__ == "__main__":
    main()
