"""
A checkpoint beside the GPT-3 paper's zero-shot table, through lm-evaluation-harness (trainer/lm_eval_adapter.py):

    python data/eval/prepare.py                          # once, where there is a network: data/eval/<task>.jsonl
    python scripts/eval.py out/gpt3_6b                   # its newest checkpoint, the six tasks
    python scripts/eval.py out/gpt3_6b/ckpt_5000.pt --tasks hellaswag,piqa --limit 500
    python scripts/eval.py hf/gpt3_6b                    # a folder scripts/export_hf.py wrote (its tokenizer.json)
    torchrun --nproc_per_node=8 scripts/eval.py out/gpt3_6b/ckpt_5000/
    python scripts/eval.py --watch out/gpt3_6b --device cuda:1   # each checkpoint once, as it lands

Prints one table (task, metric, score, the paper's figure for the GPT-3 size nearest the model's) and
writes the results beside the checkpoint: ckpt_5000.eval.json (an out_dir: its newest checkpoint's; a
Hugging Face folder: <folder>.eval.json), merged into what that file holds of the same model (a task scored
again replaces its entry), each task's --limit and data files (path and sha256) under "scored_with". The hub
is off: the paper's six tasks come from --data_dir's files, any other task from a config in an --include_path
folder (with local data_files). Under torchrun each process scores its share of the examples and rank 0 prints.

--watch OUT_DIR scores every checkpoint of a run not yet in OUT_DIR/eval.jsonl, oldest first, appending
a line for each, then waits --poll seconds for the next; it stops after the run's last step (max_iters),
at once with --poll 0, and a restart carries on where it stopped.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer import interrupt  # noqa: E402

if __name__ == "__main__":  # until scoring takes SIGINT over (elastic.hear_sigint): results land whole, at the end
    interrupt.stop_at_once("eval.py", "with nothing half-written (a checkpoint half scored is scored again)")

# before datasets is imported: never the hub, and none of its progress bars for files of a few MB
os.environ.update(HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_DATASETS_DISABLE_PROGRESS_BARS="1")

import argparse  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import signal  # noqa: E402
import time  # noqa: E402
import zipfile  # noqa: E402
from datetime import timedelta  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import sample  # noqa: E402  (loads a checkpoint as sample.py does)
from trainer import bins, checkpoint, cli, elastic, evaluation, hf, lm_eval_adapter, runlock, tokenizer  # noqa: E402

GPT2_TOKENS = 50257


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", nargs="?", help="a ckpt_<N>.pt, a ckpt_<N>/ folder, an out_dir (its newest "
                                             "checkpoint) or a Hugging Face GPT-2 folder")
    p.add_argument("--tasks", default=",".join(lm_eval_adapter.PAPER_TASKS), help="comma-separated (default: %(default)s)")
    p.add_argument("--limit", type=int, help="score only the first N examples of each task")
    p.add_argument("--data_dir", default="data/eval", help="the six tasks' files (default: %(default)s)")
    p.add_argument("--include_path", action="append", default=[], help="a folder of lm-eval task configs (repeatable)")
    p.add_argument("--batch_size", type=int, default=lm_eval_adapter.BATCH_SIZE, help="rows a forward (default: %(default)s)")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--encoding", help="override the checkpoint's encoding: 'bytes', 'gpt2' or a .tiktoken file")
    p.add_argument("--watch", metavar="OUT_DIR", help="score each checkpoint of a run as it lands, into OUT_DIR/eval.jsonl")
    p.add_argument("--poll", type=float, default=60, help="--watch: seconds between looks (0: one pass; default %(default)s)")
    args = p.parse_args(argv)
    args.tasks = [t for t in args.tasks.split(",") if t]
    if bool(args.source) == bool(args.watch):
        sample.fail("give a checkpoint, an out_dir or a Hugging Face folder, or --watch OUT_DIR (one of them)")
    if problem := cli.below_least(args, {"limit": 1, "batch_size": 1, "poll": 0}):
        sample.fail(problem)
    if not args.tasks:
        sample.fail("--tasks names no task: give one or more, comma-separated")
    if args.watch and (problem := watch_problem(args.watch)):
        sample.fail(problem)
    return args


def watch_problem(path):
    """Why --watch cannot watch path, as one line, or None: a checkpoint (scored once, without --watch), a folder
    that is not there or holds no run (a typo would wait forever)."""
    if os.path.isfile(path) or os.path.isfile(os.path.join(path, checkpoint.TRAINER_STATE)):
        return (f"--watch {path} is a checkpoint, not a run's folder: score it once without --watch "
                f"(python scripts/eval.py {path}), or watch its run's out_dir")
    if not os.path.isdir(path):
        return f"--watch {path}: no such folder: pass the out_dir of a run (the folder train.py writes into)"
    if not checkpoint.list_checkpoints(path) and not os.path.isfile(os.path.join(path, "train.log")):
        return (f"--watch {path} holds no run (no checkpoint, no train.log): pass the out_dir of a run (the folder "
                "train.py writes into)")
    if not os.access(path, os.W_OK):  # found out at the first write, after minutes of scoring
        return f"--watch {path}: this user cannot write there (its {checkpoint.SCORES_LOG}): make it writable"
    return None


def check_tasks(args):
    """The tasks' files and folders, once the source is known good and before its model loads (minutes for a 6.7B):
    a file cut short or an --include_path that is not there stops eval.py in a second."""
    try:
        lm_eval_adapter.check_tasks(args.tasks, args.data_dir, args.include_path)
    except lm_eval_adapter.HarnessError as e:
        sample.fail(str(e))


def load(args, source, local_rank=0):
    """(model, encoding, device, autocast, {'iter', 'max_iters', 'out': where the results go}) for a
    checkpoint, an out_dir or a Hugging Face folder."""
    if os.path.isfile(source) and not zipfile.is_zipfile(source):  # before the tasks are checked: the first mistake
        sample.fail(f"{source} is not a checkpoint, or one cut short (torch.save writes a whole zip archive): give "
                    "eval.py a ckpt_<N>.pt, a run's out_dir or a Hugging Face folder")
    is_checkpoint = os.path.isfile(source) or os.path.isfile(os.path.join(source, checkpoint.TRAINER_STATE))
    # an out_dir holds config.json too (train.py's settings): it is a Hugging Face folder only without checkpoints
    if not is_checkpoint and not checkpoint.list_checkpoints(source) and os.path.isfile(os.path.join(source, "config.json")):
        check_tasks(args)
        device, autocast = sample.device_and_autocast(args, local_rank)
        try:
            model = hf.from_pretrained(source).to(device).eval()
        except hf.WeightsError as e:
            sample.fail(str(e))
        encoding = hf_encoding(args.encoding, source, model.config.n_tokens or model.config.vocab_size)
        return model, encoding, device, autocast, {"iter": None, "max_iters": None, "out": source.rstrip("/") + ".eval.json"}
    if not is_checkpoint and not checkpoint.list_checkpoints(source):  # sample.py's advice names its own flags
        what = "holds no checkpoint (ckpt_<N>.pt or ckpt_<N>/) and no Hugging Face config.json" \
            if os.path.isdir(source) else "does not exist"
        sample.fail(f"{source} {what}: give eval.py a checkpoint, a run's out_dir or a Hugging Face folder, e.g. "
                    "python train.py config/train_tiny.py (which writes out/tiny), then python scripts/eval.py out/tiny")
    check_tasks(args)
    where = SimpleNamespace(**vars(args), init_from=source if is_checkpoint else None, out_dir=source)
    model, state, encoding, device, autocast = sample.load_model(where, local_rank)
    if args.encoding:  # the user's, not the one the model was trained with
        sample.check_encoding_fits(encoding, model.config.vocab_size)
    step = state.get("iter_num")
    folder = os.path.dirname(source.rstrip("/")) if is_checkpoint else source
    path = source if is_checkpoint else next((p for n, p in checkpoint.list_checkpoints(folder) if n == step), None)
    return model, encoding, device, autocast, {"iter": step, "max_iters": state.get("config", {}).get("max_iters"),
                                               "out": checkpoint.scores_path(folder, step), "checkpoint": path,
                                               "identity": path and checkpoint.identity(path)}


def hf_encoding(name, folder, tokens):
    """The encoding of a Hugging Face folder of `tokens` tokens: --encoding (name), else the folder's own
    tokenizer.json (export_hf.py writes one), else GPT-2's where the model has GPT-2's 50,257 tokens; else one
    line. One of more tokens than the model is one line too."""
    has_own = os.path.isfile(os.path.join(folder, "tokenizer.json"))
    if not name and not has_own and tokens != GPT2_TOKENS:
        sample.fail(f"{folder} has {tokens} tokens, not GPT-2's {GPT2_TOKENS}, and no tokenizer.json: pass --encoding "
                    "(bytes, gpt2 or the run's .tiktoken file)")
    try:
        found = tokenizer.FolderEncoding(folder) if has_own and not name else tokenizer.get_encoding(name or "gpt2")
    except ValueError as e:  # a rank file not there, tiktoken's gpt2 offline, a tokenizer.json that does not load
        sample.fail(str(e))
    sample.check_encoding_fits(found, tokens)
    return found


def score(args, source, rank=0, world_size=1, local_rank=0):
    """(results on rank 0 else None, load's dict with 'params', the truncation note) of one model."""
    model, encoding, device, autocast, info = load(args, source, local_rank)
    lm = lm_eval_adapter.GPTLM(model, encoding, device, autocast, args.batch_size, rank, world_size)
    try:
        results = lm_eval_adapter.evaluate(lm, args.tasks, args.data_dir, args.include_path, args.limit)
    except lm_eval_adapter.HarnessError as e:
        sample.fail(str(e))
    return results, {**info, "params": model.get_num_params(non_embedding=False)}, lm.truncation_note()


def scored_with(tasks, data_dir, include_path, limit):
    """{task: {'limit', 'data': [{'path', 'sha256'}]}}: what a task's score depends on beside the model, the data
    by content too (prepare.py --synthetic writes made-up examples where the real ones go, data/eval by default).
    Kept per task: the tasks merged into one eval.json may come from different calls."""
    others = [t for t in tasks if t not in lm_eval_adapter.PAPER_TASKS]
    index = lm_eval_adapter.task_manager(list(include_path)).task_index if others and include_path else {}
    files = {t: [lm_eval_adapter.task_file(data_dir, t)] if t in lm_eval_adapter.PAPER_TASKS else
             lm_eval_adapter.data_files(index[t]) if t in index else [] for t in tasks}
    return {t: {"limit": limit, "data": [{"path": os.path.abspath(p), "sha256": data_digest(p)} for p in paths]}
            for t, paths in files.items()}


def data_digest(path):
    """sha256 of a task's data file, or of a folder's files (names and contents) in name order."""
    if os.path.isfile(path):
        return tokenizer.file_sha256(path)
    names = sorted(os.path.relpath(os.path.join(d, f), path) for d, _, files in os.walk(path) for f in files)
    listing = "".join(f"{name} {tokenizer.file_sha256(os.path.join(path, name))}\n" for name in names)
    return hashlib.sha256(listing.encode()).hexdigest()


def unscored(record, wanted):
    """The tasks of wanted (scored_with's) that an eval.json's record lacks or holds scored otherwise: with another
    --limit, on other data, or before eval.py recorded either (unknown: it may have been made-up or limited data),
    so that such a score never stands in for the one asked for. Data by content: a volume moved reads the same."""
    results, recorded = record.get("results", {}), record.get("scored_with", {})
    digests = lambda r: sorted(str(f.get("sha256")) for f in r.get("data", []) if isinstance(f, dict))
    return [t for t, want in wanted.items() if t not in results or not isinstance(recorded.get(t), dict)
            or recorded[t].get("limit") != want["limit"] or digests(recorded[t]) != digests(want)]


def earlier_record(info):
    """What info['out'] holds of this checkpoint, to merge into; {} where it is absent, another checkpoint's (its iter
    or params other) or not JSON, and for a Hugging Face folder, which nothing tells apart from one exported anew
    over it (a note names the last two)."""
    if info["iter"] is None and os.path.isfile(info["out"]):
        print(f"note: {info['out']} written anew: a Hugging Face folder's scores are not merged (a folder exported "
              "again in its place would keep another model's)", file=sys.stderr)
        return {}
    try:
        with open(info["out"]) as f:
            record = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        print(f"note: {info['out']} does not read as JSON ({e}): written anew", file=sys.stderr)
        return {}
    same = isinstance(record, dict) and isinstance(record.get("results"), dict) and \
        (record.get("iter"), record.get("params")) == (info["iter"], info["params"])
    if not same:
        print(f"note: {info['out']} held another model's scores: written anew", file=sys.stderr)
    return record if same else {}


def write_results(args, info, results):
    """results into info['out'], merged with what it holds of this model: a task scored again replaces its entry,
    the others stay (scoring task B after task A keeps A for the ladder). The tasks kept, for the last line."""
    scoring_now = scored_with(args.tasks, args.data_dir, args.include_path, args.limit)
    try:
        with runlock.merging(info["out"]):
            if info.get("checkpoint") and checkpoint.rolled_back_since(info["checkpoint"], info["identity"]):
                sample.fail(f"{info['checkpoint']} was rolled back while it was scored (a spike, or init_from): its "
                            "scores are not written; score the checkpoint now at its step")
            record = earlier_record(info)
            kept = {t: r for t, r in record.get("results", {}).items() if t not in results}
            scoring = {t: s for t, s in record.get("scored_with", {}).items() if t not in results}
            bins.write_json_atomic(info["out"], {
                "source": args.source, "iter": info["iter"], "params": info["params"], "results": {**kept, **results},
                "scored_with": {**scoring, **scoring_now}})
    except OSError as e:  # a full disk or a read-only volume: what it held stays as it was
        sample.fail(f"cannot write {info['out']}: {e.strerror}; the scores above are not saved: free space or make "
                    "its folder writable, then rerun")
    return sorted(kept)


def table(results, params):
    """One row per task and metric: the score (in % for accuracies) and the paper's zero-shot figure."""
    name, _ = evaluation.gpt3_reference(params)
    lines = [f"{'task':<16}{'metric':<12}{'n':>7}{'score':>22}   {name} zero-shot", "-" * 76]
    for task, metrics in results.items():
        for metric, value in metrics.items():
            if metric in ("n", "chance") or metric.endswith("_stderr"):
                continue
            number = "{:.4g}".format if "perplexity" in metric else lambda v: f"{100 * v:.2f}"  # accuracies in %
            stderr = metrics.get(f"{metric}_stderr")
            shown = number(value) + (f" ± {number(stderr)}" if isinstance(stderr, float) else "")
            paper = evaluation.gpt3_reference(params, task, metric)[1]
            lines.append(f"{task:<16}{metric:<12}{metrics['n']:>7}{shown:>22}   {'' if paper is None else paper}")
    return "\n".join(lines)


def append_line(path, record):
    """One line a checkpoint, on disk before the next is started; a full disk is one line (a line cut short is one
    read_watch_log skips: that checkpoint is scored again)."""
    try:
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        sample.fail(f"cannot write {path}: {e.strerror}; free space, then run the same command")


def watch(args, heard):
    """Score each checkpoint of args.watch not yet in its eval.jsonl, oldest first, until the run's last step;
    stop once heard (a SIGINT) is set, should a library have swallowed its KeyboardInterrupt."""
    log_path = os.path.join(args.watch, checkpoint.SCORES_LOG)
    print(f"watch: {args.watch}: {len(evaluation.read_watch_log(log_path))} checkpoint(s) scored before; "
          "Ctrl-C (SIGINT) stops, and the same command carries on", flush=True)
    while True:
        done = evaluation.read_watch_log(log_path)
        todo = [(n, path) for n, path in reversed(checkpoint.list_checkpoints(args.watch)) if n not in done]
        # the newest scored step ends the watch where it was its run's last (a run extended since has steps after
        # it), and nothing newer waits
        newest = done[max(done)] if done else None
        if newest and newest["iter"] >= newest["max_iters"] and not todo:
            print(f"watch: the run's last step is scored; {log_path} has {len(done)} checkpoint(s)")
            return
        for n, path in todo:
            try:
                t0, scored = time.time(), checkpoint.identity(path)
            except FileNotFoundError:
                print(f"watch: ckpt_{n} was rotated away before it was scored")
                continue
            results, info, note = score(args, path)
            record = {"iter": info["iter"], "checkpoint": path, "params": info["params"], "results": results,
                      "max_iters": info["max_iters"] or info["iter"], "seconds": round(time.time() - t0, 1)}
            with runlock.merging(log_path):  # a roll back sets lines aside under the same lock
                if checkpoint.rolled_back_since(path, scored):  # its step's checkpoint is another model now
                    print(f"watch: ckpt_{n} was rolled back while it was scored: its scores are not kept")
                    continue
                append_line(log_path, record)
            print(f"watch: step {info['iter']} scored in {record['seconds']}s" + (f"; {note}" if note else ""),
                  flush=True)
            if heard.is_set():
                raise KeyboardInterrupt
        if args.poll == 0:
            return
        if heard.is_set():
            raise KeyboardInterrupt
        if not todo:
            time.sleep(args.poll)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if args.watch:
        if world_size > 1:
            sample.fail("--watch runs in one process: start it with python, not torchrun")
        heard = elastic.hear_sigint()  # from now on a stop is a KeyboardInterrupt here, saying where eval.jsonl is
        try:
            return watch(args, heard)
        except KeyboardInterrupt:  # a checkpoint half scored is scored again by the next watch
            log = os.path.join(args.watch, checkpoint.SCORES_LOG)
            print(f"watch: stopped by SIGINT; {log} has every checkpoint scored so far, and the same command "
                  "carries on", flush=True)
            sys.exit(130)
    if world_size > 1:
        device, _ = sample.device_and_autocast(args, local_rank)
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=timedelta(minutes=30))
    # one process: a stop (a Ctrl-C, or the ladder's SIGTERM) unwinds, so that lm-eval's temporary task folder
    # goes (under torchrun it exits at once)
    heard = elastic.hear_sigint((signal.SIGINT, signal.SIGTERM)) if world_size == 1 else None
    try:
        results, info, note = score(args, args.source, rank, world_size, local_rank)
        if heard is not None and heard.is_set():  # a library swallowed the KeyboardInterrupt
            raise KeyboardInterrupt
    except KeyboardInterrupt:
        name = heard.name if heard else "SIGINT"
        print(f"eval.py: stopped by {name} before writing anything", file=sys.stderr, flush=True)
        sys.exit(128 + signal.Signals[name])
    interrupt.stop_at_once("eval.py", "before its scores were written (its results file holds what it did): rerun")
    if rank == 0:
        if note:
            print(f"note: {note}", file=sys.stderr)
        print(f"{args.source}: step {info['iter']}, {info['params']:,} parameters")
        print(table(results, info["params"]))
        kept = write_results(args, info, results)
        print(f"wrote {info['out']}" + (f" (kept its earlier {', '.join(kept)})" if kept else ""))
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
