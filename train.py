"""
Train a GPT on one GPU (or the CPU), or on many with torchrun:

    python train.py config/train_gpt3_6b.py [--key=value ...]
    torchrun --nproc_per_node=8 train.py config/train_gpt3_6b.py [--strategy=fsdp]

Reads top to bottom: config, setup (processes, log, device, checkpoint, data, model,
optimizer), then the loop. Re-running the same command continues from the newest loadable
checkpoint in out_dir; Ctrl+C, SIGTERM and SIGHUP stop after the current micro-batch with
the state of the last completed step saved. Every printed line also goes to <out_dir>/train.log.
"""
import datetime
import json
import math
import os
import signal
import sys
import time
from contextlib import nullcontext

import torch

from trainer import environment  # first: what an older torch lacks is named before anything needs it

if problem := environment.torch_problem():
    sys.exit(f"error: {problem}")

import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

import configurator
from model import GPT, GPTConfig
from trainer import (
    bins, checkpoint, elastic, evaluation, hardware, hellaswag, hf, memory, metrics, mixture, optim, precision,
    resume, runlock, runlog, saving, sharding, spikes, stopping, tokenizer, wandb_logging)

# -----------------------------------------------------------------------------
# config
cfg = configurator.load_config_or_exit(sys.argv[1:])
ARCHITECTURE_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias", "activation")

# one process, or one per GPU under torchrun (which sets RANK, LOCAL_RANK and WORLD_SIZE)
distributed = "RANK" in os.environ
rank = int(os.environ.get("RANK", 0))
local_rank = int(os.environ.get("LOCAL_RANK", 0))
world_size = int(os.environ.get("WORLD_SIZE", 1))
master = rank == 0  # only rank 0 writes train.log, config.json, wandb and .pt checkpoints

if master:
    try:  # one run per out_dir: a second one would interleave train.log and overwrite checkpoints
        out_dir_lock = runlock.hold(cfg.out_dir, "training run")
    except runlock.Unavailable as e:
        sys.exit(f"error: {e}")
run_log = runlog.RunLog(cfg.out_dir, rank)  # stdout and train.log (runlog.py)
log, fail = run_log, run_log.fail
record = metrics.Metrics(cfg.out_dir, enabled=master)  # what tools read: out_dir/metrics.jsonl (metrics.py)
sys.excepthook = run_log.crash
run_log.explain = lambda error: environment.compile_failure(error) if cfg.compile else None  # one line, not a traceback

if cfg.strategy == "hsdp" and not cfg.hsdp_shard_size:  # one node's GPUs: its fast link carries the sharding
    cfg.hsdp_shard_size = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
if problem := configurator.check(cfg, world_size, distributed) or elastic.restart_problem():
    fail(problem)
log(f"=== {time.strftime('%Y-%m-%d %H:%M:%S')} train.py {' '.join(sys.argv[1:])}"
    + (f" ({world_size} processes, {cfg.strategy})" if distributed else ""))
if master and (restarted := elastic.restart_line(cfg.out_dir)):
    log(restarted)

stop_signal = stopping.StopSignal()  # from here on a signal stops the run cleanly (stopping.py)

# -----------------------------------------------------------------------------
# device, precision and process group
allocator = memory.use_expandable_segments()  # before the device initialises, which is when it is read
device, device_type = hardware.resolve_device(cfg.device, local_rank)
if problem := hardware.device_problem(device):
    fail(problem)
if device_type == "cuda":
    torch.cuda.set_device(device)  # first: under torchrun nothing may touch GPU 0 from another rank
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
if cfg.fp8 and (problem := precision.device_problem(device) or precision.kernel_problem(cfg.fp8, device)):
    fail(problem)
if device_type == "cuda" and (problem := environment.compiler_problem(cfg.compile)):
    fail(problem)
