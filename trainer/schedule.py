"""The learning rate at each iteration: one function, learning_rate(), read by train.py and the forecast.

'cosine' (the default, GPT-3's): linear warmup, cosine decay to min_lr at lr_decay_iters, then min_lr.
'wsd' (warmup-stable-decay): linear warmup, learning_rate held, then a decay to min_lr over the last
lr_decay_fraction of lr_decay_iters. Its shape is lr_decay_shape: 'sqrt' (the default) is Hägele et al.'s
1-sqrt cooldown (NeurIPS 2024, arXiv 2405.18392), which beat a linear one at equal length in their runs and
matches cosine with a 20% cooldown; 'linear' is MiniCPM's and torchtitan's plain ramp.

A cooldown fork (cooldown_iters=K from a checkpoint at iteration N, checkpointer.py) decays from the
schedule's value at N to min_lr over K steps in the same shape, whatever the schedule.
"""
import math

SCHEDULES = ("cosine", "wsd")
SHAPES = ("sqrt", "linear")


def decay_start(cfg):
    """The iteration a WSD run's decay begins: the last lr_decay_fraction of lr_decay_iters, after warmup."""
    return max(cfg.warmup_iters, round(cfg.lr_decay_iters * (1 - cfg.lr_decay_fraction)))


def _remaining(progress, shape):
    """How much of the way from min_lr to the peak is left, progress of the way through a decay (0..1)."""
    progress = min(max(progress, 0.0), 1.0)
    return 1 - math.sqrt(progress) if shape == "sqrt" else 1 - progress


def learning_rate(it, cfg, cooldown_from=None):
    """The learning rate of step it (0-based). cooldown_from: the iteration a cooldown fork started from."""
    if cooldown_from is not None and it >= cooldown_from:
        peak = learning_rate(cooldown_from, cfg)
        progress = (it - cooldown_from) / max(1, cfg.cooldown_iters)
        return cfg.min_lr + _remaining(progress, cfg.lr_decay_shape) * (peak - cfg.min_lr)
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
    if cfg.lr_schedule == "wsd":
        start = decay_start(cfg)
        progress = (it - start) / max(1, cfg.lr_decay_iters - start)
        return cfg.min_lr + _remaining(progress, cfg.lr_decay_shape) * (cfg.learning_rate - cfg.min_lr)
    ratio = (it - cfg.warmup_iters) / max(1, cfg.lr_decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def first_difference(before, after, until, cooldown_from=None):
    """The first step below `until` whose learning rate differs between configs `before` and `after`, else `until`:
    the evaluations up to it followed either schedule, those after it (to `until`) only `before`'s."""
    return next((it for it in range(until) if not math.isclose(learning_rate(it, before, cooldown_from),
                                                               learning_rate(it, after, cooldown_from))), until)


def describe(cfg, cooldown_from=None):
    """train.log's line naming the schedule and where its decay starts."""
    if cooldown_from is not None:
        return (f"schedule: cooldown fork from iter {cooldown_from} (lr {learning_rate(cooldown_from, cfg):.3e}), "
                f"{cfg.lr_decay_shape} decay to min_lr {cfg.min_lr:.3e} over {cfg.cooldown_iters} steps, "
                f"ending at iter {cooldown_from + cfg.cooldown_iters}")
    if not cfg.decay_lr:
        return f"schedule: constant learning_rate {cfg.learning_rate:.3e} (decay_lr=False)"
    if cfg.lr_schedule == "wsd":
        return (f"schedule: wsd, warmup {cfg.warmup_iters} iters, learning_rate {cfg.learning_rate:.3e} until iter "
                f"{decay_start(cfg)}, then {cfg.lr_decay_shape} decay to min_lr {cfg.min_lr:.3e} at iter "
                f"{cfg.lr_decay_iters}")
    return (f"schedule: cosine, warmup {cfg.warmup_iters} iters, decay from iter {cfg.warmup_iters} from "
            f"learning_rate {cfg.learning_rate:.3e} to min_lr {cfg.min_lr:.3e} at iter {cfg.lr_decay_iters}")


def problem(cfg):
    """The first schedule setting train.py cannot run with, as one line, or None."""
    if cfg.lr_schedule not in SCHEDULES:
        return f"lr_schedule must be {' or '.join(map(repr, SCHEDULES))}, got {cfg.lr_schedule!r}"
    if not 0 < cfg.lr_decay_fraction <= 1:
        return f"lr_decay_fraction must be in (0, 1], the share of lr_decay_iters spent decaying; got {cfg.lr_decay_fraction}"
    if cfg.lr_decay_shape not in SHAPES:
        return f"lr_decay_shape must be {' or '.join(map(repr, SHAPES))}, got {cfg.lr_decay_shape!r}"
    if cfg.cooldown_iters < 0:
        return f"cooldown_iters must be 0 (no cooldown fork) or more, got {cfg.cooldown_iters}"
    if cfg.max_iters < 1 or cfg.lr_decay_iters < 1:
        key = "max_iters" if cfg.max_iters < 1 else "lr_decay_iters"
        return f"{key} must be at least 1, got {getattr(cfg, key)}"
    if cfg.warmup_iters < 0:
        return f"warmup_iters must be 0 or more, got {cfg.warmup_iters}"
    if cfg.decay_lr and cfg.warmup_iters > cfg.lr_decay_iters:
        return (f"warmup_iters ({cfg.warmup_iters}) is past lr_decay_iters ({cfg.lr_decay_iters}), where the decay "
                "ends: shorten the warmup or set lr_decay_iters to the run's length")
    if not 0 < cfg.learning_rate:
        return f"learning_rate must be more than 0, got {cfg.learning_rate}"
    if cfg.decay_lr and not 0 <= cfg.min_lr <= cfg.learning_rate:  # without decay min_lr is never reached
        return f"min_lr must be between 0 and learning_rate ({cfg.learning_rate}), got {cfg.min_lr}"
    return None
