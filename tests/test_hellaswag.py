"""HellaSwag in the loop: scoring equals a plain per-ending computation on a model that has learnt the
answers, gives lm-eval's `hellaswag` task's acc and acc_norm on the same examples (its specification),
one and two processes agree, the in-loop evaluation logs and plots, and bad files are one line. The scripts
(prepare.py, train.py, plot_log.py) run in this interpreter; the two ranks are torchrun's processes."""
import json
import os
import random
import shutil
import time

import pytest
import torch
from torch.nn import functional as F

from trainer import bins, checkpoint, evaluation, metrics
from conftest import run_here
from conftest import torchrun as torchrun_
from model import GPT, GPTConfig, mask_padding
from trainer.tokenizer import get_encoding

POOL = ["apple pie", "river bank [title] now", "stone wall", "cloud nine", "green door", "paper boat"]
BYTES = get_encoding("bytes")
MODEL = ["--n_layer=2", "--n_head=2", "--n_embd=64", "--block_size=32", "--batch_size=16",
         "--gradient_accumulation_steps=1", "--warmup_iters=10", "--learning_rate=3e-3", "--eval_iters=2",
         "--log_interval=50", "--wandb_log=False"]


def write_examples(path, n=24):
    """HellaSwag's records as the hub holds them (lm-eval's preprocessing turns ' [title]' into '. ')."""
    rng = random.Random(0)
    examples = [{"activity_label": "Quiz", "ctx_a": f"Q{i:02d}", "ctx_b": "says", "endings": rng.sample(POOL, 4),
                 "label": str(rng.randrange(4))} for i in range(n)]
    path.write_text("".join(json.dumps(ex) + "\n" for ex in examples))
    return evaluation.read_hellaswag_jsonl(str(path))


