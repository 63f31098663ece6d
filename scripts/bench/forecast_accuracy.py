"""How well train.log's forecast (trainer/forecast.py) predicts a run's final val loss from 25% and 50% of it.

    OMP_NUM_THREADS=1 python scripts/bench/forecast_accuracy.py --seeds 1337 1338 --schedules cosine wsd

Trains the tiny config once per (schedule, seed) for --iters steps, evaluating every --eval_interval steps,
then fits the law train.py fits at 25% and 50% of the run (forecast.Forecaster over the eval records of its
metrics.jsonl up to there) and sets its forecast beside the final measured val loss, with whether train.log
printed it or why not (too few points, a WSD run's stable phase, an error over 2% of the forecast), and the
first forecast train.log printed. Prints a markdown table and writes it as JSON to --out.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import configurator  # noqa: E402
from trainer import forecast, metrics  # noqa: E402
from trainer.schedule import learning_rate  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="config/train_tiny.py")
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--eval_interval", type=int, default=5)
    p.add_argument("--eval_iters", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[1337])
    p.add_argument("--schedules", nargs="+", default=["cosine", "wsd"])
    p.add_argument("--work", default="/tmp/forecast_accuracy", help="where the runs' out_dirs go")
    p.add_argument("--out", default="/tmp/forecast_accuracy/results.json")
    p.add_argument("--args", default="", help="more train.py overrides for every run, e.g. a smaller model")
    args = p.parse_args(argv)
    rows = []
    for schedule in args.schedules:
        for seed in args.seeds:
            out_dir = Path(args.work) / f"{schedule}_{seed}"
            if not (out_dir / metrics.FILE).is_file() or not metrics.read(out_dir, "done"):
                subprocess.run([sys.executable, "train.py", args.config, f"--out_dir={out_dir}", f"--seed={seed}",
                                f"--max_iters={args.iters}", f"--lr_decay_iters={args.iters}",
                                f"--lr_schedule={schedule}", f"--eval_interval={args.eval_interval}",
                                f"--eval_iters={args.eval_iters}", "--checkpoint_interval=0", "--init_from=auto", *args.args.split()],
                               cwd=REPO, check=True, env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.DEVNULL)
            evals = [(r["iter"], r["val_loss"]) for r in metrics.latest_per_iter(metrics.read(out_dir, "eval"))]
            final = evals[-1][1]
            cfg = configurator.load_config([args.config, *args.args.split(), f"--max_iters={args.iters}",
                                            f"--lr_decay_iters={args.iters}", f"--lr_schedule={schedule}"])
            forecaster = forecast.Forecaster([learning_rate(it, cfg) for it in range(args.iters)], cfg.warmup_iters)
            for share in (0.25, 0.5):  # the fit train.py makes there, printed or not
                points = [(it, loss) for it, loss in evals if it <= share * args.iters]
                made, printed = forecaster.fit(points), forecaster.predict(points)
                value, bar = (None, made) if isinstance(made, str) else made
                rows.append({"schedule": schedule, "seed": seed, "at": share, "final_val_loss": final,
                             "forecast": value, "error_bar": bar, "error": value and value - final,
                             "printed": printed if isinstance(printed, str) else "printed"})
            for it, _ in evals:  # and the first forecast train.log printed
                made = forecaster.predict([(i, loss) for i, loss in evals if i <= it])
                if not isinstance(made, str) and it < args.iters:
                    rows.append({"schedule": schedule, "seed": seed, "at": it / args.iters, "final_val_loss": final,
                                 "forecast": made[0], "error_bar": made[1], "error": made[0] - final,
                                 "printed": "the first printed"})
                    break
    print("| schedule | seed | fit made at | fit's forecast (±E) | final val loss | forecast − final | train.log |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        made = f"{r['forecast']:.4f} (±{r['error_bar']:.4f})" if r["forecast"] is not None else f"none: {r['error_bar']}"
        diff = f"{r['error']:+.4f}" if r["error"] is not None else "—"
        print(f"| {r['schedule']} | {r['seed']} | {r['at']:.0%} of {args.iters} | {made} | {r['final_val_loss']:.4f} "
              f"| {diff} | {r['printed']} |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"args": vars(args), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
