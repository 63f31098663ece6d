"""The scaling ladder, in-process: trainer/ladder.py's fits recover the laws synthetic ladders are drawn from and
their intervals cover the truth; scripts/ladder.py climbs a synthetic recipe (a stand-in for train.py that writes
the metrics.jsonl a run would, from a known law), finds its optimum, holds out the largest size, trains nothing
on a rerun and only the new size when one is added; bad input is one line."""
import hashlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest

import configurator
from conftest import REPO, python, run_here
from trainer import bins, checkpoint, cost, ladder, ladder_analysis, metrics

sys.path.insert(0, str(REPO / "scripts"))
import ladder as ladder_script  # noqa: E402
import plan  # noqa: E402

SIZES = np.geomspace(1e5, 3e7, 6)


def noisy(values, scale, seed=0):
    return np.asarray(values) * (1 + np.random.default_rng(seed).normal(0, scale, len(values)))


def test_the_lr_fit_recovers_its_power_law_and_its_interval_covers_the_next_size():
    lrs = noisy(0.3 * SIZES ** -0.25, 0.03)
    fit = ladder.fit_lr(SIZES[:-1], lrs[:-1])
    assert fit.named()["c"] == pytest.approx(0.3, rel=0.5) and fit.named()["b"] == pytest.approx(-0.25, abs=0.03)
    value, low, high = fit.predict(SIZES[-1])
    assert low < 0.3 * SIZES[-1] ** -0.25 < high and low < value < high


def test_the_loss_fit_recovers_a_saturating_law_and_prefers_it_to_a_power_law():
    losses = noisy(1.5 + 30 * SIZES ** -0.3, 0.001)
    fit = ladder.fit_loss(SIZES, losses)
    assert fit.form == "saturating"
    named = fit.named()
    assert named["E"] == pytest.approx(1.5, abs=0.1) and named["alpha"] == pytest.approx(0.3, abs=0.05)
    value, low, high = ladder.fit_loss(SIZES[:-1], losses[:-1]).predict(SIZES[-1])
    truth = 1.5 + 30 * SIZES[-1] ** -0.3
    assert low < truth < high and value == pytest.approx(truth, rel=0.01)


def test_a_pure_power_law_stays_one_and_a_plateau_before_the_power_law_is_found():
    losses = noisy(40 * SIZES ** -0.2, 0.002)
    fit = ladder.fit_loss(SIZES, losses)
    assert fit.form == "power" and fit.named()["alpha"] == pytest.approx(0.2, abs=0.01)
    sizes = np.geomspace(3e4, 6e5, 6)  # the CPU ladder's span: flat below Nb = 2e5, a power law above it
    losses = noisy(2.8 * (1 + sizes / 2e5) ** -0.3, 0.002)
    fit = ladder.fit_loss(sizes[:-1], losses[:-1])
    assert fit.form == "plateau" and ladder.backtest("power", sizes[:-1], losses[:-1]) > 0.02  # power misses
    named = fit.named()
    assert named["L0"] == pytest.approx(2.8, rel=0.05) and named["alpha"] == pytest.approx(0.3, abs=0.1)
    value, low, high = fit.predict(sizes[-1])
    truth = 2.8 * (1 + sizes[-1] / 2e5) ** -0.3
    assert low < truth < high and value == pytest.approx(truth, rel=0.01)


def test_a_slope_that_settles_at_the_top_is_followed_by_the_local_power_law_not_carried_on_by_plateau():
    """Steepening from -0.1 to -0.3 at the third size, then straight: plateau, fitted through the bend, keeps
    steepening past the top; the power law through the three largest sizes is the law there."""
    sizes = np.geomspace(3e4, 6e5, 6)
    slope = np.where(np.log(sizes) < np.log(sizes[2]), -0.1, -0.3)
    losses = 2.6 * np.exp(np.concatenate([[0], np.cumsum(slope[1:] * np.diff(np.log(sizes)))]))
    losses = noisy(losses, 0.002)
    fit = ladder.fit_loss(sizes[:-1], losses[:-1])
    assert fit.form == "local" and fit.n == 3 and fit.named()["alpha"] == pytest.approx(0.3, abs=0.05)
    assert ladder.backtest("plateau", sizes[:-1], losses[:-1]) > ladder.backtest("local", sizes[:-1], losses[:-1])
    value, low, high = fit.predict(sizes[-1])
    assert low < losses[-1] < high and value == pytest.approx(losses[-1], rel=0.01)
    assert ladder.fit_form("local", sizes[:3], losses[:3]).form == "power"  # three sizes: local is all of them


def test_the_last_steps_slope_carried_on_follows_a_slope_that_changed_at_the_top():
    """A slope of -0.1 that steepens to -0.3 on the last of five sizes' steps: the line through the two largest
    reads the sixth size exactly, where the fit, whose forms are judged on the straight steps below, over-predicts it."""
    sizes = np.geomspace(3e4, 6e5, 6)
    slope = np.where(np.log(sizes) < np.log(sizes[4]), -0.1, -0.3)
    losses = 2.6 * np.exp(np.concatenate([[0], np.cumsum(slope[1:] * np.diff(np.log(sizes)))]))
    assert ladder.along_last_step(sizes[:-1], losses[:-1], sizes[-1]) == pytest.approx(losses[-1], rel=1e-9)
    assert ladder.fit_loss(sizes[:-1], losses[:-1]).predict(sizes[-1])[0] > 1.02 * losses[-1]
    shuffled = [3, 0, 4, 2, 1]  # the two largest, wherever they stand
    assert ladder.along_last_step(sizes[shuffled], losses[shuffled], sizes[-1]) == pytest.approx(losses[-1], rel=1e-9)


def test_misses_within_a_hundredth_of_a_percent_are_a_tie_won_by_the_simpler_form(monkeypatch):
    """Within 0.01% of the least miss, not the same when rounded: 1.2351% and 1.2349% round apart (to 1.24%
    and 1.23%), and power, the simpler, is kept; 1.2351% against 1.2049% is no tie."""
    losses = noisy(1.5 + 30 * SIZES ** -0.3, 0.001)  # saturating, which either form can fit
    for saturating, chosen in ((0.012349, "power"), (0.012049, "saturating")):
        misses = {"power": 0.012351, "saturating": saturating, "plateau": math.inf, "local": math.inf}
        monkeypatch.setattr(ladder, "backtest", lambda form, n, y: misses[form])
        assert ladder.fit_loss(SIZES, losses).form == chosen

def test_beyond_its_sizes_the_interval_widens_by_what_the_backtest_missed_per_step():
    """The drift: a form can be wrong, and the fit's covariance cannot say so; its backtest missed by m over one
    step of log N, so k steps beyond the largest size the interval counts k * m more (and nothing inside)."""
    sizes = np.geomspace(3e4, 6e5, 6)
    law = lambda n: 2.8 * (1 + n / 2e5) ** -0.3 * (1 + 0.05 * np.tanh(np.log(n / 2e5)))  # no form of the ladder's
    fit = ladder.fit_loss(sizes, noisy(law(sizes), 0.005))
    step = math.log(sizes[-1] / sizes[-2])
    assert fit.drift == pytest.approx(ladder.backtest(fit.form, sizes, noisy(law(sizes), 0.005)) / step)
    assert fit.drift > 0 and fit.reach == pytest.approx(sizes[-1])
    fit.others = {}  # the other forms' readings widen it too (the next test): here the drift alone
    blind = ladder.Fit(fit.form, fit.params, fit.cov, fit.scatter, fit.n)  # the same fit without its drift
    far = sizes[-1] * 8
    value, low, high = fit.predict(far)
    assert blind.predict(far)[0] == value and (high - low) > (blind.predict(far)[2] - blind.predict(far)[1])
    sigma, blind_sigma = (high - value) / ladder.Z, (blind.predict(far)[2] - value) / ladder.Z
    assert sigma ** 2 - blind_sigma ** 2 == pytest.approx((fit.drift * math.log(8) * value) ** 2, rel=1e-6)
    assert fit.predict(sizes[2]) == blind.predict(sizes[2])  # inside the ladder: the scatter and the fit alone
    again = ladder.Fit.from_json(json.loads(json.dumps(fit.to_json())))
    assert (again.drift, again.reach) == (fit.drift, fit.reach) and again.predict(far) == pytest.approx(fit.predict(far))


def test_beyond_its_sizes_the_interval_reaches_the_other_forms_readings():
    """A backtest one step out cannot see a bend further out: beyond the sizes the interval spans what every
    form along the rule that the sizes fit with a point to spare reads there, and the s-shaped law (five sizes
    or more); inside them it does not."""
    sizes = np.geomspace(3e4, 6e5, 6)
    law = lambda n: 2.8 * (1 + n / 2e5) ** -0.3 * (1 + 0.05 * np.tanh(np.log(n / 2e5)))
    fit = ladder.fit_loss(sizes, noisy(law(sizes), 0.005))
    assert set(fit.others) == set(ladder.ALONG_THE_RULE) - {fit.form} | {"s_shaped"}
    far = sizes[-1] * 8
    readings = [float(ladder.Fit(form, params, np.zeros((len(params),) * 2), 0.0, 6)(far))
                for form, params in fit.others.items()]
    value, low, high = fit.predict(far)
    alone = ladder.Fit(fit.form, fit.params, fit.cov, fit.scatter, fit.n, fit.drift, fit.reach).predict(far)
    assert (low, high) == (min(alone[1], *readings), max(alone[2], *readings)) and value == alone[0]
    assert fit.predict(sizes[2]) == ladder.Fit(fit.form, fit.params, fit.cov, fit.scatter, fit.n).predict(sizes[2])
    again = ladder.Fit.from_json(json.loads(json.dumps(fit.to_json(), allow_nan=False)))
    assert again.predict(far) == pytest.approx(fit.predict(far))
    # four sizes: the three-parameter forms fit with a point to spare, local (three sizes, two parameters) too
    assert set(ladder.fit_loss(sizes[:4], noisy(law(sizes[:4]), 0.005)).others) == \
        set(ladder.ALONG_THE_RULE) - {"power"}
    assert ladder.other_forms("power", sizes[:3], law(sizes[:3])) == {}  # three: only power has one to spare


def test_chinchilla_is_fitted_when_the_ladder_measured_several_ratios():
    n, d = np.meshgrid(SIZES, [10.0, 40.0])
    n, d = n.ravel(), (d * n).ravel()
    truth = dict(E=1.7, A=400.0, alpha=0.34, B=410.0, beta=0.28)
    losses = noisy(truth["E"] + truth["A"] * n ** -truth["alpha"] + truth["B"] * d ** -truth["beta"], 0.0005)
    fit = ladder.fit_loss(n, losses, d)
    assert fit.form == "chinchilla"
    for key, value in truth.items():
        assert fit.named()[key] == pytest.approx(value, rel=0.15), key
    tokens = ladder.tokens_for_loss(fit, 6.7e9, 2.2)  # inverts the law: its loss there is the target
    assert fit((6.7e9, tokens)) == pytest.approx(2.2, abs=1e-6)
    assert ladder.tokens_for_loss(fit, 6.7e9, 1.69).startswith("never, by this fit")


def test_chinchillas_interval_beyond_the_ladder_widens_by_its_own_backtests_miss():
    """The 6.7B prediction of a ladder with two ratios is Chinchilla's fit, read 5x beyond its largest size: its
    form can be wrong too, so it drifts as the fit along the rule does, by what it missed of the largest size's
    runs when fitted without them."""
    n, d = np.meshgrid(SIZES, [10.0, 40.0])
    n, d = n.ravel(), (d * n).ravel()
    law = lambda n, d: (1.7 + 400 * n ** -0.34 + 410 * d ** -0.28) * (1 + 0.02 * np.tanh(np.log(n / 3e6)))
    losses = law(n, d)
    fit = ladder.fit_loss(n, losses, d)
    top = n == n.max()
    below = ladder.fit_loss(n[~top], losses[~top], d[~top])  # the same fit without the largest size
    miss = np.mean(np.abs(below((n[top], d[top])) / losses[top] - 1))
    assert fit.form == "chinchilla" and fit.reach == pytest.approx(SIZES[-1]) and miss > 0.001
    assert fit.drift == pytest.approx(miss / math.log(SIZES[-1] / SIZES[-2]))
    far = (SIZES[-1] * 8, 20 * SIZES[-1] * 8)
    blind = ladder.Fit(fit.form, fit.params, fit.cov, fit.scatter, fit.n)  # the same fit without its drift
    value, low, high = fit.predict(far)
    assert value == blind.predict(far)[0] and high - low > blind.predict(far)[2] - blind.predict(far)[1]
    assert low < law(*far) < high and not blind.predict(far)[1] < law(*far) < blind.predict(far)[2]
    # where only the largest size has a second ratio, the sizes below cannot say how tokens matter: no backtest,
    # so no interval beyond the largest size, and none after a round trip through ladder.json
    n, d = np.append(SIZES, SIZES[-1]), np.append(10 * SIZES, 40 * SIZES[-1])
    fit = ladder.fit_loss(n, noisy(law(n, d), 0.002), d)
    assert fit.form == "chinchilla" and (fit.drift, fit.reach) == (math.inf, SIZES[-1])
    again = ladder.Fit.from_json(json.loads(json.dumps(fit.to_json(), allow_nan=False)))
    value, low, high = again.predict(far)
    assert value == pytest.approx(fit(far)) and (low, high) == (-math.inf, math.inf)
    assert ladder.interval_text((low, high), ".3f") == f"({ladder.UNJUDGED})"
    assert all(map(math.isfinite, again.predict((SIZES[2], 10 * SIZES[2]))))  # inside the ladder it has one


