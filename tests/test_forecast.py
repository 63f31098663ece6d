"""The forecast (forecast.py), in-process on synthetic curves: its bar covers the true final loss of a curve that
follows the law with noise, widens to the backtest's miss when the law misfits, says why there is none when
the points cannot determine it, and writes its line and record."""
import json
import math
import os
import sys
import types

import numpy as np
import pytest

import configurator
from conftest import REPO
from trainer import forecast, ladder, metrics, schedule


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


def test_the_bar_covers_the_true_final_loss_of_a_noisy_curve_from_the_law():
    rates = lrs("cosine")
    final = synthetic(rates, noise=0.0)[-1][1]
    curves = [synthetic(rates, noise=0.01, seed=seed) for seed in range(5)]  # the tiny runs' scatter about the law
    for upto, width in ((20, 2.0), (30, 0.1), (35, 0.04)):  # at 50%, 75%, 88% of the run the bar narrows
        fits = [forecast.Forecaster(rates, 20).fit(points[:upto]) for points in curves]
        assert all(error < width for _, error in fits)
        assert sum(abs(value - final) <= error for value, error in fits) >= 4  # a bar, not a guarantee: 4 of 5


def test_the_bar_is_the_backtests_miss_when_the_law_misfits():
    rates = lrs("cosine")
    drift = [(it, loss + 0.1 * (it / 400) ** 2) for it, loss in synthetic(rates, 0.002)]  # a curve off the law
    forecaster = forecast.Forecaster(rates, 20)
    value, error = forecaster.fit(drift[:20])
    _, spread = forecaster.at_end(*forecaster.fit_law(drift[:20]))
    assert error > 3 * spread and abs(value - drift[-1][1]) <= error


def test_no_forecast_before_enough_points_a_backtest_or_any_decay():
    rates = lrs("cosine")
    points = synthetic(rates, 0.002)
    assert "needs 5" in forecast.Forecaster(rates, 20).predict(points[:4])
    assert "backtest" in forecast.Forecaster(rates, 20).predict(points[:10])  # refit up to iter 25: no points
    wsd = lrs("wsd")
    stable = [(it, loss) for it, loss in synthetic(wsd, 0.002) if it <= 300]  # decay starts at 320
    assert "not decayed" in forecast.Forecaster(wsd, 20).predict(stable)
    assert "backtest" in forecast.Forecaster(wsd, 20).predict(synthetic(wsd, 0.002)[:35])  # refit up to 306
    value, error = forecast.Forecaster(wsd, 20).predict(synthetic(wsd, 0.002)[:38])  # backtest has 330..360
    assert abs(value - synthetic(wsd, 0.0)[-1][1]) <= error


def test_report_logs_the_line_and_writes_the_record(tmp_path):
    rates = lrs("cosine")
    record, lines = metrics.Metrics(tmp_path), []
    for it, loss in synthetic(rates, 0.002)[:25]:
        record("eval", it, val_loss=loss)
    forecast.report(forecast.Forecaster(rates, 20), None, tmp_path, 250, 400, lines.append, record)
    assert lines[0].startswith("forecast: val loss ") and " at iter 400 (±" in lines[0]
    written = metrics.read(tmp_path, "forecast")[0]
    assert written["iter"] == 250 and written["at_iter"] == 400 and set(written) >= {"val_loss", "error"}
    forecast.report(forecast.Forecaster(rates, 20), None, tmp_path, 30, 400, lines.append, record)
    assert lines[1].startswith("forecast: none yet, ")


