"""Train a GPT on one GPU (or the CPU), or on many with torchrun:

    python train.py config/train_gpt3_6b.py [--key=value ...]
    torchrun --nproc_per_node=8 train.py config/train_gpt3_6b.py [--strategy=fsdp]

Top to bottom: config, processes, device, start point, data, model, optimizer, the loop; each decision is a function
in trainer/. The same command again continues from out_dir's newest loadable checkpoint; Ctrl+C, SIGTERM and SIGHUP
stop after the current micro-batch, saving the last completed step. People read out_dir/train.log, tools metrics.jsonl.
"""
import functools
import math
import os
import sys
import time

from trainer import interrupt  # first: a Ctrl-C while torch imports is one line, not a traceback

interrupt.stop_at_once("train.py", "before training began, with nothing to save: the same command starts it")
import torch  # noqa: E402

from trainer import machine  # next: what an older torch lacks is named before anything needs it

if problem := machine.torch_problem():
    sys.exit(f"error: {problem}")

import configurator
from model import ARCHITECTURE_KEYS, GPT, model_config
from trainer import (
    RunError, bins, checkpointer, cost, elastic, evaluation, faults, forecast, machine, metrics, optim, parallel,
    precision, runlock, runlog, schedule, tokenizer)

# -----------------------------------------------------------------------------
# config (configurator.py: every key, its default and help, and where each value came from)
cfg = configurator.load_config_or_exit(sys.argv[1:])

# -----------------------------------------------------------------------------
# processes: one, or one per GPU under torchrun
distributed, rank, local_rank, world_size = elastic.ranks()
master = rank == 0  # only rank 0 writes train.log, config.json, wandb and .pt checkpoints
if problem := checkpointer.fork_problem(cfg):  # before the lock and train.log: a fork's source is only read
    sys.exit(f"error: {problem}")
# one run per out_dir: a second one would interleave train.log and overwrite checkpoints
out_dir_lock = runlock.hold_or_exit(cfg.out_dir, "training run") if master else None
log = runlog.RunLog(cfg.out_dir, rank)  # stdout and train.log (runlog.py)
record = metrics.Metrics(cfg.out_dir, enabled=master)  # what tools read: out_dir/metrics.jsonl (metrics.py)
sys.excepthook = log.crash  # from here on every RunError is one line, `error: ...`, and exit status 1
if cfg.compile:  # a library's error explained in one line, not a traceback: a failed compile, a stale cached graph
    log.explainers.append(machine.compile_failure)

if cfg.strategy == "hsdp" and not cfg.hsdp_shard_size and distributed:  # one node's GPUs: its fast link shards
    cfg.hsdp_shard_size = parallel.node_size()
if problem := configurator.check(cfg, world_size, distributed) or elastic.restart_problem():
    raise RunError(problem)
# from here on a signal stops the run cleanly (elastic.py), so train.log's header gets its ending line (but for
# a launcher's death before training begins: the kernel kills the workers, with nothing to save)
stop_signal = elastic.StopSignal()
log(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} train.py {' '.join(sys.argv[1:])}"
    + (f" ({world_size} processes, {cfg.strategy})" if distributed else ""))
if master and (restarted := elastic.restart_line(cfg.out_dir)):
    log(restarted)

# -----------------------------------------------------------------------------
# device, precision and process group
allocator = cost.use_expandable_segments()  # before the device initialises, which is when it is read
device, device_type, problem = machine.use_device(cfg.device, local_rank)
if problem := problem or (cfg.fp8 and (precision.device_problem(device) or precision.kernel_problem(cfg.fp8, device))) or (
        device_type == "cuda" and machine.compiler_problem(cfg.compile)):
    raise RunError(problem)
if device_type == "cpu":  # threads the machine has free, not one a core whatever the load (machine.py)
    log(machine.use_cpu_threads())
timeout = parallel.init_processes(cfg, device_type, log) if distributed else None

# -----------------------------------------------------------------------------
# what to start from: a checkpoint (resume, roll back), imported weights, or scratch (checkpointer.py)
start = checkpointer.start_point(cfg, configurator.DEFAULTS, master, log)
log(schedule.describe(cfg, start.cooldown_from))
with torch.device("meta"):
    shapes = GPT(model_config(cfg, start.saved_args))  # every shape and no storage: what cost.py's estimates read
