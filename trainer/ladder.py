"""The scaling ladder's fits: from a recipe's runs at several small sizes to its loss, learning rate and
zero-shot scores at a size nobody has trained yet (scripts/ladder.py runs the ladder, plan.py reads it).

Every fit is least squares through scipy.optimize.curve_fit, with curve_fit's covariance of the parameters
(scaled by the residuals, as the scatter of small runs is not known in advance). A prediction carries a
±Z sigma interval: the fit's uncertainty at that point (the delta method through the covariance) combined
with one run's scatter about the law, since a new run scatters as the ladder's did, and beyond the largest
size with the loss law's drift (Fit.predict).

The forms, by the ladder's name for them (x: N the parameters, D the training tokens, or a task's loss):
    lr          lr = c * N^b                       the best learning rate by size, fitted in log space
    power       L = A * N^-alpha                   the final val loss along a fixed tokens-per-parameter rule
    saturating  L = E + A * N^-alpha               the same with an irreducible loss E
    plateau     L = L0 * (1 + N / Nb)^-alpha       flat at L0 well below Nb, a power law well above it
    local       L = A * N^-alpha                   on the three largest sizes alone: the log-log tangent at the top
    chinchilla  L = E + A * N^-alpha + B * D^-beta (Hoffmann et al.), when the ladder measured several D/N
    sigmoid     acc = a / (1 + exp(-k * (L - L0))) + b   a task's score against a loss (Bhagia et al.'s step 2)
    rise        s = 1 / (1 + exp(-k * (L - L0)))   the same where the task's chance c is known: b = c, a + b = 1
With D a fixed multiple of N, D carries no information of its own: Chinchilla's B and beta fold into A and
alpha, so along the rule L(N) is all the data can identify. Power, saturating or plateau: the ladder takes the
form that, fitted on all its sizes but the largest, best predicts the largest (backtest), as the ladder
itself is judged on a size it held out. Saturating bends the log-log line towards a floor (Chinchilla's
E); plateau bends it the other way, a broken power law (Caballero et al., arXiv 2210.14891) whose first
segment is flat: the smallest models sit near what a model of the bytes' frequencies reaches (Hestness et
al.'s "small data region", arXiv 1712.00409), and the power law only starts above them. Local follows a
curve whose slope has settled at the top after changing below (steepening then straight, as the CPU ladder's
Muon runs): plateau, fitted on the steepening, carries it on past the top. A four-parameter s-shaped form (a
plateau easing to a floor) was tried along the rule and not adopted: it read Muon's largest sizes too high, by more
than these read them too low (docs/ladder_evidence.md, "The s-shaped form, fitted"); its reading bounds the
interval beyond the sizes instead (other_forms), since Muon's curve flattened past every form along the rule.
"""
import functools
import json
import math
import os
import warnings
from pathlib import Path

import numpy as np

from trainer import RunError, bins, tokenizer

Z = 2.0  # prediction intervals are ±2 sigma: about 95% when the scatter is normal
MIN_SIZES = 3
STEEPEST = 100  # a task sigmoid's largest |k|, per unit of loss: one at it is a step


class FitError(RunError):
    """Why a fit cannot be made or a ladder read, in one line a user can act on."""


def _lr(n, logc, b):
    return logc + b * np.log(n)  # log lr


def _power(n, loga, alpha):
    return np.exp(loga - alpha * np.log(n))


def _saturating(n, e, loga, alpha):
    return e + np.exp(loga - alpha * np.log(n))


def _plateau(n, logl0, lognb, alpha):
    return np.exp(logl0 - alpha * np.log1p(n / np.exp(lognb)))


def _s_shaped(n, e, logl0, lognb, alpha):
    return e + (np.exp(logl0) - e) * np.exp(-alpha * np.log1p(n / np.exp(lognb)))


def _chinchilla(nd, e, loga, alpha, logb, beta):
    n, d = nd
    return e + np.exp(loga - alpha * np.log(n)) + np.exp(logb - beta * np.log(d))


def _sigmoid(loss, a, k, l0, b):
    return a / (1 + np.exp(-k * (loss - l0))) + b


def _rise(loss, k, l0):
    return 1 / (1 + np.exp(-k * (loss - l0)))  # a score's share of the way from chance to 1


# name: (function, parameter names, fitted in log space)
FORMS = {
    "lr": (_lr, ("logc", "b"), True),
    "power": (_power, ("logA", "alpha"), False),
    "saturating": (_saturating, ("E", "logA", "alpha"), False),
    "plateau": (_plateau, ("logL0", "logNb", "alpha"), False),
    "local": (_power, ("logA", "alpha"), False),
    "s_shaped": (_s_shaped, ("E", "logL0", "logNb", "alpha"), False),
    "chinchilla": (_chinchilla, ("E", "logA", "alpha", "logB", "beta"), False),
    "sigmoid": (_sigmoid, ("a", "k", "L0", "b"), False),
    "rise": (_rise, ("k", "L0"), False),
}


