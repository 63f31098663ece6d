"""sample.py: the KV cache gives the logits a full forward gives, the newest loadable checkpoint is
used (falling back past a truncated one), and ids outside the encoding are never sampled."""
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from trainer import bins, checkpoint, checkpointer, tokenizer
import sample
from conftest import REPO, run_here
from model import GPT, GPTConfig, KVCache

# vocab_size 320 over the 257 ids of 'bytes': an untrained model samples ids the encoding lacks
MODEL_ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=320, bias=False)


def tiny_model(seed=0, position="learned"):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**MODEL_ARGS, position=position)).eval()


@torch.no_grad()
@pytest.mark.parametrize("position", ["learned", "rope"])
def test_cached_logits_match_full_forward(position):
    model = tiny_model(position=position)
    idx = torch.randint(0, 320, (2, 20), generator=torch.Generator().manual_seed(1))
    caches = [KVCache(model.config.block_size) for _ in model.transformer.h]
    logits, _ = model(idx[:, :5], kv_caches=caches)  # a prompt, then one token at a time
    for t in range(5, 20):
        full, _ = model(idx[:, :t])
        torch.testing.assert_close(logits, full, rtol=1e-5, atol=1e-5)
        logits, _ = model(idx[:, t:t + 1], kv_caches=caches)
    # several new tokens at once after a cached prefix: the explicit-mask path
    caches = [KVCache(model.config.block_size) for _ in model.transformer.h]
    model(idx[:, :9], kv_caches=caches)
    chunk, _ = model(idx[:, 9:14], kv_caches=caches)
    full, _ = model(idx[:, :14])
    torch.testing.assert_close(chunk, full, rtol=1e-5, atol=1e-5)


@torch.no_grad()
@pytest.mark.parametrize("position", ["learned", "rope"])
def test_greedy_generation_with_the_cache_equals_without(position):
    model = tiny_model(position=position)
    prompt = torch.randint(0, 320, (2, 6), generator=torch.Generator().manual_seed(1))
    greedy = [model.generate(prompt, 40, top_k=1, use_cache=use_cache) for use_cache in (True, False)]
    assert torch.equal(*greedy)  # 46 tokens: past block_size 32, the window slides


@pytest.fixture
def run_dir(tmp_path):
    """Checkpoints at steps 3 and 7 of a tiny model, its data dir holding only meta.json."""
    data = tmp_path / "data"
    data.mkdir()
    bins.write_meta(str(data), {"encoding": "bytes", "vocab_size": 257})
    out = tmp_path / "out"
    for step in (3, 7):
        state = {"model": tiny_model(seed=step).state_dict(), "model_args": MODEL_ARGS, "iter_num": step,
                 "config": {"data_dir": str(data)}, "encoding": None}
        checkpoint.save_checkpoint(state, str(out), step, keep_last_n=0, log=lambda m: None)
    return out


@pytest.mark.e2e  # a signal to a real process
def test_a_sigint_while_sampling_is_one_line(run_dir, tmp_path):
    """Ctrl-C while it samples was a KeyboardInterrupt traceback from deep in torch: now one line, exit status 130."""
    said = tmp_path / "stderr"  # where sample.py says what it loads and samples
    with open(said, "w") as f:
        job = subprocess.Popen([sys.executable, "sample.py", f"--out_dir={run_dir}", "--device=cpu",
                                "--max_new_tokens=1000000", "--num_samples=1"], cwd=REPO, stdout=subprocess.DEVNULL,
                               stderr=f)
    try:
        deadline = time.time() + 120
        while "sampling 1 x 1000000 tokens" not in said.read_text():
            assert time.time() < deadline and job.poll() is None, said.read_text()
            time.sleep(0.05)
        job.send_signal(signal.SIGINT)
        job.wait(timeout=60)
    finally:
        job.kill()
    lines = said.read_text().splitlines()
    assert job.returncode == 130 and "Traceback" not in said.read_text() and lines[-1] == (
        "sample.py: stopped by SIGINT (the samples above are whole where a line of dashes ends them)"), lines