def test_a_power_law_through_three_sizes_has_no_interval_beyond_them():
    """Three sizes leave a power law no backtest (two sizes fit it exactly and judge nothing), and a fit no
    backtest judged is not bounded beyond its sizes: on the CPU ladders such fits read 5.6x out missed their
    intervals 20 times in 20. Four sizes judge power, and its interval there widens by what that missed."""
    law = lambda n: 3.0 * (1 + n / 2e5) ** -0.3
    three = ladder.fit_loss(SIZES[:3], noisy(law(SIZES[:3]), 0.005))
    assert three.form == "power" and math.isinf(three.drift) and three.reach == pytest.approx(SIZES[2])
    assert three.predict(SIZES[-1])[1:] == (-math.inf, math.inf)
    assert all(map(math.isfinite, three.predict(SIZES[1])))
    four = ladder.fit_loss(SIZES[:4], noisy(law(SIZES[:4]), 0.005))
    assert math.isfinite(four.drift) and four.drift > 0 and all(map(math.isfinite, four.predict(SIZES[-1])))
    assert ladder.interval_text(four.predict(SIZES[-1])[1:], ".3f").startswith("[")


def test_the_task_sigmoid_recovers_bhagias_second_step():
    losses = np.linspace(2.2, 4.0, 8)
    scores = noisy(0.55 / (1 + np.exp(6.0 * (losses - 3.0))) + 0.25, 0.002)
    fit = ladder.fit_task(losses, scores)
    named = fit.named()
    assert named["a"] == pytest.approx(0.55, abs=0.05) and named["k"] == pytest.approx(-6.0, rel=0.2)
    assert named["L0"] == pytest.approx(3.0, abs=0.05) and named["b"] == pytest.approx(0.25, abs=0.03)


def test_the_task_sigmoid_from_chance_fits_only_where_and_how_steeply_the_score_rises():
    """Given chance, the floor is chance and the ceiling 1 (fixed, no variance), and a fit on the scores below
    0.6 reads a loss beyond them; left free, the same points put the ceiling where they stop."""
    law = lambda loss: 0.25 + 0.75 / (1 + np.exp(6.0 * (loss - 2.4)))
    losses = np.linspace(2.45, 4.0, 10)  # scores 0.25-0.61: the rise's lower half
    fit = ladder.fit_task(losses, noisy(law(losses), 0.002), chance=0.25)
    named, stderr = fit.named(), fit.to_json()["stderr"]
    assert (named["a"], named["b"], stderr["a"], stderr["b"]) == (0.75, 0.25, 0, 0) and fit.form == "sigmoid"
    assert named["k"] == pytest.approx(-6.0, rel=0.1) and named["L0"] == pytest.approx(2.4, abs=0.03)
    value, low, high = fit.predict(1.9)
    assert value == pytest.approx(law(1.9), abs=0.02) and low < value < high
    free = ladder.fit_task(losses, noisy(law(losses), 0.002))
    assert abs(float(free(1.9)) - law(1.9)) > 2 * abs(value - law(1.9))


def test_a_task_whose_weakest_checkpoints_score_below_chance_gets_the_free_sigmoid():
    """lm-eval's unnormalised acc can favour an answer's length, so models that know nothing score under a guess;
    a fit from chance cannot pass through them. Where the weakest quarter's mean is below chance by more than
    twice its standard error, the task has no chance (ladder_analysis.chance_of) and its fit is free."""
    losses = np.linspace(2.4, 4.0, 16)
    rising = 0.25 + 0.5 / (1 + np.exp(5.0 * (losses - 2.6)))
    biased = 0.21 + 0.5 / (1 + np.exp(5.0 * (losses - 2.6)))  # its floor 0.21: under a 4-way guess
    assert not ladder.below_chance(losses, noisy(rising, 0.01), 0.25)
    assert ladder.below_chance(losses, noisy(biased, 0.01), 0.25)
    assert not ladder.below_chance(losses, noisy(biased, 0.01), 0.2)  # a 5-way task: above its chance
    runs = [{"final_val_loss": float(x), "scores": {"t/acc": float(y), "t/acc_norm": float(z)},
             "chance": {"t": 0.25}} for x, y, z in zip(losses, noisy(biased, 0.01), noisy(rising, 0.01))]
    assert ladder_analysis.chance_of(runs, "t/acc") == {} and ladder_analysis.chance_of(runs, "t/acc_norm") == \
        {"chance": 0.25}


def test_best_lr_is_the_parabolas_vertex_and_says_when_it_is_at_an_edge():
    lrs = [1e-3, 2e-3, 4e-3, 8e-3]
    losses = [(math.log(lr / 3e-3)) ** 2 + 2.0 for lr in lrs]
    best, edge = ladder.best_lr(lrs, losses)
    assert best == pytest.approx(3e-3, rel=1e-6) and edge is None
    assert ladder.best_lr(lrs, [4, 3, 2, 1]) == (8e-3, "high") and ladder.best_lr(lrs, [1, 2, 3, 4]) == (1e-3, "low")


def test_a_rates_cost_is_read_off_the_sweeps_own_runs_and_only_inside_it():
    lrs, losses = [1e-3, 2e-3, 4e-3, 8e-3], [2.2, 2.0, 2.1, 2.5]
    assert ladder.sweep_cost(lrs, losses, 2e-3) == pytest.approx(0)  # the lowest run's own rate
    assert ladder.sweep_cost(lrs, losses, 4e-3) == pytest.approx(0.05)  # a run 5% above the lowest
    assert ladder.sweep_cost(lrs, losses, math.sqrt(4e-3 * 8e-3)) == pytest.approx(0.15)  # half-way in log lr
    assert ladder.sweep_cost(lrs, losses, 1.6e-2) is None and ladder.sweep_cost([2e-3], [2.0], 2e-3) is None
    diverged = [2.2, 2.0, 2.1, float("nan")]  # a run that diverged: nothing to read beside it, the rest as before
    assert ladder.sweep_cost(lrs, diverged, 4e-3) == pytest.approx(0.05) and ladder.sweep_cost(lrs, diverged, 6e-3) == math.inf


def test_a_form_is_judged_only_where_the_sizes_below_the_largest_leave_a_point_to_spare():
    sizes = np.geomspace(3e4, 6e5, 5)
    losses = 2.8 * (1 + sizes / 2e5) ** -0.3  # a plateau, exactly: 3 or 4 sizes cannot judge a 3-parameter form
    for k in (3, 4):
        fit = ladder.fit_loss(sizes[:k], losses[:k])
        value, low, high = fit.predict(sizes[-1])
        # four sizes judge power by its backtest, three judge nothing: no interval beyond them
        assert fit.form == "power" and (math.isfinite(low) and math.isfinite(high)) == (k == 4)
        assert ladder.backtest("plateau", sizes[:k], losses[:k]) == math.inf
    assert ladder.fit_loss(sizes, losses).form == "plateau"


def test_a_diverged_run_is_the_worst_of_its_sweep():
    assert ladder.best_lr([1e-3, 2e-3, 4e-3], [2.0, 1.9, float("nan")]) == (pytest.approx(2e-3), None)
    runs = [{"size": "a", "params": 1, "tokens_per_param": 2, "lr": lr, "final_val_loss": v}
            for lr, v in ((1e-3, float("nan")), (2e-3, 2.0))]
    assert ladder.best_runs(runs, 2)[0]["final_val_loss"] == 2.0


def test_points_on_a_form_are_a_fit_only_where_they_determine_it_and_a_step_is_no_sigmoid():
    exact = ladder.fit_lr([1e4, 1e5, 1e6], [2e-3] * 3)  # three equal rates: on lr = c N^0, exactly
    assert exact.named()["b"] == pytest.approx(0, abs=1e-9) and not exact.cov.any()
    with pytest.raises(ladder.FitError, match="do not determine the lr form's parameters"):
        ladder.fit("lr", np.array([1e5, 1e5, 1e5]), [2e-3] * 3, [math.log(2e-3), 0.0])  # one size: no slope
    losses = np.linspace(1.5, 2.5, 12)
    with pytest.raises(ladder.FitError, match="the fit is a step"):
        ladder.fit_task(losses, np.where(losses < 2.0, 0.30, 0.27))


def test_too_few_sizes_and_an_unreachable_target_are_one_line():
    with pytest.raises(ladder.FitError, match="2 sizes, a fit needs at least 3"):
        ladder.fit_loss([1e5, 1e6], [3.0, 2.5])
    with pytest.raises(ladder.FitError, match="2 sizes, a fit needs at least 3"):
        ladder.fit_lr([1e5, 1e6], [1e-3, 5e-4])
    fit = ladder.fit_loss(SIZES, noisy(1.5 + 30 * SIZES ** -0.3, 0.001))
    assert ladder.size_for_loss(fit, 1.4).startswith("never, by this fit")
    assert fit(ladder.size_for_loss(fit, 2.0)) == pytest.approx(2.0, abs=1e-6)
    ceiling = ladder.Fit("plateau", [math.log(2.7), math.log(1e5), 0.3], np.zeros((3, 3)), 0.01, 5)  # at most 2.7
    assert ladder.size_for_loss(ceiling, 2.8).startswith("none, by this fit: its loss is below 2.8000 at every size")
    assert ladder.rule_compute_ratio(ladder.size_for_loss(ceiling, 2.8), 1e5).startswith("none")  # not (1 / N)^2


# -----------------------------------------------------------------------------
# scripts/ladder.py on a synthetic recipe

def law(n, d, lr, optimizer):
    """The synthetic recipe's final val loss: a power law in size along the ladder's rule (2 tokens per
    parameter; more tokens lower it), a parabola in log lr about an optimum that falls as a power of size
    (Muon's 4x AdamW's, and its loss 5% lower)."""
    best = (4.0 if optimizer == "muon" else 1.0) * 0.05 * n ** -0.3
    return (0.95 if optimizer == "muon" else 1.0) * 8.0 * n ** -0.1 * (d / (2 * n)) ** -0.05 \
        + 0.05 * math.log(lr / best) ** 2


def task_score(loss):
    """The synthetic recipe's score on a four-way task: a sigmoid falling from 0.75 to chance as the loss rises."""
    return 0.5 / (1 + math.exp((loss - 2.7) / 0.1)) + 0.25


class Calls(list):
    """The out_dirs trained, in order, and (.commands) the commands that trained them."""


@pytest.fixture
def fake_train(monkeypatch):
    """train.py replaced by the law: each call writes the start, eval and done records a run would."""
    calls, commands, real = Calls(), [], subprocess.run
    calls.scored = []

    def run(command, **kwargs):
        if "train.py" not in command and "scripts/eval.py" not in command:  # matplotlib's fc-list, say
            return real(command, **kwargs)
        if "scripts/eval.py" in command:  # scored as the sigmoid task_score of the run's final val loss
            out_dir = command[command.index("scripts/eval.py") + 1]
            tasks = command[command.index("--tasks") + 1].split(",")
            loss = metrics.read(out_dir, "eval")[-1]["val_loss"]
            newest = checkpoint.list_checkpoints(out_dir)[0][0]
            eval_script = ladder_script.eval_script()  # written as eval.py writes: merged, with how each was scored
            eval_script.write_results(eval_script.parse_args(command[command.index("scripts/eval.py") + 1:]),
                                      {"out": str(Path(out_dir, f"ckpt_{newest}.eval.json")), "iter": newest,
                                       "params": None},
                                      {t: {"acc_norm": task_score(loss), "n": 1000} for t in tasks})
            calls.scored.append((out_dir, tasks))
            return types.SimpleNamespace(returncode=0, stdout="", stderr="")
        args = command[command.index("train.py") + 1:]
        cfg = configurator.load_config(args)
        n = cost.meta_model(cfg, "none").get_num_params()
        record = metrics.Metrics(cfg.out_dir)
        configurator.save_json(cfg, Path(cfg.out_dir) / "config.json")
        nproc = next((int(c.split("=")[1]) for c in command if str(c).startswith("--nproc_per_node=")), 1)
        record("start", 0, max_iters=cfg.max_iters, tokens_per_iter=cfg.batch_size * cfg.block_size, params=n,
               eval_batch_size=cfg.batch_size, world_size=nproc)
        tokens = cfg.max_iters * cfg.batch_size * cfg.block_size
        seed_noise = 1 + 0.01 * (cfg.seed - 1337)  # another seed, another loss: +1% a seed above the default's
        record("eval", cfg.max_iters, val_loss=law(n, tokens, cfg.learning_rate, cfg.optimizer) * seed_noise)
        record("done", cfg.max_iters, best_val_loss=None)
        Path(cfg.out_dir, f"ckpt_{cfg.max_iters}.pt").touch()  # the checkpoint at its end, for eval.py
        calls.append(cfg.out_dir)
        commands.append(command)
        return types.SimpleNamespace(returncode=0, stdout="", stderr="")
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    calls.commands = commands
    return calls


def ladder_config(tmp_path, widths, **extra):
    path = tmp_path / "ladder_test.py"
    sizes = {f"w{w}": dict(n_layer=2, n_head=2, n_embd=w) for w in widths}
    path.write_text(f"base = ['config/train_tiny.py']\ncommon = '--batch_size=4 --gradient_accumulation_steps=1'\n"
                    f"sizes = {sizes!r}\ntokens_per_param = 2\n" + "".join(f"{k} = {v!r}\n" for k, v in extra.items()))
    return str(path)


def climb(config, out, *recipes):
    argv = [config, "--out", str(out)]
    for r in recipes:
        argv += ["--recipe", r]
    ladder_script.main(argv)
    return json.loads((out / "ladder.json").read_text())


