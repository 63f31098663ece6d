"""The Checkpointer: when a run saves, what a checkpoint holds beyond weights, and how one goes back in.

torchtitan's CheckpointManager(states={...}) made small. train.py hands it the live parts, each with
state_dict() / load_state_dict(): the model and optimizer (whose state dicts checkpoint.py gathers, whole
tensors in a .pt, shards under FSDP), the sampler (every source's position), the spike guard, and the run's
own values (RunState). It adds the iteration, the config and every rank's RNG states, and calls:
restore() once at the start, maybe_save(step) after every step, roll_back(step) after a burst of spikes and
finish() at the end. The files (.pt and sharded formats, atomic writes, rotation, fallback) are checkpoint.py's.
Both sides of every field live here, so one added to the save cannot be forgotten by the restore.

Before any of that, start_point() (at the end of this file) decides what the run starts from: out_dir's
newest checkpoint, one to roll back to, imported weights, or scratch, and the architecture that implies;
and a cooldown fork's rules.
"""
import dataclasses
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
from trainer import RunError, checkpoint, faults, hf, optim, parallel, precision, schedule, tokenizer

# The learning-rate schedule may change at a resume (a longer run, a lower peak): logged, not refused.
SCHEDULE_KEYS = ("learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "decay_lr", "max_iters", "lr_schedule",
                 "lr_decay_fraction", "lr_decay_shape")
# So may what the steps compute in and with: logged too, as the run is then not the one that never stopped.
NUMERICS_KEYS = ("dtype", "dropout", "weight_decay", "beta1", "beta2", "grad_clip")


@dataclasses.dataclass
class RunState:
    """The run's own values a checkpoint keeps, as top-level keys of the file (their names from before the
    Checkpointer, so older checkpoints load): the architecture, the encoding sample.py decodes with, a cooldown
    fork's first iteration (its schedule needs it after the source has moved on), the val set its val losses are
    of ([eval_iters, the config's batch_size]), and the best val loss, wandb id and tokens trained (through
    iteration tokens_iter), which a resume carries on."""
    model_args: dict
    encoding: str | None = None
    cooldown_from: int | None = None
    encoding_sha256: str | None = None  # a rank file's (tokenizer.describe), so sample.py finds it if it moved
    best_val_loss: float = math.inf
    wandb_run_id: str | None = None
    tokens: int = 0
    tokens_iter: int = 0
    val_set: list | None = None

    def state_dict(self):
        return dataclasses.asdict(self)

    def load_state_dict(self, state):
        self.best_val_loss, self.wandb_run_id = state["best_val_loss"], state["wandb_run_id"]
        saved = state["config"]  # an older checkpoint's count: its own batch every step
        per_step = saved["batch_size"] * saved["gradient_accumulation_steps"] * state["model_args"]["block_size"]
        self.tokens, self.tokens_iter = state.get("tokens", state["iter_num"] * per_step), state["iter_num"]

    def tokens_through(self, iteration, tokens_per_iter):
        """Tokens trained through `iteration`: those counted by the checkpoint, then tokens_per_iter a step (a
        resume may change the batch)."""
        return self.tokens + (iteration - self.tokens_iter) * tokens_per_iter


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


def restore_rngs(rngs, rank, world_size, seed, iteration, device_type):
    """This rank's RNGs where the saving run left them (rngs: one state per rank of that run). A rank it did not
    have (more processes now) gets a seed of its own at this iteration: another rank's state would give two ranks
    the same dropout masks from here on."""
    saved = rank < len(rngs)
    set_rng_state(rngs[rank if saved else 0], device_type)  # numpy's and python's too
    if not saved:
        torch.manual_seed(seed + rank + world_size * iteration)  # seeds every device's generator too