class Fit:
    """A fitted form: its parameters, their covariance, the scatter of the points about it, and for a loss
    law how fast its backtest says it drifts from the truth beyond the sizes it was fitted on, and the other
    forms fitted to the same sizes (their readings beyond them bound its interval too)."""

    def __init__(self, form, params, cov, scatter, n, drift=0.0, reach=math.inf, others=None):
        self.form, self.params, self.cov = form, np.asarray(params, float), np.asarray(cov, float)
        self.scatter, self.n = scatter, n  # residual standard deviation (log space for 'lr'; inf: an exact fit)
        self.drift, self.reach = drift, reach  # relative miss per unit of log N beyond reach, the largest size
        self.others = others or {}  # {form: its parameters}: the forms along the rule it was chosen over

    def raw(self, x):
        fn, _, _ = FORMS[self.form]
        return fn(x, *self.params)

    def __call__(self, x):
        value = self.raw(x)
        return np.exp(value) if FORMS[self.form][2] else value

    def predict(self, x):
        """(value, low, high) at one point: ±Z sigma of the fit's uncertainty there, one run's scatter, and
        beyond the fitted sizes the drift: the form itself may be wrong, by as much per unit of log N as its
        backtest missed (the fit's covariance assumes the form is right, and so narrows where it is not).
        Beyond the sizes, low and high also reach the other forms' readings: a backtest one step out cannot see
        a bend further out, and on the CPU ladders read 3.8x beyond their sizes the chosen forms missed by up to
        18% (Muon's by 10-12% on every seed), mostly outside their drift's intervals, where the forms' readings
        bracketed the measurement in 19 of 20 checks at 3.8x and 5.9x (docs/ladder_evidence.md, "w320: beyond the
        config", "Unrepeated data"); at 6.0x Muon's curve flattened past every form's reading along the rule on
        the three seeds measured ("w400: further", "w400: a third seed"), so the s-shaped law's reading, which
        over-reads there, is one of them (other_forms).
        Beyond the sizes of a fit no backtest judged (drift inf: too few sizes), low and high are unbounded: on
        the CPU ladders, power laws through three sizes read 5.6x out missed their intervals 20 times in 20
        ("Intervals no backtest judged")."""
        value = float(np.ravel(self.raw(x))[0])
        beyond = max(math.log(float(np.ravel(x)[0]) / self.reach), 0.0) if self.drift else 0.0
        if beyond and math.isinf(self.drift):  # no backtest judged the form: nothing bounds it out here
            return (math.exp(value), 0.0, math.inf) if FORMS[self.form][2] else (value, -math.inf, math.inf)
        grad = jacobian(FORMS[self.form][0], x, self.params)[0]  # the prediction's sensitivity to each parameter
        drift = self.drift * beyond * (1.0 if FORMS[self.form][2] else abs(value)) if beyond else 0.0
        sigma = math.sqrt(max(float(grad @ self.cov @ grad), 0.0) + self.scatter ** 2 + drift ** 2)
        low, high = value - Z * sigma, value + Z * sigma
        if beyond:  # the forms it was chosen over, read here: the form is what a backtest cannot settle
            readings = [float(np.ravel(FORMS[form][0](x, *params))[0]) for form, params in self.others.items()]
            low, high = min([low, *readings]), max([high, *readings])
        return tuple(map(math.exp, (value, low, high))) if FORMS[self.form][2] else (value, low, high)

    def named(self):
        """{parameter: value}, with A and B as themselves rather than their logs."""
        out = {}
        for name, value in zip(FORMS[self.form][1], self.params):
            out[name[3:] if name.startswith("log") else name] = math.exp(value) if name.startswith("log") else value
        return out

    def to_json(self):
        return {"form": self.form, "params": dict(zip(FORMS[self.form][1], self.params.tolist())),
                "named": self.named(), "cov": self.cov.tolist(), "n": self.n,
                "scatter": self.scatter if math.isfinite(self.scatter) else None,  # None: an exact fit
                "stderr": dict(zip(FORMS[self.form][1], np.sqrt(np.clip(np.diag(self.cov), 0, None)).tolist())),
                # drift None: no backtest judged the form (inf, which JSON cannot hold)
                **({"drift": self.drift if math.isfinite(self.drift) else None, "reach": self.reach}
                   if self.drift else {}),
                **({"others": {form: list(params) for form, params in self.others.items()}} if self.others else {})}

    @classmethod
    def from_json(cls, d):
        """to_json's dict back; FitError where it was cut or edited into something else."""
        try:
            scatter = math.inf if d["scatter"] is None else d["scatter"]
            drift = math.inf if "drift" in d and d["drift"] is None else d.get("drift", 0.0)
            return cls(d["form"], [d["params"][k] for k in FORMS[d["form"]][1]], d["cov"], scatter, d["n"],
                       drift, d.get("reach", math.inf), d.get("others"))
        except (KeyError, TypeError, ValueError) as e:
            raise FitError(f"a fit in the ladder.json does not read ({type(e).__name__}: {e}): rerun "
                           "scripts/ladder.py to write it") from None


def fit(form, x, y, p0, bounds=(-np.inf, np.inf), min_points=MIN_SIZES, what="points"):
    """Fit one form; FitError when there are too few points or the fit does not converge."""
    y = np.asarray(y, float)
    if len(y) < min_points:
        raise FitError(f"{len(y)} {what}, a fit needs at least {min_points}: add a size to the ladder")
    fn, names, in_log = FORMS[form]
    target = np.log(y) if in_log else y
    from scipy.optimize import OptimizeWarning, curve_fit  # here: scipy's import is half a second of every start
    try:
        with warnings.catch_warnings():  # an undetermined covariance is handled below
            warnings.simplefilter("ignore", OptimizeWarning)
            params, cov = curve_fit(fn, x, target, p0=p0, bounds=bounds, maxfev=50000)
    except (RuntimeError, ValueError) as e:
        raise FitError(f"the {form} fit did not converge on these {len(y)} {what} ({e})") from None
    residuals = target - fn(x, *params)
    dof = len(y) - len(names)
    if dof <= 0:  # the points fix the parameters exactly and nothing measures their error: no interval
        return Fit(form, params, np.zeros((len(names), len(names))), math.inf, len(y))
    on_form = np.allclose(residuals, 0, atol=1e-12)  # scipy's covariance is then 0/0: zero or inf by chance
    if on_form and determined(fn, x, params):
        cov = np.zeros((len(names), len(names)))
    elif on_form or not np.isfinite(cov).all():
        raise FitError(f"these {len(y)} {what} do not determine the {form} form's parameters")
    return Fit(form, params, cov, math.sqrt((residuals ** 2).sum() / dof), len(y))


