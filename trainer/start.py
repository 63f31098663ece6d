"""Where a run starts: its checkpoint (resume), one to roll back to, imported weights, or scratch; and the
rules of a cooldown fork, which starts from another run's checkpoint.

`start_point(cfg, ...)` decides it once, before anything is built, with the architecture that implies (a
checkpoint's or the weights' own, written into cfg). checkpointer.py puts the chosen checkpoint into the
live run. Problems are raised as StartError, one line each.
"""
import os
import time
import types

import torch.distributed as dist

from model import ARCHITECTURE_KEYS, GPTConfig
from trainer import RunError, checkpoint, hf


class StartError(RunError):
    """A start point that cannot be used, with what to do about it."""


def start_point(cfg, defaults, master, log):
    """What this run starts from, as a namespace: state (a checkpoint to continue, else None), weights and
    encoding (imported weights for a new run, else None), saved_args (the model_args the weights fix, or
    None) and origin (whose they are, for messages). init_from 'auto' continues out_dir's newest loadable
    checkpoint, else starts from scratch (or init_weights / a GPT-2 name); a path continues that checkpoint,
    setting newer ones of out_dir aside (a roll back). The architecture keys of cfg become the weights' own
    (their provenance 'from <origin>'); one the config sets to another value than its default
    (configurator.DEFAULTS) and the weights' is a StartError. A cooldown fork (cooldown_iters) also gets
    cooldown_from, the iteration its decay starts at, and max_iters its end; continuing_fork says the same
    fork command ran before and goes on from the fork's own newest checkpoint. load_seconds: the checkpoint's read."""
    continuing_fork = continues_fork(cfg)
    if continuing_fork:
        cfg.init_from = "resume"
    pretrained = cfg.init_weights or (cfg.init_from if cfg.init_from in hf.GPT2_MODELS else "")
    from_path = cfg.init_from not in ("auto", "resume", "scratch", *hf.GPT2_MODELS)
    if cfg.init_weights and cfg.init_from not in ("auto", "scratch"):
        raise StartError(f"init_weights starts a new run, init_from={cfg.init_from!r} continues one: drop one of them")
    if from_path and not os.path.exists(cfg.init_from):
        raise StartError(f"init_from: no such checkpoint {cfg.init_from}")
    if master:
        checkpoint.remove_stale_temp_files(cfg.out_dir, log=log)
    if dist.is_initialized():
        dist.barrier()  # the others look at out_dir only once rank 0 has tidied it
    start = types.SimpleNamespace(state=None, weights=None, encoding=None, saved_args=None, origin=None,
                                  pretrained=pretrained, continuing_fork=continuing_fork, cooldown_from=None)
    t0 = time.time()
    start.state = _checkpoint_to_continue(cfg, from_path, master, log)
    start.load_seconds = time.time() - t0  # the read; restoring adds the copy into the model (checkpointer.py)
    if start.state is not None:
        start.saved_args, start.origin = start.state["model_args"], "the checkpoint"
    elif pretrained:
        try:
            start.saved_args, start.weights, start.encoding = hf.load_weights(pretrained, log=log)
        except hf.WeightsError as e:
            raise StartError(f"{'init_weights' if cfg.init_weights else 'init_from'}: {e}") from None
        start.origin = pretrained
    if start.saved_args is not None:
        take_architecture(cfg, defaults, start.saved_args, start.origin)
    if start.state is not None:
        start.cooldown_from = cooldown_from(cfg, start.state, continuing_fork)
    if start.cooldown_from is not None:  # a cooldown fork stops after its cooldown
        cfg.max_iters = start.cooldown_from + cfg.cooldown_iters
    return start


