"""Where a run starts, and its state beyond weights and optimizer: what a checkpoint keeps, how it goes back in.

`start_point(cfg, ...)` decides what a run starts from (its checkpoint, one to roll back to, imported
weights, or scratch) and the architecture that implies. train.py saves `run_state(...)` beside the weights
and optimizer, and `restore(...)` puts a loaded checkpoint back into the live run: weights, optimizer, data
position, RNGs and spike statistics. Both sides live here, so a field added to one cannot be forgotten by
the other, the RNG states included (rng_state, set_rng_state). Problems are raised as ResumeError, one
line each, for train.py to print.
"""
import io
import math
import os
import random
import time
import types

import numpy as np
import torch
import torch.distributed as dist

from model import ARCHITECTURE_KEYS, GPTConfig
from trainer import checkpoint, hf, mixture, optim, sharding, spikes

# The learning-rate schedule may change at a resume (a longer run, a lower peak): logged, not refused.
SCHEDULE_KEYS = ("learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "decay_lr", "max_iters", "lr_schedule",
                 "lr_decay_fraction", "lr_decay_shape")


class ResumeError(Exception):
    """A checkpoint that cannot continue this run, with what to do about it."""


def start_point(cfg, defaults, master, log):
    """What this run starts from, as a namespace: state (a checkpoint to continue, else None), weights and
    encoding (imported weights for a new run, else None), saved_args (the model_args the weights fix, or
    None) and origin (whose they are, for messages). init_from 'auto' continues out_dir's newest loadable
    checkpoint, else starts from scratch (or init_weights / a GPT-2 name); a path continues that checkpoint,
    setting newer ones of out_dir aside (a roll back). The architecture keys of cfg become the weights' own
    (their provenance 'from <origin>'); one the config sets to another value than its default
    (configurator.DEFAULTS) and the weights' is a ResumeError. A cooldown fork (cooldown_iters) also gets
    cooldown_from, the iteration its decay starts at, and max_iters its end; continuing_fork says the same
    fork command ran before and goes on from the fork's own newest checkpoint. load_seconds: the checkpoint's read."""
    continuing_fork = continues_fork(cfg)
    if continuing_fork:
        cfg.init_from = "resume"
    pretrained = cfg.init_weights or (cfg.init_from if cfg.init_from in hf.GPT2_MODELS else "")
    from_path = cfg.init_from not in ("auto", "resume", "scratch", *hf.GPT2_MODELS)
    if cfg.init_weights and cfg.init_from not in ("auto", "scratch"):
        raise ResumeError(f"init_weights starts a new run, init_from={cfg.init_from!r} continues one: drop one of them")
    if from_path and not os.path.exists(cfg.init_from):
        raise ResumeError(f"init_from: no such checkpoint {cfg.init_from}")
    if master:
        checkpoint.remove_stale_temp_files(cfg.out_dir, log=log)
    if dist.is_initialized():
        dist.barrier()  # the others look at out_dir only once rank 0 has tidied it
    start = types.SimpleNamespace(state=None, weights=None, encoding=None, saved_args=None, origin=None,
                                  pretrained=pretrained, continuing_fork=continuing_fork, cooldown_from=None)
    t0 = time.time()
    try:
        start.state = _checkpoint_to_continue(cfg, from_path, master, log)
        start.load_seconds = time.time() - t0  # the read; restoring adds the copy into the model (train.py)
    except checkpoint.CheckpointError as e:
        raise ResumeError(str(e)) from None
    if start.state is not None:
        start.saved_args, start.origin = start.state["model_args"], "the checkpoint"
    elif pretrained:
        try:
            start.saved_args, start.weights, start.encoding = hf.load_weights(pretrained, log=log)
        except hf.WeightsError as e:
            raise ResumeError(f"{'init_weights' if cfg.init_weights else 'init_from'}: {e}") from None
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
            raise ResumeError(f"init_from='scratch' but {cfg.out_dir} holds {len(existing)} checkpoint(s) (newest "
                              f"{os.path.basename(existing[0][1])}); use another out_dir, or init_from='auto' to continue")
        return None
    if not from_path:
        state = checkpoint.load_newest_on_every_rank(cfg.out_dir, log=log)
        if state is None and cfg.init_from == "resume":
            raise ResumeError(f"init_from='resume' but {cfg.out_dir} has no checkpoint; use init_from='auto' to "
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
            raise ResumeError(f"{key}={wanted!r} (set {sources.get(key, 'in the config')}) conflicts with {origin}'s {key}={saved!r}: the "
                              f"architecture comes from {origin}, so leave {key} out, or train a new model in a new out_dir")
        setattr(cfg, key, saved)
        if wanted != saved:
            sources[key] = f"from {origin}"


def rng_state(device_type):
    """This process's RNG states as tensors and plain types, so the checkpoint loads with weights_only=True."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if device_type == "cuda" else None,
        "numpy": [torch.from_numpy(keys.copy()), pos, has_gauss, gauss],
        "python": [version, list(internal), gauss_next],
    }


def gather_rng_states(rng):
    """Every rank's rng_state, in rank order (under torchrun each rank has its own dropout streams).
    Sent as bytes: pickled tensors do not survive the trip through all_gather_object."""
    if not dist.is_initialized():
        return [rng]
    buffer, blobs = io.BytesIO(), [None] * dist.get_world_size()
    torch.save(rng, buffer)
    dist.all_gather_object(blobs, buffer.getvalue())
    return [torch.load(io.BytesIO(blob), weights_only=True) for blob in blobs]


def set_rng_state(rng, device_type):
    """Undo rng_state: the RNGs continue exactly where the saving process's stopped."""
    torch.set_rng_state(rng["torch"])
    if device_type == "cuda" and rng["cuda"] is not None:
        torch.cuda.set_rng_state(rng["cuda"])
    random.setstate((rng["python"][0], tuple(rng["python"][1]), rng["python"][2]))
    np.random.set_state(("MT19937", rng["numpy"][0].numpy(), *rng["numpy"][1:]))


def run_state(cfg, model_args, iter_num, best_val_loss, step_start, wandb_run_id, encoding, guard, cooldown_from=None):
    """Everything but weights and optimizer that a resume needs. step_start holds the sampler (mixture.py:
    every source's position) and RNG states from the start of the step after iter_num, where a resumed run begins.
    cooldown_from: a cooldown fork's starting iteration, which its schedule needs after the source has moved on."""
    return {
        "cooldown_from": cooldown_from,
        "model_args": model_args,
        "iter_num": iter_num,
        "best_val_loss": best_val_loss,
        "config": vars(cfg),
        "sampler": step_start["sampler"],
        "rng": gather_rng_states(step_start["rng"]),  # every rank's, in rank order
        "wandb_run_id": wandb_run_id,
        "encoding": encoding,
        "spikes": guard.state_dict(),
    }


def step_start(sampler, device_type):
    """The data position and RNG states at the start of a step: where a run resumed there begins."""
    return {"sampler": sampler.state_dict(), "rng": rng_state(device_type)}


def save(saver, state, model, optimizer, cfg, iter_num, sharded, master, device):
    """Save run_state() `state` with the weights and optimizer after iter_num steps: every rank its shards
    (sharded), else rank 0 a .pt. Weights that are not finite are never saved (ResumeError). The previous save
    is complete first (one at a time; had it failed, this raises its CheckpointError); with checkpoint_async
    the write goes on in the background. Returns the seconds this save held the run: its write, or with
    checkpoint_async its copy to host memory."""
    if not sharding.all_finite(model.parameters(), device):
        raise ResumeError(f"weights are not finite after step {iter_num}; not saving. Roll back with "
                          f"--init_from=<an earlier ckpt_N.pt>, perhaps with a lower learning_rate")
    saver.wait()
    t0 = time.time()
    if sharded:
        saver.save_sharded(model, optimizer, state, cfg.out_dir, iter_num, cfg.keep_last_n)
    elif master:
        model_sd, optimizer_sd = checkpoint.full_state(model, optimizer)
        saver.save_checkpoint(dict(state, model=model_sd, optimizer=optimizer_sd), cfg.out_dir, iter_num,
                              cfg.keep_last_n)
    if not cfg.checkpoint_async:
        saver.wait()  # the other ranks wait for rank 0's .pt here, on the save group's long timeout
    return time.time() - t0


def restore(state, cfg, model, optimizer, sampler, guard, rank, world_size, device_type, log, after_rollback=False):
    """Load a checkpoint into the live run. A rollback keeps its own count of rollbacks and does not
    repeat the schedule note. Returns (iter_num, best_val_loss, wandb_run_id)."""
    if problem := optim.mode_change(state["config"], cfg):
        raise ResumeError(problem)
    try:
        checkpoint.restore(state, model, optimizer)
    except checkpoint.CheckpointError as e:  # the live model may be half overwritten: stop here
        raise ResumeError(f"{e}; move that checkpoint aside and rerun to resume from the one before") from None
    try:
        changes = sampler.load_state_dict(state["sampler"])
    except mixture.MixtureError as e:
        raise ResumeError(str(e)) from None
    best_val_loss = state["best_val_loss"]
    if changes and not after_rollback:
        log(f"note: the data mixture changed since the checkpoint ({', '.join(changes)}): from iter "
            f"{state['iter_num']} on the draws follow the new weights, each kept source going on from its own position")
        if math.isfinite(best_val_loss):
            log(f"note: best val loss {best_val_loss:.4f} was a mean under the old weights: reset, the next eval sets it")
    if changes:  # the val loss is the sources' mean weighted by their shares: a best of other shares is no bar
        best_val_loss = math.inf
    rngs = state["rng"]  # one per rank of the run that saved it
    if len(rngs) != world_size:
        log(f"resuming {len(rngs)} process(es)' run with {world_size}: the weights, optimizer and data order "
            f"continue exactly, but dropout masks and float reduction order differ, so it is not bit-exact")
    set_rng_state(rngs[rank % len(rngs)], device_type)
    if "spikes" in state:
        guard.load_state_dict(state["spikes"], after_rollback=after_rollback)
    if state["config"].get("fp8", "") != cfg.fp8 and not after_rollback:  # the weights are plain either way
        log(f"note: fp8 {state['config'].get('fp8', '') or 'off'} -> {cfg.fp8 or 'off'} since the checkpoint: "
            f"the weights and optimizer continue as saved, the matmuls from here on are {cfg.fp8 or 'bf16'}")
    changed = [f"{k} {state['config'][k]} -> {getattr(cfg, k)}" for k in SCHEDULE_KEYS
               if k in state["config"] and state["config"][k] != getattr(cfg, k)]
    if changed and not after_rollback:
        log(f"note: the schedule changed since the checkpoint ({', '.join(changed)}): the learning rate follows the "
            f"new values from iter {state['iter_num']} on")
    return state["iter_num"], best_val_loss, state["wandb_run_id"]


def roll_back(first_spike, spike_data, iter_num, cfg, guard, sampler, master, saver, load, log):
    """PaLM's recipe: back to the newest checkpoint spike_rollback_margin steps before the first spike,
    and on from spike_skip_batches global batches past the spike's data. load(state) puts a checkpoint
    into the live run (restore with after_rollback=True) and returns its iteration. Returns the
    iteration it went back to, or None if there is no checkpoint that old."""
    saver.wait()  # a save still in flight would publish a checkpoint newer than the one rolled back to
    if len(guard.rollbacks) >= cfg.max_rollbacks:
        raise ResumeError(
            f"loss spikes again at iter {first_spike} after {len(guard.rollbacks)} automatic rollback(s) "
            f"(max_rollbacks={cfg.max_rollbacks}); lower learning_rate or raise max_rollbacks and rerun the same "
            "command to resume from the newest checkpoint")
    found = spikes.rollback_target(checkpoint.list_checkpoints(cfg.out_dir), first_spike, cfg.spike_rollback_margin)
    if found is None:
        log(f"warning: loss spike burst from iter {first_spike}, but no checkpoint {cfg.spike_rollback_margin} "
            f"steps before it to roll back to; going on")
        guard.skipped_at.clear()
        return None
    try:  # load first: a target that cannot be read must not leave the newer checkpoints set aside
        state = checkpoint.load_checkpoint(found[1], log=log)
        if master:
            checkpoint.roll_back_to(found[1], log=log)
    except checkpoint.CheckpointError as e:
        raise ResumeError(f"loss spike burst from iter {first_spike}, and no rollback: {e}") from None
    rollbacks = guard.rollbacks + [{"at": iter_num, "to": found[0], "first_spike": first_spike}]
    restored = load(state)
    guard.rollbacks = rollbacks
    sampler.load_state_dict(spike_data)
    sampler.next_windows(cfg.spike_skip_batches * cfg.batch_size * cfg.gradient_accumulation_steps)
    log(f"rolled back to iter {restored} ({len(rollbacks)} of max {cfg.max_rollbacks}) after a burst of skipped "
        f"steps from iter {first_spike}; the data goes on {cfg.spike_skip_batches} global batches past the spike's")
    return restored


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
        raise ResumeError(f"{cfg.out_dir} holds checkpoints of a run that is not a cooldown fork: give the fork a "
                          f"new --out_dir")
    return state["cooldown_from"]
