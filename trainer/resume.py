"""A run's state beyond its weights and optimizer: what a checkpoint keeps of it, and how it goes back in.

train.py saves `run_state(...)` beside the weights and optimizer, and `restore(...)` puts a loaded
checkpoint back into the live run: weights, optimizer, data position, RNGs and spike statistics.
Both sides live here, so a field added to one cannot be forgotten by the other (tests/test_train.py
resumes runs bit-exactly), the RNG states included (rng_state, set_rng_state). Problems are raised as
ResumeError, one line each, for train.py to print.
"""
import io
import random

import numpy as np
import torch
import torch.distributed as dist

from trainer import checkpoint, mixture, optim, spikes

# The learning-rate schedule may change at a resume (a longer run, a lower peak): logged, not refused.
SCHEDULE_KEYS = ("learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "decay_lr", "max_iters")


class ResumeError(Exception):
    """A checkpoint that cannot continue this run, with what to do about it."""


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


def run_state(cfg, model_args, iter_num, best_val_loss, step_start, wandb_run_id, encoding, guard):
    """Everything but weights and optimizer that a resume needs. step_start holds the sampler (mixture.py:
    every source's position) and RNG states from the start of the step after iter_num, where a resumed run begins."""
    return {
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


def restore(state, cfg, model, optimizer, sampler, guard, rank, world_size, device_type, log, after_rollback=False):
    """Load a checkpoint into the live run. A rollback keeps its own count of rollbacks and does not
    repeat the schedule note. Returns (iter_num, best_val_loss, wandb_run_id)."""
    if problem := optim.mode_change(state["config"], cfg):
        raise ResumeError(problem)
    try:
        checkpoint.restore(state, model, optimizer)
    except checkpoint.CheckpointError as e:  # the live model may be half overwritten: stop here
        raise ResumeError(f"{e}; move that checkpoint aside and rerun to resume from the one before") from None
    def upgraded(data_state):  # in the form of today's checkpoints, if it is from before mixtures
        return mixture.upgrade(data_state, state.get("sampler_windows"), state["config"])
    try:
        changes = sampler.load_state_dict(upgraded(state["sampler"]))
    except mixture.MixtureError as e:
        raise ResumeError(str(e)) from None
    if changes and not after_rollback:
        log(f"note: the data mixture changed since the checkpoint ({', '.join(changes)}): from iter "
            f"{state['iter_num']} on the draws follow the new weights, each kept source going on from its own position")
    rngs = state["rng"]  # one per rank of the run that saved it
    if len(rngs) != world_size:
        log(f"resuming {len(rngs)} process(es)' run with {world_size}: the weights, optimizer and data order "
            f"continue exactly, but dropout masks and float reduction order differ, so it is not bit-exact")
    set_rng_state(rngs[rank % len(rngs)], device_type)
    if "spikes" in state:  # the data positions of its skipped steps, too, are sampler states
        skipped_at = [[at, upgraded(data_state)] for at, data_state in state["spikes"]["skipped_at"]]
        guard.load_state_dict(dict(state["spikes"], skipped_at=skipped_at), after_rollback=after_rollback)
    if state["config"].get("fp8", "") != cfg.fp8 and not after_rollback:  # the weights are plain either way
        log(f"note: fp8 {state['config'].get('fp8', '') or 'off'} -> {cfg.fp8 or 'off'} since the checkpoint: "
            f"the weights and optimizer continue as saved, the matmuls from here on are {cfg.fp8 or 'bf16'}")
    changed = [f"{k} {state['config'][k]} -> {getattr(cfg, k)}" for k in SCHEDULE_KEYS
               if k in state["config"] and state["config"][k] != getattr(cfg, k)]
    if changed and not after_rollback:
        log(f"note: the schedule changed since the checkpoint ({', '.join(changed)}): the learning rate follows the "
            f"new values from iter {state['iter_num']} on")
    return state["iter_num"], state["best_val_loss"], state["wandb_run_id"]


def roll_back(first_spike, spike_data, iter_num, cfg, guard, sampler, master, load, log):
    """PaLM's recipe: back to the newest checkpoint spike_rollback_margin steps before the first spike,
    and on from spike_skip_batches global batches past the spike's data. load(state) puts a checkpoint
    into the live run (restore with after_rollback=True) and returns its iteration. Returns the
    iteration it went back to, or None if there is no checkpoint that old."""
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