def test_report_leaves_out_the_evaluations_another_schedule_weighting_or_val_set_measured(tmp_path):
    record, seen = metrics.Metrics(tmp_path), []
    for it in range(0, 101, 10):
        record("eval", it, val_loss=3.0)
    record("schedule_changed", 60, changes=["max_iters 60 -> 200"], lr_from=35)  # the rates moved from step 35
    for it in (60, 70):  # the resumed run's, the resume point's again: weights the old rates trained
        record("eval", it, val_loss=2.5)
    stub = types.SimpleNamespace(predict=lambda points: seen.append([it for it, _ in points]) or "stub")
    forecast.report(stub, None, tmp_path, 70, 200, lambda line: None, record)
    assert seen[-1] == [0, 10, 20, 30, 70]  # 40-60 measured weights the old rates from step 35 on had trained
    record("weights_changed", 80, changes=["web 0.5 -> 0.7"], weights={"web": 0.7})
    record("eval", 90, val_loss=2.0)
    forecast.report(stub, None, tmp_path, 90, 200, lambda line: None, record)
    assert seen[-1] == [90]  # another weighted mean of the sources up to the weights' change
    record("val_set_changed", 100, was=[2, 4], now=[2, 8])
    record("eval", 110, val_loss=1.9)
    forecast.report(stub, None, tmp_path, 110, 200, lambda line: None, record)
    assert seen[-1] == [110]  # other windows up to the val set's change
    assert forecast.measured_otherwise(metrics.read(tmp_path)) == [(35, 60), (-1, 80), (-1, 100)]


# -----------------------------------------------------------------------------
# the scaling ladder's prior (forecast.Prior)

def ladder_json(path, shape=lambda f: 1 + 0.6 * (1 - f) ** 2, sizes=(1e4, 3e4, 1e5, 3e5), data=None):
    """A ladder.json whose best runs' final val loss is 20 N^-0.2 and whose curves are final * shape(fraction)."""
    fractions = np.linspace(0.05, 1.0, 20)
    runs = [{"size": f"s{i}", "params": n, "tokens_per_param": 2, "lr": 1e-3, "final_val_loss": 20 * n ** -0.2,
             "curve": [[f, 20 * n ** -0.2 * shape(f)] for f in fractions]} for i, n in enumerate(sizes)]
    path.write_text(json.dumps({"data": data or {"dataset": "quickstart", "vocab_size": 320}, "tokens_per_param": [2],
                                "recipes": {"adamw": {"runs": runs}}}))
    return str(path)


def test_the_prior_predicts_the_size_and_takes_the_level_from_the_run(tmp_path):
    prior = forecast.prior(ladder_json(tmp_path / "ladder.json"), 1e6)
    final = 20 * 1e6 ** -0.2
    value, low, high = prior.predicted
    assert value == pytest.approx(final, rel=1e-3) and low < final < high
    off = 1.05 * final  # the run ends 5% above the ladder's law: its level, not the ladder's, is forecast
    points = [(it, off * (1 + 0.6 * (1 - it / 400) ** 2)) for it in (40, 60, 80, 100)]  # up to 25% of 400 steps
    made, error = prior.forecast(points, 400)
    assert made == pytest.approx(off, rel=1e-3) and error < 0.01 * made
    assert prior.forecast([], 400) == "no evaluation yet"


def test_the_priors_shape_follows_the_two_nearest_sizes_and_its_error_is_their_backtest(tmp_path):
    """A shape that is the same up to 5e4 parameters and then changes linearly in log N (a small run has
    learned most of what it will by half-way, a larger one has more to come): the line through the two
    nearest sizes reads the run's shape exactly, and the same line one size down misses, which is its error."""
    def runs_shape(n):
        return lambda f: 1 + (0.6 + 0.3 * max(math.log(n / 5e4), 0)) * (1 - f) ** 2
    sizes = (1e4, 3e4, 1e5, 3e5)
    path = ladder_json(tmp_path / "ladder.json", sizes=sizes)
    result = json.loads(open(path).read())
    for run, n in zip(result["recipes"]["adamw"]["runs"], sizes):
        run["curve"] = [[f, 20 * n ** -0.2 * runs_shape(n)(f)] for f, _ in run["curve"]]
    (tmp_path / "ladder.json").write_text(json.dumps(result))
    prior, final = forecast.prior(path, 1e6), 20 * 1e6 ** -0.2
    points = [(it, final * runs_shape(1e6)(it / 400)) for it in (140, 160, 180, 200)]  # up to half-way
    made, error = prior.forecast(points, 400)
    assert made == pytest.approx(final, rel=1e-3)
    assert 0.005 * final < error < 0.2 * final  # the line one size down misses the nearest's shape
    near = forecast.prior(path, 3.1e5)  # just above the nearest size: its shape's error is one step's, not ~0
    assert near.shape(0.5)[1] == pytest.approx(prior.shape(0.5)[1] * math.log(3) / math.log(1e6 / 3e5))


