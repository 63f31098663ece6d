"""How the ladder's choice of loss form (trainer/ladder.fit_loss) predicts a held-out size, against the rule it
replaced, on synthetic ladders drawn from known laws.

    python scripts/bench/form_choice.py --draws 40 --noise 0.005 0.01

Each draw is a ladder at the CPU ladder's six sizes (35k to 639k parameters) whose final val losses follow
one of the three forms along the rule (power, saturating, plateau) times (1 + noise · a normal draw): the
scatter of one run about its law, about 1% on the CPU ladder (docs/scaling_ladder.md). Each rule fits the
five smaller sizes and predicts the largest. "least" is the ladder's: the form whose backtest misses least.
"halve" is the rule it replaced: power, unless another form halves power's backtest miss. Prints, per law
and noise, each rule's mean and worst error against the law's true value, the share within 3%, and how
often the ±2 sigma interval held the truth. Trains nothing; about a minute.
"""
import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from trainer import ladder  # noqa: E402

SIZES = np.geomspace(34976, 638960, 6)
LAWS = {"power": lambda n: 40 * n ** -0.2,
        "saturating": lambda n: 1.0 + 30 * n ** -0.3,
        "plateau": lambda n: 2.8 * (1 + n / 2e5) ** -0.35}


def halve(n, y):
    """The replaced rule: power unless another form's backtest misses by less than half of power's."""
    misses = {form: ladder.backtest(form, n, y) for form in ladder.ALONG_THE_RULE}
    better = [f for f in ladder.ALONG_THE_RULE[1:] if misses[f] < misses["power"] / 2]
    try:
        return ladder.fit_form(min(better, key=misses.get) if better else "power", n, y)
    except ladder.FitError:
        return ladder.fit_form("power", n, y)


RULES = {"least": ladder.fit_loss, "halve": halve}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--draws", type=int, default=40)
    p.add_argument("--noise", type=float, nargs="+", default=[0.005, 0.01])
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")  # curve_fit's warnings on the draws whose fits strain
    print("| law | noise | rule | mean error | worst | within 3% | interval holds |")
    print("|---|---|---|---|---|---|---|")
    for noise in args.noise:
        for law_name, law in LAWS.items():
            truth = law(SIZES[-1])
            for rule_name, rule in RULES.items():
                errors, held = [], []
                for seed in range(args.draws):
                    y = law(SIZES) * (1 + np.random.default_rng(seed).normal(0, noise, len(SIZES)))
                    value, low, high = rule(SIZES[:-1], y[:-1]).predict(SIZES[-1])
                    errors.append(abs(value / truth - 1))
                    held.append(low <= truth <= high)
                print(f"| {law_name} | {noise:.1%} | {rule_name} | {np.mean(errors):.2%} | {np.max(errors):.1%} | "
                      f"{np.mean(np.array(errors) < 0.03):.0%} | {np.mean(held):.0%} |")


if __name__ == "__main__":
    main()
