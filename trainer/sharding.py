"""Sharding a GPT over the processes of a run with FSDP2 (torch.distributed.fsdp.fully_shard).

The policy keeps one GPU's numerics where it can. On one GPU, bf16 autocast multiplies in bf16 over
fp32 weights, runs LayerNorm in fp32 and keeps the residual stream in fp32. FSDP2's default casts a
module's inputs to its param_dtype, which would make the residual stream bf16: the loss would drift
from a one-GPU run's and activations would take other bytes than memory.py prices. So no module's inputs are cast; a block's weights are gathered in bf16
(half the traffic, and exactly what autocast would cast them to), the embeddings and the final
LayerNorm stay fp32 in the root group, and gradients are reduce-scattered in fp32 into the fp32
shards the optimizer updates.

One difference remains: a block's LayerNorm weights arrive bf16-rounded (LayerNorm still computes in
fp32 under autocast). Giving each LayerNorm an fp32 group of its own would remove it, but FSDP's hooks
inside a selectively checkpointed block then break the recompute. The rounding (8 bits of mantissa
on gains near 1) is the price; tests/test_distributed.py bounds its effect on the loss (4 steps of the
tiny model track one process's to 3e-5, against the 2% the default policy needed).

HSDP (strategy='hsdp') is the same FSDP2 over a 2-D mesh: each parameter is sharded over the
`shard` dimension (the GPUs of one node, on its fast link) and replicated over the `replicate`
dimension (the nodes), so the all-gathers and reduce-scatters stay inside a node and only the
shards' gradients are all-reduced across nodes, once per optimizer step (sync_gradients). The numerics
are FSDP's: the same policy, the gradients averaged over every rank.
"""
import os

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


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


NODE_SIZE_UNKNOWN = ("strategy='hsdp' with hsdp_shard_size=0 shards over one node's processes, but LOCAL_WORLD_SIZE "
                     "is not set (not launched by torchrun): set hsdp_shard_size to the GPUs per node")


def node_size(environ=os.environ):
    """hsdp_shard_size=0's group: one node's processes, as torchrun's LOCAL_WORLD_SIZE says; None where no
    launcher said (the ranks cannot know which of them share a node, and all of them would be plain FSDP)."""
    return int(environ["LOCAL_WORLD_SIZE"]) if environ.get("LOCAL_WORLD_SIZE") else None


def sync_gradients(model, last, ddp=False, hsdp=False):
    """Before each micro-batch's backward: whether it syncs gradients across replicas (last: the step's
    last micro-batch).
    - DDP all-reduces only on the last; the others accumulate locally.
    - FSDP reduce-scatters after every micro-batch: skipping it would keep every block's unsharded
      gradient until the step ends (26.6 GB per GPU at 6.7B), and memory is why one uses FSDP.
    - HSDP reduce-scatters inside the shard group (the node) after every micro-batch, as FSDP, and
      all-reduces the shards across the replicas (the nodes) only on the last: FSDP adds the micro-batches'
      reduce-scattered shards in fp32 buffers of a shard's size meanwhile, so one inter-node all-reduce a
      step instead of one per micro-batch (160 at 6.7B). set_requires_all_reduce recurses into every
      FSDPModule (each block and the root)."""
    if ddp:
        model.require_backward_grad_sync = last
    elif hsdp:
        model.set_requires_all_reduce(last)
