"""How the ladder's choice of loss form (trainer/ladder.fit_loss) predicts a held-out size, against the rule it
replaced, on synthetic ladders drawn from known laws.

    python scripts/bench/form_choice.py --draws 40 --noise 0.005 0.01

Each draw is a ladder at the CPU ladder's six sizes (35k to 639k parameters) whose final val losses follow
a law (power, saturating or plateau, three of the forms along the rule; or s-shaped, a plateau that bends to a
floor, L = E + (L0 - E)(1 + N/Nb)^-alpha, fitted to the Muon sweep of the CPU ladder's seed 1337: its log-log
slope steepens to -0.30 and eases to -0.26 at the top) times (1 + noise · a normal draw): the
scatter of one run about its law (on the CPU ladder another seed at a size's best rate ends up to 2.5-4.5%
away, docs/scaling_ladder.md). Each rule fits the five smaller sizes and predicts the largest (one step beyond),
then all six and predicts 4x the largest (a GPU ladder's 1.3B to 6.7B is 5x). "least" is the ladder's: the
form whose backtest misses least. "no local" is the rule it replaced: the same without the local form (both
with the interval's drift term). Prints, per law and noise, each rule's mean and worst error against the law's
true value one step beyond, the share within 3%, and how often the ±2 sigma interval held the truth; then the mean
error and the interval's record at 4x. Trains nothing; about a minute. With --ladders, real ladders instead: each
recipe's held-out check (ladder.json's held_out) under each rule, and beside them the last step's slope
(ladder.along_last_step: the log-log line through the two largest sizes fitted, read at the held-out size; no
interval).

    python scripts/bench/form_choice.py --ladders docs/ladder_runs/seed7/ladder.json docs/ladder_runs/seed8/ladder.json

With --further, each real ladder's checks at every distance instead (its k largest sizes held out, k = 1, 2, ...),
the chosen form's error beside the last step's and where its interval put the measurement, and per k their mean
absolute errors, how often the last step was the nearer and how often the interval held (docs/ladder_evidence.md,
"The last step, further out"); --without_s_shaped makes the intervals without the s-shaped law's reading. With
--s_shaped, the same checks with the s-shaped law fitted as a form (where at least five sizes are fitted) beside
the chosen form, and the rule that would choose it where its backtest misses least (docs/ladder_evidence.md,
"The s-shaped form, fitted").
"""
import contextlib
import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainer import cli, ladder, ladder_analysis  # noqa: E402

SIZES = np.geomspace(34976, 638960, 6)


s_shaped = ladder.FORMS["s_shaped"][0]  # E + (L0 - E)(1 + N/Nb)^-alpha: flat at L0 well below Nb, eases to E
fit_s_shaped = ladder.fit_s_shaped
LAWS = {"power": lambda n: 40 * n ** -0.2,
        "saturating": lambda n: 1.0 + 30 * n ** -0.3,
        "plateau": lambda n: 2.8 * (1 + n / 2e5) ** -0.35,
        "s-shaped": lambda n: s_shaped(n, 1.1, math.log(2.63), math.log(1e6), 4.3)}
S_SHAPED_SIZES = 5  # its four parameters and a point to spare


# each rule is the ladder's fit_loss choosing among these forms
RULES = {"least": ladder.ALONG_THE_RULE, "no local": tuple(f for f in ladder.ALONG_THE_RULE if f != "local")}


@contextlib.contextmanager
def choosing_among(forms):
    kept, ladder.ALONG_THE_RULE = ladder.ALONG_THE_RULE, forms
    try:
        yield
    finally:
        ladder.ALONG_THE_RULE = kept


@contextlib.contextmanager
def without_s_shaped(on):
    """With on, ladder.other_forms reads no s-shaped law: the intervals as they were before it joined them."""
    kept = ladder.fit_s_shaped
    if on:
        ladder.fit_s_shaped = lambda n, y: None
    try:
        yield
    finally:
        ladder.fit_s_shaped = kept