def test_the_prior_uses_only_the_ladders_sizes_below_the_run(tmp_path):
    path = ladder_json(tmp_path / "ladder.json")
    assert forecast.prior(path, 5e4) == "the ladder has 2 size(s) below this run's 50,000 parameters; its prior needs 3"


def test_the_prior_reads_no_shape_before_the_ladders_first_evaluation(tmp_path):
    """The ladder's curves start at 5% (ladder_json's first evaluation): before it their shape is a straight line
    across the steepest fall of the loss, which nothing measured."""
    prior = forecast.prior(ladder_json(tmp_path / "ladder.json"), 1e6)
    final = 20 * 1e6 ** -0.2
    early = [(it, final * (1 + 0.6 * (1 - it / 400) ** 2)) for it in (4, 8, 12, 16)]  # up to 4% of 400 steps
    assert prior.forecast(early, 400) == ("the ladder's runs were first evaluated at 5% of their length: their "
                                          "shape starts there")
    assert prior.forecast(early + [(20, final * (1 + 0.6 * 0.95 ** 2))], 400)[0] == pytest.approx(final, rel=1e-3)


def run_config(**overrides):
    """A run's config as the prior reads it: 400 steps, a tenth's warmup and floor, cosine to the end."""
    return types.SimpleNamespace(**{**configurator.DEFAULTS, **dict(max_iters=400, lr_decay_iters=400, warmup_iters=40,
                                                                     learning_rate=1e-3, min_lr=1e-4), **overrides})


def test_the_prior_refuses_a_run_that_does_not_follow_the_ladders_schedule_naming_what_to_set(tmp_path):
    """Each of the run's tokens per parameter, warmup share, floor, decay's end and schedule (what scripts/ladder.py
    records of its recipe) against the ladder's: the first that differs is the one line the run logs, and
    the run goes on without a prior. What an older ladder.json did not record is not compared."""
    path = ladder_json(tmp_path / "ladder.json")
    result = json.loads(open(path).read())
    result["settings"] = {"warmup_fraction": 0.1, "min_lr_ratio": 0.1}
    result["recipes"]["adamw"]["schedule"] = {"lr_schedule": "cosine"}
    (tmp_path / "ladder.json").write_text(json.dumps(result))
    assert isinstance(forecast.prior(path, 1e6, run_config(), 2e6), forecast.Prior)  # 2 tokens a parameter
    for cfg, tokens, line in (
            (run_config(), 4.5e6, "the ladder's runs trained 2 tokens per parameter and this run 4.5: its curves and "
                                  "its prediction are another run's; train 2 tokens per parameter, or build "
                                  "a ladder with tokens_per_param = 4.5 in its config"),
            (run_config(warmup_iters=1), 2e6, "the ladder's runs warmed up over 10.0% of their length and this run "
                                              "over 0.25%: set warmup_iters=40"),
            (run_config(min_lr=0.0), 2e6, "the ladder's runs decayed to 0.1 of their peak rate and this run to 0: "
                                          "set min_lr=0.0001"),
            (run_config(lr_decay_iters=300), 2e6, "the ladder's runs decayed until their last step and this run until "
                                                  "iter 300 of 400: set lr_decay_iters=400"),
            (run_config(lr_schedule="wsd"), 2e6, "the ladder's runs followed another schedule (lr_schedule 'cosine', "
                                                 "here 'wsd'): build a ladder with this one")):
        assert forecast.prior(path, 1e6, cfg, tokens) == line
    assert isinstance(forecast.prior(ladder_json(tmp_path / "older.json"), 1e6, run_config(lr_schedule="wsd"), 2e6),
                      forecast.Prior)  # recorded neither settings nor schedule: only the ratio is judged


