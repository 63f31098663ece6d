"""The val loss a run will end with, forecast from its val losses so far and the learning-rate schedule ahead.

The form is Tissue et al.'s scaling law with learning-rate annealing (arXiv 2408.11029):

    L(s) = L0 + A * S1(s)^-alpha - C * S2(s)

S1 is the area under the learning-rate curve up to step s (the "forward area": how far the weights have
travelled), S2 the annealing area: each step's drop in learning rate, carried on with momentum lambda = 0.999
(m_i = lambda * m_{i-1} + (lr_{i-1} - lr_i), S2 = sum of m_i). The learning rates are taken relative to the
schedule's peak, so the four fitted numbers stay near 1. The law's point is that one fit covers any schedule:
fitted on the steps so far, it is read off at max_iters under the rest of the schedule.

A forecast needs MIN_POINTS evaluations after warmup, and at least one learning-rate drop among them:
with none (a WSD run's stable phase) C, the gain of the decay still ahead, is not measured, so the log says
so rather than guessing it (a cooldown fork measures that gain directly).

E is a measured error, not only the fit's: curve_fit's one-sigma spread leaves out the law's misfit to a
small, noisy run, and docs/time_to_quality.md found forecasts missing by several times it, all on one side:
a misfit of the law, which no statistic of the fit can see. So each fit is backtested, as a forecaster is
judged: on what it would have said earlier. With the last evaluation at t and the run ending at T, the law
is refitted on the evaluations up to b = t*t/T, which extrapolates by the same factor T/t (b to t) as the forecast does (t to T); its largest
miss against the losses observed after b is scaled by (T - t) / (t - b) = T/t, the remaining horizon over the
backtest's, as extrapolation error grows with the horizon. E = max(the fit's spread combined with one
evaluation's scatter about the fit, since the final val loss is a noisy evaluation too; that scaled miss). Until
the backtest can be made (b still in warmup, too few points before b, or, for WSD, no decay before b) there is
no forecast, and none while E is over MAX_RELATIVE_ERROR of the forecast.

With forecast_prior (a scaling ladder's ladder.json, scripts/ladder.py) a second forecast comes beside it from
the ladder's first evaluation (5% of the run): Prior, the ladder's curve shape at this run's level, and the
ladder's own prediction for this size, so one run tells whether the ladder was right.
"""
import math
import os

import numpy as np

from trainer import ladder, metrics

MIN_POINTS = 5
MOMENTUM = 0.999  # Tissue et al.'s lambda for the annealing area
MAX_RELATIVE_ERROR = 0.02  # a forecast whose error is wider than this share of it says too little to print


def areas(lrs, warmup_iters, momentum=MOMENTUM):
    """(S1, S2) after each number of completed steps (index k: after k steps, k = 0..len(lrs))."""
    eta = np.asarray(lrs, dtype=float) / max(lrs)
    drops = np.concatenate([[0.0], eta[:-1] - eta[1:]])
    drops[: warmup_iters + 1] = 0.0  # warmup's rise is not annealing
    m, momenta = 0.0, np.empty_like(drops)
    for i, d in enumerate(drops):
        m = momentum * m + d
        momenta[i] = m
    zero = np.zeros(1)
    return np.concatenate([zero, np.cumsum(eta)]), np.concatenate([zero, np.cumsum(momenta)])


def law(s1s2, l0, a, alpha, c):
    s1, s2 = s1s2
    return l0 + a * np.power(s1, -alpha) - c * s2