class Checkpointer:
    def __init__(self, cfg, states, device, sharded, group, log, record):
        """states: {"model": the plain module, "optimizer", "sampler", "spikes": the SpikeGuard, "run": RunState}.
        sharded: every rank saves its shards (FSDP), else rank 0 a .pt. group: the process group of the saves'
        collectives and barriers (parallel.save_group), or None. log, record: train.log and metrics.jsonl."""
        self.cfg, self.states, self.device, self.sharded, self.log, self.record = cfg, states, device, sharded, log, record
        self.device_type = torch.device(device).type
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.saver = checkpoint.Saver(cfg.checkpoint_async, group, log)
        self.saved_iter, self.saved_time, self.resume_point = 0, time.time(), None

    def restore(self, start):
        """The start point's checkpoint (start_point) into the live run: (its iteration, the seconds its read and
        load took), or (0, None) for a run from scratch or from imported weights."""
        if start.state is None:
            return 0, None
        t0 = time.time()
        iteration = self._load(start.state)
        run = self.states["run"]
        self.log(f"resuming after {iteration} completed steps (best val loss {run.best_val_loss:.4f})")
        if start.cooldown_from is not None and not start.continuing_fork:  # a fork is a run of its own, wandb's too
            run.wandb_run_id = None
        start.state = None  # the mmap'd tensors have been copied into the model and optimizer
        self.saved_iter, self.saved_time = iteration, time.time()
        return iteration, start.load_seconds + time.time() - t0

    def _load(self, state, after_rollback=False):
        """A loaded checkpoint into the live parts; its iteration. A rollback keeps the run's own counts of
        skipped steps and rollbacks, and does not repeat the notes of what changed since the checkpoint."""
        cfg, model, sampler, run = self.cfg, self.states["model"], self.states["sampler"], self.states["run"]
        if problem := optim.mode_change(state["config"], cfg):
            raise RunError(problem)
        checkpoint.restore(state, model, self.states["optimizer"])
        changes = sampler.load_state_dict(state["sampler"])
        run.load_state_dict(state)
        if changes and not after_rollback:
            self.log(f"note: the data mixture changed since the checkpoint ({', '.join(changes)}): from iter "
                     f"{state['iter_num']} on the draws follow the new weights, each kept source going on from its "
                     f"own position")
            if math.isfinite(run.best_val_loss):
                self.log(f"note: best val loss {run.best_val_loss:.4f} was a mean under the old weights: reset, the "
                         f"next eval sets it")
        if changes:  # the val loss is the sources' mean weighted by their shares: a best of other shares is no bar
            run.best_val_loss = math.inf
        saved_val_set = state.get("val_set")  # None: a checkpoint older than the key, whose eval batch is unknown
        if saved_val_set is not None and list(saved_val_set) != run.val_set:
            run.best_val_loss = math.inf  # a rollback to a checkpoint of the old windows too: their best is no bar
            if not after_rollback:
                self._note_val_set(run, list(saved_val_set), state["iter_num"])
        rngs = state["rng"]  # one per rank of the run that saved it
        if len(rngs) != self.world_size:
            self.log(f"resuming {len(rngs)} process(es)' run with {self.world_size}: the weights, optimizer and data "
                     f"order continue exactly, but dropout masks and float reduction order differ, so it is not "
                     f"bit-exact")
        threads = state.get("cpu_threads")  # a CPU's sums split over its threads: their order is in the result
        if self.device_type == "cpu" and threads and threads != torch.get_num_threads() and not after_rollback:
            self.log(f"note: {threads} CPU thread(s) saved this checkpoint and {torch.get_num_threads()} continue it: "
                     f"the sums' order differs, so the run goes on close to, not bit-exact with, one that never "
                     f"stopped (OMP_NUM_THREADS={threads} makes it exact)")
        restore_rngs(rngs, self.rank, self.world_size, cfg.seed, state["iter_num"], self.device_type)
        if "spikes" in state:
            self.states["spikes"].load_state_dict(state["spikes"], after_rollback=after_rollback)
        if not after_rollback:
            self._note_changes(state["config"], state["iter_num"])
        if cfg.fp8 and self.sharded:  # each weight's fp8 scale comes from one all-reduce after each change
            precision.update_weight_scales(model)
        return state["iter_num"]

    def _note_val_set(self, run, saved, iteration):
        """A resume whose eval_iters or batch_size differ from the checkpoint's: its val losses are of other windows
        (bins.val_windows), so the best is no bar and the forecast leaves the earlier ones out (val_set_changed)."""
        (iters0, batch0), (iters1, batch1) = saved, run.val_set
        self.log(f"note: the val set changed since the checkpoint ({iters0} x {batch0} -> {iters1} x {batch1} "
                 f"windows, eval_iters x batch_size): val losses from iter {iteration} on are of other windows; "
                 "the best val loss and the forecast start again")
        self.record("val_set_changed", iteration, was=saved, now=run.val_set)

    def _note_changes(self, saved, iteration):
        """Log what the config changed since the checkpoint that the run takes in its stride: the batch's split
        (auto picks it from the memory of the device it starts on), fp8, the schedule."""
        (b0, a0), (b1, a1) = (saved.get("batch_size"), saved.get("gradient_accumulation_steps")), \
            (self.cfg.batch_size, self.cfg.gradient_accumulation_steps)  # micro-batch x accumulation, then and now
        if None not in (b0, a0) and (b0, a0) != (b1, a1):
            self.log(f"note: micro-batch {b0} x {a0} -> {b1} x {a1} since the checkpoint" + (
                ": the same batches summed in another order, so the run goes on close to, not bit-exact with, one "
                "that never stopped" if b0 * a0 == b1 * a1 else f": {b1 * a1} sequences a step, not {b0 * a0}, "
                "from here on"))
        if saved.get("fp8", "") != self.cfg.fp8:  # the weights are plain either way
            self.log(f"note: fp8 {saved.get('fp8', '') or 'off'} -> {self.cfg.fp8 or 'off'} since the checkpoint: "
                     f"the weights and optimizer continue as saved, the matmuls from here on are {self.cfg.fp8 or 'bf16'}")
        split = saved.get("muon_split_qkv", False)  # a checkpoint older than the key stepped the qkv fused
        if self.cfg.optimizer == "muon" and split != self.cfg.muon_split_qkv:
            self.log(f"note: muon_split_qkv {split} -> {self.cfg.muon_split_qkv} since the checkpoint: from here on "
                     f"Muon orthogonalises q, k and v {'apart' if self.cfg.muon_split_qkv else 'as one matrix'}")
        if numerics := [f"{k} {saved[k]} -> {getattr(self.cfg, k)}" for k in NUMERICS_KEYS
                        if k in saved and saved[k] != getattr(self.cfg, k)]:
            self.log(f"note: {', '.join(numerics)} since the checkpoint: the run goes on, no longer as one that never "
                     "stopped would")
        changed = [f"{k} {saved[k]} -> {getattr(self.cfg, k)}" for k in SCHEDULE_KEYS
                   if k in saved and saved[k] != getattr(self.cfg, k)]
        if changed:
            before = types.SimpleNamespace(**{**vars(self.cfg), **saved})
            lr_from = schedule.first_difference(before, self.cfg, iteration, self.states["run"].cooldown_from)
            self.log(f"note: the schedule changed since the checkpoint ({', '.join(changed)}): the learning rate "
                     f"follows the new values from iter {iteration} on" + (
                         f"; the forecast leaves out the evaluations after iter {lr_from}, whose rates were the old "
                         "schedule's" if lr_from < iteration else ""))
            # the forecast reads it (forecast.measured_otherwise), as plot_log.py's vertical lines do
            self.record("schedule_changed", iteration, changes=changed, lr_from=lr_from)
            was = schedule.learning_rate(iteration, before)
            now = schedule.learning_rate(iteration, self.cfg)
            if now > 1.01 * was:  # a decayed model heated up again: what extending a run after its decay does
                self.log(f"warning: at iter {iteration} the learning rate goes back up from {was:.3e} to {now:.3e}: "
                         f"the run had decayed and is heated again; to extend a run, fork a cooldown from a "
                         f"checkpoint before its decay began (docs/training.md, cooldown forks)")

    def step_start(self):
        """The data position and RNG states now, at the start of a step: where a run resumed there begins, and
        what the next save keeps (resume_point; the spike guard notes a skipped step's data by its sampler's)."""
        self.resume_point = {"sampler": self.states["sampler"].state_dict(), "rng": rng_state(self.device_type)}

    def maybe_save(self, iteration):
        """Save after step `iteration` when one is due: every checkpoint_interval steps (0: never, for
        benchmarks), at max_iters, or once checkpoint_minutes have passed since the last save on any rank's
        clock (clocks differ between machines)."""
        cfg = self.cfg
        if cfg.checkpoint_interval <= 0:
            return
        late = parallel.agree(cfg.checkpoint_minutes > 0 and time.time() - self.saved_time >= 60 * cfg.checkpoint_minutes,
                              self.device)
        if iteration % cfg.checkpoint_interval == 0 or iteration == cfg.max_iters or late:
            self.save(iteration)

    def save(self, iteration):
        """The state after `iteration` steps, resuming at step_start()'s point: every rank its shards (sharded),
        else rank 0 a .pt. Weights that are not finite are never saved. The previous save is complete first (one
        at a time; had it failed, this raises its CheckpointError); with checkpoint_async the write goes on in the
        background, and the save record's seconds are the copy to host memory that held the run."""
        cfg, model, optimizer, run = self.cfg, self.states["model"], self.states["optimizer"], self.states["run"]
        run.tokens = run.tokens_through(iteration, cfg.tokens_per_step)
        run.tokens_iter = iteration
        state = dict(run.state_dict(), iter_num=iteration, config=vars(cfg),
                     sampler=self.resume_point["sampler"], rng=gather_rng_states(self.resume_point["rng"]),
                     spikes=self.states["spikes"].state_dict(), cpu_threads=torch.get_num_threads())
        if checkpoint.nonfinite_on_any_rank(dict(model.named_parameters()), self.device):
            raise RunError(f"weights are not finite after step {iteration}; not saving. Roll back with "
                           f"--init_from=<an earlier ckpt_N.pt>, perhaps with a lower learning_rate")
        self.saver.wait()
        t0 = time.time()
        if self.sharded:
            self.saver.save_sharded(model, optimizer, state, cfg.out_dir, iteration, cfg.keep_last_n)
        elif self.rank == 0:
            model_sd, optimizer_sd = checkpoint.full_state(model, optimizer)
            self.saver.save_checkpoint(dict(state, model=model_sd, optimizer=optimizer_sd), cfg.out_dir, iteration,
                                       cfg.keep_last_n)
        if not cfg.checkpoint_async:
            self.saver.wait()  # the other ranks wait for rank 0's .pt here, on the save group's long timeout
        self.record("save", iteration, asynchronous=cfg.checkpoint_async, sharded=self.sharded, seconds=time.time() - t0)
        self.saved_iter, self.saved_time = iteration, time.time()

    def roll_back(self, iteration):
        """PaLM's recipe, after the burst of skipped steps that ends at step `iteration` (SpikeGuard.burst): back to
        the newest checkpoint spike_rollback_margin steps before the burst's first step, the data going on
        spike_skip_batches global batches past that step's, and saved there again at once, so a kill before the
        next save still skips the data. Returns the iteration it went back to, or None: no checkpoint is that old."""
        cfg, guard, sampler = self.cfg, self.states["spikes"], self.states["sampler"]
        first_spike, spike_data = guard.burst(iteration)
        self.saver.wait()  # a save still in flight would publish a checkpoint newer than the one rolled back to
        if len(guard.rollbacks) >= cfg.max_rollbacks:
            raise guard.diverged(iteration, f"loss spikes again at iter {first_spike} after {len(guard.rollbacks)} "
                                 f"automatic rollback(s) (max_rollbacks={cfg.max_rollbacks}); lower learning_rate or "
                                 "raise max_rollbacks and rerun the same command to resume from the newest checkpoint")
        found = faults.rollback_target(checkpoint.list_checkpoints(cfg.out_dir), first_spike, cfg.spike_rollback_margin)
        if found is None:
            self.log(f"warning: loss spike burst from iter {first_spike}, but no checkpoint {cfg.spike_rollback_margin} "
                     f"steps before it to roll back to; going on")
            guard.skipped_at.clear()
            guard.stop_if_diverged(iteration)  # the burst was non-finite steps: their limit holds as with no rollback
            return None
        try:  # load first: a target that cannot be read must not leave the newer checkpoints set aside
            state = checkpoint.load_checkpoint(found[1], log=self.log)
            if self.rank == 0:
                checkpoint.roll_back_to(found[1], log=self.log)
        except checkpoint.CheckpointError as e:  # said in the terms of the burst that asked for it
            raise RunError(f"loss spike burst from iter {first_spike}, and no rollback: {e}") from None
        restored = self._load(state, after_rollback=True)  # keeps the run's own rollbacks (SpikeGuard.load_state_dict)
        guard.rollbacks.append({"at": iteration, "to": found[0], "first_spike": first_spike})
        sampler.load_state_dict(spike_data)
        sampler.next_windows(cfg.spike_skip_batches * cfg.batch_size * cfg.gradient_accumulation_steps)
        self.log(f"rolled back to iter {restored} ({len(guard.rollbacks)} of max {cfg.max_rollbacks}) after a burst of "
                 f"skipped steps from iter {first_spike}; the data goes on {cfg.spike_skip_batches} global batches "
                 f"past the spike's")
        self.record("rollback", restored, from_iter=iteration, first_spike=first_spike)
        self.step_start()
        if cfg.checkpoint_interval > 0:  # over the checkpoint rolled back to: a kill now must not forget the data skip
            self.save(restored)
        else:
            self.saved_iter, self.saved_time = restored, time.time()
        return restored

    def finish(self, iteration, stopped):
        """At the end of the run: a stopped run's last completed step saved (unless it just was), and the save
        in flight complete before the process ends."""
        if stopped and self.cfg.checkpoint_interval > 0 and iteration != self.saved_iter:
            self.save(iteration)
        self.saver.wait()


