"""What a ladder's runs say, beyond the runs: each recipe's fits (trainer/ladder.py's laws, through each size's
best run), their held-out checks (the fits made again without the largest sizes, their prediction for the
largest beside what it measured) and the compute multipliers between recipes. scripts/ladder.py trains the
runs and writes this into ladder.json; plan.py and the in-run forecast read it back."""
import math

import numpy as np

from trainer import ladder


def analyse(runs_by_recipe, ratio):
    """{recipe: {"fits", "held_out", "held_out_further", and after the first recipe "compute_multiplier_vs_FIRST"}}
    from {recipe: its runs}; FitError names a fit that cannot be made at all."""
    out = {}
    for name, runs in runs_by_recipe.items():
        try:
            recipe_fits = fits(runs, ratio)
        except ladder.FitError as e:
            raise ladder.FitError(f"recipe {name}: {e}") from None
        out[name] = {"fits": recipe_fits, "held_out": held_out(runs, ratio),
                     "held_out_further": [held_out(runs, ratio, k)  # the same check at 2, 3, ... sizes' distance
                                          for k in range(2, len(ladder.best_runs(runs, ratio)) - ladder.MIN_SIZES + 1)]}
    names = list(runs_by_recipe)
    for other in names[1:]:
        out[other]["compute_multiplier_vs_" + names[0]] = compute_multipliers(
            {"runs": runs_by_recipe[names[0]], **out[names[0]]}, {"runs": runs_by_recipe[other]}, ratio)
    return out


def fits(runs, ratio):
    """One recipe's fits (the best learning rate, the final val loss along the rule, and where the ladder
    measured several ratios or has scores, Chinchilla's form and the task fits) as JSON-ready dicts."""
    best = ladder.best_runs(runs, ratio)
    if len(best) < ladder.MIN_SIZES and (lost := ladder.no_best_run(runs, ratio)):
        raise ladder.FitError(f"every run diverged at {', '.join(lost)}, which leaves {len(best)} sizes and a fit "
                              f"needs {ladder.MIN_SIZES}: sweep lower learning rates (the recipe's learning_rate)")
    sizes = [r["params"] for r in best]
    out = {"lr": ladder.fit_lr(*lr_points(runs, best, ratio)).to_json(),
           "loss": ladder.fit_loss(sizes, [r["final_val_loss"] for r in best]).to_json()}
    at_best = at_best_rates(runs, ratio)
    if several_ratios(at_best):
        try:
            out["loss_nd"] = fit_nd(at_best).to_json()
        except ladder.FitError as e:  # the fit along the rule still stands
            out["loss_nd_problem"] = str(e)
    for task, fit in task_fits(runs, ratio).items():
        out.setdefault("tasks" if isinstance(fit, ladder.Fit) else "task_problems", {})[task] = \
            {**fit.to_json(), **chance_of(scored_runs(runs, ratio), task)} if isinstance(fit, ladder.Fit) else fit
    return out


def lr_points(runs, best, ratio):
    """(sizes, best rates) for the learning-rate fit: the sizes among best whose rate was swept. A size trained
    once (the GPU ladder's largest) ran at the rate this fit predicted: as a point it would add no measurement
    but narrow the fit's interval. All of best where fewer than MIN_SIZES were swept (a ladder without sweeps)."""
    chosen = [r for r in best if len(swept(runs, r["size"], ratio)) > 1]
    chosen = chosen if len(chosen) >= ladder.MIN_SIZES else best
    return [r["params"] for r in chosen], [r["sweep_best_lr"] for r in chosen]


def at_best_rates(runs, ratio):
    """Each size's best run at the ratio (ladder.best_runs) and its one run at each other ratio: Chinchilla's
    points (a run that diverged is none: it says nothing of the law, nor does a size best_runs left out)."""
    best = ladder.best_runs(runs, ratio)
    kept = {r["size"] for r in best}
    return [r for r in runs if r["tokens_per_param"] != ratio and r["size"] in kept
            and math.isfinite(r["final_val_loss"])] + best