def real_ladders(paths):
    """Each ladder.json's held-out check under each rule: the largest size from the sizes below, one step out."""
    print("| ladder | recipe | rule | form | predicted [±2σ] | measured | error |")
    print("|---|---|---|---|---|---|---|")
    for path in paths:
        result = json.loads(Path(path).read_text())
        for name, rec in result["recipes"].items():
            for rule_name, forms in RULES.items():
                with choosing_among(forms):
                    h = ladder_analysis.held_out(rec["runs"], result["tokens_per_param"][0])
                print(f"| {Path(path).parent.name} | {name} | {rule_name} | {h['form']} | "
                      f"{h['predicted_val_loss']:.4f} {ladder.interval_text(h['interval'], '.4f')} | "
                      f"{h['measured_val_loss']:.4f} | {h['relative_error']:+.1%}, {ladder_analysis.where(h)} |")
            t = h["last_step"]  # the same under every rule: it reads the runs, not a form
            print(f"| {Path(path).parent.name} | {name} | last step | - | {t['predicted_val_loss']:.4f} | "
                  f"{h['measured_val_loss']:.4f} | {t['relative_error']:+.1%} |")


def every_distance(paths, fewest=ladder.MIN_SIZES):
    """(the row's first four cells, k, the sizes fitted's best runs, ladder_analysis.held_out's check) for each
    ladder.json's held-out checks at every distance, remade from its runs, with at least fewest sizes fitted. A
    check the ladder cannot make (too few sizes below, a fit that fails) is left out."""
    for path in paths:
        result = json.loads(Path(path).read_text())
        ratio = result["tokens_per_param"][0]
        for name, rec in result["recipes"].items():
            best = ladder.best_runs(rec["runs"], ratio)
            for k in range(1, len(best) - fewest + 1):
                h = ladder_analysis.held_out(rec["runs"], ratio, k)
                if "problem" not in h:
                    where = f"{h['size']} from {k} below | {h['extrapolation']:.1f}x"
                    yield f"| {Path(path).parent.name} | {name} | {where} |", k, best[:-k], h


def further_out(paths):
    """Each ladder's checks at every distance (every_distance): the fit's error and the last step's, and where
    the fit's interval put the measurement; then per k, the mean of each's absolute error, the count where the
    last step's was the smaller, and how often the interval held the measurement, of the checks it judged."""
    print("| ladder | recipe | held out | distance | the fit | interval | the last step |")
    print("|---|---|---|---|---|---|---|")
    by_k = {}
    for cells, k, _, h in every_distance(paths):
        fit, last = h["relative_error"], h["last_step"]["relative_error"]
        width = None if h["interval"] is None else (h["interval"][1] - h["interval"][0]) / h["measured_val_loss"]
        by_k.setdefault(k, []).append((abs(fit), abs(last), h["inside"], width))
        print(f"{cells} {h['form']} {fit:+.1%} | {ladder_analysis.where(h)} | {last:+.1%} |")
    print("\n| sizes held out | checks | the fit: mean miss | the last step: mean miss | the last step nearer | "
          "the interval held | its mean width |")
    print("|---|---|---|---|---|---|---|")
    for k, rows in sorted(by_k.items()):
        fit, last = np.array([row[:2] for row in rows]).T
        judged = [row for row in rows if row[2] is not None]
        width = f"{np.mean([row[3] for row in judged]):.0%}" if judged else "-"
        print(f"| {k} | {len(rows)} | {fit.mean():.1%} | {last.mean():.1%} | {np.sum(last < fit)} of {len(rows)} | "
              f"{sum(row[2] for row in judged)} of {len(judged)} | {width} |")


def s_shaped_misses(n, y, at, measured):
    """(the s-shaped law's relative miss of measured at size at, fitted on sizes n and losses y; its backtest's miss,
    inf where the sizes below the largest are too few to fit it), or None where n are too few or no fit converges."""
    if len(n) < S_SHAPED_SIZES or (params := fit_s_shaped(n, y)) is None:
        return None
    below = fit_s_shaped(n[:-1], y[:-1]) if len(n) > S_SHAPED_SIZES else None
    backtest = math.inf if below is None else abs(float(s_shaped(n[-1], *below)) / y[-1] - 1)
    return float(s_shaped(at, *params)) / measured - 1, backtest