# -----------------------------------------------------------------------------
# Where a run starts: its checkpoint (resume), one to roll back to, imported weights, or scratch; and the
# rules of a cooldown fork, which starts from another run's checkpoint. start_point(cfg, ...) decides it once,
# before anything is built, with the architecture that implies; the Checkpointer above puts a chosen checkpoint
# into the live run. Problems are raised as StartError, one line each.

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
    continuing_fork, requested = continues_fork(cfg), cfg.init_from
    if continuing_fork:
        cfg.init_from = "resume"
    pretrained = cfg.init_weights or (cfg.init_from if cfg.init_from in hf.GPT2_MODELS else "")
    from_path = cfg.init_from not in ("auto", "resume", "scratch", *hf.GPT2_MODELS)
    if cfg.init_weights and cfg.init_from not in ("auto", "scratch"):
        raise StartError(f"init_weights starts a new run, init_from={cfg.init_from!r} continues one: drop one of them")
    if from_path and not os.path.exists(cfg.init_from):
        raise StartError(f"init_from: no such checkpoint {cfg.init_from}: give auto, resume, scratch, a GPT-2 name "
                         f"({', '.join(hf.GPT2_MODELS)}) or the path of a ckpt_<N>.pt or ckpt_<N>/")
    if master:
        checkpoint.remove_stale_temp_files(cfg.out_dir, log=log)
    if dist.is_initialized():
        dist.barrier()  # the others look at out_dir only once rank 0 has tidied it
    start = types.SimpleNamespace(state=None, weights=None, encoding=None, saved_args=None, origin=None,
                                  pretrained=pretrained, continuing_fork=continuing_fork, cooldown_from=None)
    t0 = time.time()
    start.state = _checkpoint_to_continue(cfg, from_path, master, log)
    start.load_seconds = time.time() - t0  # the read; restoring adds the copy into the model (py)
    if start.state is not None:
        start.saved_args, start.origin = start.state["model_args"], "the checkpoint"
    elif cfg.eval_only and not pretrained:  # random weights: a val loss of nothing trained, exit 0
        raise StartError(f"eval_only=True but {cfg.out_dir} holds no checkpoint to evaluate: train there first, or "
                         "give init_from (a checkpoint) or init_weights (a GPT-2 name or folder)")
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
    source = checkpoint.iteration_of(requested) if continuing_fork else None
    if source is not None and source != start.cooldown_from:  # this command's fork is not the one out_dir holds
        raise StartError(f"{cfg.out_dir} holds a cooldown fork from iter {start.cooldown_from}, and this command forks "
                         f"from {requested} (iter {source}): give this fork a new --out_dir")
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
    init_path = os.path.abspath(cfg.init_from)  # also for 'ckpt_N/' with a trailing slash
    own = os.path.isdir(cfg.out_dir) and os.path.samefile(os.path.dirname(init_path), cfg.out_dir)
    if not own and (problem := foreign_checkpoint_problem(cfg.out_dir, init_path)):
        raise StartError(problem)
    state = checkpoint.load_checkpoint(cfg.init_from, log=log)
    # an earlier checkpoint of this out_dir: set the newer ones aside, only now that it has loaded
    if master and own and checkpoint.roll_back_to(init_path, log=log):
        log("rolled back: once this run is going, drop --init_from to continue it later "
            "(running this same command again would roll back again)")
    return state