def test_the_ladder_finds_each_sizes_optimum_holds_out_the_largest_and_reruns_nothing(tmp_path, fake_train, capsys):
    config = ladder_config(tmp_path, [16, 32, 48, 64, 96])
    result = climb(config, tmp_path / "out", "adamw: --optimizer=adamw", "muon: --optimizer=muon --learning_rate=8e-3")
    for name, factor in (("adamw", 1.0), ("muon", 4.0)):
        rec = result["recipes"][name]
        for r in ladder.best_runs(rec["runs"], 2):  # the sweep found the law's optimum at every size
            assert r["sweep_best_lr"] == pytest.approx(factor * 0.05 * r["params"] ** -0.3, rel=0.02)
            assert r["sweep_edge"] is None
        assert rec["fits"]["lr"]["named"]["b"] == pytest.approx(-0.3, abs=0.01)
        held = rec["held_out"]
        assert held["inside"] and abs(held["relative_error"]) < 0.01 and held["lr_ratio"] == pytest.approx(1, abs=0.05)
        assert 0 <= held["lr_cost"] < 0.002  # the recommended rate loses next to nothing in its own sweep
        by_size = {r["size"]: r["params"] for r in rec["runs"]}
        assert held["extrapolation"] == pytest.approx(by_size["w96"] / by_size["w64"])
        further, = rec["held_out_further"]  # five sizes: two held out leave three to fit, three would leave two
        assert further["held_out_sizes"] == 2 and further["size"] == "w96"
        assert further["extrapolation"] == pytest.approx(by_size["w96"] / by_size["w48"])
        # three sizes judge no form: no interval, so no inside (ladder.UNJUDGED)
        assert further["interval"] is None and further["inside"] is None and abs(further["relative_error"]) < 0.02
        assert abs(held["last_step"]["relative_error"]) < 0.01  # on a straight law the line through two agrees
    assert all(v["multiplier"] > 1 for v in result["recipes"]["muon"]["compute_multiplier_vs_adamw"].values())
    out = capsys.readouterr().out
    assert "held out w96" in out and "held out the 2 largest sizes (" in out and "; its sweep lost " in out
    assert "; the last step's slope carried on: " in out
    trained = len(fake_train)
    climb(config, tmp_path / "out", "adamw: --optimizer=adamw", "muon: --optimizer=muon --learning_rate=8e-3")
    assert len(fake_train) == trained  # the rerun trained nothing
    climb(ladder_config(tmp_path, [16, 32, 48, 64, 96, 128]), tmp_path / "out", "adamw: --optimizer=adamw")
    assert {p.split("/")[-1].split("_")[0] for p in fake_train[trained:]} == {"w128"}  # only the new size



def test_a_rerun_with_other_recipe_flags_does_not_take_the_runs_trained_without_them(tmp_path, fake_train, capsys):
    """A run's folder names its size, ratio, rate and seed, not the recipe's other flags: the rerun of a stopped
    or finished ladder with --weight_decay added is refused in one line, not given the old runs as its own."""
    config = ladder_config(tmp_path, [16, 32, 48])
    climb(config, tmp_path / "out", "adamw: --optimizer=adamw")
    trained = len(fake_train)
    with pytest.raises(SystemExit, match=r"w16_r2_lr[0-9.]+ was trained with weight_decay=0.1 where this ladder sets "
                                         r"weight_decay=0.2: use another --out, or delete the run to train it again$"):
        climb(config, tmp_path / "out", "adamw: --optimizer=adamw --weight_decay=0.2")
    assert len(fake_train) == trained
    begun = Path(fake_train[-1])  # a run stopped part-way (no done record) would resume under the new flags
    (begun / metrics.FILE).write_text("".join(line + "\n" for line in (begun / metrics.FILE).read_text().splitlines()
                                              if '"done"' not in line))
    for run in (tmp_path / "out" / "runs" / "adamw").iterdir():  # the others gone: trained anew, with the flag
        if run != begun:
            shutil.rmtree(run)
    with pytest.raises(SystemExit, match=f"{begun.name} was trained with weight_decay=0.1 where this ladder sets "
                                         "weight_decay=0.2"):
        climb(config, tmp_path / "out", "adamw: --optimizer=adamw --weight_decay=0.2")
    assert fake_train[:trained].count(str(begun)) == fake_train.count(str(begun)) == 1  # not resumed

def test_an_edited_common_is_judged_run_by_run_a_logging_flag_reuses_them_a_new_batch_does_not(tmp_path, fake_train):
    """common's text is not the test: each run's config.json is. Logging changes no loss, so the runs stand; the
    global batch is not compared key by key (train.py may split it otherwise), so it is compared as a product,
    and the validation windows (the config's micro-batch, before train.py's split) as theirs."""
    config = Path(ladder_config(tmp_path, [16, 32, 48]))
    climb(str(config), tmp_path / "out", "adamw: --optimizer=adamw")
    trained, text = len(fake_train), config.read_text()
    config.write_text(text.replace("--gradient_accumulation_steps=1", "--gradient_accumulation_steps=1 --log_interval=7"))
    climb(str(config), tmp_path / "out", "adamw: --optimizer=adamw")
    assert len(fake_train) == trained  # reused
    config.write_text(text.replace("--batch_size=4 --gradient_accumulation_steps=1",
                                   "--batch_size=2 --gradient_accumulation_steps=2"))  # the same batch, split,
    with pytest.raises(SystemExit, match=r"was trained with validation windows \(eval_iters x batch_size\)=80 where "
                                         r"this ladder sets validation windows \(eval_iters x batch_size\)=40"):
        climb(str(config), tmp_path / "out", "adamw: --optimizer=adamw")  # but validated on half the windows
    assert len(fake_train) == trained
    config.write_text(text.replace("--gradient_accumulation_steps=1", "--gradient_accumulation_steps=2"))
    with pytest.raises(SystemExit, match=r"was trained with .*max_iters=44, .*batch_size x gradient_accumulation_steps"
                                         r"=4 where this ladder sets .*batch_size x gradient_accumulation_steps=8: use"):
        climb(str(config), tmp_path / "out", "adamw: --optimizer=adamw")
    assert len(fake_train) == trained


def test_a_largest_size_trained_once_says_its_rate_was_not_checked(tmp_path, fake_train, capsys):
    """As on the GPU ladder, whose 1.3B runs once at the rate the sizes below predict: its recommended rate
    over its "sweep's best" is 1 by construction, and the output says there was no check."""
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], sweep_points=(5, 3, 3, 1)), tmp_path / "out",
                   "adamw: --optimizer=adamw")
    assert result["recipes"]["adamw"]["held_out"]["sweep_lrs"] == [pytest.approx(
        result["recipes"]["adamw"]["held_out"]["recommended_lr"], rel=0.01)]
    assert "its one run's rate, not swept: no check of the rate" in capsys.readouterr().out