def test_the_fast_run_follows_its_ladders_schedule_and_the_gpt3_run_is_not_its_ladders_shape():
    """config/train_gpt3_6b_fast.py warms up, decays and ends as config/ladder_gpt3_fast.py's runs do, in
    fractions of their length, so its prior is read; config/train_gpt3_6b.py trains 45 tokens per parameter
    where config/ladder_gpt3.py's runs train 20, so its prior says so."""
    sys.path.insert(0, str(REPO / "scripts"))
    import ladder as ladder_script
    from trainer import cost
    problems = {}
    for name, target in (("ladder_gpt3_fast", "train_gpt3_6b_fast"), ("ladder_gpt3", "train_gpt3_6b")):
        settings = ladder_script.load_settings(str(REPO / "config" / f"{name}.py"))
        recipe = configurator.load_config([str(REPO / b) for b in settings["base"]] + settings["common"].split())
        result = {"tokens_per_param": list(settings["tokens_per_param"]), "settings": settings,
                  "recipes": {"r": {"schedule": ladder.schedule(recipe),
                                    "recipe_settings": {k: getattr(recipe, k) for k in ladder.RECIPE_KEYS}}}}
        run = configurator.load_config([str(REPO / "config" / f"{target}.py")])
        tokens = run.max_iters * run.batch_size * run.gradient_accumulation_steps * run.block_size
        problems[name] = ladder.shape_problem(result, "r", run, tokens / cost.meta_model(run, "none").get_num_params())
        assert ladder.recipe_mismatch(result, "r", run) == {}  # each target follows its ladder's recipe
    assert problems["ladder_gpt3_fast"] is None
    assert problems["ladder_gpt3"].startswith("the ladder's runs trained 20 tokens per parameter and this run 45.1")


def test_report_prints_the_ladders_prediction_beside_the_forecast_and_the_measured_loss(tmp_path):
    rates = lrs("cosine")
    prior = forecast.prior(ladder_json(tmp_path / "ladder.json"), 1e6)
    record, lines = metrics.Metrics(tmp_path), []
    for it, loss in synthetic(rates, 0.002)[:10]:
        record("eval", it, val_loss=loss)
    forecast.report(forecast.Forecaster(rates, 20), prior, tmp_path, 100, 400, lines.append, record)
    assert lines[0].startswith("forecast: none yet, ")  # the law alone has too little to go on at 25%
    assert lines[1].startswith("forecast with the ladder's prior: val loss ") and "; the ladder predicted " in lines[1]
    assert "; measured now " in lines[1]
    written, = metrics.read(tmp_path, "forecast_prior")  # apart from the law's records, as its charts are
    assert set(written) >= {"val_loss", "error", "ladder_val_loss"} and not metrics.read(tmp_path, "forecast")