def test_falls_back_past_a_truncated_checkpoint_and_never_samples_padding(run_dir, tmp_path):
    newest = run_dir / "ckpt_7.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("def main():")
    result = run_here(["sample.py", "--device=cpu", f"--out_dir={run_dir}", f"--start=FILE:{prompt}", "--num_samples=2",
                       "--max_new_tokens=60", "--temperature=1.0", "--top_k=0"])
    assert result.returncode == 0, result.stderr
    assert "ckpt_7.pt" in result.stderr and "falling back" in result.stderr and "from step 3" in result.stderr
    assert "Traceback" not in result.stderr
    samples = result.stdout.split("---------------\n")
    assert len(samples) == 3 and all(s.startswith("def main():") for s in samples[:2])
    # 63 of the 320 ids are outside 'bytes': their logits are masked, so no '<|?ID|>' placeholder is sampled
    assert "<|?" not in result.stdout


def test_init_from_picks_a_checkpoint(run_dir, capsys):
    sample.main([f"--init_from={run_dir / 'ckpt_3.pt'}", "--device=cpu", "--num_samples=1", "--max_new_tokens=5"])
    assert "from step 3" in capsys.readouterr().err


def test_encoding_falls_back_to_the_checkpoint_then_the_flag(run_dir, capsys):
    (run_dir.parent / "data" / "meta.json").unlink()
    with pytest.raises(SystemExit) as e:
        sample.main([f"--out_dir={run_dir}", "--device=cpu"])
    assert e.value.code == 1 and "pass --encoding" in capsys.readouterr().err
    sample.main([f"--out_dir={run_dir}", "--device=cpu", "--encoding=bytes", "--num_samples=1",
                 "--max_new_tokens=5", "--start=x"])
    assert capsys.readouterr().out.startswith("x")


def test_a_mixture_runs_encoding_is_its_own_record_not_its_unread_data_dirs(tmp_path):
    """A run on a data_mixture never read data_dir, whose meta.json may say another encoding of the same size."""
    bins.write_meta(str(tmp_path), {"encoding": "gpt2", "vocab_size": 50257})
    state = {"config": {"data_dir": str(tmp_path), "data_mixture": {"data/quickstart": 1.0}}, "encoding": "bytes"}
    args = sample.parse_args([])
    assert sample.encoding_name(args, state) == "bytes"
    del state["config"]["data_mixture"]  # one dataset: its data_dir's meta.json is what it read
    assert sample.encoding_name(args, state) == "gpt2"


def test_a_meta_json_without_an_encoding_defers_to_the_checkpoint_and_one_cut_short_is_one_line(tmp_path, capsys):
    state = {"config": {"data_dir": str(tmp_path)}, "encoding": "bytes"}
    args = sample.parse_args([])
    (tmp_path / "meta.json").write_text('{"vocab_size": 257}')
    assert sample.encoding_name(args, state) == "bytes"
    (tmp_path / "meta.json").write_text('{"encoding": "gp')
    with pytest.raises(SystemExit) as e:
        sample.encoding_name(args, state)
    [line] = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and line.startswith("error: ") and "meta.json does not read as JSON" in line


def test_a_rank_file_that_moved_is_found_by_the_hash_the_checkpoint_recorded(tmp_path, capsys):
    """A volume mounted elsewhere moves the rank file the checkpoint names: its hash finds the copy beside the run."""
    ranks, run = tmp_path / "ranks.tiktoken", tmp_path / "run"
    tokenizer.get_encoding("bytes").write_ranks(str(ranks))
    state = {"config": {}, **checkpointer.RunState({}, **tokenizer.describe(str(ranks))).state_dict()}  # train.py's
    assert state["encoding"] == str(ranks) and len(state["encoding_sha256"]) == 64
    run.mkdir()
    ranks.rename(run / "mine.tiktoken")
    args = sample.parse_args([f"--out_dir={run}"])
    assert sample.encoding_name(args, state) == str(run / "mine.tiktoken")
    (run / "mine.tiktoken").unlink()
    with pytest.raises(SystemExit) as e:
        sample.encoding_name(args, state)
    [line] = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 1 and line.startswith("error: the checkpoint: the rank file ") and "copy it to" in line