def jacobian(fn, x, params):
    """d fn(x, *params) / d params by forward differences: a row per point of x, a column per parameter (fn
    as curve_fit takes it, so forecast.py's law too)."""
    params = np.asarray(params, float)
    value, columns = np.ravel(fn(x, *params)), []
    for i, p in enumerate(params):
        h = 1e-6 * max(abs(p), 1e-3)
        bumped = params.copy()
        bumped[i] = p + h
        columns.append((np.ravel(fn(x, *bumped)) - value) / h)
    return np.column_stack(columns)


def determined(fn, x, params):
    """Whether points at x fix every parameter of fn near params: its Jacobian there has full column rank."""
    return np.linalg.matrix_rank(jacobian(fn, x, params)) == len(params)


def fit_lr(sizes, lrs):
    """The best learning rate against size: lr = c * N^b (a straight line in log-log)."""
    if len(sizes) < MIN_SIZES:
        raise FitError(f"{len(sizes)} sizes, a fit needs at least {MIN_SIZES}: add a size to the ladder")
    b, logc = np.polyfit(np.log(sizes), np.log(lrs), 1)
    return fit("lr", np.asarray(sizes, float), lrs, [logc, b], what="sizes")


ALONG_THE_RULE = ("power", "saturating", "plateau", "local")  # simplest first: local uses the fewest sizes
LOCAL_SIZES = 3


def fit_loss(sizes, losses, tokens=None):
    """The final val loss against size along one tokens-per-parameter rule: the form of ALONG_THE_RULE whose
    backtest misses least (power where none can be judged); 'chinchilla' when tokens are given and their ratio
    to size varies, drifting by its own backtest on the largest size's runs. Least, not power unless another
    halves its miss: on ladders drawn from each form with 1% noise, demanding half cost more on curved laws than
    it saved on straight ones (scripts/bench/form_choice.py)."""
    n, y = np.asarray(sizes, float), np.asarray(losses, float)
    if len(set(np.round(n))) < MIN_SIZES:
        raise FitError(f"{len(set(np.round(n)))} sizes, a fit needs at least {MIN_SIZES}: add a size to the ladder")
    if tokens is not None:
        d = np.asarray(tokens, float)
        several = lambda keep: np.ptp(np.log(d[keep] / n[keep])) > 0.1  # ratios: without them D says nothing
        if several(slice(None)):
            # the sizes below the largest at one ratio cannot judge the form: no backtest, no interval beyond
            miss = chinchilla_backtest(n, d, y) if several(n < n.max()) else math.inf
            return with_drift(fit_chinchilla(n, d, y), miss, n)
    misses = {form: backtest(form, n, y) for form in ALONG_THE_RULE}
    try:
        # misses within 0.01% of the least are a tie, and a tie goes to the simpler form (ALONG_THE_RULE's order):
        # a saturating fit whose floor is 0 is a power law, and a rounding difference should not name it otherwise
        least = min(misses.values())
        chosen = fit_form(next(f for f in ALONG_THE_RULE if misses[f] <= least + 1e-4), n, y)
    except FitError:  # the sizes below the largest chose it, all of them do not determine it
        chosen = fit_form("power", n, y)
    chosen.others = other_forms(chosen.form, n, y)
    return with_drift(chosen, misses[chosen.form], n)


def other_forms(chosen, n, y):
    """{form: parameters} of each form along the rule but the chosen one that these sizes fit with a point to
    spare (through as many points as parameters any curve passes, and says nothing of the law); local only
    where it is not power through all of them; and the s-shaped law, never chosen, read beside them."""
    out = {}
    for form in ALONG_THE_RULE:
        if form == chosen or len(n) <= len(FORMS[form][1]) or (form == "local" and len(n) <= LOCAL_SIZES):
            continue
        try:
            out[form] = fit_form(form, n, y).params.tolist()
        except FitError:  # a form these sizes do not determine bounds nothing
            continue
    if len(n) > len(FORMS["s_shaped"][1]) and (params := fit_s_shaped(n, y)) is not None:
        out["s_shaped"] = params.tolist()
    return out


def fit_s_shaped(n, y):
    """The s-shaped law E + (L0 - E)(1 + N/Nb)^-alpha's parameters (E, log L0, log Nb, alpha) by least squares
    from several starts (its least squares has local minima in Nb and E), or None where none converges. Never
    the chosen form (its backtest chose it too rarely, and it read 11-27% high where the chosen ones read low:
    docs/ladder_evidence.md, "The s-shaped form, fitted"); its reading bounds the interval beyond the sizes, as
    the rule's other forms do, because Muon's curve flattened past every one of theirs 6x out on the three seeds
    measured ("w400: further"). Only its parameters: its covariance on five or six sizes is seldom finite."""
    found = _s_shaped_fit(tuple(np.asarray(n, float).tolist()), tuple(np.asarray(y, float).tolist()))
    return None if found is None else np.array(found)