def _checkpoint_to_continue(cfg, from_path, master, log):
    """The checkpoint state init_from names, or None for a new run."""
    if cfg.init_from == "scratch":
        if existing := checkpoint.list_checkpoints(cfg.out_dir):
            raise StartError(f"init_from='scratch' but {cfg.out_dir} holds {len(existing)} checkpoint(s) (newest "
                              f"{os.path.basename(existing[0][1])}); use another out_dir, or init_from='auto' to continue")
        return None
    if not from_path:
        state = checkpoint.load_newest_on_every_rank(cfg.out_dir, log=log)
        if state is None and cfg.init_from == "resume":
            raise StartError(f"init_from='resume' but {cfg.out_dir} has no checkpoint; use init_from='auto' to "
                              "start from scratch")
        return state
    state = checkpoint.load_checkpoint(cfg.init_from, log=log)
    # an earlier checkpoint of this out_dir: set the newer ones aside, only now that it has loaded
    init_path = os.path.abspath(cfg.init_from)  # also for 'ckpt_N/' with a trailing slash
    if master and os.path.samefile(os.path.dirname(init_path), cfg.out_dir) and checkpoint.roll_back_to(init_path, log=log):
        log("rolled back: once this run is going, drop --init_from to continue it later "
            "(running this same command again would roll back again)")
    return state


def take_architecture(cfg, defaults, saved_args, origin):
    """Set cfg's architecture keys to saved_args' (a checkpoint's or imported weights' model_args). A key the
    config set to a value other than both its default and the saved one is a mistake, named with where it
    was set (cfg.sources, configurator.py's record)."""
    sources = getattr(cfg, "sources", {})
    for key in ARCHITECTURE_KEYS:
        saved, wanted = saved_args.get(key, getattr(GPTConfig, key)), getattr(cfg, key)
        if wanted != saved and wanted != defaults[key]:
            raise StartError(f"{key}={wanted!r} (set {sources.get(key, 'in the config')}) conflicts with {origin}'s {key}={saved!r}: the "
                              f"architecture comes from {origin}, so leave {key} out, or train a new model in a new out_dir")
        setattr(cfg, key, saved)
        if wanted != saved:
            sources[key] = f"from {origin}"


# Cooldown forks: `--init_from=OUT/ckpt_N.pt --out_dir=FORK --cooldown_iters=K` anneals a copy of the run at N
# in FORK (schedule.py gives its learning rates) and stops at N+K. The source's out_dir is only read: nothing
# there is locked, logged, tidied or rolled back, so its run can go on meanwhile and rotate ckpt_N away.

def fork_problem(cfg):
    """Why this cooldown fork must not start, in one line, or None. Checked before anything opens out_dir,
    which for a fork into the source's own out_dir would be the source's."""
    if cfg.cooldown_iters <= 0:
        return None
    if cfg.init_from in ("auto", "resume", "scratch", *hf.GPT2_MODELS):
        return (f"cooldown_iters={cfg.cooldown_iters} needs --init_from=OUT/ckpt_N.pt, the checkpoint to cool down "
                f"from, not init_from={cfg.init_from!r}")
    source = os.path.realpath(os.path.dirname(os.path.abspath(cfg.init_from)))
    if source == os.path.realpath(cfg.out_dir):
        return (f"cooldown_iters={cfg.cooldown_iters} into {cfg.out_dir}, the source checkpoint's own out_dir, would "
                f"overwrite that run's checkpoints: give the fork a new --out_dir")
    return None


def continues_fork(cfg):
    """A cooldown fork whose out_dir already holds checkpoints: the same command again goes on from the fork's
    own newest checkpoint, not back to the source's (which may be gone by now)."""
    return cfg.cooldown_iters > 0 and bool(checkpoint.list_checkpoints(cfg.out_dir))


def cooldown_from(cfg, state, continuing):
    """The iteration a cooldown fork's decay starts from (None for any other run): the source checkpoint's
    iteration, kept in each of the fork's own checkpoints."""
    if cfg.cooldown_iters <= 0:
        return None
    if not continuing:
        return state["iter_num"]
    if state.get("cooldown_from") is None:
        raise StartError(f"{cfg.out_dir} holds checkpoints of a run that is not a cooldown fork: give the fork a "
                          f"new --out_dir")
    return state["cooldown_from"]
