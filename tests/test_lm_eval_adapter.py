"""lm-evaluation-harness as the engine: the adapter's three request types compute what the model computes
(cut from the left and counted past block_size, greedy through the KV cache up to a stop string);
scripts/eval.py prints the paper's table from local files with the hub off, writes JSON beside the
checkpoint, agrees with itself under torchrun and takes custom task configs; --watch scores each
checkpoint once and resumes; plot_log.py draws the curves; an export scores the same under lm-eval's
own `hf` model. Tiny random models and made-up task files (data/eval/prepare.py --synthetic): no hub."""
import hashlib
import json
import shlex
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from conftest import REPO, load_script, sigint_heard, torchrun
from model import GPT, GPTConfig, mask_padding
from trainer import bins, checkpoint, evaluation, hf, lm_eval_adapter, metrics
from trainer.tokenizer import get_encoding

ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=48, vocab_size=320, bias=False)
BYTES = get_encoding("bytes")


eval_script = load_script("eval_script", "scripts/eval.py")  # sets the hub off for this process, as eval.py does
prepare_script = load_script("prepare_eval", "data/eval/prepare.py")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**ARGS)).eval()


def save(out_dir, step, max_iters=30):
    checkpoint.save_checkpoint({"model": tiny_model(step).state_dict(), "model_args": ARGS, "iter_num": step,
                                "encoding": "bytes", "config": {"max_iters": max_iters, "data_dir": ""}},
                               str(out_dir), step, 10, log=lambda m: None)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """An out_dir with two checkpoints of a 30-step run, and 8 made-up examples of each of the six tasks."""
    folder = tmp_path_factory.mktemp("harness")
    for step in (10, 20):
        save(folder / "run", step)
    tasks = folder / "tasks"
    tasks.mkdir()
    for task in lm_eval_adapter.PAPER_TASKS:
        bins.write_jsonl_atomic(lm_eval_adapter.task_file(str(tasks), task), prepare_script.synthetic(task, 8))
    return folder


class Request:  # what the adapter reads of lm-eval's Instance
    def __init__(self, *args):
        self.args, self.task_name = args, "test"


def plain_logprob(model, context, continuation):
    """One row, no padding; the softmax over the encoding's 257 tokens, not the padded vocabulary's 320."""
    ids = torch.tensor([context + continuation])
    with torch.no_grad():
        logits = mask_padding(model(ids[:, :-1], every_position=True)[0][0], BYTES.n_vocab)
    return F.log_softmax(logits, -1)[torch.arange(ids.size(1) - 1), ids[0, 1:]][-len(continuation):].sum().item()


def test_the_adapters_requests_compute_what_the_model_does():
    model = tiny_model()
    lm = lm_eval_adapter.GPTLM(model, BYTES, "cpu", torch.no_grad(), batch_size=3)
    eot = BYTES.eot_token
    pairs = [("The cat", " sat"), ("A", " much longer continuation"), ("", "Alone"), ("x" * 60, " cut")]
    results = lm.loglikelihood([Request(*p) for p in pairs])
    for (context, continuation), (logprob, greedy) in zip(pairs, results):
        ctx, cont = BYTES.encode_ordinary(context) or [eot], BYTES.encode_ordinary(continuation)
        row = (ctx + cont)[-(ARGS["block_size"] + 1):]  # the last block_size inputs and their targets
        assert logprob == pytest.approx(plain_logprob(model, row[:-len(cont)], cont), abs=1e-4)
        assert greedy is False  # a random model does not predict these bytes
    assert lm.truncation_note() == ("1 of 4 requests were longer than block_size 48: they were scored on their last "
                                    "tokens, their contexts cut from the left")
    short, long = "a short text", "a text far longer than the window of forty-eight bytes, so in windows"
    rolled = lm.loglikelihood_rolling([Request(short), Request(long)])
    ids = BYTES.encode_ordinary(short)
    assert rolled[0] == pytest.approx(plain_logprob(model, [eot], ids), abs=1e-4)  # every token, from end-of-text
    ids = BYTES.encode_ordinary(long)  # lm-eval's windows: the first 48 tokens, then the other 21 after 28 of them
    assert len(ids) == 69 and rolled[1] == pytest.approx(
        plain_logprob(model, [eot], ids[:48]) + plain_logprob(model, ids[20:48], ids[48:]), abs=1e-4)
    prompts = ["Once upon", "Two words", "Longer prompt"]  # two of 9 tokens decode together, one alone
    free = [BYTES.decode(model.generate(torch.tensor([BYTES.encode_ordinary(p)]), 12, top_k=1)[0, len(p):].tolist())
            for p in prompts]
    stop = free[1][5:7]  # a stop string inside the second continuation: it ends there
    out = lm.generate_until([Request(prompts[0], {"max_gen_toks": 12}), Request(prompts[1], {"until": [stop],
                             "max_gen_toks": 12}), Request(prompts[2], {"max_gen_toks": 12})])
    assert out == [free[0], free[1][:free[1].index(stop)], free[2]]
    with pytest.raises(lm_eval_adapter.HarnessError, match="do_sample=False"):
        lm.generate_until([Request("x", {"do_sample": True, "temperature": 0.7})])