class Forecaster:
    """Fits the law to (iteration, val loss) points of a run whose steps have the learning rates lrs."""

    def __init__(self, lrs, warmup_iters):
        self.s1, self.s2 = areas(lrs, warmup_iters)
        self.warmup_iters, self.end = warmup_iters, len(lrs)

    def predict(self, points):
        """(val_loss, error) at the end of the schedule, or a one-line reason there is none to print."""
        result = self.fit(points)
        if isinstance(result, str) or result[1] <= MAX_RELATIVE_ERROR * result[0]:
            return result
        return f"the error (±{result[1]:.3f} on {result[0]:.3f}) is still over {MAX_RELATIVE_ERROR:.0%} of it"

    def fit(self, points):
        """(val_loss, E) at the end of the schedule however wide E is, or why there is no forecast."""
        points = [(it, loss) for it, loss in points if self.warmup_iters < it < self.end and math.isfinite(loss)]
        now = self.fit_law(points)
        if isinstance(now, str):
            return now
        t = points[-1][0]
        back = t * t // self.end
        then = self.fit_law([p for p in points if p[0] <= back])
        if isinstance(then, str):
            return f"the backtest (a refit on the evaluations up to iter {back}) cannot be made yet: {then}"
        value, spread = self.at_end(*now)
        noise = math.sqrt((self.misses(now[0], points) ** 2).sum() / (len(points) - len(now[0])))  # one eval's
        miss = self.misses(then[0], [p for p in points if p[0] > back]).max()
        return value, float(max(math.hypot(spread, noise), miss * (self.end - t) / (t - back)))

    def misses(self, params, points):
        """|law - observed val loss| at each point."""
        iters = np.array([it for it, _ in points])
        return np.abs(law((self.s1[iters], self.s2[iters]), *params) - np.array([loss for _, loss in points]))

    def fit_law(self, points):
        """The law's (params, covariance) fitted to the points, or why it cannot be fitted."""
        if len(points) < MIN_POINTS:
            return f"{len(points)} evaluation(s) after warmup so far, the fit needs {MIN_POINTS}"
        iters = np.array([it for it, _ in points])
        losses = np.array([loss for _, loss in points])
        if self.s2[iters].max() <= 1e-3 * max(self.s2[-1], 1e-12):
            return "the learning rate has not decayed yet, so the fit cannot measure the decay's gain"
        p0 = [0.5 * losses.min(), losses.max() - 0.5 * losses.min(), 0.5, 0.1 / max(self.s2[-1], 1.0)]
        from scipy.optimize import curve_fit  # here, not at the top: scipy's import is half a second of every start
        try:
            params, cov = curve_fit(law, (self.s1[iters], self.s2[iters]), losses, p0=p0,
                                    bounds=([0, 0, 0, 0], [np.inf, np.inf, 5, np.inf]), maxfev=20000)
        except (RuntimeError, ValueError) as e:
            return f"the fit did not converge ({e})"
        if not np.isfinite(cov).all():
            return "the fit is not determined by the points so far"
        return params, cov

    def at_end(self, params, cov):
        """The law's value at the end of the schedule and its one-sigma spread from the fit's covariance."""
        end = (self.s1[-1:], self.s2[-1:])
        value = float(law(end, *params)[0])
        grad = ladder.jacobian(law, end, params)[0]  # the prediction's sensitivity to each parameter
        return value, float(math.sqrt(max(grad @ cov @ grad, 0.0)))


def measured_otherwise(records):
    """[(first, last)]: the evaluations at iterations first < it <= last measured a run other than this one, from
    its metrics records: after a resume that changed the schedule, those after the first step whose learning rate
    changed (schedule_changed's lr_from) up to the resume (an extended run's old end, say, was measured after its
    decay); after one that changed a mixture's weights or the val set, every one up to the resume (another weighted
    mean, other windows)."""
    return [(r["lr_from"], r["iter"]) if r["kind"] == "schedule_changed" else (-1, r["iter"])
            for r in records if r["kind"] in ("schedule_changed", "weights_changed", "val_set_changed")]


def report(forecaster, prior, out_dir, iter_num, max_iters, log, record):
    """After an evaluation: train.log's forecast line (or why there is none) and a "forecast" metrics record,
    and beside them the ladder prior's and its "forecast_prior" record (prior: prior()'s answer). The points
    are out_dir's eval records up to iter_num (metrics.jsonl: a resumed run keeps its history), but for those
    measured under another schedule or weighting (measured_otherwise): the law and the prior read this run's."""
    if iter_num >= max_iters:
        return
    records = metrics.read(out_dir)
    evals = metrics.latest_per_iter([r for r in records if r["kind"] == "eval"])
    otherwise = measured_otherwise(records)
    points = [(r["iter"], r["val_loss"]) for r in evals if r["iter"] <= iter_num and r.get("val_loss") is not None
              and not any(first < r["iter"] <= last for first, last in otherwise)]
    result = forecaster.predict(points)
    if isinstance(result, str):
        log(f"forecast: none yet, {result}")
    else:
        log(f"forecast: val loss {result[0]:.4f} at iter {max_iters} (±{result[1]:.4f})")
        record("forecast", iter_num, at_iter=max_iters, val_loss=result[0], error=result[1])
    if isinstance(prior, str):
        log(f"forecast with the ladder's prior: none, {prior}")
    elif prior:  # beside it, the ladder's: its prediction for this size and its shape at this run's level
        made, (predicted, *interval) = prior.forecast(points, max_iters), prior.predicted
        log("forecast with the ladder's prior: " + (f"none yet, {made}" if isinstance(made, str) else
            f"val loss {made[0]:.4f} (±{made[1]:.4f})")
            + f"; the ladder predicted {predicted:.4f} {ladder.interval_text(interval, '.4f')}"
            + (f"; measured now {points[-1][1]:.4f}" if points else ""))
        if not isinstance(made, str):
            # a kind of its own: charts (wandb's forecast_prior/val_loss, plot_log.py) keep it apart from the law's
            record("forecast_prior", iter_num, at_iter=max_iters, val_loss=made[0], error=made[1],
                   ladder_val_loss=predicted)


LEVEL_POINTS = 3  # the prior's level: the mean over the run's last this many evaluations


