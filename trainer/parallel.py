"""How a run's processes share the work: the process groups, and the model wrapped for them.

`init_processes` starts torch.distributed with a timeout for training's collectives and `save_group`
makes the gloo group saves wait on, with a timeout a whole write fits in. `mode` names how gradients
meet ('ddp', 'by_hand', 'fsdp' or 'single') and `wrap` applies it, with torch.compile; `agree`, `mean`
and `same_on_every_rank` are the collectives the loop needs (whether the weights are finite on every rank:
checkpoint.nonfinite_on_any_rank, which a save and a sharded load both ask).

Sharding with FSDP2 (fully_shard) keeps one GPU's numerics where it can: bf16 autocast multiplies in
bf16 over fp32 weights and keeps LayerNorm and the residual stream in fp32, so no module's inputs are
cast (FSDP2's default would make the residual stream bf16, drifting from one GPU's loss and from what
cost.py prices). A block's weights are gathered in bf16 (half the traffic, what autocast would cast them
to), the embeddings and final LayerNorm stay fp32 in the root group, and gradients are reduce-scattered
in fp32 into the fp32 shards the optimizer updates. A block's LayerNorm gains arrive bf16-rounded: an
fp32 group of their own would break a selectively checkpointed block's recompute (docs/distributed.md).
HSDP is the same FSDP2 over a (replicate, shard) mesh: shard within a node (on its fast link), replicate
across nodes, whose link carries only the shards' gradients, all-reduced once per optimizer step.
"""
import datetime
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel as DDP

from trainer import RunError, checkpoint, elastic, optim


def init_processes(cfg, device_type, log):
    """torch.distributed's default group for torchrun's processes; returns its collectives' timeout."""
    timeout = datetime.timedelta(minutes=cfg.collective_timeout_minutes)
    backend = cfg.backend if cfg.backend != "auto" else ("nccl" if device_type == "cuda" else "gloo")
    if backend == "nccl":  # a hung collective ends the process and leaves a trace (elastic.py)
        log(f"NCCL/RCCL: {elastic.nccl_settings(cfg.out_dir)}")
    dist.init_process_group(backend=backend, timeout=timeout)
    return timeout


