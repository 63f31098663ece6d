"""
lm-evaluation-harness (`lm-eval`) as the evaluation engine, fed by this project's GPT with no export:
GPTLM is lm-eval's model interface over model.py, and evaluate() runs tasks through
lm_eval.simple_evaluate, the GPT-3 paper's six zero-shot tasks from local files.

GPTLM builds on lm-eval's TemplateLM, which tokenizes (context, continuation) pairs as its Hugging Face
model does (the pair encoded whole and the context's tokens split off, an empty context replaced by
end-of-text), so an exported folder scores the same under `--model hf`. Log-likelihoods are batched
forwards under the training autocast, scored by evaluation.continuation_logprobs (HellaSwag's in-loop
scorer too) over the encoding's tokens only (an export drops a padded vocabulary's extra rows); a pair
longer than block_size is cut from the left and counted. Rolling log-likelihoods
use lm-eval's own windows. Generation is greedy, through model.py's KV cache, in a loop of its own:
model.generate samples and knows no stop strings. Under torchrun lm-eval's own data-parallel path
gives each rank its share of the requests; GPTLM supplies the gathers it asks for.

Local tasks: lm-eval's own task configs (prompt, process_docs, metrics) with only the dataset replaced
by DATA_DIR/<task>.jsonl, through a YAML that `include`s the built-in one. train.py never imports this
module: lm-eval takes seconds to import and is not needed to train.
"""
import itertools
import json
import os
import tempfile

import lm_eval
import torch
import torch.distributed as dist
from lm_eval.api.model import TemplateLM
from lm_eval.utils import get_rolling_token_windows, make_disjoint_window

from model import KVCache, mask_padding
from trainer import RunError, evaluation

PAPER_TASKS = tuple(dict.fromkeys(task for task, _ in evaluation.GPT3_ZERO_SHOT))
# where each task's config sits among lm-eval's own (indexing all of them takes ~20 s)
BUILTIN_FOLDERS = {"hellaswag": "hellaswag", "lambada_openai": "lambada", "piqa": "piqa", "arc_easy": "arc",
                   "arc_challenge": "arc", "winogrande": "winogrande"}
# the fields of a record that lm-eval's config of each reads (its templates, process_docs or functions)
PAPER_FIELDS = {"hellaswag": ("activity_label", "ctx_a", "ctx_b", "endings", "label"), "lambada_openai": ("text",),
                "piqa": ("goal", "sol1", "sol2", "label"), "arc_easy": ("question", "choices", "answerKey"),
                "arc_challenge": ("question", "choices", "answerKey"),
                "winogrande": ("sentence", "option1", "option2", "answer")}
BATCH_SIZE = 32  # rows a forward: a multiple-choice question's choices, or rolling windows
MAX_GEN_TOKS = 256  # lm-eval's default for generate_until


class HarnessError(RunError):
    """A task, file or request that cannot be evaluated: one line saying what to do."""


