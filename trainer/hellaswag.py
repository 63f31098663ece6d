"""
HellaSwag, zero-shot, completion style: for each of an example's four endings, the model's
cross-entropy of the ending's tokens given the context (context + " " + ending). `acc` picks the
ending with the lowest summed loss, `acc_norm` the lowest mean loss per token (llm.c's number; the
GPT-3 paper's figures below are on the same footing, as close as a reimplementation gets).

Files: the official jsonl (one example a line: 'ctx', four 'endings', 'label') or the prepared form
data/hellaswag/prepare.py writes beside the bins, hellaswag.json: the encoding's name and, per
example, the token ids of the context and of each ending, and the label.
"""
import json
import math
import os

import torch
import torch.distributed as dist
from torch.nn import functional as F

from trainer import bins, tokenizer

FILE = "hellaswag.json"  # the prepared form's name, beside train.bin and val.bin
BATCH = 8  # examples a forward: 32 rows of a few dozen tokens
# GPT-3 paper (Brown et al. 2020, table 3.3/H.1), zero-shot HellaSwag accuracy by model size
GPT3_ZERO_SHOT = {125e6: 33.7, 350e6: 43.6, 760e6: 51.0, 1.3e9: 54.7, 2.7e9: 62.8, 6.7e9: 67.4, 13e9: 70.9, 175e9: 78.9}


class HellaSwagError(Exception):
    """A missing or malformed file: one line saying which and why."""


class EncodingMismatch(HellaSwagError):
    """A prepared file tokenized with another encoding than the model's."""


def gpt3_reference(n_params):
    """('GPT-3 6.7B', its zero-shot accuracy in %) for the GPT-3 size nearest n_params (on a log scale)."""
    size = min(GPT3_ZERO_SHOT, key=lambda s: abs(math.log(s / n_params)))
    return f"GPT-3 {size / 1e9:g}B" if size >= 1e9 else f"GPT-3 {size / 1e6:g}M", GPT3_ZERO_SHOT[size]


def read_jsonl(path):
    """The official examples: [(ctx, [4 endings], label)]."""
    examples = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    examples.append(_check(json.loads(line), path, i))
    except OSError as e:
        raise HellaSwagError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise HellaSwagError(f"{path}: not JSON lines ({e})") from None
    if not examples:
        raise HellaSwagError(f"{path} holds no examples")
    return examples


def _check(obj, path, line):
    ctx, endings, label = (obj.get(k) for k in ("ctx", "endings", "label")) if isinstance(obj, dict) else (None,) * 3
    if not isinstance(ctx, str) or not isinstance(endings, list) or len(endings) != 4 \
            or not all(isinstance(e, str) for e in endings):
        raise HellaSwagError(f"{path}:{line}: expected 'ctx' and four 'endings'")
    if str(label) not in ("0", "1", "2", "3"):  # the hub's copy stores it as a string
        raise HellaSwagError(f"{path}:{line}: label {label!r} is not 0-3")
    return ctx, endings, int(label)


def tokenize(examples, encoding):
    """The prepared form: ids of each context and of each ending (with its leading space)."""
    return {**tokenizer.describe(encoding.name), "examples": [
        {"ctx": encoding.encode_ordinary(ctx), "endings": [encoding.encode_ordinary(" " + e) for e in endings],
         "label": label} for ctx, endings, label in examples]}


def write(path, examples, encoding):
    bins.write_json_atomic(path, tokenize(examples, encoding))


def load(path, encoding):
    """Tokenized examples from a prepared file (whose encoding must match the run's) or an official
    jsonl (tokenized now with the run's encoding)."""
    if not os.path.isfile(path):
        raise HellaSwagError(f"no HellaSwag file at {path}: run data/hellaswag/prepare.py")
    if not path.endswith(".jsonl"):
        try:
            with open(path) as f:
                prepared = json.load(f)
            if tokenizer.identity(prepared) != tokenizer.identity(tokenizer.describe(encoding.name)):
                raise EncodingMismatch(f"{path} was tokenized with {prepared['encoding']!r} but the model uses "
                                       f"{encoding.name!r}: run data/hellaswag/prepare.py with the run's encoding")
            for i, ex in enumerate(prepared["examples"]):
                _check_prepared(ex, i, encoding.n_vocab)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise HellaSwagError(f"{path} is not a prepared HellaSwag file ({e}): prepare it again") from None
        return prepared["examples"]
    return tokenize(read_jsonl(path), encoding)["examples"]