def end_processes():
    """At the end of a torchrun job: wait for every rank, then take the process group down (a clean exit)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def save_group(cfg, n_params, timeout, log):
    """Training's collectives fail a hung job within collective_timeout_minutes. A save can take far longer
    (the checkpoint's size over this disk's speed, measured now), so its waits are on a gloo group of their own."""
    checkpoint_bytes = optim.checkpoint_bytes(n_params, optim.mode_of(vars(cfg)))
    write_speed = checkpoint.write_speed(cfg.out_dir) if cfg.checkpoint_interval > 0 else float("inf")
    save_timeout = checkpoint.process_group_timeout(checkpoint_bytes, write_speed)
    log(f"collectives wait up to {timeout}, saves up to {save_timeout} ({cfg.out_dir} writes "
        f"{write_speed / 1e9:.2f} GB/s, a checkpoint is {checkpoint_bytes / 1e9:.1f} GB)")
    return dist.new_group(backend="gloo", timeout=save_timeout)


def mode(cfg, distributed):
    """How gradients meet: 'fsdp' (strategy fsdp or hsdp), 'ddp', 'by_hand' (DDP cannot reduce fp32
    gradients of bf16 weights: optim.average_gradients), or 'single' (one process)."""
    if not distributed:
        return "single"
    if cfg.strategy in ("fsdp", "hsdp"):
        return "fsdp"
    return "ddp" if cfg.master_weights == "float32" else "by_hand"


def wrap(model, cfg, how, world_size, device_type, local_rank, log):
    """The model as the loop runs it, for mode() `how`: compiled per block (in place, so state_dict keys
    stay), then sharded (FSDP2/HSDP, in place) or wrapped in DDP. Call it before the optimizer is built."""
    if how == "by_hand":  # the replicas start from rank 0's weights, as DDP would make them
        optim.broadcast_weights(model.parameters())
    if cfg.compile:  # per block: each block's checkpoint is traced too
        # Dynamo's DDP optimizer would split each block's graph at bucket boundaries so that all-reduces
        # overlap backward; DDP here all-reduces only on a step's last micro-batch, so the splits only cost speed.
        torch._dynamo.config.optimize_ddp = how != "ddp"
        for block in model.transformer.h:
            block.compile()
    if how == "fsdp":  # parameters, gradients and optimizer state block by block, keeping one GPU's numerics
        shard(model, cfg.dtype, mesh(cfg.strategy, device_type, world_size, cfg.hsdp_shard_size))
        if cfg.strategy == "hsdp":
            log(f"hsdp: each parameter sharded over {cfg.hsdp_shard_size} processes, replicated "
                f"{world_size // cfg.hsdp_shard_size} times")
    if how != "ddp":
        return model
    # Gradients made before the wrap become views of DDP's buckets (gradient_as_bucket_view): without them the
    # first step's unsynced micro-batches would make fresh .grad tensors beside the buckets (26.6 GB at 6.7B).
    # They stay views as long as they are zeroed in place, never set to None.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    return DDP(model, device_ids=[local_rank] if device_type == "cuda" else None, gradient_as_bucket_view=True)


def sync_gradients(model, last):
    """Before each micro-batch's backward: whether it syncs gradients across replicas (last: the step's
    last micro-batch).
    - DDP all-reduces only on the last; the others accumulate locally.
    - FSDP reduce-scatters after every micro-batch: skipping it would keep every block's unsharded
      gradient until the step ends (26.6 GB per GPU at 6.7B), and memory is why one uses FSDP.
    - HSDP reduce-scatters inside the shard group (the node) after every micro-batch, as FSDP, and
      all-reduces the shards across the replicas (the nodes) only on the last: FSDP adds the micro-batches'
      reduce-scattered shards in fp32 buffers of a shard's size meanwhile, so one inter-node all-reduce a
      step instead of one per micro-batch (160 at 6.7B). set_requires_all_reduce recurses into every
      FSDPModule (each block and the root); on a 1-D mesh (FSDP) there is no all-reduce for it to skip."""
    if isinstance(model, DDP):
        model.require_backward_grad_sync = last
    elif isinstance(model, FSDPModule):
        model.set_requires_all_reduce(last)


def agree(flag, device):
    """True on every rank if it is true on any: a stop or a save that only some ranks enter deadlocks."""
    if not dist.is_initialized():
        return flag
    t = torch.tensor([float(flag)], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item() > 0


def same_on_every_rank(*scalars):
    """Rank 0's values of these 0-d tensors (DTensors, as FSDP2's norm, included) as floats on every rank:
    equal already, made certain, as every rank must step or skip alike."""
    values = torch.stack([(t.full_tensor() if isinstance(t, DTensor) else t).float() for t in scalars])
    if dist.is_initialized():
        dist.broadcast(values, 0)
    return values.tolist()


def mean(t):
    """t averaged over the ranks, in place (t itself in one process)."""
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
    return t


def mesh(strategy, device_type, world_size, hsdp_shard_size):
    """The device mesh fully_shard spreads over: None (all ranks, 1-D) for fsdp; for hsdp
    (nodes, GPUs per node) = (world_size // hsdp_shard_size, hsdp_shard_size)."""
    if strategy != "hsdp":
        return None
    return init_device_mesh(device_type, (world_size // hsdp_shard_size, hsdp_shard_size),
                            mesh_dim_names=("replicate", "shard"))


def shard(model, dtype, device_mesh=None):
    """Shard parameters, gradients and optimizer state block by block, in place (over device_mesh, if given)."""
    blocks = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=False) \
        if dtype == "bfloat16" else MixedPrecisionPolicy()
    for block in model.transformer.h:
        fully_shard(block, mesh=device_mesh, mp_policy=blocks)
    fully_shard(model, mesh=device_mesh, mp_policy=MixedPrecisionPolicy(cast_forward_inputs=False))  # fp32, as on one GPU


def node_size(environ=os.environ):
    """hsdp_shard_size=0's group: one node's processes, as torchrun's LOCAL_WORLD_SIZE says; a RunError where no
    launcher said (the ranks cannot know which of them share a node, and all of them would be plain FSDP)."""
    if not environ.get("LOCAL_WORLD_SIZE"):
        raise RunError("strategy='hsdp' with hsdp_shard_size=0 shards over one node's processes, but LOCAL_WORLD_SIZE "
                       "is not set (not launched by torchrun): set hsdp_shard_size to the GPUs per node")
    return int(environ["LOCAL_WORLD_SIZE"])