@functools.lru_cache(maxsize=4096)
def _s_shaped_fit(n, y):
    """fit_s_shaped's search (24 fits), once per ladder's sizes and losses: a ladder's checks and the plan
    read the same sizes again and again."""
    from scipy.optimize import curve_fit
    n, y = np.asarray(n, float), np.asarray(y, float)
    bounds = ([0, math.log(y.min()), math.log(n.min()) - 10, 0],
              [y.min(), math.log(y.max()) + 3, math.log(n.max()) + 10, 10])
    found = []
    for lognb in np.linspace(math.log(n.min()) - 1, math.log(n.max()) + 1, 8):
        for e in (0.0, 0.5 * y.min(), 0.9 * y.min()):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    params, _ = curve_fit(_s_shaped, n, y, p0=[e, math.log(y.max()), lognb, 1.0], bounds=bounds,
                                          maxfev=20000)
            except (RuntimeError, ValueError):
                continue
            found.append((float(((_s_shaped(n, *params) - y) ** 2).sum()), params))
    return tuple(min(found, key=lambda f: f[0])[1].tolist()) if found else None


def along_last_step(sizes, losses, n):
    """The loss at n read off the log-log line through the two largest sizes: the last step's slope carried on.
    A reading beside the fit, not a form it chooses: two points give it no scatter, so no interval, and a
    backtest would judge it on the step below, before a slope that is still changing has changed. Where it and
    the fit disagree, the law is still bending at the top (docs/ladder_evidence.md, "Seed 10 and the last step's
    slope")."""
    order = np.argsort(sizes)[-2:]
    (n1, n2), (y1, y2) = np.asarray(sizes, float)[order], np.asarray(losses, float)[order]
    return float(y2 * (n / n2) ** (math.log(y2 / y1) / math.log(n2 / n1)))


def fit_chinchilla(n, d, y):
    """Chinchilla's L(N, D) fitted to runs of n parameters and d tokens (at least 6: it has 5 parameters)."""
    slope, intercept = np.polyfit(np.log(n), np.log(y), 1)
    return fit("chinchilla", (n, d), y, [0.5 * y.min(), intercept, -slope, intercept, -slope],
               bounds=([0, -50, 0, -50, 0], [y.min(), 50, 3, 50, 3]), min_points=6, what="runs")


def chinchilla_backtest(n, d, y):
    """As backtest() along the rule: Chinchilla's fit without the largest size, its mean relative miss of that
    size's runs; inf where the runs below are too few to fit it."""
    top, below = n == n.max(), n < n.max()
    try:
        return float(np.mean(np.abs(fit_chinchilla(n[below], d[below], y[below])((n[top], d[top])) / y[top] - 1)))
    except FitError:
        return math.inf


def with_drift(loss_fit, miss, sizes):
    """loss_fit, its drift set from its backtest's miss: one step, log(largest / next size), missed by that
    much; inf where the backtest could not be made, so that nothing beyond the largest size is bounded."""
    top = np.unique(np.asarray(sizes, float))[-2:]  # a size measured at several ratios is one size
    loss_fit.drift, loss_fit.reach = miss / math.log(top[1] / top[0]), float(top[1])
    return loss_fit


UNJUDGED = "no interval: too few sizes for a backtest to judge the form this far out; add a size"


def interval_text(interval, fmt):
    """'[low, high]' in fmt, or UNJUDGED where there is none: interval None (a held-out check's) or unbounded
    (Fit.predict's)."""
    if interval is None or not math.isfinite(interval[1]):
        return f"({UNJUDGED})"
    return f"[{interval[0]:{fmt}}, {interval[1]:{fmt}}]"


def backtest(form, sizes, losses):
    """How far form, fitted on all sizes but the largest, misses the largest's loss (relative); inf where the
    smaller sizes cannot fit it with a point to spare (an exact fit through them judges nothing, and its
    interval would be unbounded)."""
    order = np.argsort(sizes)
    n, y = np.asarray(sizes, float)[order], np.asarray(losses, float)[order]
    try:
        miss = abs(float(fit_form(form, n[:-1], y[:-1], min_points=len(FORMS[form][1]) + 1)(n[-1])) / y[-1] - 1)
    except FitError:
        return math.inf
    return miss if math.isfinite(miss) else math.inf  # a largest size whose every run diverged judges nothing


def fit_form(form, n, y, min_points=MIN_SIZES):
    """One of ALONG_THE_RULE fitted to sizes n and losses y, from starting points suited to it."""
    if form == "local":  # a power law on the largest sizes alone; with no more sizes than that, it is power
        form = "local" if len(n) > LOCAL_SIZES else "power"
        top = np.argsort(n)[-LOCAL_SIZES:]
        n, y = n[top], y[top]
    slope, intercept = np.polyfit(np.log(n), np.log(y), 1)
    if form in ("power", "local"):
        return fit(form, n, y, [intercept, -slope], min_points=min_points, what="sizes")
    if form == "saturating":
        return fit("saturating", n, y, [0.5 * y.min(), intercept, -slope], bounds=([0, -50, 0], [y.min(), 50, 3]),
                   min_points=min_points, what="sizes")
    found, problem = [], None
    for lognb in np.linspace(math.log(n.min()) - 1, math.log(n.max()), 6):  # its least squares has local minima in Nb
        try:
            found.append(fit("plateau", n, y, [math.log(y.max()), lognb, max(-1.5 * slope, 0.05)],
                             bounds=([math.log(y.min()), math.log(n.min()) - 10, 0],
                                     [math.log(y.max()) + 3, math.log(n.max()) + 10, 5]),
                             min_points=min_points, what="sizes"))
        except FitError as e:
            problem = e
    if not found:
        raise problem
    return min(found, key=lambda f: float(((f(n) - y) ** 2).sum()))