def test_two_recipes_climb_side_by_side_with_two_jobs_and_end_as_one_at_a_time(tmp_path, fake_train, monkeypatch):
    """--jobs 2 with two recipes: a run of each at once (a recipe's own sizes follow one another), and the
    same ladder.json as one recipe after the other."""
    train, lock, running, most, met = ladder_script.subprocess.run, threading.Lock(), [0], [0], threading.Event()

    def run(command, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            if running[0] == 2:
                met.set()
        met.wait(5)  # each recipe's first run waits here for the other's (climbing one after the other, in vain)
        try:
            return train(command, **kwargs)
        finally:
            with lock:
                running[0] -= 1
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    config, recipes = ladder_config(tmp_path, [16, 32, 48]), ("adamw: --optimizer=adamw", "muon: --optimizer=muon")
    ladder_script.main([config, "--out", str(tmp_path / "two"), "--jobs", "2",
                        *(a for r in recipes for a in ("--recipe", r))])
    assert most[0] == 2
    together = json.loads((tmp_path / "two" / "ladder.json").read_text())
    apart = climb(config, tmp_path / "one", *recipes)
    for name in ("adamw", "muon"):
        assert together["recipes"][name]["fits"] == apart["recipes"][name]["fits"]


def test_each_run_at_once_gets_gpus_of_its_own_through_the_variable_the_user_narrowed_them_with():
    """A run told nothing takes GPU 0, so --jobs 2 on a GPU box would train both runs on one card."""
    assert ladder_script.device_slots(3, 1, "cuda", {}, count=0) == [{}, {}, {}]  # no GPU: the runs share the cores
    assert ladder_script.device_slots(3, 1, "cpu", {}, count=8) == [{}, {}, {}]  # the CPU's runs take no GPU
    assert ladder_script.device_slots(2, 4, "cuda", {}, count=8) == [{"CUDA_VISIBLE_DEVICES": "0,1,2,3"},
                                                                     {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}]
    assert ladder_script.device_slots(2, 1, "cuda", {"CUDA_VISIBLE_DEVICES": "6,7"}, count=2) == [
        {"CUDA_VISIBLE_DEVICES": "6"}, {"CUDA_VISIBLE_DEVICES": "7"}]  # the user's own GPUs, not 0 and 1
    assert ladder_script.device_slots(2, 1, "cuda", {"HIP_VISIBLE_DEVICES": "2,3"}, count=2, rocm=True) == [
        {"HIP_VISIBLE_DEVICES": "2"}, {"HIP_VISIBLE_DEVICES": "3"}]  # ROCm's own variable, where the user set it
    assert ladder_script.device_slots(2, 1, "cuda", {"HIP_VISIBLE_DEVICES": "2,3"}, count=2, rocm=False) == [
        {"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}]  # a CUDA build ignores a stray HIP variable
    with pytest.raises(SystemExit, match=r"^error: --jobs 3 x --nproc 4 needs 12 GPUs and 8 are visible: lower"):
        ladder_script.device_slots(3, 4, "cuda", {}, count=8)


def test_the_slots_are_shared_a_finished_climb_leaves_its_slot_to_the_other_and_no_two_runs_share_a_gpu(
        tmp_path, fake_train, monkeypatch):
    """--jobs 2 with two recipes on two GPUs: while both climb, a run of each; once adamw's (instant here) has
    ended, muon's sweeps take both slots, and at no moment do two runs hold one GPU."""
    train, lock, held, most_muon, muon_running = ladder_script.subprocess.run, threading.Lock(), [], [0], [0]

    def run(command, **kwargs):
        if "train.py" not in command:
            return train(command, **kwargs)
        muon, env = "--optimizer=muon" in command, kwargs["env"]
        with lock:
            assert env["CUDA_VISIBLE_DEVICES"] not in held
            held.append(env["CUDA_VISIBLE_DEVICES"])
            muon_running[0] += muon
            most_muon[0] = max(most_muon[0], muon_running[0])
        try:
            time.sleep(0.05 if muon else 0)
            return train(command, **kwargs)
        finally:
            with lock:
                held.remove(env["CUDA_VISIBLE_DEVICES"])
                muon_running[0] -= muon
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    monkeypatch.setattr(ladder_script.torch.cuda, "device_count", lambda: 2)
    on_gpus = ladder_config(tmp_path, [16, 32, 48], common="--batch_size=4 --gradient_accumulation_steps=1 --device=cuda")
    ladder_script.main([on_gpus, "--out", str(tmp_path / "out"), "--jobs", "2",
                        "--recipe", "adamw: --optimizer=adamw", "--recipe", "muon: --optimizer=muon"])
    assert most_muon[0] == 2  # JOBS // recipes, the old share, would have kept muon to one run at a time


def test_runs_on_the_cpu_of_a_gpu_box_take_as_many_slots_as_jobs_and_no_gpu(tmp_path, fake_train, monkeypatch):
    monkeypatch.setattr(ladder_script.torch.cuda, "device_count", lambda: 1)
    climb(ladder_config(tmp_path, [16, 32, 48]), tmp_path / "out", "adamw: --optimizer=adamw")  # device='cpu'
    ladder_script.main([ladder_config(tmp_path, [16, 32, 48]), "--out", str(tmp_path / "two"), "--jobs", "2",
                        "--recipe", "adamw: --optimizer=adamw"])  # not "needs 2 GPUs and 1 are visible"
    assert all("CUDA_VISIBLE_DEVICES=" not in " ".join(c) for c in fake_train.commands)




def test_a_run_a_signal_stopped_part_way_is_not_taken_for_finished(tmp_path, fake_train, monkeypatch):
    """train.py saves and exits 0 on SIGTERM (someone's kill, a preemption): its last val loss is not the run's
    final one, so the ladder stops in one line and a rerun resumes the run, not a climb on a partial loss."""
    train = ladder_script.subprocess.run

    def run(command, **kwargs):
        result = train(command, **kwargs)
        if "train.py" in command and "--learning_rate=0.001" in command:  # stopped at half-way: no done record
            out_dir = Path(command[command.index("train.py") + 1:][-2].removeprefix("--out_dir="))
            lines = (out_dir / metrics.FILE).read_text().splitlines()
            (out_dir / metrics.FILE).write_text("".join(line + "\n" for line in lines if '"done"' not in line))
        return result
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    with pytest.raises(SystemExit, match=r"w16_r2_lr0.001 stopped before its end \(its train.py was signalled\): "
                                         "rerun to resume it$"):
        climb(ladder_config(tmp_path, [16, 32, 48]), tmp_path / "out", "adamw: --optimizer=adamw")

def test_a_sizes_replicas_train_beside_the_next_sizes_sweep(tmp_path, fake_train, monkeypatch):
    """The next sweep is centred on the sweeps below, not on the seeds: with two slots, w16's replicas and w32's
    sweep train at once, and ladder.json lists the runs as one run at a time would."""
    train, lock, running, met = ladder_script.subprocess.run, threading.Lock(), [], threading.Event()

    def run(command, **kwargs):
        if "train.py" not in command:
            return train(command, **kwargs)
        me = ("--seed=" in " ".join(command), next(a for a in command if a.startswith("--n_embd=")))
        with lock:
            running.append(me)
            if (True, "--n_embd=16") in running and (False, "--n_embd=32") in running:
                met.set()
        try:
            time.sleep(0.05)
            return train(command, **kwargs)
        finally:
            with lock:
                running.remove(me)
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    config = ladder_config(tmp_path, [16, 32, 48], seeds=2)
    ladder_script.main([config, "--out", str(tmp_path / "two"), "--jobs", "2", "--recipe", "adamw: --optimizer=adamw"])
    assert met.is_set()
    together = json.loads((tmp_path / "two" / "ladder.json").read_text())["recipes"]["adamw"]
    apart = climb(config, tmp_path / "one", "adamw: --optimizer=adamw")["recipes"]["adamw"]
    assert [(r["size"], r["lr"], r["seed"]) for r in together["runs"]] == [
        (r["size"], r["lr"], r["seed"]) for r in apart["runs"]] and together["fits"] == apart["fits"]

def test_a_run_that_diverges_ranks_last_and_is_not_trained_again(tmp_path, fake_train, monkeypatch):
    """train.py stops a run whose loss will not stay finite, writes a `diverged` record and exits 1, as a sweep's
    highest rate may: the ladder goes on, the run's final val loss is NaN (it ranks last), a rerun trains nothing."""
    train = ladder_script.subprocess.run

    def run(command, **kwargs):
        if "train.py" not in command:
            return train(command, **kwargs)
        cfg = configurator.load_config(command[command.index("train.py") + 1:])
        n = cost.meta_model(cfg, "none").get_num_params()
        if cfg.learning_rate < 2.5 * 0.05 * n ** -0.3:  # below 2.5 times the law's best rate: it trains
            return train(command, **kwargs)
        record = metrics.Metrics(cfg.out_dir)
        record("start", 0, max_iters=cfg.max_iters, tokens_per_iter=cfg.batch_size * cfg.block_size, params=n)
        record("eval", 0, val_loss=5.0)
        for k in range(1, cfg.max_nonfinite_steps + 1):
            record("nonfinite", k, loss=None, grad_norm=None, in_a_row=k)
        record("diverged", cfg.max_nonfinite_steps, reason="10 non-finite steps in a row")
        fake_train.append(cfg.out_dir)
        return types.SimpleNamespace(returncode=1, stdout="",
                                     stderr="error: 10 non-finite steps in a row; stopping without saving")
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    config = ladder_config(tmp_path, [16, 32, 48, 64])
    result = climb(config, tmp_path / "out", "adamw: --optimizer=adamw")
    runs = result["recipes"]["adamw"]["runs"]
    lost = [r for r in runs if not math.isfinite(r["final_val_loss"])]
    assert lost and all(r["lr"] == max(o["lr"] for o in runs if o["size"] == r["size"]) for r in lost)  # top rates
    for r in ladder.best_runs(runs, 2):  # the law's optimum, within the sweep's factor where a neighbour diverged
        ratio = r["sweep_best_lr"] / (0.05 * r["params"] ** -0.3)
        assert 0.5 < ratio < 2 if r["size"] in {o["size"] for o in lost} else ratio == pytest.approx(1, rel=0.02)
    trained = len(fake_train)
    climb(config, tmp_path / "out", "adamw: --optimizer=adamw")
    assert len(fake_train) == trained


def test_scores_of_the_runs_checkpoints_give_a_task_fit_and_the_held_out_sizes_score(tmp_path, fake_train, capsys):
    """scripts/eval.py's results beside each run's checkpoint (ckpt_N.eval.json): the rerun trains nothing,
    fits each task's score against the final val loss on every scored run, and predicts the held-out size's
    score from its predicted loss (both of Bhagia et al.'s steps)."""
    config, out = ladder_config(tmp_path, [16, 32, 48, 64, 96]), tmp_path / "out"
    runs = climb(config, out, "adamw: --optimizer=adamw")["recipes"]["adamw"]["runs"]
    losses = [r["final_val_loss"] for r in runs]
    middle, spread = float(np.median(losses)), float(np.ptp(losses))
    score = lambda loss: 0.5 / (1 + math.exp((loss - middle) / (0.2 * spread))) + 0.25  # chance 0.25
    rising = lambda loss: 0.75 / (1 + math.exp((loss - middle) / (0.2 * spread))) + 0.25  # chance 0.25 to 1
    for r in runs:
        newest = checkpoint.list_checkpoints(r["out_dir"])[0][0]
        Path(r["out_dir"], f"ckpt_{newest - 1}.eval.json").write_text("not the newest checkpoint's: never read")
        Path(r["out_dir"], f"ckpt_{newest}.eval.json").write_text(json.dumps(
            {"results": {"next_line": {"acc_norm": score(r["final_val_loss"]), "acc_norm_stderr": 0.01, "n": 1000,
                                       "perplexity": 90 * r["final_val_loss"]},  # a loss: not a score to fit
                         "swaps": {"acc": rising(r["final_val_loss"]), "n": 1000, "chance": 0.25}}}))  # as eval.py says
    trained = len(fake_train)
    rec = climb(config, out, "adamw: --optimizer=adamw")["recipes"]["adamw"]
    assert len(fake_train) == trained and "task_problems" not in rec["fits"]
    assert set(rec["fits"]["tasks"]) == {"next_line/acc_norm", "swaps/acc"}
    assert all(r["chance"] == {"swaps": 0.25} for r in rec["runs"])
    fit = ladder.Fit.from_json(rec["fits"]["tasks"]["next_line/acc_norm"])
    assert fit.n == len(runs) and fit.named()["b"] == pytest.approx(0.25, abs=0.01)
    assert "chance" not in rec["fits"]["tasks"]["next_line/acc_norm"]  # eval.py gave none: the free sigmoid
    swaps = ladder.Fit.from_json(rec["fits"]["tasks"]["swaps/acc"])
    assert rec["fits"]["tasks"]["swaps/acc"]["chance"] == 0.25
    assert (swaps.named()["a"], swaps.named()["b"]) == (0.75, 0.25)
    for task, law in (("next_line/acc_norm", score), ("swaps/acc", rising)):
        held = rec["held_out"]["scores"][task]
        assert held["measured"] == pytest.approx(law(rec["held_out"]["measured_val_loss"]))
        assert held["predicted"] == pytest.approx(law(rec["held_out"]["predicted_val_loss"]), abs=0.01)
    out = capsys.readouterr().out
    assert "next_line/acc_norm: predicted " in out and "swaps/acc against the final val loss" in out
    assert f"({len(runs)} runs): sigmoid, from chance 0.25 to 1, k " in out


@pytest.fixture
def any_task(monkeypatch):
    """fake_train stands in for scripts/eval.py too, and knows every task: the up-front lookup passes."""
    from trainer import lm_eval_adapter
    monkeypatch.setattr(lm_eval_adapter, "check_tasks", lambda tasks, data_dir, include_path=(): None)


def test_eval_tasks_scores_each_run_once_and_the_ladder_fits_them(tmp_path, fake_train, any_task):
    """--eval_tasks: scripts/eval.py on each run once it is trained; a rerun scores nothing again, and asking
    for another task scores each run on it."""
    config, out = ladder_config(tmp_path, [16, 32, 48, 64]), tmp_path / "out"
    argv = [config, "--out", str(out), "--recipe", "adamw: --optimizer=adamw", "--eval_tasks", "next_line",
            "--eval_args", "--include_path data/quickstart/next_line --device cpu"]
    ladder_script.main(argv)
    rec = json.loads((out / "ladder.json").read_text())["recipes"]["adamw"]
    assert sorted(d for d, _ in fake_train.scored) == sorted(fake_train) == sorted(r["out_dir"] for r in rec["runs"])
    fit = ladder.Fit.from_json(rec["fits"]["tasks"]["next_line/acc_norm"])
    assert fit.named()["b"] == pytest.approx(0.25, abs=0.02)
    ladder_script.main(argv)
    assert len(fake_train.scored) == len(rec["runs"])  # the rerun scored nothing
    ladder_script.main(argv[:-4] + ["--eval_tasks", "next_line, other", *argv[-2:]])  # next_line from the same data
    assert len(fake_train.scored) == 2 * len(rec["runs"])  # each run once more, on the new task alone
    assert [tasks for _, tasks in fake_train.scored[len(rec["runs"]):]] == [["other"]] * len(rec["runs"])
    for run in rec["runs"]:  # eval.py wrote "other" alone: next_line's scores were kept beside it
        assert set(ladder_script.eval_results(run["out_dir"])) == {"next_line", "other"}


def test_a_task_scored_with_another_limit_other_data_or_by_an_older_eval_py_is_scored_again(tmp_path, fake_train,
                                                                                              any_task):
    """The ladder's "already scored" check reads how eval.py scored each task (scored_with: --limit, the data's
    sha256): a limited, made-up or unrecorded score is scored again, never taken for the one asked for."""
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mytask.jsonl").write_text('{"context": "a", "choices": ["x", "y"], "label": 0}\n')
    (tasks / "mytask.yaml").write_text(json.dumps({"task": "mytask", "dataset_path": "json", "dataset_kwargs": {
        "data_files": {"validation": str(tasks / "mytask.jsonl")}}}))
    config, out = ladder_config(tmp_path, [16, 32, 48]), tmp_path / "out"
    argv = [config, "--out", str(out), "--recipe", "adamw: --optimizer=adamw", "--eval_tasks", "mytask,other"]
    scoring = f"--include_path {tasks} --device cpu"

    def rescored(eval_args):  # the runs scored by this ladder call, and on which tasks
        before = len(fake_train.scored)
        ladder_script.main(argv + ["--eval_args", eval_args])
        return {tuple(t) for _, t in fake_train.scored[before:]}, len(fake_train.scored) - before
    runs = rescored(scoring)[1]
    assert runs == len(fake_train) and rescored(scoring) == (set(), 0)  # as asked: not again
    assert rescored(scoring + " --limit 5") == ({("mytask", "other")}, runs)  # a limited score is another score
    (tasks / "mytask.jsonl").write_text('{"context": "b", "choices": ["x", "y"], "label": 1}\n')  # made-up, same path
    assert rescored(scoring + " --limit 5") == ({("mytask",)}, runs)  # "other" names no file: its data is the same
    for r in fake_train:  # as an eval.py that recorded no scored_with left it: unknown, so scored again
        path = ladder_script.eval_json(r)
        path.write_text(json.dumps({k: v for k, v in json.loads(path.read_text()).items() if k != "scored_with"}))
    assert rescored(scoring + " --limit 5") == ({("mytask", "other")}, runs)
    record = ladder_script.eval_record(fake_train[0])
    assert set(record["results"]) == {"mytask", "other"} and record["scored_with"]["mytask"]["limit"] == 5
    assert record["scored_with"]["mytask"]["data"] == [{"path": str(tasks / "mytask.jsonl"), "sha256": hashlib.sha256(
        (tasks / "mytask.jsonl").read_bytes()).hexdigest()}]


@pytest.mark.parametrize("under", [False, True])
def test_an_out_that_is_a_file_is_one_line_before_anything_trains(tmp_path, fake_train, under):
    """--out naming a file, or a folder under one, made the first run's mkdir a NotADirectoryError traceback."""
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "sub" if under else tmp_path / "afile"
    said = f" lies under {tmp_path / 'afile'}, which" if under else ""
    with pytest.raises(SystemExit, match=f"^error: --out {out}{said} is a file, not a folder: pass a folder"):
        climb(ladder_config(tmp_path, [16, 32, 48]), out, "a: --optimizer=adamw")
    assert len(fake_train) == 0


def test_the_failure_is_reported_when_a_run_of_the_same_recipe_then_stops(tmp_path, fake_train, any_task, monkeypatch):
    """Two runs of one recipe at once (--jobs 2): the second fails while the first trains, whose scoring then
    does not start. The failure is what the user reads, not a traceback of the stop it caused."""
    train, failed = ladder_script.subprocess.run, threading.Event()

    def run(command, **kwargs):
        if "train.py" in command and "--learning_rate=0.001" in command:  # the first sweep's second rate
            failed.set()
            return types.SimpleNamespace(returncode=1, stdout="", stderr="error: the disk is full")
        if "train.py" in command:
            failed.wait(120)
            time.sleep(0.2)  # the failure has stopped the ladder by now
        return train(command, **kwargs)
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    with pytest.raises(SystemExit, match="failed: error: the disk is full$"):
        ladder_script.main([ladder_config(tmp_path, [16, 32, 48]), "--out", str(tmp_path / "out"), "--jobs", "2",
                            "--recipe", "adamw: --optimizer=adamw", "--eval_tasks", "next_line"])


@pytest.mark.parametrize("extra, message", [
    (["--eval_args", "--device cpu"], "--eval_args without --eval_tasks: name the tasks to score"),
    (["--eval_tasks", "a", "--eval_args=--tasks=b"], "--eval_args sets --tasks=b: name the tasks with --eval_tasks"),
    (["--eval_tasks", "a", "--eval_args", "--include_path 'x"], "--eval_args \"--include_path 'x\": No closing"),
    (["--eval_tasks", "a"], "runs keep no checkpoint to score \\(checkpoint_interval=0\\)")])
def test_eval_options_that_cannot_work_are_one_line_before_anything_trains(tmp_path, fake_train, any_task, extra,
                                                                          message):
    config = ladder_config(tmp_path, [16, 32, 48])
    Path(config).write_text(Path(config).read_text().replace("--gradient_accumulation_steps=1",
                                                             "--gradient_accumulation_steps=1 --checkpoint_interval=0"))
    with pytest.raises(SystemExit, match=message):
        ladder_script.main([config, "--out", str(tmp_path / "out"), "--recipe", "adamw: --optimizer=adamw", *extra])
    assert len(fake_train) == 0


def test_a_task_eval_py_cannot_find_stops_the_ladder_before_anything_trains(tmp_path, fake_train):
    """The real lookup (trainer/lm_eval_adapter.check_tasks): a misspelt task, or a paper task without its local
    file, is one line in the ladder's first seconds; a task whose config is in --include_path passes it."""
    config, tasks = ladder_config(tmp_path, [16, 32, 48]), tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mytask.yaml").write_text('{"task": "mytask", "dataset_path": "json"}')
    argv = [config, "--out", str(tmp_path / "out"), "--recipe", "adamw: --optimizer=adamw", "--eval_args"]
    for extra, message in ((["--include_path", str(tasks)], "--eval_tasks: unknown task 'mytsk'"),
                           (["--data_dir", str(tmp_path)], "--eval_tasks: no local file .*piqa.jsonl for piqa")):
        with pytest.raises(SystemExit, match=message):
            ladder_script.main(argv + [" ".join(extra), "--eval_tasks", "mytsk" if "mytsk" in message else "piqa"])
    assert len(fake_train) == 0
    ladder_script.main(argv + [f"--include_path {tasks}", "--eval_tasks", "mytask"])
    assert len(fake_train) == len(fake_train.scored) > 0


def test_a_ladder_without_sweeps_climbs_at_one_rate_and_its_lr_fit_is_that_rate(tmp_path, fake_train):
    """sweep_points = (1, 1): one run per size at the recipe's rate; four equal best rates lie on the lr law
    exactly, which is a fit (zero covariance), not a failure."""
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], sweep_points=(1, 1)), tmp_path / "out",
                   "adamw: --optimizer=adamw --learning_rate=2e-3")
    rec = result["recipes"]["adamw"]
    assert {r["lr"] for r in rec["runs"]} == {2e-3} and len(rec["runs"]) == 4
    fit = ladder.Fit.from_json(rec["fits"]["lr"])
    assert fit.named()["b"] == pytest.approx(0, abs=1e-9) and fit.predict(1e6) == pytest.approx((2e-3,) * 3)