@pytest.mark.e2e
def test_eval_prints_the_papers_table_writes_json_and_agrees_under_torchrun(run, capsys, tmp_path):
    custom = tmp_path / "custom"  # a task of one's own through --include_path, with local data_files
    custom.mkdir()
    (custom / "my_piqa.yaml").write_text(json.dumps({
        "task": "my_piqa", "dataset_path": "json", "dataset_kwargs": {"data_files": {"validation": str(run / "tasks" / "piqa.jsonl")}},
        "output_type": "multiple_choice", "validation_split": "validation", "doc_to_text": "{{goal}}",
        "doc_to_choice": "{{[sol1, sol2]}}", "doc_to_target": "label", "metric_list": [{"metric": "acc"}]}))
    eval_script.main([str(run / "run"), "--data_dir", str(run / "tasks"), "--device", "cpu"])
    out = capsys.readouterr().out
    rows = {tuple(line.split()[:2]): line for line in out.splitlines()[2:] if line.split()[:1] in [[t] for t in lm_eval_adapter.PAPER_TASKS]}
    assert f"step 20, {tiny_model().get_num_params(non_embedding=False):,} parameters" in out
    assert "GPT-3 125M zero-shot" in out and rows[("hellaswag", "acc_norm")].endswith("33.7")
    assert rows[("lambada_openai", "perplexity")].endswith("18.6") and rows[("winogrande", "acc")].endswith("52.0")
    written = json.loads((run / "run" / "ckpt_20.eval.json").read_text())
    assert written["iter"] == 20 and set(written["results"]) == set(lm_eval_adapter.PAPER_TASKS)
    assert all(r["n"] == 8 for r in written["results"].values())
    assert {t: r.get("chance") for t, r in written["results"].items()} == {  # a guess among the choices; a word, none
        "hellaswag": 0.25, "lambada_openai": None, "piqa": 0.5, "winogrande": 0.5, "arc_easy": 0.25,
        "arc_challenge": 0.25}
    two = torchrun(["--standalone", "--nproc_per_node=2"], [
        "scripts/eval.py", run / "run" / "ckpt_20.pt", "--data_dir", run / "tasks", "--device", "cpu",
        "--include_path", custom, "--tasks", "hellaswag,lambada_openai,my_piqa"],
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert two.returncode == 0, two.stderr
    assert two.stdout.count("hellaswag ") == 2  # rank 0 alone prints the table
    split = json.loads((run / "run" / "ckpt_20.eval.json").read_text())["results"]
    for task in ("hellaswag", "lambada_openai"):  # each rank scored its share; the bootstrapped stderr aside
        assert {k: v for k, v in split[task].items() if k != "perplexity_stderr"} == \
               {k: v for k, v in written["results"][task].items() if k != "perplexity_stderr"}
    assert split["my_piqa"]["n"] == 8 and split["my_piqa"]["acc"] == written["results"]["piqa"]["acc"]


@pytest.mark.parametrize("case,expected", [
    ("missing", "piqa.jsonl for piqa: run python data/eval/prepare.py --tasks piqa"),
    ("unknown", "unknown task 'mmlu'"), ("no_source", "give a checkpoint")])
def test_a_missing_task_file_or_unknown_task_is_one_line(run, tmp_path, capsys, case, expected):
    argv = {"missing": [str(run / "run"), "--data_dir", str(tmp_path), "--tasks", "piqa"],
            "unknown": [str(run / "run"), "--data_dir", str(run / "tasks"), "--tasks", "mmlu"], "no_source": []}[case]
    with pytest.raises(SystemExit) as e:
        eval_script.main(argv + ["--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and err[-1].startswith("error: ") and expected in err[-1]


def bad_task_files(run, folder, case):
    """eval.py's arguments for a data folder (or --include_path) with one bad file, as a copy, a crash or a typo
    leaves it: lm-eval met each with a traceback from datasets, a template or a config's function."""
    for task in ("piqa", "arc_easy", "winogrande"):
        (folder / f"{task}.jsonl").write_bytes((run / "tasks" / f"{task}.jsonl").read_bytes())
    config = {"dataset_path": "json", "dataset_kwargs": {"data_files": {"validation": str(folder / "mine.jsonl")}},
              "output_type": "multiple_choice", "validation_split": "validation", "doc_to_target": "label",
              "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    (folder / "custom").mkdir()
    (folder / "custom" / "plain.yaml").write_text(json.dumps({**config, "task": "plain", "doc_to_text": "context",
                                                               "doc_to_choice": "choices"}))
    (folder / "custom" / "template.yaml").write_text(json.dumps({**config, "task": "template",
                                                                  "doc_to_text": "{{goal}}",
                                                                  "doc_to_choice": "{{[sol1, sol2]}}"}))
    (folder / "mine.jsonl").write_text('{"foo": 1, "label": 0}\n')
    piqa = (folder / "piqa.jsonl").read_text()
    tasks, include = {"cut": ("piqa", []), "empty": ("arc_easy", []), "no_field": ("winogrande", []),
                      "no_folder": ("next_line", [folder / "nope_dir"]), "plain_field": ("plain", [folder / "custom"]),
                      "template_field": ("template", [folder / "custom"])}[case]
    if case == "cut":
        (folder / "piqa.jsonl").write_text(piqa[:len(piqa) - 10])
    elif case == "empty":
        (folder / "arc_easy.jsonl").write_text("")
    elif case == "no_field":
        (folder / "winogrande.jsonl").write_text('{"foo": 1}\n')
    elif case == "plain_field":  # the first record has the column (else lm-eval reads 'context' as literal text)
        (folder / "mine.jsonl").write_text('{"context": "a", "choices": ["x", "y"], "label": 0}\n'
                                           '{"foo": 1, "label": 0}\n')
    argv = [str(run / "run"), "--data_dir", str(folder), "--tasks", tasks, "--device", "cpu", "--limit", "2"]
    return argv + [a for path in include for a in ("--include_path", str(path))]


@pytest.mark.parametrize("case,expected", [
    ("cut", r"piqa: .*/piqa.jsonl line 8 is not JSON \(Unterminated string.*\), cut short or mangled: run python "
            r"data/eval/prepare.py --tasks piqa --out_dir .* where there is a network, or copy a whole one here$"),
    ("empty", r"arc_easy: .*/arc_easy.jsonl holds no records: run python data/eval/prepare.py --tasks arc_easy"),
    ("no_field", r"winogrande: .*/winogrande.jsonl line 1 has no field 'sentence', which the task reads: run python"),
    ("no_folder", r"--include_path .*/nope_dir is not a folder: pass the folder that holds the task configs"),
    ("plain_field", r"plain: .*/mine.jsonl line 2 has no field 'context', which the task reads: write it again "
                    r"\(for next_line: python data/quickstart/next_line.py\), or fix its config .*/custom/plain.yaml$"),
    ("template_field", r"template: lm-eval cannot read .*/mine.jsonl \(UndefinedError: 'goal' is undefined\): give it "
                       r"one JSON record a line with the fields its config reads$")])
def test_a_bad_task_file_or_include_path_is_one_line_naming_it(run, tmp_path, capsys, case, expected):
    """A task file cut mid-line, empty or without a field its config reads, and an --include_path that is not
    there: one line on stderr naming the file (or folder) and what to do, exit 1; before the model loads, but for
    a template's field, which lm-eval finds as it builds the task."""
    with pytest.raises(SystemExit) as e:
        eval_script.main(bad_task_files(run, tmp_path, case))
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and re.match("error: " + expected, err[-1]), err
    assert [line for line in err if not line.startswith(("loading ", "loaded "))] == err[-1:]  # progress aside
    assert any(line.startswith("loaded ") for line in err) == (case == "template_field")


def test_check_tasks_passes_good_files_and_a_template_task_it_cannot_read(run, tmp_path):
    """check_tasks (the ladder asks it before training) reads good files through, blank lines too; a template's
    fields are left to lm-eval, as it builds the task."""
    argv = bad_task_files(run, tmp_path, "template_field")
    with open(tmp_path / "piqa.jsonl", "a") as f:
        f.write("\n")
    lm_eval_adapter.check_tasks(["piqa", "arc_easy", "winogrande", "template"], str(tmp_path),
                                [argv[argv.index("--include_path") + 1]])


def test_watch_scores_each_checkpoint_once_resumes_and_plots(run, tmp_path, capsys):
    out_dir = tmp_path / "run"
    for step in (10, 20):
        save(out_dir, step)
    watch = ["--watch", str(out_dir), "--data_dir", str(run / "tasks"), "--tasks", "hellaswag,winogrande", "--device", "cpu"]
    eval_script.main(watch + ["--poll", "0"])  # one pass
    log = out_dir / "eval.jsonl"
    assert [json.loads(line)["iter"] for line in log.read_text().splitlines()] == [10, 20]
    with open(log, "a") as f:
        f.write('{"iter": 30, "resu')  # a torn line, as a crash mid-write leaves: that step is scored again
    eval_script.main(watch + ["--poll", "0"])  # a restart: nothing new
    save(out_dir, 30)
    eval_script.main(watch + ["--poll", "0.01"])  # scores step 30, then stops: it is the run's last
    records = [json.loads(line) for line in log.read_text().splitlines()[:2] + log.read_text().splitlines()[3:]]
    assert [r["iter"] for r in records] == [10, 20, 30] and log.read_text().count('"iter": 10') == 1
    assert records[0]["results"]["winogrande"]["n"] == 8 and records[2]["max_iters"] == 30
    assert "the run's last step is scored" in capsys.readouterr().out
    save(out_dir, 40, max_iters=50)  # the run extended: its last step scored so far is no longer its last
    eval_script.main(watch + ["--poll", "0"])
    assert [json.loads(line)["iter"] for line in log.read_text().splitlines()[3:]] == [30, 40]
    with open(log, "ab") as f:
        f.write(b"\xff\n")  # a byte that is not UTF-8 spoils its line, not the log
    assert sorted(evaluation.read_watch_log(str(log))) == [10, 20, 30, 40]
    record = metrics.Metrics(out_dir)
    record("start", 0, params=100)
    for i in range(1, 31):
        record("step", i, loss=4 - i / 20, tokens_per_sec=1000.0)
    with open(out_dir / metrics.FILE, "ab") as f:
        f.write(b"\xff\n")  # so does metrics.jsonl's, which a resumed train.py reads at each evaluation
    assert len(metrics.read(out_dir, "step")) == 30
    plot_log = load_script("plot_log", "scripts/plot_log.py")
    curves, _ = plot_log.parse_evals(str(log))
    assert sorted(curves) == [("hellaswag", "acc_norm"), ("winogrande", "acc")]
    assert sorted(curves[("winogrande", "acc")]) == [10, 20, 30, 40]
    plot_log.main([str(out_dir), "--out", str(tmp_path / "plot.png")])
    assert "lm-eval curves for 2 task metric(s)" in capsys.readouterr().out and (tmp_path / "plot.png").stat().st_size > 10_000


def test_watch_keeps_no_scores_of_a_checkpoint_rolled_back_while_it_was_scored(run, tmp_path, monkeypatch, capsys):
    """A spike roll back while --watch scores ckpt_20: its scores are of a model set aside, and the ckpt_20 that
    training writes again must be scored, not found in eval.jsonl already."""
    out_dir = tmp_path / "run"
    for step in (10, 20):
        save(out_dir, step)
    real, rolled = eval_script.score, []

    def rolled_back_meanwhile(args, path, *rest):
        scored = real(args, path, *rest)
        if path.endswith("ckpt_20.pt") and not rolled:
            rolled.extend(checkpoint.roll_back_to(str(out_dir / "ckpt_10.pt"), log=lambda m: None))
        return scored
    monkeypatch.setattr(eval_script, "score", rolled_back_meanwhile)
    watch = ["--watch", str(out_dir), "--data_dir", str(run / "tasks"), "--tasks", "piqa", "--device", "cpu"]
    eval_script.main(watch + ["--poll", "0"])
    assert "watch: ckpt_20 was rolled back while it was scored: its scores are not kept" in capsys.readouterr().out
    assert list(evaluation.read_watch_log(str(out_dir / "eval.jsonl"))) == [10]
    save(out_dir, 20)  # training writes step 20 again: scored this time
    eval_script.main(watch + ["--poll", "0"])
    assert list(evaluation.read_watch_log(str(out_dir / "eval.jsonl"))) == [10, 20]


def test_scores_of_a_checkpoint_rolled_back_while_it_was_scored_are_not_written(run, tmp_path, monkeypatch, capsys):
    out_dir = tmp_path / "run"
    for step in (10, 20):
        save(out_dir, step)
    real = eval_script.score

    def rolled_back_meanwhile(args, source, *rest):
        scored = real(args, source, *rest)
        checkpoint.roll_back_to(str(out_dir / "ckpt_10.pt"), log=lambda m: None)
        save(out_dir, 20)  # training goes on and writes step 20 again: another model
        return scored
    monkeypatch.setattr(eval_script, "score", rolled_back_meanwhile)
    with pytest.raises(SystemExit, match="^1$"):
        eval_script.main([str(out_dir), "--data_dir", str(run / "tasks"), "--tasks", "piqa", "--device", "cpu"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {out_dir / 'ckpt_20.pt'} was rolled back while it was scored (a spike, or init_from): its scores are "
        "not written; score the checkpoint now at its step")
    assert not (out_dir / "ckpt_20.eval.json").exists()


def test_watch_stops_after_the_checkpoint_whose_sigint_a_library_swallowed(run, tmp_path, monkeypatch, capsys):
    """A bare `except:` inside lm-eval or datasets can eat the KeyboardInterrupt; the watch still stops, with
    the checkpoint it was scoring written whole, not on to the next one and a minute's poll."""
    out_dir = tmp_path / "run"
    for step in (10, 20):
        save(out_dir, step)
    score = eval_script.score

    def score_through_a_swallowed_interrupt(*args, **kwargs):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.1)  # the handler runs here
        except:  # noqa: E722 - what the library does
            pass
        return score(*args, **kwargs)
    monkeypatch.setattr(eval_script, "score", score_through_a_swallowed_interrupt)
    previous = signal.getsignal(signal.SIGINT)
    try:
        with pytest.raises(SystemExit) as stopped:
            eval_script.main(["--watch", str(out_dir), "--data_dir", str(run / "tasks"), "--tasks", "hellaswag",
                              "--device", "cpu", "--poll", "60"])
    finally:
        signal.signal(signal.SIGINT, previous)
    assert stopped.value.code == 130 and "watch: stopped by SIGINT" in capsys.readouterr().out
    assert [json.loads(line)["iter"] for line in (out_dir / "eval.jsonl").read_text().splitlines()] == [10]


def wait_for(condition, what, timeout=120):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, f"no {what} in {timeout} s"
        time.sleep(0.05)


@pytest.mark.e2e
@pytest.mark.parametrize("when", ["importing", "scoring", "waiting"])
def test_watch_started_with_sigint_ignored_stops_on_it_within_10s_leaving_eval_jsonl_whole(run, tmp_path, when):
    """`python scripts/eval.py --watch OUT &` in a script starts with SIGINT ignored, which Python keeps: kill -INT
    must stop it wherever it is, the seconds of imports included (a signal there used to be lost)."""
    out_dir = tmp_path / "run"
    for step in (10, 20):
        save(out_dir, step)
    lines = tmp_path / "output"  # stdout and stderr (loading ..., lm-eval's progress bars), unbuffered
    with open(lines, "w") as output:
        child = subprocess.Popen([sys.executable, "scripts/eval.py", "--watch", str(out_dir), "--data_dir",
                                  str(run / "tasks"), "--tasks", "hellaswag", "--device", "cpu", "--poll", "60"],
                                 cwd=REPO, stdout=output, stderr=output,
                                 preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        marker = {"importing": None, "scoring": "loading ", "waiting": "watch: step 20 scored"}[when]
        wait_for(lambda: sigint_heard(child.pid), "SIGINT handler")
        if marker:
            wait_for(lambda: marker in lines.read_text(), repr(marker))
        else:  # still importing torch and lm-eval, seconds before the first line
            assert "watch:" not in lines.read_text()
        child.send_signal(signal.SIGINT)
        sent = time.time()
        child.wait(timeout=60)
        assert time.time() - sent < 10 and child.returncode == 130 and "Traceback" not in lines.read_text(), lines.read_text()
    finally:
        child.kill()
    records = [json.loads(line) for line in (out_dir / "eval.jsonl").read_text().splitlines()] \
        if (out_dir / "eval.jsonl").exists() else []  # every line whole, oldest checkpoint first
    assert [r["iter"] for r in records] == [10, 20][:len(records)] and (when != "waiting" or len(records) == 2)
    assert ("watch: stopped by SIGINT" in lines.read_text()) == (when != "importing")


def task_folders(temporary):
    """tempfile's folders (tmp...) in temporary, where torch keeps a cache folder of its own besides."""
    return [p for p in temporary.iterdir() if p.name.startswith("tmp")]


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])  # SIGTERM: how scripts/ladder.py stops its eval.py
def test_a_stop_while_one_checkpoint_is_scored_writes_nothing_and_leaves_no_temporary_folder(run, tmp_path, sig):
    """Ctrl-C while lm-eval scores: one line, exit status 130, no result file, and its temporary task folder
    (tempfile's, under TMPDIR) removed, as an immediate exit would not; a SIGTERM's alike, exit status 143."""
    temporary, out_dir = tmp_path / "tmp", tmp_path / "run"
    temporary.mkdir()
    out_dir.mkdir()
    shutil.copy(run / "run" / "ckpt_20.pt", out_dir)
    lines = tmp_path / "output"
    with open(lines, "w") as output:
        child = subprocess.Popen([sys.executable, "scripts/eval.py", str(out_dir / "ckpt_20.pt"), "--data_dir",
                                  str(run / "tasks"), "--tasks", ",".join(lm_eval_adapter.PAPER_TASKS), "--device",
                                  "cpu"],
                                 cwd=REPO, stdout=output, stderr=output, env={**os.environ, "TMPDIR": str(temporary)})
    try:
        wait_for(lambda: task_folders(temporary), "temporary task folder")
        child.send_signal(sig)
        child.wait(timeout=60)
    finally:
        child.kill()
    text = lines.read_text()
    assert child.returncode == 128 + sig and "Traceback" not in text, text
    assert text.strip().splitlines()[-1] == f"eval.py: stopped by {sig.name} before writing anything"
    assert not task_folders(temporary) and [p.name for p in out_dir.iterdir()] == ["ckpt_20.pt"]


def test_an_export_scores_the_same_under_lm_evals_hf_model(run, tmp_path, capsys):
    from lm_eval.models.huggingface import HFLM
    folder = str(tmp_path / "hf")
    hf.export(str(run / "run" / "ckpt_20.pt"), folder, dtype=torch.float32, log=lambda m: None)
    tasks = ["hellaswag", "piqa", "lambada_openai"]
    theirs = lm_eval_adapter.evaluate(HFLM(pretrained=folder, dtype="float32", device="cpu", batch_size=8), tasks,
                                      str(run / "tasks"))
    lm = lm_eval_adapter.GPTLM(tiny_model(20), BYTES, "cpu", torch.no_grad())
    ours = lm_eval_adapter.evaluate(lm, tasks, str(run / "tasks"))
    eval_script.main([folder, "--data_dir", str(run / "tasks"), "--tasks", ",".join(tasks), "--encoding", "bytes",
                      "--device", "cpu"])
    exported = json.loads((tmp_path / "hf.eval.json").read_text())["results"]
    # scored again on one task: a folder's file is written anew, not merged (an export over it is another model);
    # without --encoding, through the folder's own tokenizer.json, with the same scores
    eval_script.main([folder, "--data_dir", str(run / "tasks"), "--tasks", "piqa", "--device", "cpu"])
    assert json.loads((tmp_path / "hf.eval.json").read_text())["results"] == {"piqa": exported["piqa"]}
    os.remove(os.path.join(folder, "tokenizer.json"))
    with pytest.raises(SystemExit, match="^1$"):
        eval_script.main([folder, "--data_dir", str(run / "tasks"), "--tasks", "piqa", "--device", "cpu"])
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {folder} has 257 tokens, not GPT-2's 50257, and no tokenizer.json: pass --encoding (bytes, gpt2 or "
        "the run's .tiktoken file)")
    for task in tasks:
        assert theirs[task].get("chance") == ours[task].get("chance") == exported[task].get("chance")
        for metric in ("acc", "acc_norm", "perplexity"):
            if metric in theirs[task]:
                assert theirs[task][metric] == pytest.approx(ours[task][metric], rel=1e-4), (task, metric)
                assert exported[task][metric] == pytest.approx(ours[task][metric], rel=1e-4), (task, metric)


def test_eval_with_no_checkpoint_advises_a_command_eval_accepts(tmp_path, capsys):
    """It used to suggest --out_dir / --init_from, which eval.py rejects: the advice now ends with an eval.py call."""
    eval_script = load_script("eval_script", "scripts/eval.py")
    for source in (tmp_path, tmp_path / "missing"):
        with pytest.raises(SystemExit) as e:
            eval_script.main([str(source), "--device", "cpu"])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 1 and err.startswith(f"error: {source} ") and "--out_dir" not in err
        suggested = shlex.split(err.rsplit("then python ", 1)[1])
        assert suggested[0] == "scripts/eval.py"
        eval_script.parse_args(suggested[1:])  # what it suggests parses (a SystemExit would fail the test)


def test_next_line_writes_two_four_way_tasks_of_the_val_split_that_lm_eval_scores(tmp_path):
    """data/quickstart/next_line.py: from a val.bin of byte-level files, examples whose answer is the true next
    line (without its indentation, which ends the context), whose three others are other files' lines, that
    fit the tiny models' 128 bytes; the same file on a second run; next_line_swaps, whose others are the answer
    with two neighbouring characters swapped; and tasks lm-eval scores through the adapter."""
    files = ["\n".join(f"    value_{f}_{i} = compute({i}, {f})" for i in range(30)) for f in range(4)]
    tokens = []
    for text in files:
        tokens += list(text.encode()) + [256]
    np.array(tokens, dtype=np.uint16).tofile(tmp_path / "val.bin")
    next_line = load_script("next_line", "data/quickstart/next_line.py")
    next_line.main(["--data_dir", str(tmp_path), "--out_dir", str(tmp_path / "task"), "-n", "40"])
    written = (tmp_path / "task" / "next_line.jsonl").read_text()
    examples = [json.loads(line) for line in written.splitlines()]
    assert len(examples) == 40
    for e in examples:
        answer = e["choices"][e["label"]]
        source = next(text for text in files if e["context"] + answer in text)  # the context's true next line
        assert e["context"].endswith("\n    ") and len(e["context"]) + max(map(len, e["choices"])) < 128
        assert len(set(e["choices"])) == 4 and all(c not in source for c in e["choices"] if c != answer)
    next_line.main(["--data_dir", str(tmp_path), "--out_dir", str(tmp_path / "again"), "-n", "40"])
    assert (tmp_path / "again" / "next_line.jsonl").read_text() == written
    swaps = [json.loads(line) for line in (tmp_path / "task" / "next_line_swaps.jsonl").read_text().splitlines()]
    assert 0 < len(swaps) <= 40
    for e in swaps:  # next_line's context and answer; the others the answer with one neighbouring pair swapped
        answer = e["choices"][e["label"]]
        assert any(e["context"] + answer in text for text in files) and len(set(e["choices"])) == 4
        for other in (c for c in e["choices"] if c != answer):
            i = next(k for k in range(len(answer)) if other[k] != answer[k])
            assert other == answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:]
    lm = lm_eval_adapter.GPTLM(tiny_model(), BYTES, "cpu", torch.no_grad())
    scored = lm_eval_adapter.evaluate(lm, ["next_line", "next_line_swaps"], str(tmp_path), [str(tmp_path / "task")])
    assert scored["next_line"]["n"] == 40 and 0 <= scored["next_line"]["acc_norm"] <= 1
    assert scored["next_line"]["chance"] == scored["next_line_swaps"]["chance"] == 0.25  # four choices each
    assert scored["next_line_swaps"]["n"] == len(swaps) and scored["next_line_swaps"]["acc"] == pytest.approx(
        scored["next_line_swaps"]["acc_norm"])  # the choices are as long as each other
    (tmp_path / "task").rename(tmp_path / "moved")  # its configs name the files where they were written
    with pytest.raises(lm_eval_adapter.HarnessError, match=r"^task next_line reads .*/task/next_line.jsonl, which is "
                                                           r"not there: write its config .* again \(for next_line"):
        lm_eval_adapter.check_tasks(["next_line"], str(tmp_path), [str(tmp_path / "moved")])


def scored(out_dir, step):
    return json.loads((out_dir / f"ckpt_{step}.eval.json").read_text())


def test_eval_json_merges_each_call_and_says_how_each_task_was_scored(run, tmp_path, capsys):
    """Scoring a checkpoint on piqa after hellaswag (docs/scaling_ladder.md's "Scoring apart") keeps hellaswag, an
    eval.json from before scored_with included; a task scored again replaces its entry. Each task says its --limit
    and data by content (scored_with), and unscored (the ladder's check) names those scored otherwise or unknown."""
    out_dir, tasks = tmp_path / "run", str(run / "tasks")
    save(out_dir, 10)
    params = tiny_model().get_num_params(non_embedding=False)
    (out_dir / "ckpt_10.eval.json").write_text(json.dumps({  # as eval.py wrote it before: one limit for the file
        "source": str(out_dir), "iter": 10, "params": params, "limit": None, "results": {"hellaswag": {"n": 8}}}))
    eval_script.main([str(out_dir), "--data_dir", tasks, "--tasks", "piqa", "--limit", "3", "--device", "cpu"])
    assert capsys.readouterr().out.endswith(f"wrote {out_dir / 'ckpt_10.eval.json'} (kept its earlier hellaswag)\n")
    record = scored(out_dir, 10)
    assert record["results"]["hellaswag"] == {"n": 8} and record["results"]["piqa"]["n"] == 3
    piqa = run / "tasks" / "piqa.jsonl"
    assert record["scored_with"] == {"piqa": {"limit": 3, "data": [{"path": str(piqa), "sha256": hashlib.sha256(
        piqa.read_bytes()).hexdigest()}]}}  # hellaswag's is unknown
    wanted = lambda limit, data_dir=tasks: eval_script.scored_with(["hellaswag", "piqa"], data_dir, [], limit)
    assert eval_script.unscored(record, wanted(3)) == ["hellaswag"] and eval_script.unscored(record, wanted(None)) == [
        "hellaswag", "piqa"]
    eval_script.main([str(out_dir), "--data_dir", tasks, "--tasks", "hellaswag,piqa", "--device", "cpu"])
    record = scored(out_dir, 10)
    assert [record["results"][t]["n"] for t in ("hellaswag", "piqa")] == [8, 8] and eval_script.unscored(
        record, wanted(None)) == []
    made_up = tmp_path / "made_up"  # other examples, as prepare.py --synthetic writes them
    made_up.mkdir()
    for task in ("hellaswag", "piqa"):
        bins.write_jsonl_atomic(lm_eval_adapter.task_file(str(made_up), task), prepare_script.synthetic(task, 8, 1))
    assert eval_script.unscored(record, wanted(None, str(made_up))) == ["hellaswag", "piqa"]
    shutil.copytree(tasks, tmp_path / "moved")  # the same files elsewhere (a volume mounted at another path)
    assert eval_script.unscored(record, wanted(None, str(tmp_path / "moved"))) == []


def test_two_calls_merging_into_one_eval_json_take_turns(tmp_path):
    """Two eval.py calls on one checkpoint: the second's read-merge-write waits for the first's, which would
    otherwise drop the tasks written between its read and its write."""
    import threading
    from trainer import runlock
    out = tmp_path / "ckpt_10.eval.json"
    info, args = {"out": str(out), "iter": 10, "params": 5}, eval_script.parse_args([str(tmp_path), "--tasks", "piqa"])
    with runlock.merging(str(out)):  # the first call, between its read and its write
        second = threading.Thread(target=eval_script.write_results, args=(args, info, {"piqa": {"n": 2}}))
        second.start()
        second.join(timeout=0.5)
        assert second.is_alive() and not out.exists()
        bins.write_json_atomic(str(out), {"iter": 10, "params": 5, "results": {"hellaswag": {"n": 8}}})
    second.join(timeout=10)
    assert scored(tmp_path, 10)["results"] == {"hellaswag": {"n": 8}, "piqa": {"n": 2}}


def test_a_full_disk_at_the_write_is_one_line_and_the_earlier_file_stays(tmp_path, monkeypatch, capsys):
    out = tmp_path / "ckpt_10.eval.json"
    out.write_text(json.dumps({"iter": 10, "params": 5, "results": {"hellaswag": {"n": 8}}}))

    def full(path, obj):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(eval_script.bins, "write_json_atomic", full)
    args = eval_script.parse_args([str(tmp_path), "--tasks", "piqa"])
    with pytest.raises(SystemExit, match="^1$"):
        eval_script.write_results(args, {"out": str(out), "iter": 10, "params": 5}, {"piqa": {"n": 2}})
    assert capsys.readouterr().err == (f"error: cannot write {out}: No space left on device; the scores above are not "
                                       "saved: free space or make its folder writable, then rerun\n")
    assert scored(tmp_path, 10)["results"] == {"hellaswag": {"n": 8}}


@pytest.mark.parametrize("before, note", [
    ('{"iter": 10, "params": 1, "results": {"piqa": {"n": 8}}}', "held another model's scores: written anew"),
    ('{"iter": 10, "resu', "does not read as JSON (Unterminated string")])
def test_an_eval_json_of_another_model_or_cut_short_is_written_anew_with_a_note(run, tmp_path, capsys, before, note):
    out_dir = tmp_path / "run"
    save(out_dir, 10)
    (out_dir / "ckpt_10.eval.json").write_text(before)
    eval_script.main([str(out_dir), "--data_dir", str(run / "tasks"), "--tasks", "hellaswag", "--limit", "2",
                      "--device", "cpu"])
    assert note in capsys.readouterr().err and set(scored(out_dir, 10)["results"]) == {"hellaswag"}


@pytest.mark.parametrize("case", ["checkpoint", "checkpoint_folder", "missing", "no_run"])
def test_watch_refuses_what_is_not_a_runs_folder_in_one_line(tmp_path, capsys, case):
    """--watch of a typo waited forever, and of a checkpoint file exited 0 having scored nothing."""
    save(tmp_path / "run", 10)
    (tmp_path / "run" / "ckpt_20").mkdir()  # a sharded checkpoint's folder
    (tmp_path / "run" / "ckpt_20" / checkpoint.TRAINER_STATE).touch()
    (tmp_path / "empty").mkdir()
    path, expected = {
        "checkpoint": (tmp_path / "run" / "ckpt_10.pt", " is a checkpoint, not a run's folder: score it once without "
                                                        f"--watch (python scripts/eval.py {tmp_path}/run/ckpt_10.pt)"),
        "checkpoint_folder": (tmp_path / "run" / "ckpt_20", " is a checkpoint, not a run's folder"),
        "missing": (tmp_path / "typo", ": no such folder: pass the out_dir of a run"),
        # cut before the log's name, which test_metrics_interface.py's guard against log-parsing regexes looks for
        "no_run": (tmp_path / "empty", " holds no run (no checkpoint, no train")}[case]
    with pytest.raises(SystemExit) as e:
        eval_script.main(["--watch", str(path), "--device", "cpu", "--poll", "0"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and len(err) == 1 and err[0].startswith(f"error: --watch {path}{expected}"), err


@pytest.mark.parametrize("kind", ["hf", "checkpoint"])
def test_an_encoding_of_more_tokens_than_the_model_is_one_line(run, tmp_path, capsys, gpt2_rank_file, kind):
    """A Hugging Face folder's model or a checkpoint's (whose scoring was an IndexError mid-way, and whose samples
    were garbage with exit status 0): sample.check_encoding_fits, for eval.py and sample.py alike."""
    folder = str(tmp_path / "hf") if kind == "hf" else str(run / "run" / "ckpt_20.pt")
    if kind == "hf":
        hf.export(str(run / "run" / "ckpt_20.pt"), folder, dtype=torch.float32, log=lambda m: None)
    with pytest.raises(SystemExit) as e:
        eval_script.main([folder, "--data_dir", str(run / "tasks"), "--tasks", "piqa", "--device", "cpu",
                          "--encoding", gpt2_rank_file])
    rows = 257 if kind == "hf" else ARGS["vocab_size"]  # the export drops the padding rows
    assert e.value.code == 1 and capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {gpt2_rank_file} has 50257 tokens but the model {rows}: pass the --encoding it was trained with "
        "(bytes, gpt2 or the run's .tiktoken file)")


def test_a_file_that_is_not_a_checkpoint_is_named_before_the_tasks(tmp_path, capsys):
    """eval.py README.md said the tasks' files were missing (they were checked first), then failed to load it."""
    notes = tmp_path / "notes.md"
    notes.write_text("# not a checkpoint\n")
    with pytest.raises(SystemExit) as e:
        eval_script.main([str(notes), "--data_dir", str(tmp_path / "no_tasks"), "--device", "cpu"])
    assert e.value.code == 1 and capsys.readouterr().err.strip().splitlines() == [
        f"error: {notes} is not a checkpoint, or one cut short (torch.save writes a whole zip archive): give eval.py a "
        "ckpt_<N>.pt, a run's out_dir or a Hugging Face folder"]