def fit_task(losses, scores, chance=None):
    """Bhagia et al.'s second step: a task's score against a loss, a sigmoid falling as the loss rises (b the
    floor, a + b the ceiling). Given the task's chance (a multiple-choice guess), the floor is chance and the
    ceiling 1 (OLMo's ladder code anchors the top the same way, with a point of zero loss at the task's
    maximum), and only where and how steeply the score rises are fitted: left free, floor and ceiling settle
    where the ladder's scores stop, and a larger size was read below its score (docs/ladder_evidence.md, "Scores
    on the config")."""
    x, y = np.asarray(losses, float), np.asarray(scores, float)
    if chance is None or not 0 < chance < 1:
        found = fit("sigmoid", x, y, [max(y.max() - y.min(), 1e-3) * 2, -5.0, float(np.median(x)), y.min() * 0.9],
                    bounds=([0, -STEEPEST, 0, 0], [100, 0, 100, 100]), min_points=4, what="checkpoints")
    else:  # the sigmoid with a = 1 - chance and b = chance, fitted as its rise: a and b known, their variance 0
        rise = fit("rise", x, (y - chance) / (1 - chance), [-5.0, float(np.median(x))],
                   bounds=([-STEEPEST, 0], [0, 100]), min_points=4, what="checkpoints")
        cov = np.zeros((4, 4))
        cov[1:3, 1:3] = rise.cov
        found = Fit("sigmoid", [1 - chance, *rise.params, chance], cov, rise.scatter * (1 - chance), rise.n)
    if found.named()["k"] <= -0.99 * STEEPEST:  # a step between two scores: where it lies is not determined
        raise FitError(f"these {len(y)} checkpoints' scores do not rise steadily enough with falling loss to "
                       "fit a sigmoid (the fit is a step): score a task the ladder's sizes span more of")
    return found


FLOOR_SHARE = 0.25  # the share of a task's checkpoints, those of highest loss, that says where its scores start


def below_chance(losses, scores, chance):
    """Whether a task's weakest checkpoints (FLOOR_SHARE of them, 3 at least) score below chance by more than twice
    their mean's standard error. lm-eval's unnormalised acc can favour short or long answers, so a model that knows
    nothing scores under a guess; a sigmoid whose floor is chance cannot pass through such scores (on the CPU
    ladders next_line's acc started at 0.21-0.22 against 0.25, and the fit from chance read AdamW's held-out 28%
    as 65-70%), so such a task gets the free sigmoid."""
    order = np.argsort(np.asarray(losses, float))[::-1]
    weakest = np.asarray(scores, float)[order][:max(3, int(len(order) * FLOOR_SHARE))]
    if len(weakest) < 2:
        return False
    return float(weakest.mean()) < chance - 2 * float(weakest.std(ddof=1)) / math.sqrt(len(weakest))


def best_lr(lrs, losses):
    """(best learning rate, which edge of the sweep it is on or None): the vertex of a parabola in log lr
    through the lowest final loss and its two neighbours, kept between them; at an edge, that point; of a
    one-point sweep, its rate."""
    order = np.argsort(lrs)
    lrs, losses = np.asarray(lrs, float)[order], np.asarray(losses, float)[order]
    losses = np.where(np.isfinite(losses), losses, np.inf)  # a diverged run is the worst, not the best
    k = int(np.argmin(losses))
    if len(lrs) == 1:  # no sweep: the rate the sizes below predicted
        return float(lrs[0]), None
    if k == 0 or k == len(lrs) - 1:
        return float(lrs[k]), "low" if k == 0 else "high"
    x, y = np.log(lrs[k - 1:k + 2]), losses[k - 1:k + 2]
    a, b, _ = np.polyfit(x, y, 2)
    vertex = -b / (2 * a) if a > 0 else x[1]
    return float(math.exp(min(max(vertex, x[0]), x[2]))), None


def sweep_cost(lrs, losses, lr):
    """How much the sweep's own runs lose at lr against its lowest, relative: their final losses joined by
    straight lines in log lr and read at lr; None outside the sweep, inf beside a run that diverged. It is what
    a recommended rate costs, where its ratio to the best says little because the loss is flat near the best."""
    order = np.argsort(lrs)
    x, y = np.log(np.asarray(lrs, float)[order]), np.asarray(losses, float)[order]
    at, finite = math.log(lr), np.isfinite(y)
    if len(x) < 2 or not x[0] <= at <= x[-1]:
        return None
    if not finite.any() or not x[finite][0] <= at <= x[finite][-1]:
        return math.inf
    return float(np.interp(at, x[finite], y[finite]) / y[finite].min() - 1)


def rule_compute_ratio(needed, n):
    """How many times a run of n parameters' compute the run of `needed` parameters takes along a tokens rule
    (compute is 6 ratio N^2), or the reason size_for_loss gave for `needed` never being reached."""
    return needed if isinstance(needed, str) else (needed / n) ** 2


