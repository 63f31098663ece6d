"""
The bf16 copies of the fp32 master weights, made once per optimizer step instead of once per micro-batch.

bf16 autocast over fp32 weights casts every matmul weight to bf16 where it is used: with its cast
cache off, once per micro-batch (160 times a step at 6.7B, each time reading 4 B and writing 2 B per
weight: 40 GB of traffic) and again in each checkpointed block's recompute. Autocast's own cache
already keeps "the bf16 copy of each fp32 leaf that requires grad" until the outermost autocast
context exits, so one context around all of a step's micro-batches is exactly "once per step, freed
before the optimizer step": no copy of our own, no hook, and gradients flow as before through each
copy's cast node into the fp32 .grad (fp32 accumulation across micro-batches unchanged; the results
are bit-identical to casting every time: tests/test_model.py).

The step's context is autocast switched off (enabled=False): it only holds the nesting level, so the
cache outlives each micro-batch's forward context while backward runs without autocast, as before.
A checkpointed block's recompute re-enters autocast with the forward's settings and finds its
weights in the cache. Nothing may run under no_grad inside the step's context: a copy cached there
would have no grad_fn, and the gradients of later uses would not reach the weight. Evaluation runs
outside it, with the cache off (each weight is used once per forward: caching would only keep every
copy alive to the forward's end).

What it costs: the copies live for the whole step, 2 B per block matmul weight (and bias), 12.9 GB
at 6.7B. Without checkpointing that is no more than before (each block's copies were kept for its
backward anyway); a checkpointed block used to drop them after its forward and cast again.
What it does not reach: the LM head (model.py's ChunkedCrossEntropy casts the tied weight itself,
once per micro-batch: 0.4 GB of the 13.3), and torch.compile'd blocks, whose graphs cast inside
(tracing turns the cache off), once per call as before. With bf16 weights (master_weights='bfloat16',
or FSDP's bf16 param_dtype) autocast has nothing to cast and the cache stays empty.
"""
import contextlib

import torch


def contexts(dtype, device_type, once):
    """(autocast, step, forward): the run's autocast (bf16 over fp32 weights, no loss scaling, or nothing), and
    the contexts around a step's micro-batches and around each forward; once (applies()): cast once per step.
    The plain autocast has no cast cache: with checkpointing it would keep every block's bf16 copy to the end of
    the forward (13.3 GB at 6.7B) for nothing."""
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=False) \
        if dtype == "bfloat16" else contextlib.nullcontext()
    return (autocast, *once_per_step(device_type)) if once else (autocast, contextlib.nullcontext(), autocast)


def once_per_step(device_type):
    """(step, forward): autocast contexts for around all of a step's micro-batches (forwards and
    backwards) and around each forward, for bf16 autocast over unsharded fp32 weights."""
    return (torch.autocast(device_type, dtype=torch.bfloat16, enabled=False, cache_enabled=True),
            torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=True))


def applies(policy, dtype, master_weights, sharded, compiled, fp8):
    """Whether train.py casts once per step: where there is something to cast (bf16 autocast over
    unsharded fp32 weights), where the cache reaches (eager blocks, no fp8: Float8Linear casts its own)
    and where it costs no memory: with no block recomputing ('none'), whose copies were kept for the
    backward anyway. A checkpointed block would hold its copies for the whole step (12.9 GB at 6.7B),
    which would push 'auto' to recompute more: ~1-3% of step time saved is not worth that."""
    return (dtype == "bfloat16" and master_weights == "float32" and not sharded and not compiled and not fp8
            and policy == "none")