# bf16 autocast computes in bf16 over fp32 master weights; no loss scaling needed. Its cast cache
# is off: each weight is used once per forward anyway, and with checkpointing the cache would keep
# every block's bf16 copy alive to the end of the forward (13.3 GB at 6.7B) for nothing. (Training
# without recompute casts once per step instead, below: precision.py.)
autocast = (
    torch.autocast(device_type=device_type, dtype=torch.bfloat16, cache_enabled=False)
    if cfg.dtype == "bfloat16" else nullcontext()
)
save_group = None  # under torchrun: the gloo group saves wait on, with a timeout a whole write fits in
timeout = datetime.timedelta(minutes=cfg.collective_timeout_minutes)
if distributed:
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device_type == "cuda" else "gloo")
    if backend == "nccl":  # a hung collective ends the process and leaves a trace (elastic.py)
        log(f"NCCL/RCCL: {elastic.nccl_settings(cfg.out_dir)}")
    # Training's collectives fail a hung job within collective_timeout_minutes. A save can take far longer
    # (the checkpoint's size over this disk's speed, measured now), so its waits are on a group of their own.
    with torch.device("meta"):
        n_saved = GPT(GPTConfig(**{k: getattr(cfg, k) for k in ARCHITECTURE_KEYS})).get_num_params(non_embedding=False)
    checkpoint_bytes = optim.checkpoint_bytes(n_saved, optim.mode_of(vars(cfg)))
    write_speed = checkpoint.write_speed(cfg.out_dir) if cfg.checkpoint_interval > 0 else float("inf")
    save_timeout = checkpoint.process_group_timeout(checkpoint_bytes, write_speed)
    log(f"collectives wait up to {timeout}, saves up to {save_timeout} ({cfg.out_dir} writes "
        f"{write_speed / 1e9:.2f} GB/s, a checkpoint is {checkpoint_bytes / 1e9:.1f} GB)")
    dist.init_process_group(backend=backend, timeout=timeout)
    save_group = dist.new_group(backend="gloo", timeout=save_timeout)
    run_log.explain = lambda error, compiling=run_log.explain: compiling(error) or elastic.explain_timeout(
        error, save_group, timeout)  # names the hung rank
saver = saving.Saver(cfg.checkpoint_async, save_group, log)