def size_for_loss(loss_fit, target, ratio=None):
    """The parameters at which a loss fit reaches target along its tokens rule (D = ratio * N for
    chinchilla), or a one-line reason no size is where it does: never reached, or passed at every size."""
    floor = loss_fit.named().get("E", 0.0)
    if target <= floor:
        return f"never, by this fit: its loss approaches {floor:.4f} and the target is {target:.4f}"
    from scipy.optimize import brentq
    f = (lambda logn: loss_fit(np.exp(logn)) - target) if loss_fit.form != "chinchilla" else \
        (lambda logn: loss_fit((np.exp(logn), ratio * np.exp(logn))) - target)
    low, high = math.log(1.0), math.log(1e16)
    if f(high) > 0:
        return f"never, by this fit: not even at 1e16 parameters (loss {f(high) + target:.4f} there)"
    if f(low) <= 0:  # a plateau's ceiling L0: every size is below the target, none is where it is reached
        return f"none, by this fit: its loss is below {target:.4f} at every size (at most {f(low) + target:.4f})"
    return float(math.exp(brentq(f, low, high)))


def tokens_for_loss(loss_fit, n, target):
    """The tokens a model of n parameters needs to reach target by a chinchilla fit, or a one-line reason."""
    if loss_fit.form != "chinchilla":
        return ("this ladder measured one tokens-per-parameter ratio, so its fit has no term in tokens: give "
                "tokens_per_param two ratios in the ladder's config")
    named = loss_fit.named()
    rest = target - named["E"] - named["A"] * n ** -named["alpha"]
    if rest <= 0:
        return (f"never, by this fit: at {n:.3g} parameters the loss approaches "
                f"{named['E'] + named['A'] * n ** -named['alpha']:.4f} and the target is {target:.4f}")
    return float((named["B"] / rest) ** (1 / named["beta"]))


def loss_for_score(task_fit, score):
    """The loss at which a task's sigmoid reaches score (Bhagia et al.'s step 2 inverted), or a one-line
    reason there is none: the sigmoid lies between b (chance) and a + b (its ceiling), so a score at or below b
    is reached at once and one at or above a + b never."""
    named = task_fit.named()
    a, k, l0, b = named["a"], named["k"], named["L0"], named["b"]
    if score <= b:  # chance, or the level the sigmoid starts from: a model scores it at any loss
        return f"at once, by this fit: its score is never below {b:.3f}, and the target is {score:.3f}"
    if not b < score < a + b:
        return f"never, by this fit: its score lies between {b:.3f} and {a + b:.3f}, and the target is {score:.3f}"
    return float(l0 - math.log(a / (score - b) - 1) / k)


def best_runs(runs, ratio):
    """Per size, by size: the rate of its sweep at the ratio with the lowest final val loss, a rate that
    scripts/ladder.py trained again at other seeds (its `replica` runs) by their mean (seed_mean). Where some
    rates have replicas only they compete: one run picked for being low beside other rates' means would win
    by its luck, which the seeds are there to average out; and a rate that diverged at fewer seeds beats one
    that diverged at more, whatever its survivors' mean (what the seeds are there to show is such a rate). A
    size whose every run diverged has no best run, says nothing of the law, and is left out (no_best_run)."""
    best = []
    for size in {r["size"] for r in runs if r["tokens_per_param"] == ratio}:
        rates = rate_means(runs, size, ratio)
        pick = min([r for r in rates if "seed_losses" in r] or rates, key=lambda r: (diverged_seeds(r), ranked_loss(r)))
        if math.isfinite(pick["final_val_loss"]):
            best.append(pick)
    return sorted(best, key=lambda r: r["params"])


def no_best_run(runs, ratio):
    """The sizes at the ratio whose every run diverged, which best_runs leaves out."""
    kept = {r["size"] for r in best_runs(runs, ratio)}
    return sorted({r["size"] for r in runs if r["tokens_per_param"] == ratio} - kept)


def diverged_seeds(rate):
    """How many of a rate's seeds diverged (rate: one run, or seed_mean's record of several)."""
    if "seed_losses" in rate:
        return len(rate["seed_losses"]) - rate["seeds_in_mean"]
    return 0 if math.isfinite(rate["final_val_loss"]) else 1


def seeded_rates(sweep, count):
    """The rates a ladder trains again at other seeds: those of the sweep's `count` lowest runs (its runs at one
    seed), a diverged run last."""
    return [r["lr"] for r in sorted(sweep, key=ranked_loss)[:count]]


def challenges(runs, size, ratio, lr):
    """Whether the rate lr, one run of a size's sweep, could still beat the rates already trained at every seed:
    its run is below their lowest mean. The seeds' mean of a sweep's lowest run rises above that run (it was
    picked for being low); a rate whose run stays above it is not trained again (successive halving's stop)."""
    means = [ranked_loss(m) for m in rate_means(runs, size, ratio) if "seed_losses" in m]
    one = next(r for r in runs if r["size"] == size and r["tokens_per_param"] == ratio and r["lr"] == lr
               and not r.get("replica"))
    return not means or ranked_loss(one) < min(means)


def ranked_loss(run):
    """A run's final val loss for ranking runs: one that diverged (NaN) ranks last."""
    return run["final_val_loss"] if math.isfinite(run["final_val_loss"]) else math.inf


def rate_means(runs, size, ratio):
    """One size's sweep at the ratio, by learning rate: each rate's run, or its runs at several seeds as one
    record (seed_mean)."""
    rates = {}
    for r in sorted(runs, key=lambda r: bool(r.get("replica"))):  # the sweep's run first: seed_mean keeps its record
        if r["size"] == size and r["tokens_per_param"] == ratio:
            rates.setdefault(r["lr"], []).append(r)
    return [seed_mean(same) for _, same in sorted(rates.items())]


