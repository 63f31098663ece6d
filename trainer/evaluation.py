"""Evaluation inside a training run and out of it: the validation loss shared among the ranks, the
log-probability of continuations (HellaSwag's in-loop scorer and the lm-evaluation-harness adapter both
score with it), and the GPT-3 paper's zero-shot figures that every evaluation is put beside."""
import json
import math
import os

import torch
import torch.distributed as dist


# The GPT-3 paper's zero-shot figures (Brown et al. 2020, "Language Models are Few-Shot Learners", table
# H.1), in % (LAMBADA's perplexity as it is), by model size: {(lm-eval task, the lm-eval metric closest to
# the paper's scoring): figures}. docs/evaluation.md says how close each pairing is.
GPT3_SIZES = (125e6, 350e6, 760e6, 1.3e9, 2.7e9, 6.7e9, 13e9, 175e9)
GPT3_ZERO_SHOT = {
    ("hellaswag", "acc_norm"): (33.7, 43.6, 51.0, 54.7, 62.8, 67.4, 70.9, 78.9),
    ("lambada_openai", "acc"): (42.7, 54.3, 60.4, 63.6, 67.1, 70.3, 72.5, 76.2),
    ("lambada_openai", "perplexity"): (18.6, 9.09, 6.53, 5.44, 4.60, 4.00, 3.56, 3.00),
    ("piqa", "acc_norm"): (64.6, 70.2, 72.9, 75.1, 75.6, 78.0, 78.5, 81.0),
    ("arc_easy", "acc_norm"): (43.6, 46.5, 53.0, 53.8, 58.2, 60.2, 63.8, 68.8),
    ("arc_challenge", "acc_norm"): (26.6, 29.5, 31.8, 35.5, 38.0, 41.4, 43.7, 51.4),
    ("winogrande", "acc"): (52.0, 52.1, 57.4, 58.7, 62.3, 64.5, 67.9, 70.2),
}


def read_watch_log(path):
    """{step: record} of scripts/eval.py --watch's eval.jsonl ({} where there is none). A line that is not
    a whole record (a crash mid-write tore it) is left out: the watcher scores that checkpoint again."""
    records = {}
    if os.path.isfile(path):
        with open(path) as f:
            for line in f:
                try:
                    record = json.loads(line)
                    records[record["iter"]] = record
                except (ValueError, KeyError, TypeError):
                    continue
    return records


def gpt3_reference(n_params, task="hellaswag", metric="acc_norm"):
    """('GPT-3 6.7B', the paper's zero-shot figure) for the GPT-3 size nearest n_params (on a log scale);
    the figure is None where the paper has none for this task and metric."""
    k = min(range(len(GPT3_SIZES)), key=lambda i: abs(math.log(GPT3_SIZES[i] / n_params)))
    size = GPT3_SIZES[k]
    name = f"GPT-3 {size / 1e9:g}B" if size >= 1e9 else f"GPT-3 {size / 1e6:g}M"
    figures = GPT3_ZERO_SHOT.get((task, metric))
    return name, figures[k] if figures else None


@torch.no_grad()
def val_losses(model, sampler, val_windows, get_batch, autocast, device, rank=0, world_size=1):
    """{source name: val loss} of a mixture's sources on their fixed validation windows; get_batch(read,
    indices) -> (x, y)."""
    return {s.name: val_loss(model, lambda k, s=s: get_batch(s.val.windows, val_windows[s.name][k]),
                             len(val_windows[s.name]), autocast, device, rank, world_size) for s in sampler.sources}


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


def is_cut(context, continuation, block_size):
    """Whether a (context, continuation) pair of token ids is longer than the window scores (block_size
    inputs and their targets): continuation_logprobs then cuts it from the left."""
    return len(context) + len(continuation) > block_size + 1


def _rows(pairs, block_size):
    """Each pair's tokens as one right-padded row: inputs, targets and a mask of the continuation's
    targets. A row longer than the window loses tokens from its start, the context's first (and a
    continuation longer than the window, its own)."""
    rows = [((context + continuation)[-(block_size + 1):], min(len(continuation), block_size))
            for context, continuation in pairs]
    width = max(len(row) for row, _ in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1, dtype=torch.bool)
    for i, (row, scored) in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row)
        mask[i, len(row) - 1 - scored:len(row) - 1] = True
    return tokens[:, :-1], tokens[:, 1:], mask


@torch.no_grad()
def continuation_logprobs(model, pairs, block_size, device, autocast, n_tokens=0):
    """(summed log-probability of each continuation given its context, whether greedy decoding would
    produce every one of its tokens) for a batch of (context ids, continuation ids) pairs, in one
    forward under autocast: two (len(pairs),) tensors, float32 and bool. n_tokens, the encoding's
    token count (0: the model config's), leaves the rows of a padded vocabulary past it out of the
    softmax, as an export (which drops them) does. The logits exist LOSS_CHUNK_ROWS positions at a time
    (model.lm_head_scores), so a batch of 32 windows of 2048 tokens holds 0.2 GB of them, not 33 GB."""
    x, y, mask = (t.to(device) for t in _rows(pairs, block_size))
    with autocast:  # through model.py's chunked head: never the whole (rows, T, vocab) logits
        logprobs, hits = model(x, torch.where(mask, y, -1), scores=True, n_tokens=n_tokens or None)[1]
    return logprobs.sum(1), hits.all(1)