def _check_prepared(ex, i, n_vocab):
    """ValueError unless ex is a context and four non-empty endings of token ids below n_vocab, and a label 0-3."""
    if len(ex["endings"]) != 4 or type(ex["label"]) is not int or ex["label"] not in range(4):
        raise ValueError(f"example {i} has {len(ex['endings'])} endings and label {ex['label']!r}")
    for ids in (ex["ctx"], *ex["endings"]):
        if not isinstance(ids, list) or not all(type(t) is int and 0 <= t < n_vocab for t in ids):
            raise ValueError(f"example {i} holds something other than token ids below {n_vocab}")
    if not all(ex["endings"]):
        raise ValueError(f"example {i} has an empty ending")


def truncation_note(examples, block_size):
    """One line for the log when some examples do not fit the model's context window, else None:
    scoring cuts their rows from the start, silently otherwise."""
    cut = sum(any(len(ex["ctx"]) + len(e) > block_size + 1 for e in ex["endings"]) for ex in examples)
    if cut:
        return (f"hellaswag: {cut} of {len(examples)} examples are longer than block_size {block_size}: "
                "they are scored on their last tokens, their contexts cut from the start")
    return None


def _rows(examples, block_size):
    """Each example's four (context + ending) rows, right-padded, as inputs, targets and a mask of the
    ending's targets. A row longer than the context window loses tokens from the context's start (and
    an ending longer than the window, its own)."""
    rows = [((ex["ctx"] + e)[-(block_size + 1):], min(len(e), block_size)) for ex in examples for e in ex["endings"]]
    width = max(len(row) for row, _ in rows)
    tokens = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros(len(rows), width - 1, dtype=torch.bool)
    for i, (row, ending) in enumerate(rows):
        tokens[i, :len(row)] = torch.tensor(row)
        mask[i, len(row) - 1 - ending:len(row) - 1] = True
    return tokens[:, :-1], tokens[:, 1:], mask


@torch.no_grad()
def ending_losses(model, examples, block_size, device, autocast):
    """(summed, mean) cross-entropy of each example's endings: two (len(examples), 4) tensors."""
    x, y, mask = (t.to(device) for t in _rows(examples, block_size))
    with autocast:
        logits = model(x, every_position=True)[0]
    losses = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y) * mask
    summed = losses.sum(1)
    return summed.view(-1, 4), (summed / mask.sum(1)).view(-1, 4)


def evaluate(model, examples, block_size, device, autocast, limit=0, rank=0, world_size=1):
    """{'acc', 'acc_norm', 'n'} over the first `limit` examples (0: all), BATCH examples a forward,
    each rank scoring its share of the batches. Every rank runs the same number of forwards (FSDP
    needs it): a rank short of a batch repeats its last, uncounted."""
    examples = examples[:limit] if limit else examples
    batches = [examples[i:i + BATCH] for i in range(0, len(examples), BATCH)]
    was_training = model.training
    model.eval()
    counts = torch.zeros(3, device=device)  # correct by sum, correct by mean, examples
    for k in range(rank, math.ceil(len(batches) / world_size) * world_size, world_size):
        batch = batches[min(k, len(batches) - 1)]
        summed, mean = ending_losses(model, batch, block_size, device, autocast)
        if k < len(batches):
            labels = torch.tensor([ex["label"] for ex in batch], device=device)
            counts += torch.stack([(summed.argmin(1) == labels).sum(), (mean.argmin(1) == labels).sum(),
                                   torch.tensor(len(batch), device=device)]).float()
    model.train(was_training)
    if world_size > 1:
        dist.all_reduce(counts)
    correct, correct_norm, n = counts.tolist()
    return {"acc": correct / n, "acc_norm": correct_norm / n, "n": int(n)}