def seed_mean(same):
    """One record for runs that differ only in their seed: the mean final val loss, curve and scores over the
    seeds that did not diverge (`seeds_in_mean` of them; `seed_losses` keeps each). Why the mean: the sweep's
    lowest run was picked for being low, and another seed at its rate ended up to 2.5-4.5% away on the CPU family,
    11-23% at a rate on the edge of stability, with a tenth of each run's warmup (docs/ladder_evidence.md), where
    the held-out size is judged to 3%."""
    if len(same) == 1:
        return same[0]
    finite = [r for r in same if math.isfinite(r["final_val_loss"])]
    kept = finite or same[:1]  # all diverged: the first, NaN
    length = min(len(r["curve"]) for r in kept)  # the same run at another seed: the same evaluations
    curve = np.mean([np.asarray(r["curve"][:length], dtype=float) for r in kept], axis=0).tolist()
    tasks = set.intersection(*(set(r["scores"]) for r in kept))
    return {**same[0], "final_val_loss": float(np.mean([r["final_val_loss"] for r in kept])), "curve": curve,
            "scores": {t: float(np.mean([r["scores"][t] for r in kept])) for t in sorted(tasks)},
            "seed_losses": {str(r.get("seed")): r["final_val_loss"] for r in same}, "seeds_in_mean": len(finite)}


RUN_KEYS = {"size", "params", "tokens_per_param", "lr", "final_val_loss"}  # a run's record, as best_runs reads it


def ladder_file(path):
    """path, or path/ladder.json where path is a folder: scripts/ladder.py writes one ladder.json to its --out
    folder, so the folder names it without a guess. FitError for a folder without one."""
    if not os.path.isdir(path):
        return path
    if not os.path.isfile(found := os.path.join(path, "ladder.json")):
        raise FitError(f"{path} is a folder without a ladder.json: pass the ladder.json scripts/ladder.py wrote "
                       "(OUT/ladder.json)")
    return found