def test_a_prior_that_cannot_be_read_is_one_line(tmp_path):
    cfg = types.SimpleNamespace(**dict(configurator.DEFAULTS, dataset="quickstart", vocab_size=320,
                                       data_dir=str(tmp_path)))
    cfg.forecast_prior = str(tmp_path / "missing.json")
    assert "missing.json as scripts/ladder.py's ladder.json" in forecast.prior_problem(cfg)
    cfg.forecast_prior = ladder_json(tmp_path / "ladder.json") + ":muon"
    assert "the ladder has no recipe 'muon' (it has ['adamw'])" in forecast.prior_problem(cfg)
    cfg.forecast_prior = ladder_json(tmp_path / "other.json", data={"dataset": "pile", "vocab_size": 50304})
    assert "measured on other data or vocabulary" in forecast.prior_problem(cfg)
    cfg.forecast_prior = ladder_json(tmp_path / "ladder.json")
    assert forecast.prior_problem(cfg) is None
    (tmp_path / "empty.json").write_text(json.dumps({"data": {}, "recipes": {}}))
    cfg.forecast_prior = str(tmp_path / "empty.json")
    assert forecast.prior_problem(cfg).endswith("has no recipes: rerun scripts/ladder.py to write it whole")
    for half in ({"data": None, "recipes": {"adamw": {"runs": []}}}, {"data": {}, "recipes": {"adamw": []}},
                 {"data": {}, "recipes": {"adamw": {"fits": {}}}}):  # cut short, or hand-edited
        (tmp_path / "half.json").write_text(json.dumps(half))
        cfg.forecast_prior = str(tmp_path / "half.json")
        assert forecast.prior_problem(cfg).endswith("half.json is not a whole ladder.json (its data, or a recipe's "
                                                    "runs or fits, are missing): rerun scripts/ladder.py to write it")


def test_a_prior_path_may_hold_a_colon_and_a_recipe_follows_the_last_one(tmp_path):
    path = ladder_json(tmp_path / "run:1.json")
    assert forecast.split_spec(path) == (path, None)
    assert forecast.split_spec(path + ":adamw") == (path, "adamw")
    assert forecast.prior(path + ":adamw", 1e6).predicted[0] == pytest.approx(20 * 1e6 ** -0.2, rel=1e-3)


def test_the_prior_is_the_recipe_the_run_follows_and_none_where_it_follows_none_or_another(tmp_path):
    """A Muon run given a ladder of AdamW and Muon without a name gets Muon's curves, not the first recipe's; a
    named recipe the run does not follow, or a ladder whose recipes the settings cannot tell apart, gives no prior
    and says why (the run goes on, as where its shape differs). How a run is carried out (device, batch, fp8) is no
    part of a recipe (ladder.RECIPE_KEYS)."""
    path = ladder_json(tmp_path / "ladder.json")
    result = json.loads(open(path).read())
    runs = result["recipes"]["adamw"]["runs"]
    trained = {k: configurator.DEFAULTS[k] for k in ladder.RECIPE_KEYS}
    result["recipes"] = {"adamw": {"runs": runs, "recipe_settings": dict(trained, optimizer="adamw")},
                         "muon": {"runs": runs, "recipe_settings": dict(trained, optimizer="muon")}}
    (tmp_path / "ladder.json").write_text(json.dumps(result))
    cfg = types.SimpleNamespace(**dict(configurator.DEFAULTS, dataset="quickstart", vocab_size=320,
                                       data_dir=str(tmp_path), optimizer="muon", learning_rate=3e-3,
                                       device="cuda", batch_size=1, fp8="tensorwise", forecast_prior=path))
    assert ladder.recipe_for_run(result, None, cfg, path) == "muon"
    assert isinstance(forecast.prior(path, 1e6), forecast.Prior) and forecast.prior_problem(cfg) is None
    assert forecast.prior(f"{path}:adamw", 1e6, cfg, 2e6) == (
        f"recipe 'adamw' of {path} trained with optimizer='adamw' (this run 'muon'), so its curves are another "
        "recipe's: set those, or name the recipe this run follows (forecast_prior=PATH:NAME)")
    cfg.optimizer = "lion"
    assert forecast.prior(path, 1e6, cfg, 2e6).endswith("adamw, muon, and this run's settings match none of them: "
                                                         "name the one it follows (forecast_prior=PATH:NAME)")
    for recipe in result["recipes"].values():  # a ladder.json from before the settings were recorded
        del recipe["recipe_settings"]
    with pytest.raises(ladder.FitError, match="match each of adamw, muon: name the one it follows"):
        ladder.recipe_for_run(result, None, cfg, path)
    assert ladder.recipe_for_run(result, "muon", cfg, path) == "muon"