def foreign_checkpoint_problem(out_dir, init_path):
    """Why init_from=init_path (a checkpoint outside out_dir's own, whose roll back start_point does) cannot go on
    in out_dir, or None: where out_dir holds checkpoints, its saves would overwrite theirs and resume would mix the
    two runs'. One set aside there before (rolled_back/) is moved back first, as checkpoints.md says."""
    if not (existing := checkpoint.list_checkpoints(out_dir)):
        return None
    name = os.path.basename(init_path)
    if os.path.commonpath([init_path, os.path.abspath(out_dir)]) == os.path.abspath(out_dir):
        return (f"init_from={init_path} is a checkpoint {out_dir} set aside: move it back into {out_dir} (one of "
                f"the same name there first aside) and give init_from={os.path.join(out_dir, name)}, which sets the "
                "newer ones aside")
    return (f"init_from={init_path} continues another run's checkpoint, and {out_dir} holds {len(existing)} of its "
            f"own (newest {os.path.basename(existing[0][1])}), which its saves would overwrite: give it a new "
            "--out_dir, or drop --init_from to continue this one")


def encoding_problem(start, encoding, data):
    """Why the data's encoding (the name its meta.json gives, read from `data`) cannot go on from the start
    point's weights, or None: a checkpoint or imported weights learnt one encoding's token ids, and bins of another
    would train them on other text without a word (sample.py would then decode with the data's)."""
    learnt = start.state if start.state is not None else {"encoding": start.encoding}
    if learnt.get("encoding") not in (None, "gpt2", "bytes") and not learnt.get("encoding_sha256"):
        # a rank file by path alone (imported weights; a checkpoint older than its hash): its content, if there
        learnt = tokenizer.describe(learnt["encoding"]) if os.path.isfile(learnt["encoding"]) else {}
    if not learnt.get("encoding") or encoding is None:  # an older checkpoint, bins without meta.json: unknown
        return None
    if tokenizer.identity(learnt) == tokenizer.identity(tokenizer.describe(encoding)):
        return None
    return (f"{start.origin} learnt the token ids of encoding {learnt['encoding']}, and {data} is encoded with "
            f"{encoding}: prepare it again with --encoding {learnt['encoding']}, or train on it from scratch in "
            "another out_dir")


def take_architecture(cfg, defaults, saved_args, origin):
    """Set cfg's architecture keys to saved_args' (a checkpoint's or imported weights' model_args). A key the
    config set to a value other than both its default and the saved one is a mistake, named with where it
    was set (cfg.sources, configurator.py's record); so is one the command line set to another value than the
    saved one, the default too (--n_layer=12 against a 2-layer checkpoint). A config file's own architecture
    (config/train_tiny.py's bias=False, say) gives way to the saved one where it is the default."""
    sources = getattr(cfg, "sources", {})
    for key in ARCHITECTURE_KEYS:
        saved, wanted = saved_args.get(key, getattr(GPTConfig, key)), getattr(cfg, key)
        set_here = wanted != defaults[key] or sources.get(key) == "on the command line"
        if wanted != saved and set_here:
            raise StartError(f"{key}={wanted!r} (set {sources.get(key, 'in the config')}) conflicts with {origin}'s "
                             f"{key}={saved!r}: the architecture comes from {origin}, so leave {key} out, or train a "
                             "new model in a new out_dir")
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