def agree(flag):
    """True on every rank if it is true on any: a stop or a save that only some ranks enter deadlocks."""
    if not distributed:
        return flag
    t = torch.tensor([float(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() > 0


# -----------------------------------------------------------------------------
# what to start from: a checkpoint (resume, roll back) or scratch
# init_from='gpt2' etc. or init_weights=PATH: a new run from those weights, resumed like 'auto' once it has checkpoints
pretrained = cfg.init_weights or (cfg.init_from if cfg.init_from in hf.GPT2_MODELS else "")
init_from_path = cfg.init_from not in ("auto", "resume", "scratch", *hf.GPT2_MODELS)  # continue or roll back
if cfg.init_weights and cfg.init_from not in ("auto", "scratch"):
    fail(f"init_weights starts a new run, init_from={cfg.init_from!r} continues one: drop one of them")
if init_from_path and not os.path.exists(cfg.init_from):
    fail(f"init_from: no such checkpoint {cfg.init_from}")
if master:
    checkpoint.remove_stale_temp_files(cfg.out_dir, log=log)
if distributed:
    dist.barrier()  # the others look at out_dir only once rank 0 has tidied it
resume_state = None
try:
    if cfg.init_from == "scratch":
        existing = checkpoint.list_checkpoints(cfg.out_dir)
        if existing:
            fail(f"init_from='scratch' but {cfg.out_dir} holds {len(existing)} checkpoint(s) (newest "
                 f"{os.path.basename(existing[0][1])}); use another out_dir, or init_from='auto' to continue")
    elif cfg.init_from in ("auto", "resume", *hf.GPT2_MODELS):
        resume_state = checkpoint.load_newest_on_every_rank(cfg.out_dir, log=log)
        if resume_state is None and cfg.init_from == "resume":
            fail(f"init_from='resume' but {cfg.out_dir} has no checkpoint; use init_from='auto' to start from scratch")
    else:
        resume_state = checkpoint.load_checkpoint(cfg.init_from, log=log)
        # an earlier checkpoint of this out_dir: set the newer ones aside, only now that it has loaded
        init_path = os.path.abspath(cfg.init_from)  # also for 'ckpt_N/' with a trailing slash
        if master and os.path.samefile(os.path.dirname(init_path), cfg.out_dir) \
                and checkpoint.roll_back_to(init_path, log=log):
            log("rolled back: once this run is going, drop --init_from to continue it later "
                "(running this same command again would roll back again)")
except checkpoint.CheckpointError as e:
    fail(str(e))

weights, weights_encoding, saved_args = None, None, None
if resume_state is not None:
    saved_args, origin = resume_state["model_args"], "the checkpoint"
elif pretrained:
    try:
        saved_args, weights, weights_encoding = hf.load_weights(pretrained, log=log)
    except hf.WeightsError as e:
        fail(f"{'init_weights' if cfg.init_weights else 'init_from'}: {e}")
    origin = pretrained
model_args = {k: getattr(cfg, k) for k in ARCHITECTURE_KEYS}
if saved_args is not None:
    # The architecture comes from the checkpoint or weights; a config that sets another is a mistake.
    for key in ARCHITECTURE_KEYS:
        saved, wanted = saved_args.get(key, getattr(GPTConfig, key)), getattr(cfg, key)
        if wanted != saved and wanted != configurator.DEFAULTS[key]:
            where = "the command line" if any(a.startswith(f"--{key}=") for a in sys.argv) else "the config file"
            fail(f"{key}={wanted!r} (set on {where}) conflicts with {origin}'s {key}={saved!r}: the architecture "
                 f"comes from {origin}, so leave {key} out, or train a new model in a new out_dir")
        model_args[key] = saved
    model_args["n_tokens"] = saved_args.get("n_tokens", 0)
eval_batch_size = cfg.batch_size  # the config's: the validation set stays the same whatever auto picks
# Attention first: if only the math kernel runs, its T x T matrices are priced before anything is chosen.
attention = hardware.attention_backend(device, torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32,
                                       model_args["n_head"], model_args["n_embd"] // model_args["n_head"],
                                       model_args["block_size"])
if attention == "math":
    log("warning: attention runs the math kernel, which keeps the T x T attention matrices (priced in the memory "
        "estimate below; slower too); see python scripts/check_env.py")
budget = memory.device_budget(device, cfg.memory_budget_gb)  # after init_process_group: NCCL's buffers are a fixed cost
with torch.device("meta"):
    shapes = GPT(GPTConfig(**model_args))  # every shape and no storage: what memory.py's estimates read
try:  # refuse now rather than after minutes of allocating; auto picks the cheapest setting that fits
    choice = memory.settle(shapes, cfg, budget, world_size, attention)
except memory.DoesNotFit as e:
    fail(f"{e}; see python scripts/plan.py {' '.join(sys.argv[1:])}")
policy, recompute_blocks = choice.activation_checkpointing, choice.recompute_blocks
cfg.batch_size, cfg.gradient_accumulation_steps = choice.batch_size, choice.gradient_accumulation_steps
if cfg.activation_checkpointing == "auto":
    log(f"auto: {choice.describe(model_args['n_layer'])}")  # bench.py reads this line
log(memory.start_up_line(choice, budget))
gptconf = GPTConfig(**model_args, dropout=cfg.dropout, activation_checkpointing=policy, recompute_blocks=recompute_blocks)

# -----------------------------------------------------------------------------
# data: uint16 token bins of one folder or a weighted mixture of several (mixture.py), each sampled
# without replacement in a per-epoch permutation of windows
if cfg.data_mixture and cfg.data_dir != os.path.join("data", cfg.dataset):
    log(f"note: data_mixture is set, so the training and validation data do not come from data_dir {cfg.data_dir}")
try:
    tokens = gptconf.n_tokens or gptconf.vocab_size  # an id in the padding past n_tokens could never be predicted
    vocab_from = origin if saved_args else None  # whose vocabulary it is, for the advice on a mismatch
    sampler = mixture.open_mixture(mixture.folders(cfg), gptconf.block_size, tokens, cfg.seed, vocab_from)
except (bins.BinError, mixture.MixtureError) as e:
    fail(str(e))
described = next((s for s in sampler.sources if s.meta), sampler.sources[0])  # open_mixture checked they agree
meta, meta_dir = described.meta, described.path
try:  # saved in checkpoints, so sample.py can decode; a rank file found by path, else by its hash
    encoding = tokenizer.find(meta["encoding"], meta.get("encoding_sha256"), [meta_dir]) if meta else weights_encoding
except ValueError as e:
    fail(f"{meta_dir}/meta.json: {e}")
# Every rank draws the same global batch and takes its share, so the sequence of global
# batches does not depend on the number of processes.
micro_steps = cfg.gradient_accumulation_steps // world_size  # this rank's share of a step
# Evaluation always uses the same validation windows, so val losses compare across time.
val_windows = sampler.val_windows(cfg.eval_iters, eval_batch_size)
tokens_per_iter = cfg.batch_size * cfg.gradient_accumulation_steps * gptconf.block_size
hellaswag_examples = None
if cfg.hellaswag_interval > 0:
    try:  # a bad file turns the evaluation off rather than stopping a long run; another encoding is refused
        hellaswag_examples = hellaswag.load(cfg.hellaswag_file or os.path.join(cfg.data_dir, hellaswag.FILE),
                                            tokenizer.get_encoding(encoding or "gpt2"))
    except hellaswag.EncodingMismatch as e:
        fail(f"hellaswag_file: {e}")
    except (hellaswag.HellaSwagError, ValueError) as e:
        log(f"warning: {e}; HellaSwag evaluation is off for this run")
    if hellaswag_examples and (note := hellaswag.truncation_note(hellaswag_examples, gptconf.block_size)):
        log(note)
for line in sampler.describe(tokens_per_iter, cfg.max_iters):
    log(line)


def get_batch(read, indices):
    """x and y of the windows read(indices, block_size) gives: a mixture's draws, or one val bin's indices."""
    try:
        windows = torch.from_numpy(read(indices, gptconf.block_size))
    except bins.BinError as e:
        fail(str(e))
    if device_type == "cuda":  # from pinned memory the copy is asynchronous: the CPU goes on queueing work
        windows = windows.pin_memory().to(device, non_blocking=True)
    else:
        windows = windows.to(device)
    return windows[:, :-1], windows[:, 1:]


# -----------------------------------------------------------------------------
# model and optimizer
torch.manual_seed(cfg.seed)  # the same initial weights on every rank
t0 = time.time()
log(f"building the model ({gptconf.n_layer} layers, {gptconf.n_embd} wide) on {device} ...")
with torch.device(device):  # built in place: at 6.7B a CPU build then a copy would take minutes
    model = GPT(gptconf)
n_params = model.get_num_params()
log(f"built {model.get_num_params(non_embedding=False):,} parameters in {time.time() - t0:.1f}s")
if weights is not None:  # before compile and sharding, identically on every rank
    model.load_state_dict(weights)
    log(f"starting from {pretrained}'s weights at iteration 0, with a fresh optimizer and data order")
    del weights
if cfg.master_weights == "bfloat16":  # 2 bytes a weight, gradients still fp32 (optim.py)
    optim.use_bf16_weights(model)
fsdp = distributed and cfg.strategy in ("fsdp", "hsdp")  # hsdp: FSDP2 over a (nodes, GPUs per node) mesh
if cfg.fp8:  # the blocks' matmuls in fp8; the weights stay ordinary Parameters (precision.py)
    log(precision.describe(cfg.fp8, *precision.convert(model, cfg.fp8, fsdp=fsdp), fsdp=fsdp))
torch.manual_seed(cfg.seed + rank)  # but each rank its own dropout masks
raw_model = model  # the plain module, whose state_dict has no wrapper prefixes
ddp = distributed and cfg.strategy == "ddp" and cfg.master_weights == "float32"
averaged_by_hand = distributed and cfg.strategy == "ddp" and not ddp  # DDP cannot reduce fp32 grads of bf16 weights
if averaged_by_hand:  # and the replicas start from rank 0's weights, as DDP would make them
    optim.broadcast_weights(raw_model.parameters())
if cfg.compile:  # per block, in place: state_dict keys stay the same, and each block's checkpoint is traced too
    # Dynamo's DDP optimizer would split each block's graph at bucket boundaries so that
    # all-reduces overlap backward; DDP here all-reduces only on a step's last micro-batch, so
    # the splits would only cost speed.
    torch._dynamo.config.optimize_ddp = not ddp
    for block in model.transformer.h:
        block.compile()
if fsdp:  # shard parameters, gradients and optimizer state block by block, keeping one GPU's numerics
    sharding.shard(model, cfg.dtype, sharding.mesh(cfg.strategy, device_type, world_size, cfg.hsdp_shard_size))
    if cfg.strategy == "hsdp":
        log(f"hsdp: each parameter sharded over {cfg.hsdp_shard_size} processes, replicated "
            f"{world_size // cfg.hsdp_shard_size} times")
optimizer = optim.build(model, cfg.optimizer, cfg.weight_decay, cfg.learning_rate, (cfg.beta1, cfg.beta2), device_type,
                        cfg.master_weights, cfg.optimizer_offload)

guard = spikes.SpikeGuard(cfg.spike_window, cfg.spike_loss_z, cfg.spike_grad_z, cfg.spike_rollback_after)


def update_fp8_scales():
    """Under FSDP's fp8 all-gather every weight's scale comes from one all-reduce, after each change of the weights."""
    if cfg.fp8 and fsdp:
        precision.update_weight_scales(raw_model)


def load_training_state(state, after_rollback=False):
    """A checkpoint into the live run (resume.py); returns its iteration."""
    global best_val_loss, wandb_run_id
    try:
        iteration, best_val_loss, wandb_run_id = resume.restore(state, cfg, raw_model, optimizer, sampler, guard, rank,
                                                                world_size, device_type, log, after_rollback)
    except resume.ResumeError as e:
        fail(str(e))
    update_fp8_scales()
    return iteration


iter_num, best_val_loss, wandb_run_id = 0, float("inf"), None
if resume_state is not None:
    iter_num = load_training_state(resume_state)
    log(f"resuming after {iter_num} completed steps (best val loss {best_val_loss:.4f})")
    del resume_state  # the mmap'd tensors have been copied into the model and optimizer
if ddp:
    # Gradients made before the wrap become views of DDP's buckets; without them the first step's
    # unsynced micro-batches would make fresh .grad tensors beside the buckets (26.6 GB at 6.7B)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    # gradient_as_bucket_view: gradients live in DDP's buckets instead of beside them (26.6 GB at 6.7B),
    # as long as they are zeroed in place, never set to None (which makes the next micro-step's
    # gradients fresh tensors beside the buckets again)
    model = DDP(model, device_ids=[local_rank] if device_type == "cuda" else None, gradient_as_bucket_view=True)

if master:
    with open(os.path.join(cfg.out_dir, "config.json"), "w") as f:
        json.dump(dict(vars(cfg), **model_args), f, indent=2)
record("start", iter_num, max_iters=cfg.max_iters, tokens_per_iter=tokens_per_iter, params=n_params,
       world_size=world_size, batch_size=cfg.batch_size, gradient_accumulation_steps=cfg.gradient_accumulation_steps,
       activation_checkpointing=policy, recompute_blocks=recompute_blocks)

# MFU against the peak of the GPU we really have; unknown hardware says so instead of guessing.
gpu_description, gpu_key = hardware.local_gpu(local_rank) if device_type == "cuda" else (None, None)
peak_tflops = cfg.peak_tflops or (hardware.GPUS[gpu_key].peak_tflops if gpu_key else 0.0)
if device_type == "cuda":
    log(f"GPU: {gpu_description}; peak bf16 {peak_tflops or 'unknown (set peak_tflops for MFU)'} TFLOPS; "
        f"allocator {allocator}")
    if cfg.fp8 and peak_tflops:
        log(precision.mfu_note(peak_tflops, hardware.GPUS[gpu_key].fp8_tflops if gpu_key else None))
model_flops = hardware.flops_per_token(n_params, gptconf.n_layer, gptconf.n_embd, gptconf.block_size)
hardware_flops = model_flops + hardware.recompute_flops_per_token(
    memory.block_params(raw_model), gptconf.num_recomputed_blocks(), gptconf.n_embd, gptconf.block_size, gptconf.activation_checkpointing)

# each fp32 weight cast to bf16 once per optimizer step, not once per micro-batch, where that costs nothing
step_casts, train_autocast = precision.step_cast_contexts(device_type) if precision.casts_once_per_step(
    policy, cfg.dtype, cfg.master_weights, fsdp, cfg.compile, cfg.fp8) else (nullcontext(), autocast)

# -----------------------------------------------------------------------------
# wandb: optional, and never allowed to hang or prompt inside tmux (wandb_logging.py)
wandb_run = None
if cfg.wandb_log and master:
    wandb_run, wandb_run_id = wandb_logging.start(cfg.wandb_project, cfg.wandb_run_name, vars(cfg), wandb_run_id, log)


# -----------------------------------------------------------------------------
# helpers of the loop
def get_lr(it):
    """Linear warmup, then cosine decay to min_lr at lr_decay_iters, then min_lr."""
    if not cfg.decay_lr:
        return cfg.learning_rate
    if it < cfg.warmup_iters:
        return cfg.learning_rate * (it + 1) / (cfg.warmup_iters + 1)
    if it >= cfg.lr_decay_iters:
        return cfg.min_lr
    ratio = (it - cfg.warmup_iters) / max(1, cfg.lr_decay_iters - cfg.warmup_iters)
    return cfg.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (cfg.learning_rate - cfg.min_lr)


def evaluate():
    """The val loss, the sources' weighted mean; with a data_mixture also one line per source and val/<name>."""
    losses = {s.name: evaluation.val_loss(model, lambda k, s=s: get_batch(s.val.windows, val_windows[s.name][k]),
                                          len(val_windows[s.name]), autocast, device, rank, world_size)
              for s in sampler.sources}
    record("eval", iter_num, tokens=iter_num * tokens_per_iter, val_loss=sampler.headline(losses),
           **({"sources": losses} if cfg.data_mixture else {}))
    if cfg.data_mixture:
        for name, loss in losses.items():
            seen, epochs = sampler.accounting(name)
            log(f"source {name}: {seen:,} tokens seen ({epochs:.2f} epochs), val loss {loss:.4f}")
        wandb_logging.log(wandb_run, iter_num, {f"val/{name}": loss for name, loss in losses.items()})
    return sampler.headline(losses)


def evaluate_hellaswag():
    t_eval = time.time()
    result = hellaswag.evaluate(model, hellaswag_examples, gptconf.block_size, device, autocast,
                                cfg.hellaswag_limit, rank, world_size, tokenizer.get_encoding(encoding or "gpt2").n_vocab)
    log(f"hellaswag iter {iter_num}: acc_norm {result['acc_norm']:.4f}, acc {result['acc']:.4f} "
        f"({result['n']} examples, {time.time() - t_eval:.1f}s)")
    record("hellaswag", iter_num, acc_norm=result["acc_norm"], acc=result["acc"], n=result["n"])
    wandb_logging.log(wandb_run, iter_num, {"hellaswag/acc_norm": result["acc_norm"], "hellaswag/acc": result["acc"]})


def sync_gradients(on):
    """DDP all-reduces gradients only on a step's last micro-batch; the others accumulate locally.
    FSDP reduce-scatters after every micro-batch: skipping it would keep every block's unsharded
    gradient until the step ends (26.6 GB per GPU at 6.7B), and memory is why one uses FSDP."""
    if ddp:
        model.require_backward_grad_sync = on


def mean_over_ranks(t):
    if distributed:
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t


def weights_are_finite():
    local = [p.to_local() if isinstance(p, DTensor) else p for p in raw_model.parameters()]
    return not agree(not bool(torch.stack([torch.isfinite(p).all() for p in local]).all()))


def save(step_start):
    """Save the state after iter_num completed steps; step_start holds the sampler and RNG
    states from the start of the step after it, which is where a resumed run begins."""
    if not weights_are_finite():
        fail(f"weights are not finite after step {iter_num}; not saving. Roll back with "
             f"--init_from=<an earlier ckpt_N.pt>, perhaps with a lower learning_rate")
    trainer_state = resume.run_state(cfg, model_args, iter_num, best_val_loss, step_start, wandb_run_id,
                                     encoding, guard)
    try:
        saver.wait()  # the previous save is complete (one at a time), and had it failed, the run stops here
        if fsdp:
            saver.save_sharded(raw_model, optimizer, trainer_state, cfg.out_dir, iter_num, cfg.keep_last_n)
        elif master:
            model_sd, optimizer_sd = checkpoint.full_state(raw_model, optimizer)
            trainer_state.update(model=model_sd, optimizer=optimizer_sd)
            saver.save_checkpoint(trainer_state, cfg.out_dir, iter_num, cfg.keep_last_n)
        if not cfg.checkpoint_async:
            saver.wait()  # the other ranks wait for rank 0's .pt here, on the save group's long timeout
    except checkpoint.CheckpointError as e:
        fail(str(e))
    record("save", iter_num, asynchronous=cfg.checkpoint_async, sharded=fsdp)


def fault_injected(kind, it):
    """Fault injection for the tests: TRAIN_FAULT_NAN_AT_ITERS=3,4 poisons those steps' loss;
    TRAIN_FAULT_RANK_ERROR_AT_ITERS=3 stops the last rank there with an error;
    TRAIN_FAULT_CRASH_AT_ITERS=6 crashes it there in a torchrun job's first attempt (not after a restart);
    TRAIN_FAULT_HANG_AT_ITERS=3 hangs it there (until torchrun's SIGTERM, which a rank stuck in C++ would
    ignore, getting SIGKILL 30 s later);
    TRAIN_FAULT_SPIKE_AT_ITERS=5,6 multiplies it (and so the gradients) by 1000, except in steps
    replayed after an automatic rollback (a spike belongs to its data, which the rollback skipped)."""
    replayed = kind == "SPIKE" and any(r["first_spike"] <= it + 1 <= r["at"] for r in guard.rollbacks)
    restarted = kind == "CRASH" and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0"
    return str(it + 1) in os.environ.get(f"TRAIN_FAULT_{kind}_AT_ITERS", "").split(",") and not replayed \
        and not restarted


def roll_back(first_spike, spike_data):
    """Back to a checkpoint before a burst of spikes, past the spike's data (resume.py); its iteration or None."""
    try:
        saver.wait()  # a save still in flight would publish a checkpoint newer than the one rolled back to
        return resume.roll_back(first_spike, spike_data, iter_num, cfg, guard, sampler, master,
                                lambda state: load_training_state(state, after_rollback=True), log)
    except (resume.ResumeError, checkpoint.CheckpointError) as e:
        fail(str(e))


# -----------------------------------------------------------------------------
# the loop: iter_num counts completed optimizer steps, so `iter N` and ckpt_N.pt agree
if cfg.eval_only or (iter_num == 0 and cfg.eval_interval > 0):
    t0 = time.time()
    val_loss = evaluate()
    best_val_loss = min(best_val_loss, val_loss)
    log(f"eval iter {iter_num}: val loss {val_loss:.4f} ({time.time() - t0:.1f}s)")
    if hellaswag_examples and (pretrained or iter_num > 0 or cfg.eval_only):
        evaluate_hellaswag()
    elif hellaswag_examples:  # random weights score 25% by construction: minutes spent learning nothing
        log("hellaswag: skipped at iteration 0 of a run from scratch (random weights score 25%)")
    if cfg.eval_only:
        if distributed:
            dist.destroy_process_group()
        sys.exit(0)

saving = cfg.checkpoint_interval > 0  # 0 turns checkpoints off, for benchmarks
last_saved_iter, last_save_time = iter_num, time.time()  # a checkpoint's state, or scratch: nothing to save
nonfinite_in_a_row = nonfinite_total = steps_run = 0
step_time_avg = None
step_start = {"sampler": sampler.state_dict(), "rng": resume.rng_state(device_type)}
stop_vote = stopping.StopVote(stop_signal, timeout)
stop_now = agree(stop_signal.received)
while iter_num < cfg.max_iters and not stop_now:
    lr = get_lr(iter_num)
    optim.set_lr(optimizer, lr)
    t0 = time.time()
    loss_sum = torch.zeros((), device=device)
    my_windows = sampler.next_windows(cfg.batch_size * cfg.gradient_accumulation_steps).reshape(
        cfg.gradient_accumulation_steps, cfg.batch_size, 2)[rank::world_size]
    x, y = get_batch(sampler.read, my_windows[0])
    fault_scale = 1000.0 if fault_injected("SPIKE", iter_num) else 1.0
    with step_casts:  # where precision.casts_once_per_step, the weights' bf16 copies live until the step's last backward
        for micro_step in range(micro_steps):
            last = micro_step == micro_steps - 1
            sync_gradients(last)
            with train_autocast:
                loss = model(x, y)[1] * fault_scale
            if not last:  # fetch the next batch while the GPU works
                x, y = get_batch(sampler.read, my_windows[micro_step + 1])
            (loss / micro_steps).backward()
            loss_sum += loss.detach()  # no .item() here: a host sync per micro-batch stalls the GPU
            stop_now = stop_vote.read_previous_and_post()
            if stop_now:
                break
    if stop_now:
        optimizer.zero_grad(set_to_none=True)  # the unfinished step is dropped; resume redraws its batches
        break
    if fault_injected("RANK_ERROR", iter_num) and rank == world_size - 1:
        fail("injected error on the last rank")
    if fault_injected("CRASH", iter_num) and rank == world_size - 1:
        raise RuntimeError("injected crash on the last rank")
    if fault_injected("HANG", iter_num) and rank == world_size - 1:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        time.sleep(3600)
    if averaged_by_hand:
        optim.average_gradients(raw_model.parameters(), world_size)
    loss_mean = mean_over_ranks(loss_sum / micro_steps)  # over the whole global batch
    if fault_injected("NAN", iter_num):
        loss_mean = loss_mean * float("nan")
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip if cfg.grad_clip > 0 else math.inf)
    if isinstance(grad_norm, DTensor):  # FSDP2 returns the norm as a DTensor
        grad_norm = grad_norm.full_tensor()
    loss_and_norm = torch.stack([loss_mean, grad_norm.float()])
    if distributed:  # equal on every rank already; made certain, as every rank must step or skip alike
        dist.broadcast(loss_and_norm, 0)
    loss_value, norm_value = loss_and_norm.tolist()
    finite = math.isfinite(loss_value) and math.isfinite(norm_value)
    spike = guard.judge(iter_num + 1, loss_value, norm_value, step_start["sampler"]) \
        if finite and iter_num >= cfg.warmup_iters else None
    if finite:
        nonfinite_in_a_row = 0
        if not spike:
            optim.step(optimizer, cfg.seed * 1_000_003 + iter_num, device_type)  # the same rounding on every rank
            update_fp8_scales()
    else:  # skip the update; the step still counts, and its batches are not seen again
        nonfinite_in_a_row += 1
        nonfinite_total += 1
        guard.note_skipped(iter_num + 1, step_start["sampler"])
    optimizer.zero_grad(set_to_none=not ddp)
    dt = time.time() - t0
    iter_num += 1
    steps_run += 1
    step_start = {"sampler": sampler.state_dict(), "rng": resume.rng_state(device_type)}

    if spike:
        log(f"iter {iter_num}: loss spike, step skipped: {spike} ({guard.skipped} skipped in all)")
        record("spike", iter_num, loss=loss_value, grad_norm=norm_value, reason=spike, skipped=guard.skipped)
    burst = guard.burst(iter_num)
    restored = roll_back(*burst) if burst else None
    if restored is not None:
        record("rollback", restored, from_iter=iter_num, first_spike=burst[0])
        iter_num, nonfinite_in_a_row = restored, 0
        step_start = {"sampler": sampler.state_dict(), "rng": resume.rng_state(device_type)}
        if saving:  # over the checkpoint rolled back to: a kill now must not forget the data skip
            save(step_start)
        last_saved_iter, last_save_time = iter_num, time.time()
        continue
    if nonfinite_in_a_row:
        log(f"iter {iter_num}: non-finite loss {loss_value} or grad norm {norm_value}: step skipped "
            f"({nonfinite_in_a_row} in a row, {nonfinite_total} in all)")
        record("nonfinite", iter_num, loss=loss_value, grad_norm=norm_value, in_a_row=nonfinite_in_a_row)
        if nonfinite_in_a_row >= cfg.max_nonfinite_steps:
            fail(f"{nonfinite_in_a_row} non-finite steps in a row; stopping without saving. Roll back with "
                 f"--init_from=<an earlier ckpt_N.pt> and a lower learning_rate")
    if steps_run == 1:
        log(f"first step took {dt:.1f}s (includes warm-up{' and compilation' if cfg.compile else ''})")
    else:
        step_time_avg = dt if step_time_avg is None else 0.9 * step_time_avg + 0.1 * dt
    if iter_num % cfg.log_interval == 0 and not nonfinite_in_a_row and not spike:
        tokens_per_sec, peak = tokens_per_iter / dt, hardware.peak_memory(device_type)
        mfu = hardware.utilisation(model_flops, tokens_per_sec / world_size, peak_tflops)  # per GPU
        line = (f"iter {iter_num}: loss {loss_value:.4f}, time {dt * 1000:.0f}ms, mfu {hardware.percent(mfu)}, "
                f"tok/s {tokens_per_sec:,.0f}")
        if distributed:
            line += f" ({tokens_per_sec / world_size:,.0f} per GPU)"
        line += f", lr {lr:.3e}, grad norm {norm_value:.3f}, mem {hardware.peak_memory_text(peak, cfg.optimizer_offload)}"
        hfu = hardware.utilisation(hardware_flops, tokens_per_sec / world_size, peak_tflops)
        if hardware_flops > model_flops:
            line += f", hfu {hardware.percent(hfu)}"
        if step_time_avg is not None:
            eta = (cfg.max_iters - iter_num) * step_time_avg
            line += f", eta {eta / 3600:.1f}h" if eta >= 3600 else f", eta {eta / 60:.1f}min"
        log(line)
        wandb_logging.log(wandb_run, iter_num, {"train/loss": loss_value, "lr": lr, "grad_norm": norm_value,
                                                "tokens_per_sec": tokens_per_sec, **({"mfu": mfu} if mfu is not None else {})})
        record("step", iter_num, loss=loss_value, lr=lr, grad_norm=norm_value, step_time=dt,
               tokens=iter_num * tokens_per_iter, tokens_per_sec=tokens_per_sec, mfu=mfu,
               hfu=hfu,
               peak_memory=peak)

    if cfg.eval_interval > 0 and (iter_num % cfg.eval_interval == 0 or iter_num == cfg.max_iters):
        t_eval = time.time()
        val_loss = evaluate()
        best_val_loss = min(best_val_loss, val_loss)
        log(f"eval iter {iter_num}: val loss {val_loss:.4f}, best {best_val_loss:.4f} ({time.time() - t_eval:.1f}s)")
        wandb_logging.log(wandb_run, iter_num, {"val/loss": val_loss})
    if hellaswag_examples and (iter_num % cfg.hellaswag_interval == 0 or iter_num == cfg.max_iters):
        evaluate_hellaswag()

    # clocks differ between machines: a time-based save happens when any rank says so
    time_to_save = agree(cfg.checkpoint_minutes > 0 and time.time() - last_save_time >= 60 * cfg.checkpoint_minutes)
    if saving and (iter_num % cfg.checkpoint_interval == 0 or iter_num == cfg.max_iters or time_to_save):
        save(step_start)
        last_saved_iter, last_save_time = iter_num, time.time()
    stop_now = agree(stop_signal.received)

if stop_now and saving and iter_num != last_saved_iter:
    save(step_start)
try:
    saver.wait()  # the last save in flight is complete before the process ends
except checkpoint.CheckpointError as e:
    fail(str(e))
if stop_now:
    log(f"stopped by {stop_signal.name()} after {iter_num} completed steps; run the same command to continue")
    record("stop", iter_num, signal=stop_signal.name())
elif iter_num >= cfg.max_iters:
    record("done", iter_num, best_val_loss=best_val_loss)
    log(f"done: {iter_num} steps (max_iters)" + (f"; best val loss {best_val_loss:.4f}" if best_val_loss < math.inf else ""))
if wandb_run:
    wandb_run.finish()
stop_vote.finish()
if distributed:
    dist.barrier()
    dist.destroy_process_group()