def test_a_recipes_bad_key_is_one_line_before_anything_trains(tmp_path, fake_train):
    with pytest.raises(SystemExit, match="error: recipe typo: command line: unknown config key 'optimzer'; did you "
                                         "mean optimizer"):
        climb(ladder_config(tmp_path, [16, 32, 48]), tmp_path / "out", "adamw: --optimizer=adamw",
              "typo: --optimzer=muon")
    assert len(fake_train) == 0


def test_a_failed_run_stops_the_other_recipes_climb_and_is_the_error_reported(tmp_path, fake_train, monkeypatch):
    """Recipes climb side by side: when one's run fails, the others start no new run (a GPU ladder would
    otherwise go on for hours before saying so), and the failure, not the stop, is what the user reads."""
    train, adamw_trained = ladder_script.subprocess.run, threading.Event()

    def run(command, **kwargs):
        # muon's first run to start once adamw has trained one fails; one that waited for adamw instead held its
        # slot, and with both slots held by muon's sweep the test waited out its timeout (120 s on every run)
        if "--optimizer=muon" in command and adamw_trained.is_set():
            return types.SimpleNamespace(returncode=1, stdout="", stderr="Traceback ...\nRuntimeError: out of memory\n"
                                         "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                                         "train.py FAILED\n  error_file: <N/A>")  # as torchrun ends
        result = train(command, **kwargs)
        if "--optimizer=adamw" in command:
            adamw_trained.set()
        return result
    monkeypatch.setattr(ladder_script.subprocess, "run", run)
    argv = [ladder_config(tmp_path, [16, 32, 48, 64, 96]), "--out", str(tmp_path / "out"), "--jobs", "2",
            "--recipe", "adamw: --optimizer=adamw", "--recipe", "muon: --optimizer=muon"]
    with pytest.raises(SystemExit, match="failed: RuntimeError: out of memory$"):
        ladder_script.main(argv)
    assert 0 < sum(Path(r).parent.name == "adamw" for r in fake_train) < 17  # adamw stopped before its 17 (5 + 3 a size)
    assert not (tmp_path / "out" / "ladder.json").exists()


def test_a_second_ratio_adds_one_run_per_size_and_a_chinchilla_fit_held_out_as_the_rules(tmp_path, fake_train,
                                                                                           capsys):
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], tokens_per_param=(2, 4)), tmp_path / "out",
                   "adamw: --optimizer=adamw")
    rec = result["recipes"]["adamw"]
    assert sum(r["tokens_per_param"] == 4 for r in rec["runs"]) == 4
    fit = rec["fits"]["loss_nd"]
    assert fit["form"] == "chinchilla" and fit["n"] == 8
    # fitted on w16-w48's six runs, it predicts w64's at both ratios (the law is not Chinchilla's form exactly)
    checks = rec["held_out"]["chinchilla"]
    assert [c["tokens_per_param"] for c in checks] == [4, 2]
    top = {r["tokens_per_param"]: r["final_val_loss"] for r in ladder.best_runs(rec["runs"], 2)[-1:] +
           [r for r in rec["runs"] if r["size"] == "w64" and r["tokens_per_param"] == 4]}
    for c in checks:
        assert c["measured_val_loss"] == top[c["tokens_per_param"]] and abs(c["relative_error"]) < 0.02
        # its backtest would fit w16-w32's four runs, too few for five parameters: no interval beyond w48
        assert c["interval"] is None and c["inside"] is None
    assert "chinchilla, fitted on the same sizes' runs at every ratio, predicted " in capsys.readouterr().out
    only_top = [r for r in rec["runs"] if r["tokens_per_param"] == 2 or r["size"] == "w64"]  # no ratio below to fit
    assert ladder_analysis.held_out(only_top, 2)["chinchilla"] == {"problem": "the sizes fitted were measured at one ratio"}
    assert "chinchilla" not in climb(ladder_config(tmp_path, [16, 32, 48, 64]), tmp_path / "one",
                                     "adamw: --optimizer=adamw")["recipes"]["adamw"]["held_out"]  # one ratio: none


def test_steps_grows_the_batch_with_size_so_every_size_takes_about_as_many_steps(tmp_path, fake_train):
    config = ladder_config(tmp_path, [16, 32, 64], steps=50)
    runs = climb(config, tmp_path / "out", "adamw: --optimizer=adamw")["recipes"]["adamw"]["runs"]
    configs = {c.out_dir: c for c in (configurator.load_config(command[command.index("train.py") + 1:])
                                      for command in fake_train.commands)}
    batches = []
    for r in ladder.best_runs(runs, 2):
        cfg = configs[r["out_dir"]]
        assert cfg.max_iters == pytest.approx(50, rel=0.15) and r["tokens"] == pytest.approx(2 * r["params"], rel=0.1)
        assert 20 * 4 <= cfg.eval_iters * cfg.batch_size < 20 * 4 + cfg.batch_size  # train_tiny's 20 batches of 4
        batches.append(cfg.batch_size)
    assert batches == sorted(batches) and batches[-1] > 4 * batches[0]
    result = run_here(["scripts/ladder.py", config, "--out", str(tmp_path / "o"), "--recipe", "big: --batch_size=64"])
    assert result.returncode != 0 and "recipe 'big' sets batch_size, which the ladder varies per run" in result.stderr


@pytest.mark.parametrize("argv, message", [
    (["--recipe", "big: --n_embd=256"], "recipe 'big' sets n_embd, which the ladder varies per run"),
    (["--recipe", "no colon"], "write it as 'NAME: --key=value ...'"),
])
def test_a_recipe_that_changes_what_the_ladder_varies_is_refused_in_one_line(tmp_path, argv, message):
    result = run_here(["scripts/ladder.py", ladder_config(tmp_path, [16, 32, 48]), "--out", str(tmp_path / "o"), *argv])
    assert result.returncode != 0 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("extra, recipes, message", [
    ({"sweep_points": 0}, ["a: --optimizer=adamw"], "sweep_points = 0: give whole numbers of at least 1, one per size"),
    ({"sweep_factors": (2.0, 1.0)}, ["a: --optimizer=adamw"], "sweep_factors = (2.0, 1.0): give numbers above 1"),
    ({"target": "config/no_such_run.py"}, ["a: --optimizer=adamw"], "target 'config/no_such_run.py': "),
    ({}, ["a: --optimizer=adamw", "a: --optimizer=muon"], "--recipe 'a' is given twice: name each recipe once"),
    ({"extra_size": dict(n_layer=2, n_head=2, n_embd=33)}, ["a: --optimizer=adamw"],
     "size 'w33' (recipe a): n_embd=33 must be a multiple of n_head=2"),
    ({"extra_size": dict(n_layer=2, n_heads=2, n_embd=64)}, ["a: --optimizer=adamw"], "size 'w33' (recipe a): "),
    ({"extra_size": dict(n_layer=2, n_head=0, n_embd=64)}, ["a: --optimizer=adamw"], "size 'w33' (recipe a): n_head"),
])
def test_a_ladder_config_that_cannot_run_is_one_line_before_anything_trains(tmp_path, fake_train, extra, recipes,
                                                                             message):
    """Each size is checked as train.py checks a run, and the target and sweep read, before the first run: not
    when the climb reaches them, hours in on a GPU, or after the runs, as a traceback."""
    shape = extra.pop("extra_size", None)
    config = ladder_config(tmp_path, [16, 32, 48], **extra)
    if shape:  # the largest size, the last the climb would reach
        Path(config).write_text(Path(config).read_text() + f"sizes['w33'] = {shape!r}\n")
    result = run_here(["scripts/ladder.py", config, "--out", str(tmp_path / "o"),
                       *[a for r in recipes for a in ("--recipe", r)]])
    assert result.returncode != 0 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not fake_train and not (tmp_path / "o" / "runs").exists()


@pytest.mark.parametrize("extra, recipe, message", [
    ({"evaluations": 0}, "a: --optimizer=adamw", "evaluations = 0: give a whole number of at least 1"),
    ({"tokens_per_param": ()}, "a: --optimizer=adamw", "tokens_per_param = (): give a positive number"),
    ({"tokens_per_param": (20, 20)}, "a: --optimizer=adamw", "tokens_per_param = (20, 20): give a positive number"),
    ({"base": "config/train_tiny.py"}, "a: --optimizer=adamw", "base = 'config/train_tiny.py': give a list"),
    ({"common": ["--batch_size=4"]}, "a: --optimizer=adamw", "common = ['--batch_size=4']: give one string"),
    ({"warmup_fraction": 1.0}, "a: --optimizer=adamw", "warmup_fraction = 1.0: give a share of the run in [0, 1)"),
    ({}, "a: --optimizer='adamw", "--recipe \"a: --optimizer='adamw\": No closing quotation"),
    ({}, "wide: --vocab_size=512",
     "recipe wide trains on other data or vocabulary (vocab_size 512, here 320): a ladder compares"),
])
def test_a_setting_or_recipe_no_ladder_can_run_is_one_line_before_anything_trains(tmp_path, fake_train, extra,
                                                                                 recipe, message):
    """In-process: what load_settings, parse_recipe and main refuse, as SystemExit's one line (the process's
    stderr, as the cases above check by running it). A recipe on other data would be compared with the others
    on another validation set, and recorded under the ladder's data, where forecast_prior and plan.py check it."""
    with pytest.raises(SystemExit) as e:
        climb(ladder_config(tmp_path, [16, 32, 48], **extra), tmp_path / "out", recipe)
    assert str(e.value).startswith("error: ") and message in str(e.value) and "\n" not in str(e.value), str(e.value)
    assert not fake_train


@pytest.mark.parametrize("text, message", [
    ("sizes = {'w16': dict(n_layer=2)\n", "SyntaxError: "),  # then Python's words, which vary by version
    ("steps = 1/0\n", "ZeroDivisionError: division by zero"),
])
def test_a_ladder_config_that_does_not_run_is_one_line_naming_it(tmp_path, text, message):
    """A config file that breaks as Python: where it broke, as configurator.py reports a train.py config, not a
    traceback."""
    config = tmp_path / "bad.py"
    config.write_text(text)
    with pytest.raises(SystemExit) as e:
        ladder_script.load_settings(str(config))
    assert str(e.value).startswith(f"error: {config}: {message}") and "\n" not in str(e.value), str(e.value)


def test_a_recipe_whose_rate_is_below_the_bases_floor_still_climbs(tmp_path, fake_train):
    """Each run sets min_lr from its own rate: the size check must not judge the recipe by the base's min_lr
    (train_tiny.py's 2e-4 is above this recipe's whole sweep)."""
    result = climb(ladder_config(tmp_path, [16, 32, 48]), tmp_path / "out", "slow: --learning_rate=1e-5")
    assert fake_train and min(r["lr"] for r in result["recipes"]["slow"]["runs"]) < 2e-4  # trained, not refused


def test_the_lr_fit_leaves_out_a_size_trained_once_at_the_rate_it_predicted():
    """The GPU ladder's 1.3B runs once, at the rate the sizes below predict: as a point of the lr fit it would
    measure nothing and narrow the interval at 6.7B."""
    law = lambda n: 0.05 * n ** -0.3
    runs = []
    for i, n in enumerate((1e4, 2e4, 4e4, 8e4)):
        for f in (0.5, 1, 2):
            runs.append({"size": f"s{i}", "params": n, "tokens_per_param": 4, "lr": law(n) * f, "replica": False,
                         "final_val_loss": 3 - 0.1 * i + 0.05 * abs(math.log(f)),
                         "sweep_best_lr": law(n) * (1.1 if i % 2 else 0.9),
                         "curve": [[1.0, 3.0]], "scores": {}})
    once = {"size": "s4", "params": 1.6e5, "tokens_per_param": 4, "lr": 1e-3, "replica": False, "final_val_loss": 2.5,
            "sweep_best_lr": 1e-3, "curve": [[1.0, 2.5]], "scores": {}}
    fitted = ladder.Fit.from_json(ladder_analysis.fits(runs + [once], 4)["lr"])
    swept_only = ladder.Fit.from_json(ladder_analysis.fits(runs, 4)["lr"])
    assert fitted.n == 4 and fitted.predict(1e9) == pytest.approx(swept_only.predict(1e9))
    unswept = [r for r in runs if r["size"] in ("s0", "s1") or r["lr"] == law(r["params"])]  # two sizes swept
    # too few swept: all
    assert ladder_analysis.lr_points(unswept, ladder.best_runs(unswept, 4), 4)[0] == [1e4, 2e4, 4e4, 8e4]


@pytest.mark.parametrize("config", sorted(p.name for p in (REPO / "config").glob("ladder_*.py")))
def test_every_shipped_ladder_config_loads(config, tmp_path, monkeypatch):
    """Every config/ladder_*.py is settings scripts/ladder.py accepts, read from another folder (a config that
    execs another finds it beside itself), the bf16 configs set what their comments say, and the tiny studies
    keep the tenth's warmup they were measured at where the config (and its second ratio) warm up over a quarter;
    the _full configs are the config on the whole standard library, and nothing else changed; further_full is
    beyond_full with w400 once per seed."""
    monkeypatch.chdir(tmp_path)
    settings = ladder_script.load_settings(str(REPO / "config" / config))
    assert len(settings["sizes"]) >= 4 and settings["base"] and settings["seeds"] >= 1
    if config.startswith("ladder_tiny"):
        quarter = ("ladder_tiny.py", "ladder_tiny_bf16.py", "ladder_tiny_bf16_nd.py",  # the config, its second ratio
                   "ladder_tiny_bf16_beyond.py", "ladder_tiny_bf16_full.py", "ladder_tiny_bf16_beyond_full.py",
                   "ladder_tiny_bf16_further_full.py")
        if "beyond" in config:  # the config's sizes and sweeps, then w320 once per seed
            config_sizes = ladder_script.load_settings(str(REPO / "config" / "ladder_tiny_bf16.py"))["sizes"]
            assert list(settings["sizes"]) == [*config_sizes, "w320"] and settings["sweep_points"][-1] == 1
        if "further" in config:  # beyond_full, then w400 once per seed
            beyond = ladder_script.load_settings(str(REPO / "config" / "ladder_tiny_bf16_beyond_full.py"))
            assert list(settings["sizes"]) == [*beyond["sizes"], "w400"]
            assert settings["sweep_points"] == (*beyond["sweep_points"], 1)
            assert {**settings, "sizes": beyond["sizes"], "sweep_points": beyond["sweep_points"]} == beyond
        elif config.endswith("_full.py"):
            same = ladder_script.load_settings(str(REPO / "config" / config.replace("_full", "")))
            assert settings["common"] == same["common"] + " --dataset=quickstart_full"
            assert {**settings, "common": same["common"]} == same
        assert settings["warmup_fraction"] == (0.25 if config in quarter else 0.1)
    if config.startswith("ladder_tiny_bf16"):
        assert "--dtype=bfloat16" in settings["common"].split()
        assert settings["seeds"] == (3 if config == "ladder_tiny_bf16_three.py" else 2)