save_group = parallel.save_group(cfg, shapes.get_num_params(non_embedding=False), timeout, log) if distributed else None
if distributed:  # names the hung rank
    log.explainers.append(functools.partial(elastic.explain_timeout, group=save_group, timeout=timeout))
eval_batch_size = cfg.batch_size  # the config's: the validation set stays the same whatever auto picks
choice = cost.settle_run(shapes, cfg, device, world_size, log, sys.argv[1:])  # refuse now, not after minutes of allocating
cfg.batch_size, cfg.gradient_accumulation_steps = choice.batch_size, choice.gradient_accumulation_steps
cfg.freeze()  # resolved: from here on a value means the same wherever it is read
gptconf = model_config(cfg, start.saved_args, activation_checkpointing=choice.activation_checkpointing,
                       recompute_blocks=choice.recompute_blocks)

# -----------------------------------------------------------------------------
# data: uint16 token bins of one folder or a weighted mixture of several (bins.py), each sampled
# without replacement in a per-epoch permutation of windows
if cfg.data_mixture and cfg.data_dir != os.path.join("data", cfg.dataset):
    log(f"note: data_mixture is set, so the training and validation data do not come from data_dir {cfg.data_dir}")
tokens = gptconf.n_tokens or gptconf.vocab_size  # an id in the padding past n_tokens could never be predicted
sampler = bins.open_mixture(bins.folders(cfg), gptconf.block_size, tokens, cfg.seed, start.origin,
                            mixed=bool(cfg.data_mixture))
encoding = sampler.encoding(fallback=start.encoding)  # saved in checkpoints, so sample.py can decode
if problem := checkpointer.encoding_problem(start, encoding, cfg.data_mixture or cfg.data_dir):
    raise RunError(problem)
# every rank draws the same global batch and takes its share: the batches do not depend on the number of processes
micro_steps = cfg.gradient_accumulation_steps // world_size  # this rank's share of a step
val_windows = sampler.val_windows(cfg.eval_iters, eval_batch_size)  # the same every time: val losses compare
tokens_per_iter = cfg.tokens_per_step
hellaswag_examples = evaluation.hellaswag_for_run(cfg, encoding or "gpt2", gptconf.block_size, log)


def get_batch(read, indices):
    """x and y of the windows read(indices, block_size) gives: a mixture's draws, or one val bin's indices."""
    windows = machine.to_device(torch.from_numpy(read(indices, gptconf.block_size)), device)
    return windows[:, :-1], windows[:, 1:]


# -----------------------------------------------------------------------------
# model and optimizer
torch.manual_seed(cfg.seed)  # the same initial weights on every rank
t0 = time.time()
log(f"building the model ({gptconf.n_layer} layers, {gptconf.n_embd} wide) on {device} ...")
with torch.device(device):  # built in place: at 6.7B a CPU build then a copy would take minutes
    raw_model = GPT(gptconf)  # the plain module, whose state_dict has no wrapper prefixes
precision.fp32_attention_on_cpu(raw_model, device_type, cfg.dtype)
n_params = raw_model.get_num_params()
log(f"built {raw_model.get_num_params(non_embedding=False):,} parameters in {time.time() - t0:.1f}s")
if start.weights is not None:  # before compile and sharding, identically on every rank
    raw_model.load_state_dict(start.weights)
    log(f"starting from {start.pretrained}'s weights at iteration 0, with a fresh optimizer and data order")
    start.weights = None
if cfg.master_weights == "bfloat16":  # 2 bytes a weight, gradients still fp32 (optim.py)
    optim.use_bf16_weights(raw_model)
how = parallel.mode(cfg, distributed)  # 'ddp', 'by_hand', 'fsdp' (hsdp too) or 'single'
fsdp = how == "fsdp"
if cfg.fp8:  # the blocks' matmuls in fp8; the weights stay ordinary Parameters (precision.py)
    log(precision.describe(cfg.fp8, *precision.convert(raw_model, cfg.fp8, fsdp=fsdp), fsdp=fsdp))
torch.manual_seed(cfg.seed + rank)  # but each rank its own dropout masks
model = parallel.wrap(raw_model, cfg, how, world_size, device_type, local_rank, log)  # DDP, FSDP2, compile
optimizer = optim.build(raw_model, cfg.optimizer, cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2),
                        device_type, cfg.master_weights, cfg.optimizer_offload, cfg.muon_split_qkv)
