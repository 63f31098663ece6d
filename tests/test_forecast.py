"""The forecast (forecast.py), in-process on synthetic curves: it recovers a curve that follows the law, says
why there is none when the points cannot determine it, and writes its line and record."""
import types

import numpy as np
import pytest

import configurator
from trainer import forecast, metrics, schedule


def lrs(kind, n=400, warmup=20):
    cfg = types.SimpleNamespace(**dict(configurator.DEFAULTS, lr_schedule=kind, warmup_iters=warmup,
                                       lr_decay_iters=n, max_iters=n, learning_rate=1e-3, min_lr=1e-4))
    return [schedule.learning_rate(it, cfg) for it in range(n)]


def synthetic(rates, noise, seed=0):
    """A val loss every 10 steps that follows the law (L0 2.0, A 1.5, alpha 0.4, C 0.002), with noise."""
    s1, s2 = forecast.areas(rates, 20)
    iters = np.arange(10, len(rates) + 1, 10)
    clean = forecast.law((s1[iters], s2[iters]), 2.0, 1.5, 0.4, 0.002)
    return list(zip(iters.tolist(), (clean + np.random.default_rng(seed).normal(0, noise, len(iters))).tolist()))


def test_areas_are_the_lr_area_and_the_annealing_area():
    s1, s2 = forecast.areas([0.5, 1.0, 1.0, 0.5, 0.5], warmup_iters=1, momentum=0.5)
    assert s1.tolist() == [0, 0.5, 1.5, 2.5, 3.0, 3.5]
    assert s2.tolist() == [0, 0, 0, 0, 0.5, 0.75]  # the drop at step 3, then its momentum carried on


def test_a_curve_that_follows_the_law_is_forecast_from_half_of_it():
    rates = lrs("cosine")
    final = synthetic(rates, noise=0.0)[-1][1]
    for seed in range(3):
        points = synthetic(rates, noise=0.002, seed=seed)
        value, error = forecast.Forecaster(rates, 20).predict(points[: len(points) // 2])
        assert abs(value - final) < 0.05 and abs(value - final) < 3 * error
    assert "error" in forecast.Forecaster(rates, 20).predict(points[: len(points) // 4])  # too wide to print


def test_no_forecast_before_enough_points_or_before_any_decay():
    rates = lrs("cosine")
    reason = forecast.Forecaster(rates, 20).predict(synthetic(rates, 0.002)[:4])
    assert "needs 5" in reason
    wsd = lrs("wsd")
    stable = [(it, loss) for it, loss in synthetic(wsd, 0.002) if it <= 300]  # decay starts at 320
    assert "not decayed" in forecast.Forecaster(wsd, 20).predict(stable)
    value, _ = forecast.Forecaster(wsd, 20).predict(synthetic(wsd, 0.002)[:36])  # a few points into the decay
    assert value == pytest.approx(synthetic(wsd, 0.0)[-1][1], abs=0.05)


def test_report_logs_the_line_and_writes_the_record(tmp_path):
    rates = lrs("cosine")
    record, lines = metrics.Metrics(tmp_path), []
    for it, loss in synthetic(rates, 0.002)[:20]:
        record("eval", it, val_loss=loss)
    forecast.report(forecast.Forecaster(rates, 20), tmp_path, 200, 400, lines.append, record)
    assert lines[0].startswith("forecast: val loss ") and " at iter 400 (±" in lines[0]
    written = metrics.read(tmp_path, "forecast")[0]
    assert written["iter"] == 200 and written["at_iter"] == 400 and set(written) >= {"val_loss", "error"}
    forecast.report(forecast.Forecaster(rates, 20), tmp_path, 30, 400, lines.append, record)
    assert lines[1].startswith("forecast: none yet, ")