def test_a_prior_may_be_the_ladders_folder_and_another_folder_is_one_line(tmp_path):
    """forecast_prior=OUT reads scripts/ladder.py's OUT/ladder.json (a recipe may follow, and the folder's name
    may hold a colon); a folder without a ladder.json is refused naming it, not with an IsADirectoryError."""
    cfg = types.SimpleNamespace(**dict(configurator.DEFAULTS, dataset="quickstart", vocab_size=320,
                                       data_dir=str(tmp_path)))
    folder = tmp_path / "ladder:1"
    folder.mkdir()
    ladder_json(folder / "ladder.json")
    for spec in (str(folder), f"{folder}:adamw"):
        cfg.forecast_prior = spec
        assert forecast.prior_problem(cfg) is None
        assert forecast.prior(spec, 1e6).predicted[0] == pytest.approx(20 * 1e6 ** -0.2, rel=1e-3)
    cfg.forecast_prior = f"{folder}:muon"
    assert forecast.prior_problem(cfg).endswith(f"{folder / 'ladder.json'}: the ladder has no recipe 'muon' "
                                                "(it has ['adamw'])")
    cfg.forecast_prior = str(tmp_path)
    assert forecast.prior_problem(cfg) == (f"forecast_prior: {tmp_path} is a folder without a ladder.json: pass the "
                                           "ladder.json scripts/ladder.py wrote (OUT/ladder.json)")


def test_forecast_accuracy_sets_the_largest_ladder_runs_forecasts_beside_its_final_loss(tmp_path):
    """scripts/bench/forecast_accuracy.py --ladder on a ladder whose largest run follows the ladder's shape."""
    path = ladder_json(tmp_path / "ladder.json", sizes=(1e4, 3e4, 1e5, 3e5, 1e6))
    result = json.loads(open(path).read())
    largest = result["recipes"]["adamw"]["runs"][-1]
    largest["out_dir"] = str(tmp_path / "run")
    (tmp_path / "run").mkdir()
    (tmp_path / "ladder.json").write_text(json.dumps(result))
    (tmp_path / "run" / "config.json").write_text(json.dumps(dict(
        configurator.DEFAULTS, max_iters=400, lr_decay_iters=400, warmup_iters=20, learning_rate=1e-3, min_lr=1e-4)))
    record = metrics.Metrics(tmp_path / "run")
    record("start", 0, params=largest["params"])
    record("done", 400)
    for fraction, loss in largest["curve"]:
        record("eval", round(fraction * 400), val_loss=loss)
    sys.path.insert(0, str(REPO / "scripts" / "bench"))
    import forecast_accuracy
    forecast_accuracy.main(["--ladder", path, "--out", str(tmp_path / "out.json")])
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    prior = [r for r in rows if r["method"] == "ladder prior"]
    assert [round(r["at"], 2) for r in prior] == [0.25, 0.5]
    assert all(abs(r["relative_error"]) < 1e-3 for r in prior)  # the run follows the shape: its level is exact
    now = [r for r in rows if r["method"] == "val loss now"]
    assert all(r["relative_error"] > 0.05 for r in now)
    forecast_accuracy.main(["--ladder", path, "--out", str(tmp_path / "out.json"), "--runs", f"adamw={tmp_path / 'run'}"])
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [r["size"] for r in rows if r["method"] == "ladder prior"] == ["s4", "s4", "run", "run"]
    with pytest.raises(SystemExit, match="write RECIPE=OUT_DIR, RECIPE one of \\['adamw'\\]"):
        forecast_accuracy.main(["--ladder", path, "--runs", f"muon={tmp_path / 'run'}"])
    with pytest.raises(SystemExit, match="is not a finished train.py run"):
        forecast_accuracy.main(["--ladder", path, "--runs", f"adamw={tmp_path / 'missing'}"])