def test_one_sweep_setting_holds_for_every_size(tmp_path, fake_train):
    config = ladder_config(tmp_path, [16, 32, 48], sweep_points=1, sweep_factors=2.0)
    assert ladder_script.load_settings(config)["sweep_points"] == (1,)
    result = climb(config, tmp_path / "out", "a: --optimizer=adamw")
    assert len(result["recipes"]["a"]["runs"]) == 3  # one run a size


def test_plan_refuses_a_ladder_config_too_small_and_a_train_config_in_one_line(tmp_path):
    """plan.py --ladder_plan reads the ladder config as scripts/ladder.py does: fewer than 3 sizes, or a train.py
    config, is one line, not a traceback from the pricing."""
    cfg = configurator.load_config([FAST])
    plan_ = plan.make_plan(cfg, "h200", 0.4, 2.0, 1)
    with pytest.raises(SystemExit, match="has 2 sizes, a fit needs at least 3: add sizes$"):
        plan.ladder_cost(ladder_config(tmp_path, [16, 32]), plan_, 0.4, 2.0, 1)
    with pytest.raises(SystemExit, match=r"NameError: .* \(is it a ladder config\? those set sizes, base and common"):
        plan.ladder_cost("config/train_gpt3_125m.py", plan_, 0.4, 2.0, 1)


def test_too_few_sizes_and_a_ladder_of_other_data_are_refused_in_one_line(tmp_path):
    result = run_here(["scripts/ladder.py", ladder_config(tmp_path, [16, 32]), "--out", str(tmp_path / "o"),
                       "--recipe", "a: --optimizer=adamw"])
    assert result.returncode != 0 and "2 sizes, a fit needs at least 3" in result.stderr
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "ladder.json").write_text(json.dumps({"data": {"dataset": "pile", "vocab_size": 50304},
                                                            "recipes": {"a": {"runs": []}}}))
    result = run_here(["scripts/ladder.py", ladder_config(tmp_path, [16, 32, 48]), "--out", str(tmp_path / "o"),
                       "--recipe", "a: --optimizer=adamw"])
    assert result.returncode != 0 and "measured on other data or vocabulary (dataset 'pile'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o" / "runs").exists()
    (tmp_path / "o" / "ladder.json").write_text(json.dumps({"data": {}, "recipes": {"a": {"runs": []}}, "settings": dict(
        ladder_script.SETTINGS, base=["config/train_tiny.py"], common="--batch_size=4 --gradient_accumulation_steps=1")}))
    result = run_here(["scripts/ladder.py", ladder_config(tmp_path, [16, 32, 48], steps=50), "--out",
                       str(tmp_path / "o"), "--recipe", "a: --optimizer=adamw"])  # its runs were trained at a fixed batch
    assert result.returncode != 0 and "trained its runs with other steps" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "o" / "runs").exists()


# -----------------------------------------------------------------------------
# plan.py --ladder and --ladder_plan

FAST = "config/train_gpt3_6b_fast.py"


def synthetic_ladder(path, cfg, loss_scale=1.0):
    """A ladder.json of the fast recipe's data whose fits come from known laws (the GPU ladder's sizes, 10
    and 20 tokens per parameter): Chinchilla's, an lr power law, and a HellaSwag sigmoid on the loss."""
    n, d = np.meshgrid(np.array([125e6, 350e6, 760e6, 1.3e9]), [10.0, 20.0])
    n, d = n.ravel(), (d * n).ravel()

    def fits(scale):
        losses = noisy(scale * (1.7 + 400 * n ** -0.34 + 410 * d ** -0.28), 0.002)
        loss_grid = np.linspace(2.0, 4.0, 8)
        return {"loss": ladder.fit_loss(n[4:], losses[4:]).to_json(),
                "loss_nd": ladder.fit_loss(n, losses, d).to_json(),
                "lr": ladder.fit_lr(n[4:], noisy(0.3 * n[4:] ** -0.25, 0.02)).to_json(),
                "tasks": {"hellaswag/acc_norm": ladder.fit_task(
                    loss_grid, 0.6 / (1 + np.exp(5 * (loss_grid - 2.6))) + 0.25).to_json()}}
    def runs(scale):  # each size's one run at 20 tokens per parameter, on the law
        return [{"size": f"{x:.0e}", "params": float(x), "tokens_per_param": 20, "lr": 1e-3,
                 "final_val_loss": scale * (1.7 + 400 * x ** -0.34 + 410 * (20 * x) ** -0.28)} for x in n[4:]]
    checks = {  # the ladder's own check, held out by 1 and 2 sizes
        "held_out": {"extrapolation": 1.3e9 / 760e6, "relative_error": -0.012, "form": "power",
                     "last_step": {"relative_error": -0.005},
                     "chinchilla": [{"tokens_per_param": 20, "relative_error": 0.021},
                                    {"tokens_per_param": 10, "relative_error": -0.004}]},
        "held_out_further": [{"extrapolation": 1.3e9 / 350e6, "relative_error": 0.034, "form": "power"}]}
    path.write_text(json.dumps({"data": ladder.identity(cfg), "tokens_per_param": [20, 10], "recipes": {
        "adamw": {"fits": fits(1.0), "runs": runs(1.0), **checks},
        "muon": {"fits": fits(loss_scale), "runs": runs(loss_scale), **checks}}}))
    return str(path)


def test_plan_prints_the_ladders_loss_lr_scores_and_days_to_a_target(tmp_path):
    path = synthetic_ladder(tmp_path / "ladder.json", configurator.load_config([FAST]), loss_scale=0.97)
    result = run_here(["scripts/plan.py", FAST, "--gpu", "h200", "--ladder", path, "--target", "hellaswag=67.4"])
    assert result.returncode == 0, result.stderr
    out = result.stdout[result.stdout.index("the scaling ladder's predictions"):]
    assert "adamw: final val loss " in out and "(chinchilla fit), learning rate " in out
    assert "hellaswag/acc_norm" in out and "GPT-3 at this size: 67.4" in out
    assert "target: val loss " in out and "B tokens, " in out and " days at this plan's speed" in out
    assert "compute multiplier against adamw: " in out  # Muon's 3% lower loss, as adamw's extra compute
    # how far the target lies beyond the ladder, beside how the ladder's fit missed its own sizes at a distance
    assert "this run's 6,648.8M parameters are 5.1x the ladder's largest size (1,300.0M)" in out  # less wpe
    assert "the miss at each distance: 1.7x -1.2% (power; the last step -0.5%), 3.7x +3.4% (power)" in out
    # beside the fit, the log-log line through the two largest sizes' runs carried on to 6.7B
    top = [(x, 1.7 + 400 * x ** -0.34 + 410 * (20 * x) ** -0.28) for x in (760e6, 1.3e9)]
    slope = math.log(top[1][1] / top[0][1]) / math.log(1.3e9 / 760e6)
    reading = top[1][1] * (6648.8e6 / 1.3e9) ** slope
    assert f"the last step's slope carried on to this size (a reading beside the fit, no interval): {reading:.3f}" \
        in out
    # and Chinchilla's own check, where the ladder made it (here one step out only)
    assert "by this fit, the miss at each distance (and tokens per parameter): 1.7x +2.1% at 20, -0.4% at 10\n" in out
    # the run keeps the ladder's first ratio (20), so the fit along it is read too, its own misses beneath it
    lines = out.splitlines()
    along = [i for i, line in enumerate(lines) if "by the fit along the ladder's ratio (this run keeps it): " in line]
    assert len(along) == 2 and all(lines[i].endswith("(power fit)") for i in along)
    assert all("by the fit along its ratio, the miss at each distance" in lines[i + 1] for i in along)


def test_the_forecast_inverts_its_fits_and_says_never_when_a_target_is_past_them(tmp_path):
    cfg = configurator.load_config([FAST])
    path = synthetic_ladder(tmp_path / "ladder.json", cfg, loss_scale=0.97)
    plan_ = {"params_without_position_embeddings": 6.7e9, "total_tokens": 134e9, "tokens_per_second": 1e4}
    forecast = plan.ladder_forecast(cfg, plan_, path, target_loss=2.3)
    adamw, muon = forecast["recipes"]["adamw"], forecast["recipes"]["muon"]
    fit = ladder.Fit.from_json(json.loads(open(path).read())["recipes"]["adamw"]["fits"]["loss_nd"])
    assert fit((6.7e9, adamw["target"]["tokens"])) == pytest.approx(2.3, abs=1e-6)
    assert adamw["target"]["days"] == pytest.approx(adamw["target"]["tokens"] / 1e4 / 86400)
    low, high = adamw["val_loss"][1:]
    assert low < 1.7 + 400 * 6.7e9 ** -0.34 + 410 * 134e9 ** -0.28 < high
    assert muon["compute_multiplier"] > 1
    assert forecast["extrapolation"] == pytest.approx(6.7e9 / 1.3e9) and len(adamw["checks"]) == 2
    bare = json.loads(open(path).read())  # a ladder.json from before the distances: the forecast without them
    for rec in bare["recipes"].values():
        for key in ("runs", "held_out", "held_out_further"):
            del rec[key]
    (tmp_path / "bare.json").write_text(json.dumps(bare))
    old = plan.ladder_forecast(cfg, plan_, str(tmp_path / "bare.json"), target_loss=2.3)
    assert old["extrapolation"] is None and old["recipes"]["adamw"]["checks"] == []
    assert old["recipes"]["adamw"]["val_loss"] == adamw["val_loss"]
    assert "the ladder's largest size" not in plan.ladder_text({**plan_, "ladder": old})
    never = plan.ladder_forecast(cfg, plan_, path, target_loss=1.6)["recipes"]["adamw"]["target"]
    assert never.startswith("never, by this fit")
    assert plan.ladder_forecast(cfg, plan_, path, target="hellaswag=90")["recipes"]["adamw"]["target"].startswith(
        "never, by this fit")
    assert plan.ladder_forecast(cfg, plan_, path, target="hellaswag=20")["recipes"]["adamw"]["target"] == (
        "at once, by this fit: its score is never below 0.250, and the target is 0.200")  # below chance


def test_plan_gives_no_interval_where_three_sizes_could_not_judge_the_form(tmp_path):
    """A ladder of three sizes fits a power law no backtest judged: plan.py prints its prediction at 6.7B and says
    why it has no interval, instead of the covariance's band (on the CPU ladders, 0 of 20 held 5.6x out)."""
    cfg = configurator.load_config([FAST])
    result = json.loads(open(synthetic_ladder(tmp_path / "ladder.json", cfg)).read())
    sizes = np.array([125e6, 350e6, 760e6])
    for rec in result["recipes"].values():
        rec["fits"]["loss"] = ladder.fit_loss(sizes, noisy(2.0 + 30 * sizes ** -0.2, 0.002)).to_json()
        del rec["fits"]["loss_nd"]
    (tmp_path / "three.json").write_text(json.dumps(result))
    plan_ = {"params_without_position_embeddings": 6.7e9, "total_tokens": 134e9, "tokens_per_second": 1e4}
    forecast = plan.ladder_forecast(cfg, plan_, str(tmp_path / "three.json"))
    loss = forecast["recipes"]["adamw"]["val_loss"][0]
    assert f"adamw: final val loss {loss:.3f} ({ladder.UNJUDGED}) (power fit), learning rate " in \
        plan.ladder_text({**plan_, "ladder": forecast})


def test_a_score_target_reads_the_metric_gpt3_reports_or_the_one_named():
    """ladder.json fits every metric eval.py reports, acc sorted before acc_norm: hellaswag=67.4 is GPT-3's
    acc_norm, and a task of two fits outside GPT-3's table needs its metric named."""
    grid = np.linspace(2.0, 4.0, 8)
    sigmoid = {name: ladder.fit_task(grid, 0.6 / (1 + np.exp(5 * (grid - centre))) + 0.25).to_json()
               for name, centre in (("acc", 2.2), ("acc_norm", 2.6))}
    fits = {"tasks": {f"{task}/{m}": fit for task in ("hellaswag", "next_line") for m, fit in sigmoid.items()}}
    fits["tasks"]["lambada_openai/acc"] = fits["tasks"]["lambada_openai/perplexity"] = sigmoid["acc"]
    at = {m: ladder.loss_for_score(ladder.Fit.from_json(fit), 0.55) for m, fit in sigmoid.items()}
    assert at["acc"] < at["acc_norm"] - 0.2
    assert plan.target_loss_for(fits, "hellaswag=55") == pytest.approx(at["acc_norm"])
    assert plan.target_loss_for(fits, "hellaswag/acc=55") == pytest.approx(at["acc"])
    assert plan.target_loss_for(fits, "lambada_openai=55") == pytest.approx(at["acc"])  # the table's first of two
    with pytest.raises(ValueError, match=r"next_line has fits of next_line/acc, next_line/acc_norm: name one"):
        plan.target_loss_for(fits, "next_line=55")
    assert plan.target_loss_for(fits, "next_line/acc_norm=0.55") == pytest.approx(at["acc_norm"])
    with pytest.raises(ValueError, match=r"no task fit for 'hellaswag/f1'"):
        plan.target_loss_for(fits, "hellaswag/f1=55")
    with pytest.raises(ValueError, match=r"--target hellaswag/acc: write TASK=SCORE"):  # not "no task fit": it has one
        plan.target_loss_for(fits, "hellaswag/acc")