def load(path, recipe=None, expected=None, fitted=False):
    """(ladder.json's contents, the recipe: the first one unless named): the one reader of a ladder, for
    plan.py, forecast_prior and scripts/ladder.py; path may be the ladder's folder. FitError when the file is
    not a ladder.json with recipes and their runs (fitted: their loss and lr fits, which plan.py reads), has no
    such recipe, or was measured on other data than expected (identity(), where given)."""
    path = ladder_file(path)
    try:
        result = json.loads(Path(path).read_text())
        recipes = result["recipes"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FitError(f"cannot read {path} as scripts/ladder.py's ladder.json ({type(e).__name__}: {e})") from None
    if not isinstance(recipes, dict) or not recipes:
        raise FitError(f"{path} has no recipes: rerun scripts/ladder.py to write it whole")
    whole = lambda r: isinstance(r, dict) and (isinstance(r.get("fits"), dict) and all(
        isinstance(r["fits"].get(k), dict) for k in ("loss", "lr")) if fitted else isinstance(r.get("runs"), list))
    # runs, where there are any, with what best_runs reads: plan.py and the prior read them too
    runs_whole = lambda r: isinstance(r.get("runs", []), list) and all(
        isinstance(run, dict) and RUN_KEYS <= set(run) for run in r.get("runs", []))
    # "data" is what the data checks compare: a ladder.json without it would pass for any data
    if not isinstance(result.get("data"), dict) or not all(whole(r) and runs_whole(r) for r in recipes.values()):
        raise FitError(f"{path} is not a whole ladder.json (its data, or a recipe's runs or fits, are missing): "
                       "rerun scripts/ladder.py to write it")
    if recipe and recipe not in recipes:
        raise FitError(f"{path}: the ladder has no recipe {recipe!r} (it has {sorted(recipes)})")
    if expected and (problem := identity_problem(result["data"], expected, f"{path} was measured")):
        raise FitError(problem)
    return result, recipe or next(iter(recipes))


SCHEDULE = ("lr_schedule", "lr_decay_fraction", "lr_decay_shape")  # a recipe's, in ladder.json beside its runs


def same_ratio(a, b):
    """Whether two tokens-per-parameter ratios (or two shares of a run) are one, within 10%."""
    return a == b or (a > 0 and b > 0 and abs(math.log(a / b)) <= 0.1)


def schedule(cfg):
    """A recipe's learning-rate schedule as ladder.json records it (SCHEDULE's keys; for cosine the decay's
    fraction and shape say nothing)."""
    return {k: getattr(cfg, k) for k in SCHEDULE[:1 if cfg.lr_schedule == "cosine" else None]}


def shape_problem(result, recipe, cfg, tokens_per_param):
    """Why a ladder's curves (result: its ladder.json; recipe: its name) are not the shape of cfg's run, which
    trains tokens_per_param: one line naming what differs and how to match it, or None. Its runs follow one
    schedule in fractions of their length; a run on another ratio, warmup share, decay or floor follows
    another curve (on the CPU ladder a quarter's warmup read for a tenth's missed by 5% at half-way,
    docs/scaling_ladder.md). What an older ladder.json did not record is not compared."""
    ratio, settings = result["tokens_per_param"][0], result.get("settings", {})
    if not same_ratio(ratio, tokens_per_param):
        return (f"the ladder's runs trained {ratio:g} tokens per parameter and this run {tokens_per_param:.1f}: its "
                f"curves and its prediction are another run's; train {ratio:g} tokens per parameter, or build a ladder "
                f"with tokens_per_param = {tokens_per_param:.1f} in its config")
    if "warmup_fraction" in settings and not same_ratio(settings["warmup_fraction"], cfg.warmup_iters / cfg.max_iters):
        share, warmup = cfg.warmup_iters / cfg.max_iters, round(settings["warmup_fraction"] * cfg.max_iters)
        return (f"the ladder's runs warmed up over {settings['warmup_fraction']:.1%} of their length and this run over "
                f"{share:.2%}: set warmup_iters={warmup}")
    if "min_lr_ratio" in settings and not same_ratio(settings["min_lr_ratio"], cfg.min_lr / cfg.learning_rate):
        return (f"the ladder's runs decayed to {settings['min_lr_ratio']:g} of their peak rate and this run to "
                f"{cfg.min_lr / cfg.learning_rate:.3g}: set min_lr={settings['min_lr_ratio'] * cfg.learning_rate:.3g}")
    if cfg.lr_decay_iters != cfg.max_iters:
        return (f"the ladder's runs decayed until their last step and this run until iter {cfg.lr_decay_iters} of "
                f"{cfg.max_iters}: set lr_decay_iters={cfg.max_iters}")
    recorded = result["recipes"][recipe].get("schedule")
    if recorded and (differs := {k: (v, getattr(cfg, k)) for k, v in recorded.items() if v != getattr(cfg, k)}):
        text = ", ".join(f"{k} {a!r}, here {b!r}" for k, (a, b) in differs.items())
        return f"the ladder's runs followed another schedule ({text}): build a ladder with this one"
    return None


# What makes a recipe's curves, besides its data and schedule (shape_problem) and the sizes: its runs were trained
# with these (base, common and the recipe's overrides), and a run given its prior must be too. Not how a run is
# carried out (device, batch split, compile, fp8 or the master weights' dtype: chosen to fit and speed a machine).
RECIPE_KEYS = ("optimizer", "muon_split_qkv", "weight_decay", "beta1", "beta2", "grad_clip", "dropout", "bias",
               "activation", "position", "rope_theta", "norm", "qk_norm", "tie_embeddings", "logit_softcap")


def recipe_mismatch(result, recipe, cfg):
    """{key: (the recipe's value, cfg's)} for each of RECIPE_KEYS the recipe's runs were trained with (ladder.json's
    "recipe_settings") that cfg's run sets otherwise; {} for a ladder.json older than the record."""
    trained = result["recipes"][recipe].get("recipe_settings", {})
    return {k: (v, getattr(cfg, k)) for k, v in trained.items() if v != getattr(cfg, k)}


def recipe_for_run(result, named, cfg, path):
    """The recipe of result (the ladder.json at path) whose curves cfg's run follows: the one named, or the only
    one; of several, the only one whose settings the run keeps. FitError naming what differs, or asking for the
    name where the settings cannot tell (a ladder.json older than the record, or recipes alike)."""
    recipes = [named] if named else list(result["recipes"])
    if len(recipes) == 1:
        if differs := recipe_mismatch(result, recipes[0], cfg):
            text = ", ".join(f"{k}={a!r} (this run {b!r})" for k, (a, b) in differs.items())
            raise FitError(f"recipe {recipes[0]!r} of {path} trained with {text}, so its curves are another "
                           "recipe's: set those, or name the recipe this run follows (forecast_prior=PATH:NAME)")
        return recipes[0]
    kept = [r for r in recipes if not recipe_mismatch(result, r, cfg)]
    if len(kept) == 1:
        return kept[0]
    which = "none of them" if not kept else f"each of {', '.join(kept)}"
    raise FitError(f"{path} holds the recipes {', '.join(recipes)}, and this run's settings match {which}: name the "
                   "one it follows (forecast_prior=PATH:NAME)")


def by_folder_name(key, value):
    """A setting as it compares between runs: data_dir, and data_mixture's folders, by the folder's name (as
    train.py keys its sources), so that a run on a volume mounted elsewhere is the same run; others as they are."""
    name = lambda path: os.path.basename(os.path.normpath(path))
    if key == "data_dir" and value:
        return name(value)
    if key == "data_mixture" and value:
        return {name(folder): weight for folder, weight in value.items()}
    return value


def identity(cfg):
    """What a ladder's losses were measured on (cfg: a resolved config): its data and vocabulary, free of where
    they lie (a mixture's folders by name, as train.py keys its sources; a rank file by its hash), so that a
    volume mounted elsewhere holds the same ladder."""
    info = bins.read_meta(cfg.data_dir) or {}
    return {"dataset": cfg.dataset, "data_mixture": by_folder_name("data_mixture", cfg.data_mixture) or None,
            "vocab_size": cfg.vocab_size,
            "encoding": tokenizer.identity(info) if info.get("encoding") else None,
            "train_tokens": info.get("splits", {}).get("train", {}).get("tokens")}


def identity_problem(found, expected, where, why="its fits do not apply"):
    """One line ("{where} on other data or vocabulary (...): {why}") when a ladder (found: its ladder.json's
    "data") was measured on other data or vocabulary than expected, whose losses its fits do not predict; else
    None. A figure missing on either side is not compared; a data_mixture of None is one: no mixture, one dataset."""
    known = lambda k, v: v is not None or k == "data_mixture"
    differs = {k: (found[k], v) for k, v in expected.items()
               if k in found and found[k] != v and known(k, found[k]) and known(k, v)}
    if differs:
        return (f"{where} on other data or vocabulary ("
                + ", ".join(f"{k} {a!r}, here {b!r}" for k, (a, b) in differs.items()) + f"): {why}")
    return None