def several_ratios(runs):
    """Whether these runs were trained at more than one tokens-per-parameter ratio (what Chinchilla's fit needs)."""
    return len({r["tokens_per_param"] for r in runs}) > 1


def fit_nd(runs):
    """Chinchilla's L(N, D) through these runs (at_best_rates)."""
    return ladder.fit_loss([r["params"] for r in runs], [r["final_val_loss"] for r in runs], [r["tokens"] for r in runs])


def task_fits(runs, ratio):
    """{task/metric: its score against the final val loss (Bhagia et al.'s step 2; eval.py gives no task
    loss), or why it cannot be fitted}, on every run of the sweeps that was scored: how a loss maps to a score
    does not depend on the learning rate that reached it, and Bhagia et al. fit it on every checkpoint of
    their ladder, not only each size's best."""
    scored, out = scored_runs(runs, ratio), {}
    for task in sorted({k for r in scored for k in r["scores"]}):
        have = [r for r in scored if task in r["scores"]]
        try:
            out[task] = ladder.fit_task([r["final_val_loss"] for r in have], [r["scores"][task] for r in have],
                                        chance_of(have, task).get("chance"))
        except ladder.FitError as e:
            out[task] = str(e)
    return out


def scored_runs(runs, ratio):
    """The runs at the ratio that were scored and whose loss is finite: the points of every task fit."""
    return [r for r in runs if r["tokens_per_param"] == ratio and r["scores"] and math.isfinite(r["final_val_loss"])]


def chance_of(runs, task):
    """{'chance': the accuracy of a guess at task ('hellaswag/acc_norm'), as eval.py gave it for every run that
    was scored on it}: the task's fit starts from it; {} where it gave none (not a multiple-choice task, or scored
    before eval.py said) or where the weakest of these runs score below it (ladder.below_chance)."""
    have = [r for r in runs if task in r["scores"]]
    said = {r.get("chance", {}).get(task.split("/")[0]) for r in have}
    if len(said) != 1 or None in said:
        return {}
    chance = said.pop()
    below = ladder.below_chance([r["final_val_loss"] for r in have], [r["scores"][task] for r in have], chance)
    return {} if below else {"chance": chance}


def held_out(runs, ratio, k=1):
    """Fitted on all sizes but the k largest: the prediction for the largest beside what it measured, and how
    far it extrapolated (the largest's parameters over the largest fitted size's); beside it the reading no fit
    makes, the last fitted step's slope carried on (ladder.along_last_step). k = 1 is the ladder's check;
    larger k says how its error grows with the distance, as a target lies further beyond a ladder than one step."""
    best = ladder.best_runs(runs, ratio)
    if len(best) < ladder.MIN_SIZES + k:
        return {"problem": f"{len(best)} sizes: holding {k} out leaves fewer than {ladder.MIN_SIZES} to fit"}
    last, rest = best[-1], best[:-k]
    sizes, losses = [r["params"] for r in rest], [r["final_val_loss"] for r in rest]
    try:
        loss_fit = ladder.fit_loss(sizes, losses)
    except ladder.FitError as e:  # the ladder's own fits stand; this check says why it is missing
        return {"problem": f"holding {k} out: {e}"}
    loss = loss_fit.predict(last["params"])
    lr = ladder.fit_lr(*lr_points(runs, rest, ratio)).predict(last["params"])
    measured, sweep = last["final_val_loss"], swept(runs, last["size"], ratio)
    last_step = ladder.along_last_step(sizes, losses, last["params"])
    fitted = {r["size"] for r in rest}
    scores = {task: {"predicted": float(fit(loss[0])), "measured": last["scores"][task]}  # both of Bhagia's steps
              if isinstance(fit, ladder.Fit) else {"problem": fit}
              for task, fit in task_fits([r for r in runs if r["size"] in fitted], ratio).items()
              if task in last["scores"]}
    return {"size": last["size"], "params": last["params"], "held_out_sizes": k,
            "extrapolation": last["params"] / sizes[-1], "measured_val_loss": measured, "form": loss_fit.form,
            "seed_losses": last.get("seed_losses", {}),  # what measured_val_loss is the mean of, with seeds
            "predicted_val_loss": loss[0], **judged(loss, measured),
            "relative_error": (loss[0] - measured) / measured, "recommended_lr": lr[0], "lr_interval": lr[1:],
            "last_step": {"predicted_val_loss": last_step, "relative_error": last_step / measured - 1},
            "sweep_best_lr": last["sweep_best_lr"], "lr_ratio": lr[0] / last["sweep_best_lr"],
            "sweep_lrs": [lr for lr, _ in sweep], "lr_cost": ladder.sweep_cost(*zip(*sweep), lr[0]),
            "scores": scores, **held_out_nd(runs, ratio, fitted, last["size"])}