if isinstance(optimizer, optim.MuonAdamW):
    log(optimizer.describe())
guard = faults.SpikeGuard(cfg.spike_window, cfg.spike_loss_z, cfg.spike_grad_z, cfg.spike_rollback_after,
                          cfg.max_nonfinite_steps, log, record)
fp8_all_gather = cfg.fp8 and fsdp  # each weight's scale then comes from one all-reduce after each change of the weights


def step_loss(iteration, loss_sum):
    """Once the step's gradients are complete: they are averaged over the ranks where DDP does not, and the
    loss over the whole global batch is returned. The tests' injected faults wrap this (faults.py)."""
    if how == "by_hand":
        optim.average_gradients(raw_model.parameters(), world_size)
    return parallel.mean(loss_sum / micro_steps)


# -----------------------------------------------------------------------------
# the checkpointer: what a checkpoint holds, when it is written, and how one goes back in (checkpointer.py)
run = checkpointer.RunState({k: getattr(gptconf, k) for k in (*ARCHITECTURE_KEYS, "n_tokens")},
                            cooldown_from=start.cooldown_from, val_set=[cfg.eval_iters, eval_batch_size],
                            **tokenizer.describe(encoding))
checkpoints = checkpointer.Checkpointer(cfg, {"model": raw_model, "optimizer": optimizer, "sampler": sampler,
                                              "spikes": guard, "run": run}, device, fsdp, save_group, log, record)
step_loss = faults.active.wrap(step_loss, raw_model.parameters, rank == world_size - 1, guard.replayed,
                               checkpoints.saver.wait)
iter_num, load_seconds = checkpoints.restore(start)

if master:
    configurator.save_json(cfg, os.path.join(cfg.out_dir, "config.json"), **run.model_args)
record("start", iter_num, max_iters=cfg.max_iters, tokens_per_iter=tokens_per_iter, params=n_params, world_size=world_size,
       restarts=elastic.restarts(), batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
       activation_checkpointing=gptconf.activation_checkpointing, recompute_blocks=gptconf.recompute_blocks,
       load_seconds=load_seconds, eval_batch_size=eval_batch_size)
for line in sampler.describe(tokens_per_iter, cfg.max_iters, iter_num):  # after the resume: what was drawn counts
    log(line)
if sampler.changes:  # the val loss is weighted otherwise from here on (its best was reset: checkpointer.py)
    record("weights_changed", iter_num, changes=sampler.changes, weights={s.name: s.share for s in sampler.sources})

# MFU against the peak of the GPU we really have
peak_tflops, fp8_tflops, gpu_line = machine.peaks(cfg.peak_tflops, device_type, local_rank)
if gpu_line:
    log(f"{gpu_line}; allocator {allocator}")
if gpu_line and cfg.fp8 and peak_tflops:
    log(precision.mfu_note(peak_tflops, fp8_tflops))
utilisation = cost.Utilisation(n_params, cost.block_params(raw_model), gptconf, peak_tflops, world_size)

# bf16 autocast; each fp32 weight cast to bf16 once per optimizer step, not per micro-batch, where that costs nothing
autocast, step_casts, train_autocast = precision.autocast_contexts(cfg.dtype, device_type, precision.casts_once_per_step(
    gptconf.activation_checkpointing, cfg.dtype, cfg.master_weights, fsdp, cfg.compile, cfg.fp8))

# -----------------------------------------------------------------------------
# wandb: optional, and never allowed to hang or prompt inside tmux (metrics.py)
wandb_run, run.wandb_run_id = metrics.start_wandb(cfg.wandb_project, cfg.wandb_run_name, vars(cfg), run.wandb_run_id,
                                                  log) if cfg.wandb_log and master else (None, run.wandb_run_id)
if wandb_run:
    record.forward = lambda r: metrics.to_wandb(wandb_run, r)  # wandb charts the records metrics.jsonl gets
forecaster = forecast.Forecaster([schedule.learning_rate(it, cfg, start.cooldown_from) for it in range(cfg.max_iters)],
                                 cfg.warmup_iters) if master and cfg.eval_interval > 0 else None