def run(*args, torchrun=0):
    """A script here (run_here), or under torchrun with that many processes."""
    if torchrun:
        return torchrun_(["--standalone", f"--nproc_per_node={torchrun}"], args, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return run_here(args, env={"OMP_NUM_THREADS": "1"})


@pytest.fixture(scope="module")
def learnt(tmp_path_factory):
    """A tiny byte-level model trained on 'context + correct ending' documents, with HellaSwag in the loop."""
    folder = tmp_path_factory.mktemp("hellaswag")
    examples = write_examples(folder / "hellaswag_val.jsonl")
    docs = [{"text": f"{query} {endings[label]}"} for query, endings, label in examples] * 150
    (folder / "docs.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    data = folder / "data"
    prepared = run("data/pile/prepare.py", "--source", str(folder / "docs.jsonl"), "--data_dir", str(data),
                   "--encoding", "bytes", "--val_fraction", "0")
    assert prepared.returncode == 0, prepared.stderr
    shutil.copy(data / "train.bin", data / "val.bin")  # every document is a duplicate: no split to hold out
    meta = bins.read_meta(data)  # and meta.json says so, or train.py refuses a val.bin of another length
    meta["splits"]["val"] = dict(meta["splits"]["train"])
    bins.write_meta(data, meta)
    result = run("train.py", "config/train_tiny.py", *MODEL, f"--data_dir={data}", f"--out_dir={folder / 'run'}",
                 "--max_iters=300", "--lr_decay_iters=300", "--eval_interval=150", "--checkpoint_interval=300",
                 "--hellaswag_interval=150", f"--hellaswag_file={folder / 'hellaswag_val.jsonl'}")
    assert result.returncode == 0, result.stdout + result.stderr
    return folder, result.stdout


def load_model(folder):
    state = checkpoint.load_checkpoint(str(folder / "run" / "ckpt_300.pt"), log=lambda m: None)
    model = GPT(GPTConfig(**state["model_args"]))
    checkpoint.restore(state, model)
    return model.eval()


def plain_logprob(model, ctx, ending, n_tokens=0):
    """The ending's summed log-likelihood, one row at a time, no padding, over the first n_tokens logits."""
    ids = torch.tensor([ctx + ending])
    with torch.no_grad():
        logits = mask_padding(model(ids[:, :-1], every_position=True)[0][0], n_tokens)
    return F.log_softmax(logits, -1)[torch.arange(len(ids[0]) - 1), ids[0, 1:]][-len(ending):].sum().item()


def test_scoring_equals_a_plain_computation(learnt):
    folder, _ = learnt
    model = load_model(folder)
    examples = evaluation.load_hellaswag(str(folder / "hellaswag_val.jsonl"), BYTES)
    correct = correct_norm = 0
    for start in range(0, len(examples), 5):  # batches of 5, padded to the longest row
        logprobs = evaluation.ending_logprobs(model, examples[start:start + 5], 32, "cpu", torch.no_grad(), BYTES.n_vocab)
        for i, ex in enumerate(examples[start:start + 5]):
            plain = [plain_logprob(model, ex["ctx"], e, BYTES.n_vocab) for e in ex["endings"]]
            torch.testing.assert_close(logprobs[i], torch.tensor(plain), rtol=1e-5, atol=1e-5)
            correct += max(range(4), key=lambda k: plain[k]) == ex["label"]
            correct_norm += max(range(4), key=lambda k: plain[k] / ex["chars"][k]) == ex["label"]
    result = evaluation.hellaswag_accuracy(model, examples, 32, "cpu", torch.no_grad(), n_tokens=BYTES.n_vocab)
    assert result == {"acc": correct / 24, "acc_norm": correct_norm / 24, "n": 24}
    assert result["acc_norm"] >= 0.75  # it has learnt the answers: chance is 0.25
    assert evaluation.hellaswag_accuracy(model, examples, 32, "cpu", torch.no_grad(), limit=10)["n"] == 10


def test_the_in_loop_scorer_gives_lm_evals_hellaswag_numbers(learnt, tmp_path):
    from trainer import lm_eval_adapter
    folder, _ = learnt
    model = load_model(folder)
    (tmp_path / "hellaswag.jsonl").write_text((folder / "hellaswag_val.jsonl").read_text())
    t0 = time.time()
    lm = lm_eval_adapter.GPTLM(model, BYTES, "cpu", torch.no_grad())
    theirs = lm_eval_adapter.evaluate(lm, ["hellaswag"], str(tmp_path))
    t1 = time.time()
    examples = evaluation.load_hellaswag(str(folder / "hellaswag_val.jsonl"), BYTES)
    ours = evaluation.hellaswag_accuracy(model, examples, 32, "cpu", torch.no_grad(), n_tokens=BYTES.n_vocab)
    print(f"lm-eval {t1 - t0:.2f}s, in-loop {time.time() - t1:.2f}s for 24 examples")
    assert (theirs["hellaswag"]["acc"], theirs["hellaswag"]["acc_norm"], theirs["hellaswag"]["n"]) == \
           (ours["acc"], ours["acc_norm"], ours["n"])


def test_in_loop_evaluation_is_logged_and_plotted(learnt, tmp_path):
    folder, log = learnt
    scored = metrics.read(folder / "run", "hellaswag")
    # not at iteration 0: random weights score 25% by construction, and a 6.7B run would wait minutes for it
    assert [r["iter"] for r in scored] == [150, 300] and scored[-1]["n"] == 24 and 0 <= scored[-1]["acc_norm"] <= 1
    assert "hellaswag: skipped at iteration 0 of a run from scratch" in log
    assert "hellaswag iter 300: acc_norm" in log and "(24 examples" in log  # and in words, for people
    result = run("scripts/plot_log.py", str(folder / "run"), "--out", str(tmp_path / "plot.png"))
    assert result.returncode == 0 and (tmp_path / "plot.png").stat().st_size > 10_000


TWO_RANKS = """
import json, os, sys
import torch, torch.distributed as dist
sys.path.insert(0, os.getcwd())
from model import GPT, GPTConfig
from trainer import checkpoint, evaluation, metrics
from trainer.tokenizer import get_encoding
dist.init_process_group("gloo")
state = checkpoint.load_checkpoint(sys.argv[1], log=lambda m: None)
model = GPT(GPTConfig(**state["model_args"]))
checkpoint.restore(state, model)
examples = evaluation.load_hellaswag(sys.argv[2], get_encoding("bytes"))
result = evaluation.hellaswag_accuracy(model, examples, 32, "cpu", torch.no_grad(), 0, 257)
if dist.get_rank() == 0:
    print(json.dumps(result))
dist.destroy_process_group()
"""


@pytest.mark.e2e  # torchrun's two ranks
def test_prepared_file_one_and_two_processes_agree(learnt, tmp_path):
    folder, log = learnt
    prepared = run("data/hellaswag/prepare.py", "--source", str(folder / "hellaswag_val.jsonl"),
                   "--data_dir", str(folder / "data"))
    assert prepared.returncode == 0 and "24 examples, bytes encoding" in prepared.stdout, prepared.stderr
    model = load_model(folder)
    one = [evaluation.hellaswag_accuracy(model, evaluation.load_hellaswag(str(path), BYTES), 32, "cpu", torch.no_grad(),
                                         n_tokens=257)
           for path in (folder / "data" / evaluation.HELLASWAG_FILE, folder / "hellaswag_val.jsonl")]
    (tmp_path / "two_ranks.py").write_text(TWO_RANKS)
    prepared_file = str(folder / "data" / evaluation.HELLASWAG_FILE)
    two = run(str(tmp_path / "two_ranks.py"), str(folder / "run" / "ckpt_300.pt"), prepared_file, torchrun=2)
    assert two.returncode == 0, two.stderr
    assert one[0] == one[1] == json.loads(two.stdout) and one[0]["n"] == 24
    in_loop = next(line for line in log.splitlines() if line.startswith("hellaswag iter 300:"))
    assert f"acc_norm {one[0]['acc_norm']:.4f}" in in_loop  # the same checkpoint, scored in the loop


@pytest.mark.parametrize("case,expected", [("three_endings", "and four 'endings'"),
                                           ("label", "label 7 is not 0-3"), ("missing", "no HellaSwag file")])
def test_a_bad_file_is_one_line_and_turns_the_evaluation_off(learnt, tmp_path, case, expected):
    folder, _ = learnt
    bad = tmp_path / "bad.jsonl"
    record = {"activity_label": "A", "ctx_a": "b", "ctx_b": "c", "endings": ["d", "e", "f", "g"], "label": 0}
    if case == "three_endings":
        bad.write_text(json.dumps(dict(record, endings=["d", "e", "f"])) + "\n")
    elif case == "label":
        bad.write_text(json.dumps(dict(record, label=7)) + "\n")
    with pytest.raises(evaluation.HellaSwagError) as e:
        evaluation.load_hellaswag(str(bad), BYTES)
    assert expected in str(e.value) and "\n" not in str(e.value)
    trained = run("train.py", "config/train_tiny.py", *MODEL, f"--data_dir={folder / 'data'}",
                  f"--out_dir={tmp_path / 'run'}", "--max_iters=2", "--eval_interval=0", "--hellaswag_interval=1",
                  f"--hellaswag_file={bad}")
    assert trained.returncode == 0 and "hellaswag iter" not in trained.stdout
    assert any(line.startswith("warning: ") and expected in line and line.endswith("HellaSwag evaluation is off for this run")
               for line in trained.stdout.splitlines())


def test_another_encoding_is_refused_at_start(learnt, tmp_path, gpt2_rank_file):
    folder, _ = learnt
    gpt2_file = tmp_path / "hellaswag.json"
    evaluation.write_hellaswag(str(gpt2_file), evaluation.read_hellaswag_jsonl(str(folder / "hellaswag_val.jsonl")),
                               get_encoding(gpt2_rank_file))
    result = run("train.py", "config/train_tiny.py", *MODEL, f"--data_dir={folder / 'data'}",
                 f"--out_dir={tmp_path / 'run'}", "--max_iters=2", "--hellaswag_interval=1",
                 f"--hellaswag_file={gpt2_file}")
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("error: hellaswag_file: ") and "tokenized with" in last


def test_a_prepared_file_is_checked_and_its_encoding_known_by_content(tmp_path, gpt2_rank_file):
    ranks = get_encoding(gpt2_rank_file)
    prepared = tmp_path / "hellaswag.json"
    evaluation.write_hellaswag(str(prepared), [("A man", ["sat.", "ran.", "flew.", "swam."], 1)], ranks)
    copy = tmp_path / "elsewhere.tiktoken"  # the same ranks under another name: the same encoding
    copy.write_bytes(open(gpt2_rank_file, "rb").read())
    assert len(evaluation.load_hellaswag(str(prepared), get_encoding(str(copy)))) == 1
    with pytest.raises(evaluation.EncodingMismatch, match="tokenized with"):
        evaluation.load_hellaswag(str(prepared), get_encoding("bytes"))
    data = json.loads(prepared.read_text())
    for field, value, expected in [("ctx", [50257], "token ids below 50257"), ("ctx", "A man", "token ids"),
                                   ("label", True, "label True"), ("endings", [[1], [2], [3], []], "empty ending"),
                                   ("chars", [4, 4, 5, 0], "empty ending")]:
        bad = tmp_path / f"bad_{field}.json"
        bad.write_text(json.dumps(dict(data, examples=[dict(data["examples"][0], **{field: value})])))
        with pytest.raises(evaluation.HellaSwagError, match=expected):
            evaluation.load_hellaswag(str(bad), ranks)


def test_examples_longer_than_the_context_window_are_counted_and_scored_on_their_last_tokens():
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=16, vocab_size=64, bias=False)).eval()
    def example(n_ctx, n_ending):
        return {"ctx": list(range(n_ctx)), "endings": [[40 + k] * n_ending for k in range(4)], "label": 0}

    examples = [example(5, 3), example(20, 3), example(2, 20)]  # fits; a long context; an ending longer than the window
    assert evaluation.hellaswag_truncation_note(examples[:1], 16) is None
    assert evaluation.hellaswag_truncation_note(examples, 16) == (
        "hellaswag: 2 of 3 examples are longer than block_size 16: they are scored on their last tokens, "
        "their contexts cut from the start")
    logprobs = evaluation.ending_logprobs(model, examples, 16, "cpu", torch.no_grad())
    for i, e in enumerate(examples):
        for k, ending in enumerate(e["endings"]):
            row = (e["ctx"] + ending)[-17:]  # what fits: block_size inputs and their targets
            scored = min(len(ending), 16)
            torch.testing.assert_close(logprobs[i, k].item(), plain_logprob(model, row[:-scored], row[-scored:]),
                                       rtol=1e-5, atol=1e-5)
