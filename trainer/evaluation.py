"""Evaluation inside a training run: the validation loss over fixed windows, shared among the ranks."""
import math

import torch
import torch.distributed as dist


@torch.no_grad()
def val_loss(model, batch, eval_iters, autocast, device, rank=0, world_size=1):
    """Mean loss over eval_iters validation batches (batch(k) gives the k-th), each rank running its
    share. Every rank runs the same number of forwards, as FSDP needs: a rank short of a batch runs the
    last one again, uncounted."""
    model.eval()
    total = torch.zeros(2, device=device)  # sum of losses, batches counted
    for k in range(rank, math.ceil(eval_iters / world_size) * world_size, world_size):
        x, y = batch(min(k, eval_iters - 1))
        with autocast:
            loss = model(x, y)[1]
        if k < eval_iters:
            total += torch.stack([loss.float(), torch.ones((), device=device)])
    model.train()
    if world_size > 1:
        dist.all_reduce(total)
    return (total[0] / total[1]).item()
