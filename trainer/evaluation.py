"""Evaluation inside a training run and out of it: the validation loss shared among the ranks, the
log-probability of continuations (HellaSwag's in-loop scorer and the lm-evaluation-harness adapter both
score with it), and the GPT-3 paper's zero-shot figures that every evaluation is put beside."""
import json
import math
import os

import torch
import torch.distributed as dist

from trainer import RunError, bins, checkpoint, tokenizer


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
    if not os.path.isfile(path):
        return {}
    with open(path, errors="replace") as f:  # a byte that is not UTF-8 spoils its line, as metrics.read's
        return {record["iter"]: record for record in map(checkpoint.scores_record, f) if record is not None}


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


# -----------------------------------------------------------------------------
# HellaSwag in the training loop
# HellaSwag, zero-shot, in the training loop, scored as lm-evaluation-harness's `hellaswag` task scores it:
# the text goes through lm-eval's own process_docs (the activity label and both halves of the context as
# the query, WikiHow's bracketed artifacts cleaned from the endings), each ending is tokenized as lm-eval
# tokenizes a continuation (the query and ending encoded whole, the query's tokens split off), and
# `acc` picks the ending of highest log-likelihood, `acc_norm` the highest per character of the ending.
# tests/test_hellaswag.py holds this to lm-eval's numbers on the same examples. It is kept beside
# scripts/eval.py because it runs inside train.py without importing lm-eval (seconds at start-up, and
# not needed to train), tokenizes once per run, and runs every rank's forwards in step as FSDP needs.
#
# Files: HellaSwag's records as JSON lines (the official hellaswag_val.jsonl, or the hub's copy that
# data/eval/prepare.py writes as data/eval/hellaswag.jsonl: 'activity_label', 'ctx_a', 'ctx_b', four
# 'endings', 'label'), or the prepared form data/hellaswag/prepare.py writes beside the bins,
# hellaswag.json: the encoding's name and, per example, the token ids of the query and of each ending,
# each ending's length in characters, and the label.

HELLASWAG_FILE = "hellaswag.json"  # the prepared form's name, beside train.bin and val.bin
HELLASWAG_BATCH = 8  # examples a forward: 32 rows of a few dozen tokens
HELLASWAG_FIELDS = ("activity_label", "ctx_a", "ctx_b")


class HellaSwagError(RunError):
    """A missing or malformed file: one line saying which and why."""


class EncodingMismatch(HellaSwagError):
    """A prepared file tokenized with another encoding than the model's."""


def read_hellaswag_jsonl(path):
    """The examples as lm-eval sees them: [(query, [4 endings], label)]."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    records.append(_check_hellaswag(json.loads(line), path, i))
    except OSError as e:
        raise HellaSwagError(f"cannot read {path}: {e.strerror}") from None
    except ValueError as e:
        raise HellaSwagError(f"{path}: not JSON lines ({e})") from None
    if not records:
        raise HellaSwagError(f"{path} holds no examples")
    import datasets  # lm-eval's preprocessing maps a datasets.Dataset
    from lm_eval.tasks.hellaswag.utils import process_docs
    docs = process_docs(datasets.Dataset.from_list(records))
    return [(doc["query"], doc["choices"], int(doc["label"])) for doc in docs]


def _check_hellaswag(obj, path, line):
    fields_ok = isinstance(obj, dict) and all(isinstance(obj.get(k), str) for k in HELLASWAG_FIELDS)
    endings = obj.get("endings") if isinstance(obj, dict) else None
    if not fields_ok or not isinstance(endings, list) or len(endings) != 4 or not all(isinstance(e, str) for e in endings):
        raise HellaSwagError(f"{path}:{line}: expected {', '.join(repr(k) for k in HELLASWAG_FIELDS)} and four 'endings'")
    if str(obj.get("label")) not in ("0", "1", "2", "3"):  # the hub's copy stores it as a string
        raise HellaSwagError(f"{path}:{line}: label {obj.get('label')!r} is not 0-3")
    return {k: obj[k] for k in (*HELLASWAG_FIELDS, "endings", "label")}


def tokenize_hellaswag(examples, encoding):
    """The prepared form: ids of each query and of each ending after it, and each ending's characters."""
    prepared = []
    for query, endings, label in examples:
        ctx = encoding.encode_ordinary(query)
        prepared.append({"ctx": ctx, "endings": [encoding.encode_ordinary(f"{query} {e}")[len(ctx):] for e in endings],
                         "chars": [len(e) for e in endings], "label": label})
    return {**tokenizer.describe(encoding.name), "examples": prepared}


def write_hellaswag(path, examples, encoding):
    bins.write_json_atomic(path, tokenize_hellaswag(examples, encoding))