class GPTLM(TemplateLM):
    """lm-eval's model interface over a GPT in eval mode."""

    def __init__(self, model, encoding, device, autocast, batch_size=BATCH_SIZE, rank=0, world_size=1):
        super().__init__()
        self.model, self.encoding, self.autocast, self.batch_size = model.eval(), encoding, autocast, batch_size
        self.block_size = model.config.block_size
        self._device, self._rank, self._world_size = device, rank, world_size
        self.counts = torch.zeros(2, dtype=torch.long)  # pairs scored, pairs cut from the left

    @property
    def eot_token_id(self):
        return self.encoding.eot_token

    def tok_encode(self, string, add_special_tokens=None, **kwargs):
        return self.encoding.encode_ordinary(string)

    def tok_decode(self, ids):
        return self.encoding.decode(ids)

    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs):
        """[(log-likelihood, greedy)] of lm-eval's tokenized ((context, continuation), ids, ids) requests."""
        return self._score([(context, continuation) for _, context, continuation in requests])

    def _score(self, pairs):
        # longest first, so that a batch's rows pad to about the same length
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        results = [None] * len(pairs)
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            summed, greedy = evaluation.continuation_logprobs(self.model, [pairs[i] for i in rows], self.block_size,
                                                              self.device, self.autocast, self.encoding.n_vocab)
            for i, s, g in zip(rows, summed.tolist(), greedy.tolist()):
                results[i] = (s, g)
        self.counts += torch.tensor([len(pairs), sum(evaluation.is_cut(c, t, self.block_size) for c, t in pairs)])
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        """The log-likelihood of whole texts, each from end-of-text, in lm-eval's windows of block_size tokens."""
        pairs, owners = [], []
        for k, (text, *_) in enumerate(req.args for req in requests):
            windows = get_rolling_token_windows(self.tok_encode(text), prefix_token=self.eot_token_id,
                                                max_seq_len=self.block_size, context_len=1)
            for window in map(make_disjoint_window, windows):
                pairs.append(window)
                owners.append(k)
        totals = [0.0] * len(requests)
        for k, (logprob, _) in zip(owners, self._score(pairs)):
            totals[k] += logprob
        return totals

    def generate_until(self, requests, disable_tqdm=False):
        """Greedy continuations, each up to its first stop string (or end-of-text, or max_gen_toks). Requests
        whose contexts have the same number of tokens decode together: model.py's forward has no padding mask."""
        jobs = []
        for k, (context, kwargs) in enumerate(req.args[:2] for req in requests):
            if kwargs.get("do_sample") and kwargs.get("temperature", 1.0) > 0:
                raise HarnessError(f"{requests[k].task_name}: asks for sampling (do_sample=True); this model "
                                   "generates greedily only: set do_sample=False in the task's generation_kwargs")
            until = kwargs.get("until") or []
            until = [until] if isinstance(until, str) else list(until)
            max_new = min(int(kwargs.get("max_gen_toks", MAX_GEN_TOKS)), self.block_size - 1)
            ids = self.tok_encode(context) or [self.eot_token_id]
            room = self.block_size - max_new  # the window holds the context and what is generated
            self.counts += torch.tensor([1, int(len(ids) > room)])
            jobs.append((len(ids[-room:]), max_new, k, ids[-room:], until))
        results = [None] * len(requests)
        for (_, max_new), group in itertools.groupby(sorted(jobs), key=lambda job: job[:2]):
            group = list(group)
            for start in range(0, len(group), self.batch_size):
                batch = group[start:start + self.batch_size]
                for job, text in zip(batch, self._greedy([job[3] for job in batch], max_new, [job[4] for job in batch])):
                    results[job[2]] = text
        return results

    @torch.no_grad()
    def _greedy(self, contexts, max_new, untils):
        caches = [KVCache(self.block_size) for _ in self.model.transformer.h]
        generated = [[] for _ in contexts]
        done = [False] * len(contexts)
        x = torch.tensor(contexts, device=self.device)
        for step in range(max_new):
            with self.autocast:
                logits = self.model(x, kv_caches=caches)[0]
            x = mask_padding(logits[:, -1], self.encoding.n_vocab).argmax(-1, keepdim=True)  # never a non-token
            for row, token in enumerate(x[:, 0].tolist()):
                if not done[row]:
                    generated[row].append(token)
                    done[row] = token == self.eot_token_id or any(u in self.tok_decode(generated[row])
                                                                  for u in untils[row])
            if all(done):
                break
        texts = []
        for ids, until in zip(generated, untils):
            text = self.tok_decode([t for t in ids if t != self.eot_token_id])
            for stop in until:
                text = text.split(stop)[0]
            texts.append(text)
        return texts

    # lm-eval's data-parallel path: each rank scores its share of the requests, then it gathers
    def all_gather(self, tensor):
        parts = [torch.zeros_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor)
        return torch.stack(parts)

    def gather_object(self, obj, dst=0):
        gathered = [None] * self.world_size if self.rank == dst else None
        dist.gather_object(obj, gathered, dst=dst)
        return gathered

    def barrier(self):
        dist.barrier()

    def truncation_note(self):
        """One line when some requests were longer than block_size (all ranks' count), else None."""
        counts = self.counts.to(self.device)
        if self.world_size > 1:
            dist.all_reduce(counts)
        scored, cut = counts.tolist()
        if cut:
            return (f"{cut} of {scored} requests were longer than block_size {self.block_size}: they were scored "
                    "on their last tokens, their contexts cut from the left")
        return None


def task_file(data_dir, task):
    return os.path.join(data_dir, f"{task}.jsonl")


def task_manager(include_path):
    """lm-eval's TaskManager over the folders in include_path only. lm_eval.tasks is imported here, not at the
    top: it loads the datasets library, slow to import, which nothing else in this module needs."""
    from lm_eval.tasks import TaskManager
    return TaskManager(include_defaults=False, include_path=include_path)