def s_shaped_checks(paths):
    """Each ladder's checks at every distance (every_distance) with the s-shaped law fitted too: its miss beside
    the chosen form's, and the rule that takes it where its backtest misses less than every form along the rule;
    per k, the mean absolute misses of the fit, the s-shaped law and that rule."""
    print("| ladder | recipe | held out | distance | the fit | s-shaped | chosen by its backtest |")
    print("|---|---|---|---|---|---|---|")
    by_k = {}
    for cells, k, fitted, h in every_distance(paths, S_SHAPED_SIZES):
        n, y = (np.array([r[key] for r in fitted], float) for key in ("params", "final_val_loss"))
        if (tried := s_shaped_misses(n, y, h["params"], h["measured_val_loss"])) is None:
            continue
        fit, (miss, backtest) = h["relative_error"], tried
        chosen = backtest < min(ladder.backtest(form, n, y) for form in ladder.ALONG_THE_RULE)
        by_k.setdefault(k, []).append((abs(fit), abs(miss), chosen, abs(miss if chosen else fit)))
        print(f"{cells} {h['form']} {fit:+.1%} | {miss:+.1%} | {'yes' if chosen else 'no'} |")
    print("\n| sizes held out | checks | the fit: mean miss | s-shaped: mean miss | s-shaped nearer | "
          "chosen by its backtest | the rule with it: mean miss |")
    print("|---|---|---|---|---|---|---|")
    for k, rows in sorted(by_k.items()):
        fit, tried, chosen, rule = np.array(rows, float).T
        print(f"| {k} | {len(rows)} | {fit.mean():.1%} | {tried.mean():.1%} | {int(np.sum(tried < fit))} of "
              f"{len(rows)} | {int(chosen.sum())} | {rule.mean():.1%} |")


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=40)
    p.add_argument("--noise", type=float, nargs="+", default=[0.005, 0.01])
    p.add_argument("--ladders", nargs="+", metavar="LADDER_JSON", help="real ladders' held-out checks instead")
    p.add_argument("--further", action="store_true", help="with --ladders: their checks at every distance")
    p.add_argument("--s_shaped", action="store_true", help="with --ladders: the s-shaped law fitted beside them")
    p.add_argument("--without_s_shaped", action="store_true",
                   help="with --further: intervals without the s-shaped law's reading, as before 2026-12-07")
    args = p.parse_args(argv)
    if (args.further or args.s_shaped) and not args.ladders:
        p.error(f"--{'further' if args.further else 's_shaped'} reads real ladders: name them with --ladders")
    warnings.filterwarnings("ignore")  # curve_fit's warnings on the draws whose fits strain
    if args.ladders:
        with without_s_shaped(args.without_s_shaped):
            return (s_shaped_checks if args.s_shaped else further_out if args.further else real_ladders)(args.ladders)
    print("| law | noise | rule | mean error | worst | within 3% | interval holds | at 4x: mean error | holds |")
    print("|---|---|---|---|---|---|---|---|---|")
    far = 4 * SIZES[-1]
    for noise in args.noise:
        for law_name, law in LAWS.items():
            for rule_name, rule in RULES.items():
                next_size, at_far = [], []  # (relative error, whether the interval held the truth)
                for seed in range(args.draws):
                    y = law(SIZES) * (1 + np.random.default_rng(seed).normal(0, noise, len(SIZES)))
                    for out, fitted, x in ((next_size, slice(None, -1), SIZES[-1]), (at_far, slice(None), far)):
                        with choosing_among(rule):
                            value, low, high = ladder.fit_loss(SIZES[fitted], y[fitted]).predict(x)
                        out.append((abs(value / law(x) - 1), low <= law(x) <= high))
                errors, held = np.array(next_size).T
                far_errors, far_held = np.array(at_far).T
                print(f"| {law_name} | {noise:.1%} | {rule_name} | {errors.mean():.2%} | {errors.max():.1%} | "
                      f"{np.mean(errors < 0.03):.0%} | {held.mean():.0%} | {far_errors.mean():.1%} | "
                      f"{far_held.mean():.0%} |")


if __name__ == "__main__":
    main()