def load_hellaswag(path, encoding):
    """Tokenized examples from a prepared file (whose encoding must match the run's) or a jsonl of
    HellaSwag's records (tokenized now with the run's encoding)."""
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
    return tokenize_hellaswag(read_hellaswag_jsonl(path), encoding)["examples"]


def hellaswag_for_run(cfg, encoding_name, block_size, log):
    """The examples a run evaluates every hellaswag_interval steps, or None (interval 0). A missing or bad file
    turns the evaluation off with a warning rather than stop a long run; another encoding's file is refused
    (EncodingMismatch)."""
    if cfg.hellaswag_interval <= 0:
        return None
    try:
        examples = load_hellaswag(cfg.hellaswag_file or os.path.join(cfg.data_dir, HELLASWAG_FILE),
                                  tokenizer.get_encoding(encoding_name))
    except EncodingMismatch as e:  # named by the key that chose the file
        raise EncodingMismatch(f"hellaswag_file: {e}") from None
    except (HellaSwagError, ValueError) as e:
        log(f"warning: {e}; HellaSwag evaluation is off for this run")
        return None
    if examples and (note := hellaswag_truncation_note(examples, block_size)):
        log(note)
    return examples


def _check_prepared(ex, i, n_vocab):
    """ValueError unless ex is a query and four non-empty endings of token ids below n_vocab, their
    lengths in characters, and a label 0-3."""
    if len(ex["endings"]) != 4 or type(ex["label"]) is not int or ex["label"] not in range(4):
        raise ValueError(f"example {i} has {len(ex['endings'])} endings and label {ex['label']!r}")
    for ids in (ex["ctx"], *ex["endings"]):
        if not isinstance(ids, list) or not all(type(t) is int and 0 <= t < n_vocab for t in ids):
            raise ValueError(f"example {i} holds something other than token ids below {n_vocab}")
    if not all(ex["endings"]) or len(ex["chars"]) != 4 or not all(type(n) is int and n > 0 for n in ex["chars"]):
        raise ValueError(f"example {i} has an empty ending")


def hellaswag_truncation_note(examples, block_size):
    """One line for the log when some examples do not fit the model's context window, else None:
    scoring cuts their rows from the start, silently otherwise."""
    cut = sum(any(is_cut(ex["ctx"], e, block_size) for e in ex["endings"]) for ex in examples)
    if cut:
        return (f"hellaswag: {cut} of {len(examples)} examples are longer than block_size {block_size}: "
                "they are scored on their last tokens, their contexts cut from the start")
    return None


def ending_logprobs(model, examples, block_size, device, autocast, n_tokens=0):
    """The summed log-likelihood of each example's endings after its query: a (len(examples), 4) tensor
    (n_tokens: as continuation_logprobs)."""
    pairs = [(ex["ctx"], e) for ex in examples for e in ex["endings"]]
    return continuation_logprobs(model, pairs, block_size, device, autocast, n_tokens)[0].view(-1, 4)


def hellaswag_accuracy(model, examples, block_size, device, autocast, limit=0, n_tokens=0):
    """{'acc', 'acc_norm', 'n'} over the first `limit` examples (0: all), HELLASWAG_BATCH examples a forward,
    each rank (of torch.distributed's, where it is initialised) scoring its share of the batches. Every rank
    runs the same number of forwards (FSDP needs it): a rank short of a batch repeats its last, uncounted.
    n_tokens: the encoding's token count, so that a padded vocabulary scores as lm-eval scores the export."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    examples = examples[:limit] if limit else examples
    batches = [examples[i:i + HELLASWAG_BATCH] for i in range(0, len(examples), HELLASWAG_BATCH)]
    was_training = model.training
    model.eval()
    counts = torch.zeros(3, device=device)  # correct, correct per character, examples
    for k in range(rank, math.ceil(len(batches) / world_size) * world_size, world_size):
        batch = batches[min(k, len(batches) - 1)]
        logprobs = ending_logprobs(model, batch, block_size, device, autocast, n_tokens)
        if k < len(batches):
            labels = torch.tensor([ex["label"] for ex in batch], device=device)
            chars = torch.tensor([ex["chars"] for ex in batch], device=device, dtype=torch.float64)
            # in float64, as lm-eval divides: a near-tie then breaks the same way in both
            per_char = logprobs.double() / chars
            counts += torch.stack([(logprobs.argmax(1) == labels).sum(), (per_char.argmax(1) == labels).sum(),
                                   torch.tensor(len(batch), device=device)]).float()
    model.train(was_training)
    if world_size > 1:
        dist.all_reduce(counts)
    correct, correct_norm, n = counts.tolist()
    return {"acc": correct / n, "acc_norm": correct_norm / n, "n": int(n)}
