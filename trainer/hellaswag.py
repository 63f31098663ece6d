"""
HellaSwag, zero-shot, in the training loop, scored as lm-evaluation-harness's `hellaswag` task scores it:
the text goes through lm-eval's own process_docs (the activity label and both halves of the context as
the query, WikiHow's bracketed artifacts cleaned from the endings), each ending is tokenized as lm-eval
tokenizes a continuation (the query and ending encoded whole, the query's tokens split off), and
`acc` picks the ending of highest log-likelihood, `acc_norm` the highest per character of the ending.
tests/test_hellaswag.py holds this to lm-eval's numbers on the same examples. It is kept beside
scripts/eval.py because it runs inside train.py without importing lm-eval (seconds at start-up, and
not needed to train), tokenizes once per run, and runs every rank's forwards in step as FSDP needs.

Files: HellaSwag's records as JSON lines (the official hellaswag_val.jsonl, or the hub's copy that
data/eval/prepare.py writes as data/eval/hellaswag.jsonl: 'activity_label', 'ctx_a', 'ctx_b', four
'endings', 'label'), or the prepared form data/hellaswag/prepare.py writes beside the bins,
hellaswag.json: the encoding's name and, per example, the token ids of the query and of each ending,
each ending's length in characters, and the label.
"""
import json
import math
import os

import torch
import torch.distributed as dist

from trainer import RunError, bins, evaluation, tokenizer

FILE = "hellaswag.json"  # the prepared form's name, beside train.bin and val.bin
BATCH = 8  # examples a forward: 32 rows of a few dozen tokens
FIELDS = ("activity_label", "ctx_a", "ctx_b")


class HellaSwagError(RunError):
    """A missing or malformed file: one line saying which and why."""


class EncodingMismatch(HellaSwagError):
    """A prepared file tokenized with another encoding than the model's."""


def read_jsonl(path):
    """The examples as lm-eval sees them: [(query, [4 endings], label)]."""
    records = []
    try:
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    records.append(_check(json.loads(line), path, i))
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


def _check(obj, path, line):
    fields_ok = isinstance(obj, dict) and all(isinstance(obj.get(k), str) for k in FIELDS)
    endings = obj.get("endings") if isinstance(obj, dict) else None
    if not fields_ok or not isinstance(endings, list) or len(endings) != 4 or not all(isinstance(e, str) for e in endings):
        raise HellaSwagError(f"{path}:{line}: expected {', '.join(repr(k) for k in FIELDS)} and four 'endings'")
    if str(obj.get("label")) not in ("0", "1", "2", "3"):  # the hub's copy stores it as a string
        raise HellaSwagError(f"{path}:{line}: label {obj.get('label')!r} is not 0-3")
    return {k: obj[k] for k in (*FIELDS, "endings", "label")}


def tokenize(examples, encoding):
    """The prepared form: ids of each query and of each ending after it, and each ending's characters."""
    prepared = []
    for query, endings, label in examples:
        ctx = encoding.encode_ordinary(query)
        prepared.append({"ctx": ctx, "endings": [encoding.encode_ordinary(f"{query} {e}")[len(ctx):] for e in endings],
                         "chars": [len(e) for e in endings], "label": label})
    return {**tokenizer.describe(encoding.name), "examples": prepared}


def write(path, examples, encoding):
    bins.write_json_atomic(path, tokenize(examples, encoding))


def load(path, encoding):
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
    return tokenize(read_jsonl(path), encoding)["examples"]


def for_run(cfg, encoding_name, block_size, log):
    """The examples a run evaluates every hellaswag_interval steps, or None (interval 0). A missing or bad file
    turns the evaluation off with a warning rather than stop a long run; another encoding's file is refused
    (EncodingMismatch)."""
    if cfg.hellaswag_interval <= 0:
        return None
    try:
        examples = load(cfg.hellaswag_file or os.path.join(cfg.data_dir, FILE), tokenizer.get_encoding(encoding_name))
    except EncodingMismatch as e:  # named by the key that chose the file
        raise EncodingMismatch(f"hellaswag_file: {e}") from None
    except (HellaSwagError, ValueError) as e:
        log(f"warning: {e}; HellaSwag evaluation is off for this run")
        return None
    if examples and (note := truncation_note(examples, block_size)):
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


def truncation_note(examples, block_size):
    """One line for the log when some examples do not fit the model's context window, else None:
    scoring cuts their rows from the start, silently otherwise."""
    cut = sum(any(evaluation.is_cut(ex["ctx"], e, block_size) for e in ex["endings"]) for ex in examples)
    if cut:
        return (f"hellaswag: {cut} of {len(examples)} examples are longer than block_size {block_size}: "
                "they are scored on their last tokens, their contexts cut from the start")
    return None


def ending_logprobs(model, examples, block_size, device, autocast, n_tokens=0):
    """The summed log-likelihood of each example's endings after its query: a (len(examples), 4) tensor
    (n_tokens: as evaluation.continuation_logprobs)."""
    pairs = [(ex["ctx"], e) for ex in examples for e in ex["endings"]]
    return evaluation.continuation_logprobs(model, pairs, block_size, device, autocast, n_tokens)[0].view(-1, 4)


def evaluate(model, examples, block_size, device, autocast, limit=0, n_tokens=0):
    """{'acc', 'acc_norm', 'n'} over the first `limit` examples (0: all), BATCH examples a forward,
    each rank (of torch.distributed's, where it is initialised) scoring its share of the batches. Every rank
    runs the same number of forwards (FSDP needs it): a rank short of a batch repeats its last, uncounted.
    n_tokens: the encoding's token count, so that a padded vocabulary scores as lm-eval scores the export."""
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if dist.is_initialized() else (0, 1)
    examples = examples[:limit] if limit else examples
    batches = [examples[i:i + BATCH] for i in range(0, len(examples), BATCH)]
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