ladder_prior = forecaster and forecast.prior(cfg.forecast_prior, n_params, cfg, cfg.max_iters * tokens_per_iter)
if isinstance(ladder_prior, str):  # a ladder's prior the run cannot use: said now, not first at an evaluation
    log(f"forecast_prior: none for this run, {ladder_prior}")


# -----------------------------------------------------------------------------
# helpers of the loop
def evaluate(iteration, forecasting=False):
    """The val loss (the sources' weighted mean) logged and recorded, and the best so far; with a data_mixture
    also one line per source and val/<name>. forecasting: in the loop, the forecast of the final loss too."""
    t_eval = time.time()
    losses = evaluation.val_losses(model, sampler, val_windows, get_batch, autocast, device, rank, world_size)
    if cfg.data_mixture:
        for name, loss in losses.items():
            seen, epochs = sampler.accounting(name)
            log(f"source {name}: {seen:,} tokens seen ({epochs:.2f} epochs), val loss {loss:.4f}")
    val_loss = sampler.headline(losses)
    run.best_val_loss = min(run.best_val_loss, val_loss)
    record("eval", iteration, tokens=run.tokens_through(iteration, tokens_per_iter), val_loss=val_loss,
           best_val_loss=run.best_val_loss,
           **({"sources": losses} if cfg.data_mixture else {}))
    log(f"eval iter {iteration}: val loss {val_loss:.4f}" + (f", best {run.best_val_loss:.4f}" if clock.steps else "")
        + f" ({time.time() - t_eval:.1f}s)")
    if forecaster and forecasting:  # the val loss at max_iters, fitted to the evaluations so far (forecast.py)
        forecast.report(forecaster, ladder_prior, cfg.out_dir, iteration, cfg.max_iters, log, record)


def evaluate_hellaswag(iteration):
    t_eval = time.time()
    result = evaluation.hellaswag_accuracy(model, hellaswag_examples, gptconf.block_size, device, autocast, cfg.hellaswag_limit,
                                           tokenizer.get_encoding(encoding or "gpt2").n_vocab)
    log(f"hellaswag iter {iteration}: acc_norm {result['acc_norm']:.4f}, acc {result['acc']:.4f} "
        f"({result['n']} examples, {time.time() - t_eval:.1f}s)")
    record("hellaswag", iteration, acc_norm=result["acc_norm"], acc=result["acc"], n=result["n"])


def log_step(iteration, loss, grad_norm, lr, dt):
    """The step's line in train.log and its record in metrics.jsonl."""
    tokens_per_sec, peak = tokens_per_iter / dt, machine.peak_memory(device_type)
    mfu, hfu = utilisation(tokens_per_sec)  # per GPU
    figures = dict(loss=loss, lr=lr, grad_norm=grad_norm, step_time=dt, tokens_per_sec=tokens_per_sec, mfu=mfu, hfu=hfu)
    log(runlog.step_line(iteration, figures, machine.peak_memory_text(peak, cfg.optimizer_offload), world_size,
                         clock.eta(cfg.max_iters - iteration), show_hfu=utilisation.recomputes))
    record("step", iteration, **figures, tokens=run.tokens_through(iteration, tokens_per_iter), peak_memory=peak)


def say_how_it_ended(iteration, stopped):
    """The run's last line and record: stopped by a signal (resumable), or done at max_iters (a signal to a run
    already there, as in its last save, stops nothing)."""
    if stopped and iteration < cfg.max_iters:
        resumes = ("run the same command to continue" if cfg.checkpoint_interval > 0 else
                   f"checkpoint_interval=0 saves nothing: the same command starts again from step "
                   f"{checkpoints.saved_iter}")
        log(f"stopped by {stop_signal.name()} after {iteration} completed steps; {resumes}")
        record("stop", iteration, signal=stop_signal.name())
    elif iteration >= cfg.max_iters:
        record("done", iteration, best_val_loss=run.best_val_loss)
        log(f"done: {iteration} steps (max_iters)"
            + (f"; best val loss {run.best_val_loss:.4f}" if run.best_val_loss < math.inf else ""))