class Prior:
    """A scaling ladder's prior (scripts/ladder.py's ladder.json) for a run of n parameters, from the ladder's
    sizes below it: the final val loss its loss law predicts there, and the shape of its runs' val-loss
    curves: each best run's curve divided by its final val loss, by fraction of the run. At each fraction the
    shape is the line in log N through the two largest sizes below n, read at n; the run's own evaluations
    give the level (val loss / shape, averaged over its last LEVEL_POINTS evaluations). So the law's shape
    comes from the ladder and its level from the run: one number to measure, from the ladder's first evaluation
    after the start (5% of the run where the ladder evaluated 20 times). The run must follow the ladder's
    recipe and schedule in fractions of its length (the same tokens per parameter, warmup share and decay:
    ladder.shape_problem, which prior() checks).

    Why the two nearest sizes, not a line through all: a curve's shape changes with size unevenly (a small
    run has learned most of what it will by half-way, a larger one still has much to come), so the nearest
    sizes are the ones most like this run; on the CPU ladder a line through all sizes missed the final loss at
    half-way by 3-5%, the nearest two by under 3% (docs/scaling_ladder.md). Its error is backtested, as the
    Forecaster's is: the same line one size down (through the two sizes below the nearest) misses the
    nearest's shape by some amount per unit of log N; that rate times how far n lies beyond the nearest, and
    at least one of the ladder's steps (shapes vary from size to size, so a run just above the nearest size
    is no surer than one a step above it)."""

    def __init__(self, result, recipe, n):
        ratio = result["tokens_per_param"][0]
        runs = [r for r in ladder.best_runs(result["recipes"][recipe]["runs"], ratio) if r["params"] < n]
        if len(runs) < ladder.MIN_SIZES:
            raise ladder.FitError(f"the ladder has {len(runs)} size(s) below this run's {n:,.0f} parameters; "
                                  f"its prior needs {ladder.MIN_SIZES}")
        fit = ladder.fit_loss([r["params"] for r in runs], [r["final_val_loss"] for r in runs])
        self.predicted = fit.predict(n)  # (value, low, high)
        self.n, self.curves = n, [(math.log(r["params"]), np.array(r["curve"])) for r in runs[-3:]]
        # before the curves' first evaluation after the start their shape is a straight line across the steepest
        # fall of the loss: nothing measured it, so no forecast is read there
        self.start = max(float(c[c[:, 0] > 0, 0].min()) for _, c in self.curves)

    def shape(self, fraction):
        """(val loss / final val loss at this fraction of the run, its backtested error)."""
        (x0, r0), (x1, r1), (x2, r2) = [(x, np.interp(fraction, c[:, 0], c[:, 1] / c[-1, 1])) for x, c in self.curves]
        along = lambda xa, ra, xb, rb, x: rb + (rb - ra) * (x - xb) / (xb - xa)  # the line through a and b, at x
        miss_per_unit = abs(along(x0, r0, x1, r1, x2) - r2) / (x2 - x1)
        return along(x1, r1, x2, r2, math.log(self.n)), miss_per_unit * max(math.log(self.n) - x2, x2 - x1)

    def forecast(self, points, end):
        """(val_loss, error) at the end of the run from its (iteration, val loss) points so far."""
        points = [(it, loss) for it, loss in points if 0 < it < end and math.isfinite(loss)]
        if not points:
            return "no evaluation yet"
        points = [(it, loss) for it, loss in points if it >= self.start * end][-LEVEL_POINTS:]
        if not points:
            return (f"the ladder's runs were first evaluated at {self.start:.0%} of their length: their shape "
                    "starts there")
        shapes = [self.shape(it / end) for it, _ in points]
        levels = np.array([loss / ratio for (_, loss), (ratio, _) in zip(points, shapes)])
        value = float(levels.mean())
        spread = float(levels.std(ddof=1) / math.sqrt(len(levels))) if len(levels) > 1 else 0.0
        return value, math.hypot(value * shapes[-1][1] / shapes[-1][0], spread)


def prior(spec, n, cfg=None, tokens=None):
    """The Prior of forecast_prior = 'OUT/ladder.json' or 'OUT/ladder.json:RECIPE' for a run of n parameters
    (cfg: its config, training tokens in all: where given, the recipe is the one the run follows
    (ladder.recipe_for_run) and the ladder's curves must be its shape; else the named or first recipe); None when
    spec is ''; why there is none when the ladder cannot give one for this run (train.py logs it, and report at
    each evaluation: the run goes on without it). prior_problem has checked the file."""
    if not spec:
        return None
    path, named = split_spec(spec)
    result, recipe = ladder.load(path, named)
    if cfg is not None:
        try:
            recipe = ladder.recipe_for_run(result, named, cfg, ladder.ladder_file(path))
        except ladder.FitError as e:
            return str(e)
        if problem := ladder.shape_problem(result, recipe, cfg, tokens / n):
            return problem
    try:
        return Prior(result, recipe, n)
    except ladder.FitError as e:
        return str(e)


def split_spec(spec):
    """'PATH' or 'PATH:RECIPE' -> (PATH, RECIPE or None); a path that exists (a file, or the ladder's folder)
    is taken whole."""
    path, sep, recipe = spec.rpartition(":")
    return (spec, None) if not sep or os.path.exists(spec) else (path, recipe)


def prior_problem(cfg):
    """One line when cfg's forecast_prior cannot be read for this run (configurator.check), else None."""
    try:
        ladder.load(*split_spec(cfg.forecast_prior), expected=ladder.identity(cfg))
    except ladder.FitError as e:
        return f"forecast_prior: {e}"
    return None