def test_where_one_recipes_chinchilla_fit_is_missing_every_recipe_is_read_along_the_ratio(tmp_path):
    """One form for all, so that the compute multiplier compares like with like, the note on a run's other ratio
    is printed for all, and a target in tokens says why there is no fit in tokens."""
    cfg = configurator.load_config([FAST])
    result = json.loads(open(synthetic_ladder(tmp_path / "ladder.json", cfg, loss_scale=0.97)).read())
    del result["recipes"]["muon"]["fits"]["loss_nd"]  # its Chinchilla fit could not be made
    result["recipes"]["muon"]["fits"]["loss_nd_problem"] = "the chinchilla fit did not converge"
    (tmp_path / "mixed.json").write_text(json.dumps(result))
    plan_ = {"params_without_position_embeddings": 6.7e9, "total_tokens": 100e9, "tokens_per_second": 1e4}
    forecast = plan.ladder_forecast(cfg, plan_, str(tmp_path / "mixed.json"), target_loss=2.3)
    assert {r["form"] for r in forecast["recipes"].values()} == {"power"}
    assert forecast["recipes"]["muon"]["compute_multiplier"] > 1
    assert forecast["recipes"]["adamw"]["target"] == ("recipe muon's fit in N and D could not be made (the chinchilla "
                                                      "fit did not converge), so no recipe's is read")
    assert "note: the ladder measured 20 tokens per parameter" in plan.ladder_text({**plan_, "ladder": forecast})

def test_plan_refuses_a_ladder_of_other_data_in_one_line(tmp_path):
    path = synthetic_ladder(tmp_path / "ladder.json", configurator.load_config(["config/train_tiny.py"]))
    result = run_here(["scripts/plan.py", FAST, "--gpu", "h200", "--ladder", path])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "measured on other data or vocabulary (dataset 'quickstart', here 'pile'" in result.stderr



def test_plan_refuses_a_ladder_without_its_fits_in_one_line(tmp_path):
    """Runs but no fits (a hand-edited or cut-short ladder.json): plan.py reads the fits, the prior the runs."""
    cfg = configurator.load_config([FAST])
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps({"data": {}, "tokens_per_param": [20], "recipes": {"fast": {"runs": []}}}))
    with pytest.raises(ladder.FitError, match="is not a whole ladder.json .*: rerun scripts/ladder.py to write it$"):
        plan.ladder_forecast(cfg, plan.make_plan(cfg, "h200", 0.4, 2.0, 1), str(path))
    whole = json.loads(Path(synthetic_ladder(tmp_path / "whole.json", cfg)).read_text())
    for run in whole["recipes"]["adamw"]["runs"]:
        del run["final_val_loss"]  # runs cut down by hand: plan.py reads them for the last step's reading
    path.write_text(json.dumps(whole))
    with pytest.raises(ladder.FitError, match="is not a whole ladder.json .*: rerun scripts/ladder.py to write it$"):
        plan.ladder_forecast(cfg, plan.make_plan(cfg, "h200", 0.4, 2.0, 1), str(path))
    whole = json.loads(Path(tmp_path / "whole.json").read_text())
    ladder.load(str(tmp_path / "whole.json"), expected=ladder.identity(cfg))  # whole, it loads
    del whole["data"]  # what it was measured on, edited away: it would pass for any data
    path.write_text(json.dumps(whole))
    with pytest.raises(ladder.FitError, match="is not a whole ladder.json"):
        ladder.load(str(path), expected=ladder.identity(cfg))

def test_the_fast_ladder_is_measured_on_the_fast_runs_data_and_a_pile_ladder_is_refused_for_it():
    """config/ladder_gpt3_fast.py's runs take config/recipe_fast.py, as config/train_gpt3_6b_fast.py does, so
    plan.py and --forecast_prior read its fits for that run; config/ladder_gpt3.py's (the Pile alone) are refused:
    a data_mixture of None is no mixture, not a figure missing (a ladder.json without the key is not judged)."""
    fast = configurator.load_config([FAST])
    problems = {}
    for name in ("ladder_gpt3_fast", "ladder_gpt3"):
        settings = ladder_script.load_settings(f"config/{name}.py")
        base = configurator.load_config([*settings["base"], *settings["common"].split()])
        problems[name] = ladder.identity_problem(ladder.identity(base), ladder.identity(fast), "it was measured")
        if name == "ladder_gpt3_fast":
            assert (base.optimizer, base.lr_schedule, base.fp8) == (fast.optimizer, fast.lr_schedule, fast.fp8)
            assert settings["target"] == FAST
    assert problems["ladder_gpt3_fast"] is None
    assert problems["ladder_gpt3"].startswith("it was measured on other data or vocabulary (data_mixture None, "
                                              "here {'dclm': 0.4")
    older = {k: v for k, v in ladder.identity(configurator.load_config(["config/train_gpt3_125m.py"])).items()
             if k != "data_mixture"}
    assert ladder.identity_problem(older, ladder.identity(fast), "it was measured") is None


def test_a_ladder_on_a_volume_mounted_elsewhere_is_the_same_ladder_and_reuses_its_runs(tmp_path):
    """Its data by folder name and its rank file by hash, not by where they lie: after a new instance mounts the
    volume at another path, plan.py and --forecast_prior read the ladder and scripts/ladder.py reuses its runs."""
    def config(volume):
        (volume / "data" / "web").mkdir(parents=True, exist_ok=True)
        bins.write_meta(str(volume / "data" / "web"), {"encoding": str(volume / "gpt2.tiktoken"),
                                                       "encoding_sha256": "ab12", "vocab_size": 50257})
        return configurator.load_config(["config/train_tiny.py", f"--data_dir={volume / 'data' / 'web'}",
                                         f"--data_mixture={{'{volume / 'data' / 'web'}': 1.0}}"])
    first, second = config(tmp_path / "volA"), config(tmp_path / "volB")
    assert ladder.identity(first) == ladder.identity(second)
    assert ladder.identity(first)["encoding"] == "ab12" and ladder.identity(first)["data_mixture"] == {"web": 1.0}
    run = tmp_path / "run"
    run.mkdir()
    configurator.save_json(first, run / "config.json")
    assert ladder_script.reuse_problem(run, second) is None
    other = configurator.load_config(["config/train_tiny.py", f"--data_dir={tmp_path / 'volB' / 'data' / 'code'}"])
    assert "data_dir=" in ladder_script.reuse_problem(run, other)  # another folder is other data
    # a key newer than the run's config.json: the run had its default, so a recipe that sets it trains anew
    saved = json.loads((run / "config.json").read_text())
    del saved["muon_split_qkv"]
    (run / "config.json").write_text(json.dumps(saved))
    assert ladder_script.reuse_problem(run, second) is None
    second.muon_split_qkv = True
    assert "was trained with muon_split_qkv=False where this ladder sets muon_split_qkv=True" in \
        ladder_script.reuse_problem(run, second)


def test_ladder_plan_prices_each_run_the_ladder_config_would_train(tmp_path):
    cfg = configurator.load_config([FAST])
    target = plan.make_plan(cfg, "h200", 0.4, 2.0, 1)
    cost = plan.ladder_cost("config/ladder_gpt3.py", target, 0.4, 2.0, 1)
    assert [r["runs"] for r in cost["rows"]] == [5, 1, 3, 1, 3, 1, 3, 1, 1, 1]  # the sweeps, one run a size at 10
    config = tmp_path / "ladder_seeds.py"  # and each size's best rate at two more seeds
    config.write_text(Path("config/ladder_gpt3.py").read_text() + "seeds = 3\n")
    assert [r["runs"] for r in plan.ladder_cost(str(config), target, 0.4, 2.0, 1)["rows"]][::2] == [7, 5, 5, 5, 3]
    config.write_text(config.read_text() + "seeded_rates = 2\n")  # two rates a size at the other seeds, 1.3B's one
    assert [r["runs"] for r in plan.ladder_cost(str(config), target, 0.4, 2.0, 1)["rows"]][::2] == [9, 7, 7, 7, 3]
    assert cost["share"] == pytest.approx(cost["gpu_hours"] / (target["days"] * 24)) and 0 < cost["share"] < 1
    assert cost["days"] == pytest.approx(cost["gpu_hours"] / 24)  # one GPU: its days are its GPU-hours' days
    on_eight = plan.ladder_cost("config/ladder_gpt3.py", plan.make_plan(cfg, "h200", 0.4, 2.0, 8), 0.4, 2.0, 8)
    assert on_eight["days"] == pytest.approx(on_eight["gpu_hours"] / 8 / 24)
    assert f"{cost['days']:,.1f} days on 1 GPU(s)" in plan.ladder_text({"ladder_plan": cost})
    assert cost["extrapolation"] == pytest.approx(6_648_762_368 / 1_311_082_496)  # 6.7B over 1.3B, less wpe
    one = plan.make_plan(configurator.load_config(ladder_script.Ladder(ladder_script.load_settings(
        "config/ladder_gpt3.py"), out=None).argv([], {"n_layer": 24, "n_head": 16, "n_embd": 2048}, 1e-3, 20.0)),
        "h200", 0.4, 2.0, 1)
    assert cost["rows"][-2]["disk_gb"] == pytest.approx(3 * one["checkpoint_gb"])  # 1.3B's one run keeps its newest 3
    assert cost["disk_gb"] == pytest.approx(sum(r["disk_gb"] for r in cost["rows"])) and cost["keep_last_n"] == 3
    disk = f"{cost['disk_gb']:,.0f} GB of disk per recipe (keep_last_n=3 a run"
    assert disk in plan.ladder_text({"ladder_plan": cost})
    config.write_text(Path("config/ladder_gpt3.py").read_text().replace("--checkpoint_interval=1000",
                                                                        "--checkpoint_interval=1000 --keep_last_n=0"))
    every = plan.ladder_cost(str(config), target, 0.4, 2.0, 1)
    assert every["disk_gb"] is None and "keep_last_n <= 0 keeps them all" in plan.ladder_text({"ladder_plan": every})


def test_seeds_trains_each_sizes_lowest_run_again_and_the_fits_take_the_seeds_mean(tmp_path, fake_train, capsys):
    out = tmp_path / "out"
    climb(ladder_config(tmp_path, [16, 32, 48, 64]), out, "adamw: --optimizer=adamw")
    swept = len(fake_train)
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], seeds=3), out, "adamw: --optimizer=adamw")
    replicas = fake_train[swept:]  # the sweeps were reused: only the other seeds trained
    assert len(replicas) == 2 * 4 and all(p.endswith(("_s1338", "_s1339")) for p in replicas)
    runs = result["recipes"]["adamw"]["runs"]
    for best in ladder.best_runs(runs, 2):
        lowest = min((r for r in runs if r["size"] == best["size"] and not r["replica"]),
                     key=lambda r: r["final_val_loss"])
        assert best["lr"] == lowest["lr"] and set(best["seed_losses"]) == {"1337", "1338", "1339"}
        assert best["final_val_loss"] == pytest.approx(1.01 * lowest["final_val_loss"])  # the mean of +0, 1, 2%
        assert best["curve"][-1][1] == pytest.approx(best["final_val_loss"])
    held = result["recipes"]["adamw"]["held_out"]
    assert held["measured_val_loss"] == pytest.approx(np.mean(list(held["seed_losses"].values())))
    assert len(held["sweep_lrs"]) == 3  # the sweep's rates, not the seeds'
    assert "mean of 3 seeds" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="seeds = 0: give a whole number of at least 1"):
        climb(ladder_config(tmp_path, [16, 32, 48, 64], seeds=0), out, "adamw: --optimizer=adamw")


def test_seeded_rates_trains_the_lowest_rates_again_and_the_size_takes_the_rate_of_lowest_mean(tmp_path, fake_train):
    out = tmp_path / "out"
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], seeds=3, seeded_rates=2), out, "adamw: --optimizer=adamw")
    runs = result["recipes"]["adamw"]["runs"]
    for best in ladder.best_runs(runs, 2):
        seeded = [r for r in ladder.rate_means(runs, best["size"], 2) if "seed_losses" in r]
        assert len(seeded) == 2 and best["final_val_loss"] == min(r["final_val_loss"] for r in seeded)
    with pytest.raises(SystemExit, match="seeded_rates = 0: give a whole number of at least 1"):
        climb(ladder_config(tmp_path, [16, 32, 48, 64], seeded_rates=0), out, "adamw: --optimizer=adamw")


def test_a_seeded_rate_whose_run_is_above_the_means_before_it_is_not_trained_again(tmp_path, fake_train):
    """Rates 4x apart: the next rate's run is ~3% above the lowest, whose seeds average 1% above it (the fake
    seeds' noise), so it cannot win and trains once; 2x apart (the test above) it is within 1% and is seeded."""
    out = tmp_path / "out"
    result = climb(ladder_config(tmp_path, [16, 32, 48, 64], seeds=3, seeded_rates=2, sweep_factors=(4.0,)), out,
                   "adamw: --optimizer=adamw")
    runs = result["recipes"]["adamw"]["runs"]
    for size in {r["size"] for r in runs}:
        seeded = [r for r in ladder.rate_means(runs, size, 2) if "seed_losses" in r]
        assert len(seeded) == 1 and len(seeded[0]["seed_losses"]) == 3


def test_challenges_is_whether_a_run_is_below_every_seeded_mean():
    def run(lr, loss, seed=1):
        return {"size": "a", "tokens_per_param": 2, "lr": lr, "seed": seed, "replica": seed != 1, "scores": {},
                "final_val_loss": loss, "curve": [[1.0, loss]]}
    sweep = [run(0.1, 2.0), run(0.05, 2.03), run(0.2, float("nan"))]
    assert ladder.challenges(sweep, "a", 2, 0.1)  # nothing seeded yet: the first rate always is
    seeded = sweep + [run(0.1, 2.05, 2), run(0.1, 2.07, 3)]  # 0.1's mean 2.04: 0.05's 2.03 could still win
    assert ladder.challenges(seeded, "a", 2, 0.05) and not ladder.challenges(seeded, "a", 2, 0.2)
    steady = sweep + [run(0.1, 2.01, 2), run(0.1, 2.02, 3)]  # a mean of 2.01, below 0.05's one run
    assert not ladder.challenges(steady, "a", 2, 0.05)