@pytest.mark.e2e
def test_a_run_with_a_real_ladders_prior_prints_it_from_early_on_and_a_resume_forecasts_as_if_it_never_stopped(
        tmp_path, data_dir):
    """The whole path a user's 6.7B run takes, at tiny sizes: scripts/ladder.py trains three sizes through train.py,
    and a larger run at the ladder's ratio and schedule (its argv, as the ladder would give it) reads ladder.json
    as forecast_prior. It prints the ladder's prediction beside the forecast and the measured loss from its first
    evaluations on; a copy stopped part-way (an injected error) and resumed forecasts exactly as the run that
    never stopped, because both read the evaluations metrics.jsonl kept."""
    sys.path.insert(0, str(REPO / "scripts"))
    import ladder as ladder_script
    from conftest import python, run_here
    common = (f"--vocab_size=64 --block_size=16 --batch_size=4 --gradient_accumulation_steps=2 --eval_iters=2 "
              f"--data_dir={data_dir} --checkpoint_interval=1000000 --checkpoint_minutes=0 --dropout=0.0")
    sizes = {f"w{w}": dict(n_layer=1, n_head=1, n_embd=w) for w in (16, 24, 32)}
    config = tmp_path / "ladder_prior.py"
    config.write_text(f"base = [{str(REPO / 'config/train_tiny.py')!r}]\ncommon = {common!r}\nsizes = {sizes!r}\n"
                      "tokens_per_param = 0.2\nsweep_points = 1\nevaluations = 8\n")
    recipe = "adamw: --optimizer=adamw --learning_rate=3e-3"
    built = python([REPO / "scripts/ladder.py", config, "--out", tmp_path / "ladder", "--recipe", recipe],
                   env=dict(os.environ, OMP_NUM_THREADS="1", WANDB_MODE="disabled"))
    assert built.returncode == 0, built.stderr[-3000:]
    name, overrides = ladder_script.parse_recipe(recipe)
    argv = ladder_script.Ladder(ladder_script.load_settings(str(config)), None).argv(
        overrides, dict(n_layer=1, n_head=1, n_embd=48), 3e-3, 0.2)
    prior = f"--forecast_prior={tmp_path / 'ladder' / 'ladder.json'}"

    def train(out_dir, *extra, env=None):
        # evaluated every other step (the prior reads fractions of the run): the law's forecast has points enough
        return run_here(["train.py", *argv, prior, f"--out_dir={out_dir}", "--eval_interval=2", *extra], env=env)

    whole = train(tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr[-3000:]
    max_iters = metrics.read(tmp_path / "whole", "start")[0]["max_iters"]
    made = metrics.latest_per_iter(metrics.read(tmp_path / "whole", "forecast_prior"))
    assert made and made[0]["iter"] <= max_iters / 4  # from a quarter of the run or earlier
    said = [line for line in whole.stdout.splitlines()
            if line.startswith("forecast with the ladder's prior: val loss")]
    assert len(said) == len(made) and all("the ladder predicted" in line and "measured now" in line for line in said)
    assert all(r["at_iter"] == max_iters and r["ladder_val_loss"] == made[0]["ladder_val_loss"] for r in made)
    stop = max_iters // 2
    stopped = train(tmp_path / "split", "--checkpoint_interval=5", env={"TRAINER_FAULTS": f"rank_error@{stop}"})
    assert stopped.returncode == 1 and not metrics.read(tmp_path / "split", "done")
    resumed = train(tmp_path / "split", "--checkpoint_interval=5")
    assert resumed.returncode == 0 and "resuming after" in resumed.stdout, resumed.stderr[-3000:]
    split, once = ([(r["iter"], r["val_loss"], r["error"]) for r in metrics.latest_per_iter(
        metrics.read(tmp_path / run, "forecast_prior"))] for run in ("split", "whole"))
    assert once[-1][0] > stop and split == once  # the forecasts after the resume point as well
    # the law's forecast (none yet in so short a run: its fit and error say why) reads the same history too
    resumed_law, whole_law = ([line for line in result.stdout.splitlines() if line.startswith("forecast: ")]
                              for result in (resumed, whole))
    assert resumed_law[-1] == whole_law[-1] and "±" in whole_law[-1]