def test_reads_an_fsdp_runs_sharded_checkpoint(run_dir, capsys):
    """ckpt_9/ (a folder, as train.py writes under FSDP) holds step 7's weights: the same greedy text."""
    model = tiny_model(seed=7)
    trainer_state = {"model_args": MODEL_ARGS, "iter_num": 9, "config": {}, "encoding": "bytes"}
    checkpoint.save_sharded(model, torch.optim.AdamW(model.parameters()), trainer_state, str(run_dir), 9,
                            keep_last_n=0, log=lambda m: None)
    greedy = ["--device=cpu", "--num_samples=1", "--max_new_tokens=20", "--top_k=1"]
    sample.main([f"--out_dir={run_dir}", *greedy])
    from_folder = capsys.readouterr()
    sample.main([f"--init_from={run_dir / 'ckpt_7.pt'}", *greedy])
    assert "from step 9" in from_folder.err and from_folder.out == capsys.readouterr().out


def test_a_sharded_checkpoint_whose_weights_are_not_finite_is_one_line(run_dir, capsys):
    """No save writes a NaN weight: in a shard it is damage, which sample.py (and eval.py, a resume) must not use."""
    model = tiny_model(seed=7)
    with torch.no_grad():
        next(model.parameters())[0] = float("nan")
    trainer_state = {"model_args": MODEL_ARGS, "iter_num": 9, "config": {}, "encoding": "bytes"}
    checkpoint.save_sharded(model, torch.optim.AdamW(model.parameters()), trainer_state, str(run_dir), 9,
                            keep_last_n=0, log=lambda m: None)
    with pytest.raises(SystemExit, match="^1$"):
        sample.main([f"--out_dir={run_dir}", "--device=cpu", "--num_samples=1", "--max_new_tokens=2"])
    assert re.search(r"^error: cannot load .*ckpt_9: its weight \S+ is not finite, which no save writes: the shards "
                     r"are damaged; move that checkpoint aside", capsys.readouterr().err.strip().splitlines()[-1])


@pytest.mark.parametrize("case, args, message", [
    ("empty", [], "no checkpoint (ckpt_<N>.pt or ckpt_<N>/) in"),
    ("a checkpoint", [], "is a file: pass a checkpoint as --init_from"),
    ("corrupt", [], "none of the 2 checkpoints"),
    ("ok", ["--init_from=/nonexistent/ckpt_5.pt"], "no such checkpoint"),
    ("ok", ["--start=FILE:/nonexistent.txt"], "No such file"),
    ("ok", ["--start=FILE:{ckpt}"], "ckpt_3.pt: the file is not UTF-8 text"),  # a binary file
    ("ok", ["--temperature=0"], "--temperature must be a finite number > 0, e.g. 0.8; got 0.0"),
    ("ok", ["--temperature=nan"], "--temperature must be a finite number > 0, e.g. 0.8; got nan"),
    ("ok", ["--temperature=inf"], "--temperature must be a finite number > 0, e.g. 0.8; got inf"),
    ("ok", ["--top_k=-1"], "--top_k must be at least 0, got -1"),
    # an encoding of more tokens than the model's 320 rows: garbage samples, exit 0, before
    ("ok", ["--encoding={ranks}"], "has 50257 tokens but the model 320: pass the --encoding it was trained with"),
])
def test_bad_input_is_one_line(run_dir, tmp_path, capsys, case, args, message, request):
    if case == "corrupt":
        for p in run_dir.glob("ckpt_*.pt"):
            p.write_bytes(b"not a checkpoint")
    out_dir = {"empty": tmp_path / "empty", "a checkpoint": next(run_dir.glob("ckpt_*.pt"))}.get(case, run_dir)
    with pytest.raises(SystemExit) as e:
        ranks = request.getfixturevalue("gpt2_rank_file") if any("{ranks}" in a for a in args) else None
        sample.main([f"--out_dir={out_dir}", "--device=cpu",
                     *(a.format(ckpt=run_dir / "ckpt_3.pt", ranks=ranks) for a in args)])
    err = capsys.readouterr().err
    assert e.value.code == 1 and message in err and "Traceback" not in err