def held_out_nd(runs, ratio, fitted, size):
    """Where the ladder measured several ratios: {"chinchilla": Chinchilla's fit on the fitted sizes' runs, its
    prediction of each of size's runs (one per ratio) beside what it measured}, or its problem; {} otherwise.
    plan.py reads this fit at the target, so it is the one a target's prediction rests on."""
    at_best = at_best_rates(runs, ratio)
    if not several_ratios(at_best):
        return {}
    below = [r for r in at_best if r["size"] in fitted]
    if not several_ratios(below):
        return {"chinchilla": {"problem": "the sizes fitted were measured at one ratio"}}
    try:
        nd = fit_nd(below)
    except ladder.FitError as e:
        return {"chinchilla": {"problem": str(e)}}
    checks = []
    for r in sorted((r for r in at_best if r["size"] == size), key=lambda r: -r["tokens_per_param"]):
        value, low, high = nd.predict((r["params"], r["tokens"]))
        measured = r["final_val_loss"]
        checks.append({"tokens_per_param": r["tokens_per_param"], "predicted_val_loss": value,
                       **judged((value, low, high), measured), "measured_val_loss": measured,
                       "relative_error": (value - measured) / measured})
    return {"chinchilla": checks}


def judged(prediction, measured):
    """{"interval", "inside"} of a (value, low, high) prediction beside its measurement; both None where the
    prediction has no interval (ladder.UNJUDGED: JSON holds no infinity, and a check it cannot fail is none)."""
    _, low, high = prediction
    bounded = math.isfinite(high)
    return {"interval": [low, high] if bounded else None, "inside": low <= measured <= high if bounded else None}


def where(check):
    """'inside' or 'outside' its interval, or 'no interval' where the check had none (judged)."""
    return "no interval" if check["inside"] is None else "inside" if check["inside"] else "outside"


def swept(runs, size, ratio):
    """One size's sweep at the ratio as (learning rate, final val loss) pairs, sorted (not the replicas)."""
    return sorted((r["lr"], r["final_val_loss"]) for r in runs
                  if r["size"] == size and r["tokens_per_param"] == ratio and not r.get("replica"))


def compute_multipliers(reference, other, ratio):
    """At each of the other recipe's sizes, how many times the reference recipe's training compute reaches
    its measured loss: (N_ref / N)^2 along the tokens rule, as compute is 6 N D = 6 ratio N^2. N_ref is
    interpolated in log-log between the reference's measured sizes where they bracket the loss ("measured"),
    else solved from the reference's loss fit ("fit"). Above 1: the other recipe saves compute."""
    ref = [(r["params"], r["final_val_loss"]) for r in ladder.best_runs(reference["runs"], ratio)]
    ref_fit, out = ladder.Fit.from_json(reference["fits"]["loss"]), {}
    for r in ladder.best_runs(other["runs"], ratio):
        n, loss = r["params"], r["final_val_loss"]
        bracket = [(a, b) for a, b in zip(ref, ref[1:]) if b[1] <= loss <= a[1]]
        if bracket:
            (n0, l0), (n1, l1) = bracket[0]
            needed = math.exp(np.interp(math.log(loss), [math.log(l1), math.log(l0)], [math.log(n1), math.log(n0)]))
        else:
            needed = ladder.size_for_loss(ref_fit, loss, ratio)
        out[r["size"]] = {"multiplier": ladder.rule_compute_ratio(needed, n),
                          "by": "measured" if bracket else "fit"}
    return out