def test_a_run_lucky_at_one_seed_loses_to_a_rate_whose_seeds_are_lower_on_average():
    def run(lr, loss, seed):
        return {"size": "a", "params": 1, "tokens_per_param": 2, "lr": lr, "seed": seed, "replica": seed != 1,
                "scores": {}, "final_val_loss": loss, "curve": [[1.0, loss]]}
    runs = [run(0.1, 1.9, 1), run(0.1, 2.3, 2), run(0.1, 2.4, 3),  # the lowest run, its other seeds far above it
            run(0.05, 2.0, 1), run(0.05, 2.0, 2), run(0.05, 2.1, 3), run(0.2, 1.95, 1)]  # 0.2: one seed, no mean
    best = ladder.best_runs(runs, 2)[0]
    assert best["lr"] == 0.05 and best["final_val_loss"] == pytest.approx(2.0333, abs=1e-4)
    assert [r["lr"] for r in ladder.rate_means(runs, "a", 2)] == [0.05, 0.1, 0.2]


def test_a_diverged_seed_is_left_out_of_the_mean_and_kept_in_seed_losses():
    runs = [{"size": "a", "params": 1, "tokens_per_param": 2, "lr": 0.1, "seed": s, "replica": s != 1, "scores": {},
             "final_val_loss": v, "curve": [[1.0, v]]} for s, v in ((1, 2.0), (2, float("nan")), (3, 2.2))]
    best = ladder.best_runs(runs, 2)[0]
    assert best["final_val_loss"] == pytest.approx(2.1) and math.isnan(best["seed_losses"]["2"])
    assert best["seeds_in_mean"] == 2


def test_a_rate_that_diverged_at_more_seeds_loses_whatever_its_survivors_mean():
    runs = [{"size": "a", "params": 1, "tokens_per_param": 2, "lr": lr, "seed": s, "replica": s != 1, "scores": {},
             "final_val_loss": v, "curve": [[1.0, v]]}
            for lr, losses in ((0.1, (1.20, math.nan, math.nan)), (0.05, (1.22, 1.23, 1.22)))
            for s, v in zip((1, 2, 3), losses)]
    best = ladder.best_runs(runs, 2)[0]
    assert best["lr"] == 0.05 and best["final_val_loss"] == pytest.approx(1.2233, abs=1e-4)


def test_a_size_whose_every_run_diverged_is_left_out_of_the_fits_not_the_ladder(tmp_path):
    """config/ladder_gpt3.py's 1.3B runs once: if that run diverges the other sizes' fits still stand, and
    the summary says why the size is missing."""
    def run(size, n, lr, loss, replica=False, seed=1):
        return {"size": size, "params": n, "tokens_per_param": 2, "lr": lr, "seed": seed, "replica": replica,
                "scores": {}, "final_val_loss": loss, "curve": [[1.0, loss]], "sweep_best_lr": lr, "sweep_edge": None,
                "tokens": 2 * n, "flops": 12 * n * n, "out_dir": str(tmp_path)}
    sizes = dict(zip("abcde", SIZES[:5]))
    runs = [run(s, n, 0.01, 3 * n ** -0.1) for s, n in list(sizes.items())[:4]]
    runs += [run("e", sizes["e"], 0.01, math.nan)]
    assert [r["size"] for r in ladder.best_runs(runs, 2)] == list("abcd") and ladder.no_best_run(runs, 2) == ["e"]
    other = {**run("e", sizes["e"], 0.01, 3.0), "tokens_per_param": 1}  # its run at another ratio survived: no point
    assert "e" not in {r["size"] for r in ladder_analysis.at_best_rates(runs + [other], 2)}
    analysis = ladder_analysis.analyse({"adamw": runs}, 2)["adamw"]
    assert analysis["fits"]["loss"]["n"] == 4 and analysis["held_out"]["size"] == "d"
    assert analysis["fits"]["lr"]["n"] == 4 and analysis["fits"]["lr"]["named"]["b"] == pytest.approx(0, abs=1e-9)
    result = {"tokens_per_param": [2], "recipes": {"adamw": {"overrides": [], "runs": runs, **analysis}}}
    assert "  e        every run diverged: left out of the fits" in ladder_script.summary(result)


def test_an_error_beside_the_climb_stops_it_at_once_not_at_its_end(tmp_path, fake_train, monkeypatch):
    """A size's replicas train beside the next sweep: an error there that is not a run's failure (a bug, say)
    stops the climbs before the next size, and is the error raised."""
    run = ladder_script.Ladder.run

    def broken(self, name, recipe, size, shape, lr, ratio, seed=None):
        if seed is not None:
            raise ValueError("a bug in the replicas")
        time.sleep(0.3)  # a sweep's run takes a while; its size's replicas fail at once
        return run(self, name, recipe, size, shape, lr, ratio, seed)
    monkeypatch.setattr(ladder_script.Ladder, "run", broken)
    with pytest.raises(ValueError, match="a bug in the replicas"):
        climb(ladder_config(tmp_path, [16, 32, 48, 64], seeds=2, sweep_points=(1,)), tmp_path / "out",
              "a: --optimizer=adamw")
    assert {Path(p).name.split("_")[0] for p in fake_train} <= {"w16", "w32"}  # stopped: no w48, no w64


def test_nproc_runs_each_run_under_torchrun(tmp_path, fake_train):
    config = Path(ladder_config(tmp_path, [16, 32, 48]))
    with pytest.raises(SystemExit, match="size 'w16' .*gradient_accumulation_steps=1 must divide among 2 processes"):
        ladder_script.main([str(config), "--out", str(tmp_path / "out"), "--nproc", "2", "--recipe", "a: --optimizer=adamw"])
    assert not fake_train  # train.py would refuse each run: the ladder did, before the first
    config.write_text(config.read_text().replace("--gradient_accumulation_steps=1", "--gradient_accumulation_steps=2"))
    ladder_script.main([str(config), "--out", str(tmp_path / "out"), "--nproc", "2", "--recipe", "a: --optimizer=adamw"])
    # torchrun as this interpreter's module: a torchrun on PATH may be another env's, or missing
    assert {tuple(c[:5]) for c in fake_train.commands} == {
        (sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2")}
    fake_train.commands.clear()  # with steps each run's accumulation is its process count: the base's 1 is no bar
    (tmp_path / "stepped").mkdir()
    stepped = Path(ladder_config(tmp_path / "stepped", [16, 32, 48], steps=20))
    ladder_script.main([str(stepped), "--out", str(tmp_path / "stepped_out"), "--nproc", "2", "--recipe",
                        "a: --optimizer=adamw"])
    assert fake_train.commands and all("--gradient_accumulation_steps=2" in c for c in fake_train.commands)


def test_a_rerun_on_another_nproc_or_over_a_ladder_json_cut_short_says_what_to_do(tmp_path, fake_train):
    """With steps, a run's batch follows --nproc, so a rerun on another count cannot reuse the runs: the line says
    what they were trained with. A ladder.json cut short in OUT costs only itself: the line says to move it aside."""
    config = ladder_config(tmp_path, [16, 32, 48], steps=20)
    out = tmp_path / "out"
    climb(config, out, "a: --optimizer=adamw")
    with pytest.raises(SystemExit, match=r"\(with steps, a run's batch follows --nproc: it trained with --nproc 1\)$"):
        ladder_script.main([config, "--out", str(out), "--nproc", "2", "--recipe", "a: --optimizer=adamw"])
    (out / "ladder.json").write_text('{"recipes": {"a"')
    with pytest.raises(SystemExit, match="; move it aside, and the same command reuses the runs in .* or use another"):
        climb(config, out, "a: --optimizer=adamw")
    trained = len(fake_train)
    (out / "ladder.json").rename(out / "ladder.json.cut")
    climb(config, out, "a: --optimizer=adamw")
    assert len(fake_train) == trained  # every run reused


def test_sizes_of_the_same_parameter_count_are_one_line_before_anything_trains(tmp_path, fake_train):
    config = Path(ladder_config(tmp_path, [16, 32, 48]))
    config.write_text(config.read_text() + "sizes['w32_one_head'] = dict(n_layer=2, n_head=1, n_embd=32)\n")
    with pytest.raises(SystemExit, match="sizes 'w32' and 'w32_one_head' have the same number of parameters "
                                         r"\(recipe a\): a fit needs sizes that differ; change or drop one"):
        ladder_script.main([str(config), "--out", str(tmp_path / "out"), "--recipe", "a: --optimizer=adamw"])
    assert not fake_train


def test_a_fit_that_cannot_be_made_names_its_recipe():
    runs = [{"size": f"s{i}", "params": n, "tokens_per_param": 2, "lr": 1e-3, "final_val_loss": float("nan"),
             "sweep_best_lr": 1e-3, "scores": {}, "curve": []} for i, n in enumerate((1e4, 2e4, 4e4))]  # all diverged
    with pytest.raises(ladder.FitError, match="^recipe muon: every run diverged at s0, s1, s2, which leaves 0 sizes"):
        ladder_analysis.analyse({"muon": runs}, 2)


@pytest.mark.e2e
def test_a_real_ladder_under_torchrun_trains_through_train_py_and_its_rerun_trains_nothing(tmp_path, data_dir):
    """The ladder driving the real train.py, two processes a run, from a folder of the user's (not the
    repository's, --out relative to it): what it reads back (the start, eval and done records, config.json) is
    what train.py writes where the ladder looks, so the rerun finds every run finished with the settings it
    would give it (reuse_problem against a real config.json, not the stand-in's) and trains nothing."""
    common = (f"--vocab_size=64 --block_size=16 --batch_size=4 --gradient_accumulation_steps=2 --eval_iters=2 "
              f"--data_dir={data_dir} --checkpoint_interval=1000000 --checkpoint_minutes=0 --keep_last_n=1")
    sizes = {"w16": dict(n_layer=1, n_head=1, n_embd=16), "w24": dict(n_layer=1, n_head=1, n_embd=24),
             "w32": dict(n_layer=2, n_head=2, n_embd=32)}
    config = tmp_path / "ladder_e2e.py"
    config.write_text(f"base = [{str(REPO / 'config/train_tiny.py')!r}]\ncommon = {common!r}\nsizes = {sizes!r}\n"
                      "tokens_per_param = 0.05\nsweep_points = 1\nevaluations = 4\n")
    command = [REPO / "scripts/ladder.py", config.name, "--out", "out", "--nproc", "2",
               "--recipe", "adamw: --optimizer=adamw --learning_rate=3e-3"]
    env = dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled")
    first = python(command, cwd=tmp_path, env=env)
    assert first.returncode == 0, first.stderr[-3000:]
    assert first.stdout.count("+ torchrun --standalone --nproc_per_node=2 ") == 3
    result = json.loads((tmp_path / "out" / "ladder.json").read_text())
    runs = result["recipes"]["adamw"]["runs"]
    for r in runs:  # the ladder's record of each run is what its train.py measured
        out_dir = tmp_path / r["out_dir"]
        start, = metrics.read(out_dir, "start")
        assert start["world_size"] == 2 and r["params"] == start["params"]
        assert r["final_val_loss"] == pytest.approx(metrics.read(out_dir, "eval")[-1]["val_loss"])
        assert metrics.read(out_dir, "done") and len(r["curve"]) >= 4
    assert [r["size"] for r in runs] == ["w16", "w24", "w32"] and (tmp_path / "out" / "ladder.png").is_file()
    again = python(command, cwd=tmp_path, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "train.py" not in again.stdout  # every run reused: the real config.json holds what the ladder sets
    assert json.loads((tmp_path / "out" / "ladder.json").read_text()) == result


@pytest.mark.e2e
def test_a_signal_to_the_ladder_stops_and_saves_its_run_in_flight_and_says_so_in_one_line(tmp_path, data_dir):
    """kill (SIGTERM) of the ladder alone: its train.py gets SIGTERM too, saves and stops, and the ladder ends
    with one line, where the run used to train on alone with no ladder waiting for it."""
    import psutil
    common = (f"--vocab_size=64 --block_size=16 --batch_size=4 --gradient_accumulation_steps=2 --eval_iters=2 "
              f"--data_dir={data_dir} --checkpoint_interval=1000000 --checkpoint_minutes=0 --keep_last_n=1")
    sizes = {f"w{w}": dict(n_layer=1, n_head=1, n_embd=w) for w in (16, 24, 32)}
    (tmp_path / "ladder_e2e.py").write_text(f"base = [{str(REPO / 'config/train_tiny.py')!r}]\ncommon = {common!r}\n"
                                            f"sizes = {sizes!r}\ntokens_per_param = 100\nsweep_points = 1\n")
    job = subprocess.Popen([sys.executable, REPO / "scripts/ladder.py", "ladder_e2e.py", "--out", "out", "--recipe",
                            "adamw: --optimizer=adamw"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled"))
    try:
        deadline = time.time() + 120
        while not list((tmp_path / "out" / "runs").glob("adamw/w16_*/metrics.jsonl")) or not metrics.read(
                next((tmp_path / "out" / "runs").glob("adamw/w16_*")), "step"):
            assert time.time() < deadline and job.poll() is None, "the first run did not reach its first step"
            time.sleep(0.1)
        run_dir = next((tmp_path / "out" / "runs").glob("adamw/w16_*"))
        trainers = psutil.Process(job.pid).children()
        job.send_signal(signal.SIGTERM)
        stdout, stderr = job.communicate(timeout=120)
        assert job.returncode == 1 and "Traceback" not in stderr, stderr[-3000:]
        assert stderr.strip().splitlines()[-1] == ("stopped by SIGTERM before the ladder's end: rerun the same command "
                                                   "to resume its runs")
        assert "SIGTERM: the runs in flight save and stop; no new run starts" in stdout
        assert not psutil.wait_procs(trainers, timeout=10)[1], "a run went on training after the ladder ended"
        stop, = metrics.read(run_dir, "stop")
        assert stop["signal"] == "SIGTERM" and checkpoint.list_checkpoints(str(run_dir))[0][0] == stop["iter"]
        assert not metrics.read(run_dir, "done") and len(list((tmp_path / "out" / "runs").glob("*/*"))) == 1
    finally:
        job.kill()