def builtin_configs(tasks):
    """{task: lm-eval's own config} for tasks among PAPER_TASKS (its YAML path and the split it scores)."""
    root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    index = task_manager(sorted({os.path.join(root, BUILTIN_FOLDERS[t]) for t in tasks})).task_index
    configs = {}
    for task in tasks:
        entry = index[task]
        configs[task] = {"yaml": str(entry.yaml_path), "dataset_path": entry.cfg["dataset_path"],
                         "dataset_name": entry.cfg.get("dataset_name"),
                         "split": entry.cfg.get("test_split") or entry.cfg["validation_split"]}
    return configs


def check_tasks(tasks, data_dir, include_path=()):
    """HarnessError naming the first task that cannot be scored: one of PAPER_TASKS without its local file in
    data_dir, or another task whose config is in no include_path folder, or a data file lm-eval could not read
    (check_records). scripts/ladder.py asks before it trains, so that a misspelt task stops the ladder in its
    first second, not after its first run."""
    for folder in include_path:  # lm-eval skips a folder that is not there: its tasks would be 'unknown'
        if not os.path.isdir(folder):
            raise HarnessError(f"--include_path {os.path.abspath(folder)} is not a folder: pass the folder that holds "
                               "the task configs (for next_line: python data/quickstart/next_line.py writes "
                               "data/quickstart/next_line)")
    for task in [t for t in tasks if t in PAPER_TASKS]:
        path = os.path.abspath(task_file(data_dir, task))
        redo = f"run python data/eval/prepare.py --tasks {task} --out_dir {data_dir} where there is a network"
        if not os.path.isfile(path):
            raise HarnessError(f"no local file {path} for {task}: {redo}, or copy it here")
        check_records(task, path, PAPER_FIELDS[task], f"{redo}, or copy a whole one here")
    others = [t for t in tasks if t not in PAPER_TASKS]
    manager = task_manager(list(include_path)) if others and include_path else None
    if unknown := [t for t in others if t not in (manager.all_tasks if manager else [])]:
        raise HarnessError(f"unknown task {unknown[0]!r}: use {', '.join(PAPER_TASKS)}, or a task whose config "
                           "is in a folder passed with --include_path")
    for task in others:  # a config written before its folder moved (a clone elsewhere) names files no longer there
        entry = manager.task_index[task]
        again = "(for next_line: python data/quickstart/next_line.py)"
        for path in data_files(entry):
            if not os.path.exists(path):
                raise HarnessError(f"task {task} reads {path}, which is not there: write its config "
                                   f"{entry.yaml_path} again {again}")
            if entry.cfg.get("dataset_path") == "json" and path.endswith(".jsonl") and os.path.isfile(path):
                check_records(task, path, plain_fields(entry.cfg), f"write it again {again}, or fix its config "
                                                                   f"{entry.yaml_path}", named_outright=True)


def data_files(entry):
    """The local files a task's config (an lm-eval index entry) names in dataset_kwargs.data_files."""
    files = ((entry.cfg or {}).get("dataset_kwargs") or {}).get("data_files") or {}
    files = list(files.values()) if isinstance(files, dict) else [files]
    return [p for f in files for p in ([f] if isinstance(f, str) else f if isinstance(f, list) else [])]


def plain_fields(cfg):
    """The fields a config names outright (doc_to_text: context). A template's ({{goal}}) and a function's come out
    as lm-eval builds the task (build_tasks), as do those of a config whose process_docs makes other records."""
    if cfg.get("process_docs"):
        return ()
    return tuple(v for k in ("doc_to_text", "doc_to_choice", "doc_to_target")
                 if isinstance(v := cfg.get(k), str) and v.isidentifier())


def check_records(task, path, fields, redo, named_outright=False):
    """HarnessError unless path holds JSON lines, at least one record, each an object with fields: lm-eval stops
    on a line cut short, an empty file or a missing field with a traceback from deep in datasets or a template.
    named_outright: fields a config names as plain words (plain_fields), which lm-eval reads as literal text where
    the records have no such column; only those the first record holds are then required of every one."""
    records = 0
    try:
        with open(path, "rb") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():  # datasets' JSON reader skips blank lines
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:  # a JSONDecodeError, or bytes that are not UTF-8
                    raise HarnessError(f"{task}: {path} line {n} is not JSON ({getattr(e, 'msg', 'not UTF-8')}), "
                                       f"cut short or mangled: {redo}") from None
                if named_outright and records == 0 and isinstance(record, dict):
                    fields = [k for k in fields if k in record]
                if missing := [k for k in fields if not isinstance(record, dict) or k not in record]:
                    raise HarnessError(f"{task}: {path} line {n} has no field {missing[0]!r}, which the task reads: "
                                       f"{redo}")
                records += 1
    except OSError as e:
        raise HarnessError(f"{task}: cannot read {path} ({e.strerror}): {redo}") from None
    if not records:
        raise HarnessError(f"{task}: {path} holds no records: {redo}")