# -----------------------------------------------------------------------------
# the loop: iter_num counts completed optimizer steps, so `iter N` and ckpt_N.pt agree
clock = runlog.StepClock(cfg.compile, log)  # the first step's time, then the wall time per step behind the eta
if cfg.eval_only or (iter_num == 0 and cfg.eval_interval > 0):
    evaluate(iter_num)
    if hellaswag_examples and (start.pretrained or iter_num > 0 or cfg.eval_only):
        evaluate_hellaswag(iter_num)
    elif hellaswag_examples:  # random weights score 25% by construction: minutes spent learning nothing
        log("hellaswag: skipped at iteration 0 of a run from scratch (random weights score 25%)")
    if cfg.eval_only:
        parallel.end_processes()
        sys.exit(0)

checkpoints.step_start()
stop_vote = elastic.StopVote(stop_signal, timeout)
stop_now = parallel.agree(stop_signal.received, device)
stop_signal.training_begins()  # a launcher's death from here on saves before the run stops
while iter_num < cfg.max_iters and not stop_now:
    lr = schedule.learning_rate(iter_num, cfg, start.cooldown_from)
    optim.set_lr(optimizer, lr)
    t0 = time.perf_counter()
    loss_sum = torch.zeros((), device=device)
    my_windows = sampler.next_windows(cfg.batch_size * cfg.gradient_accumulation_steps).reshape(
        cfg.gradient_accumulation_steps, cfg.batch_size, 2)[rank::world_size]
    x, y = get_batch(sampler.read, my_windows[0])
    with step_casts:  # where precision.casts_once_per_step, the weights' bf16 copies live until the step's last backward
        for micro_step in range(micro_steps):
            last = micro_step == micro_steps - 1
            parallel.sync_gradients(model, last)
            with train_autocast:
                loss = model(x, y)[1]
            if not last:  # fetch the next batch while the GPU works
                x, y = get_batch(sampler.read, my_windows[micro_step + 1])
            (loss / micro_steps).backward()
            loss_sum += loss.detach()  # no .item() here: a host sync per micro-batch stalls the GPU
            if stop_now := stop_vote.read_previous_and_post():
                break
    if stop_now:
        optimizer.zero_grad(set_to_none=True)  # the unfinished step is dropped; resume redraws its batches
        break
    loss_mean = step_loss(iter_num + 1, loss_sum)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
    loss_value, norm_value = parallel.same_on_every_rank(loss_mean, grad_norm)  # one host sync per step
    # apply, or skip a non-finite or spiking step (it still counts, its batches are not seen again), or roll back
    action = guard.after_step(iter_num + 1, loss_value, norm_value, checkpoints.resume_point["sampler"],
                              iter_num >= cfg.warmup_iters)
    if action == faults.APPLY:
        optim.step(optimizer, cfg.seed * 1_000_003 + iter_num, device_type)  # the same rounding on every rank
        if fp8_all_gather:
            precision.update_weight_scales(raw_model)
    optimizer.zero_grad(set_to_none=how != "ddp")  # DDP's gradients stay views of its buckets
    if clock.steps == 0 or (iter_num + 1) % cfg.log_interval == 0:  # a step time that is read: with the optimizer's
        machine.synchronize(device)  # kernels, not in what waits for them next (elsewhere the next step overlaps them)
    dt = time.perf_counter() - t0
    iter_num += 1
    checkpoints.step_start()
    if action == faults.ROLL_BACK and (restored := checkpoints.roll_back(iter_num)) is not None:
        iter_num = restored
        continue
    clock.lap(dt)
    if iter_num % cfg.log_interval == 0 and action == faults.APPLY:
        log_step(iter_num, loss_value, norm_value, lr, dt)
    if cfg.eval_interval > 0 and (iter_num % cfg.eval_interval == 0 or iter_num == cfg.max_iters):
        evaluate(iter_num, forecasting=True)
    if hellaswag_examples and (iter_num % cfg.hellaswag_interval == 0 or iter_num == cfg.max_iters):
        evaluate_hellaswag(iter_num)
    checkpoints.maybe_save(iter_num)
    stop_now = parallel.agree(stop_signal.received, device)

checkpoints.finish(iter_num, stopped=stop_now)  # a stopped run's last step saved; the last save complete
say_how_it_ended(iter_num, stop_now)
metrics.finish_wandb(wandb_run)
stop_vote.finish()
parallel.end_processes()