def build_tasks(manager, tasks):
    """lm-eval's Task (a Group for a group's name) of each name, built here rather than in simple_evaluate: a
    data file lm-eval cannot read (a field a template or function reads, a .json file cut short) is then one
    HarnessError naming the task and its files. Nothing of the model runs here, so none of its errors is caught."""
    built = []
    for task in tasks:
        try:
            loaded = manager.load(task)
        except Exception as e:  # datasets', pyarrow's, jinja's, a config function's KeyError: no short list
            root = e
            while root.__cause__ is not None:  # datasets' DatasetGenerationError says only that it failed
                root = root.__cause__
            files = ", ".join(data_files(manager.task_index[task])) or "its data files"
            reason = ": ".join([type(root).__name__, *str(root).strip().splitlines()[:1]])
            raise HarnessError(f"{task}: lm-eval cannot read {files} ({reason}): give it one JSON record a line with "
                               "the fields its config reads") from e
        built += [loaded["groups"][task]] if task in loaded["groups"] else list(loaded["tasks"].values())
    return built


def write_local_tasks(folder, tasks, data_dir):
    """A YAML per task in folder: lm-eval's own config, its dataset replaced by the local file of the split
    it scores (JSON is YAML)."""
    for task, config in builtin_configs(tasks).items():
        path = os.path.abspath(task_file(data_dir, task))
        splits = {"training_split": None, "validation_split": None, "test_split": None, "fewshot_split": None}
        splits["test_split" if config["split"] == "test" else "validation_split"] = config["split"]
        local = {"include": config["yaml"], "task": task, "dataset_path": "json", "dataset_name": None,
                 "dataset_kwargs": {"data_files": {config["split"]: path}}, **splits}
        with open(os.path.join(folder, f"{task}.yaml"), "w") as f:
            json.dump(local, f, indent=1)


def evaluate(lm, tasks, data_dir, include_path=(), limit=None):
    """{task: {metric: value, 'n': examples scored, and for a multiple-choice task 'chance': the accuracy of a
    guess}} from lm_eval.simple_evaluate, on rank 0 (None on the others). PAPER_TASKS come from data_dir's
    files; any other task from a config in include_path."""
    check_tasks(tasks, data_dir, include_path)
    with tempfile.TemporaryDirectory() as folder:
        write_local_tasks(folder, [t for t in tasks if t in PAPER_TASKS], data_dir)
        manager = task_manager([folder, *include_path])
        # bootstrap_iters: the stderr of a perplexity is bootstrapped; lm-eval's 100,000 take minutes on 2 cores.
        # log_samples: each question's requests, one per choice, which is what chance() counts
        out = lm_eval.simple_evaluate(model=lm, tasks=build_tasks(manager, tasks), limit=limit, task_manager=manager,
                                      log_samples=True, bootstrap_iters=1000)
    if out is None:
        return None
    return {task: {**{_metric_name(key): value for key, value in metrics.items() if "," in key},
                   "n": out["n-samples"][task]["effective"],
                   **chance(out["samples"].get(task, []), out["configs"].get(task, {}))}
            for task, metrics in out["results"].items()}


def chance(samples, config):
    """{'chance': the mean over the questions scored of one over its choices (lm-eval asks a log-likelihood of
    each)} for a multiple-choice task, {} for another (LAMBADA's word is no choice among a few). The sigmoid of a
    score against the loss starts there (trainer/ladder.py's fit_task)."""
    if config.get("output_type") != "multiple_choice" or not samples:
        return {}
    return {"chance": sum(1 / len(s["arguments"]) for s in samples) / len(samples)}


def _metric_name(key):
    """lm-eval's 'acc,none' as 'acc'; a metric under a named filter keeps it: 'exact_match,strict-match'."""
    metric, filter_name = key.split(",", 1)
    return metric if filter_name == "none" else key
