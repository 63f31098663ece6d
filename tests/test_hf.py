"""GPT-2 / Hugging Face in and out: imported weights compute what transformers computes, exports load in
transformers with the same logits and tokenizer, round trips are exact, and a run can start from any
weights. References are GPT2LMHeadModel(GPT2Config(...)) with random weights: nothing is downloaded."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers  # its model classes load on first use, not while pytest collects

from trainer import checkpoint, hf
from conftest import REPO, run_here
from model import GPT, GPTConfig
from test_train import TINY, train
from trainer.tokenizer import get_encoding

# the tiny runs, with the vocabulary left to the weights they start from
TINY_ANY_VOCAB = [a for a in TINY if not a.startswith("--vocab_size")]


def hf_model(vocab=100, seed=0, **extra):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=16, vocab_size=vocab,
                                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **extra)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf_gpt2")
    hf_model().save_pretrained(folder)
    return folder


def logits_of(model, x):
    with torch.no_grad():
        if isinstance(model, transformers.GPT2LMHeadModel):
            return model(x).logits
        return model(x, every_position=True)[0]


def train_from(out_dir, data_dir, *overrides):
    """A tiny run whose vocabulary comes from the weights it starts from (train_tiny.py sets 320)."""
    result = run_here(["train.py", "config/train_tiny.py", *TINY_ANY_VOCAB, f"--data_dir={data_dir}",
                       f"--out_dir={out_dir}", *overrides])
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def run_script(*args):
    return run_here(args)


def test_imported_gpt2_computes_what_transformers_does(hf_folder):
    reference = transformers.AutoModelForCausalLM.from_pretrained(hf_folder).eval()
    model = hf.from_pretrained(str(hf_folder)).eval()
    assert model.config.activation == "gelu_tanh" and model.config.vocab_size == 128 and model.config.n_tokens == 100
    x = torch.randint(0, 100, (3, 16), generator=torch.Generator().manual_seed(1))
    ours, theirs = logits_of(model, x), logits_of(reference, x)
    assert (ours[..., :100] - theirs).abs().max() <= 1e-4
    assert torch.isneginf(ours[..., 100:]).all()  # padding rows are never a token
    with torch.no_grad():
        their_loss = reference(x, labels=x).loss  # transformers shifts the labels itself
        _, our_loss = model(x[:, :-1], x[:, 1:])
    assert abs(their_loss.item() - our_loss.item()) <= 1e-5
    prompt = x[:, :4]
    with torch.no_grad():
        theirs = reference.generate(prompt, max_new_tokens=10, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 10, top_k=1), theirs)


def test_sharded_safetensors_and_pytorch_bin_folders_import_alike(tmp_path, hf_folder):
    reference = hf_model()
    reference.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text((hf_folder / "config.json").read_text())
    torch.save({k.removeprefix("transformer."): v for k, v in reference.state_dict().items()},  # old files: no prefix
               tmp_path / "bin" / "pytorch_model.bin")
    _, expected, _ = hf.load_weights(str(hf_folder))
    for folder in ("sharded", "bin"):
        _, weights, _ = hf.load_weights(str(tmp_path / folder))
        assert weights.keys() == expected.keys()
        assert all(torch.equal(weights[k], expected[k]) for k in weights), folder


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("tiny_run")
    train(out, data_dir, "--max_iters=4", "--bias=True")
    return out


def assert_export_matches(export_dir, model_args, weights):
    model = GPT(GPTConfig(**model_args))
    model.load_state_dict(weights)
    reference = transformers.AutoModelForCausalLM.from_pretrained(export_dir).eval()
    x = torch.randint(0, model_args["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(2))
    assert (logits_of(model.eval(), x) - logits_of(reference, x)).abs().max() <= 1e-4


def test_export_of_a_trained_checkpoint_loads_in_transformers(tmp_path, tiny_run):
    result = run_script("scripts/export_hf.py", str(tiny_run), str(tmp_path / "hf"), "--dtype", "float32")
    assert result.returncode == 0, result.stderr
    state = checkpoint.load_checkpoint(str(tiny_run / "ckpt_4.pt"), log=lambda m: None)
    assert_export_matches(tmp_path / "hf", state["model_args"], state["model"])
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["activation_function"] == "gelu" and config["vocab_size"] == 64
    assert (tmp_path / "hf" / "generation_config.json").exists()


def test_round_trip_is_exact(tmp_path, tiny_run):
    hf.export(str(tiny_run / "ckpt_4.pt"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    args, weights, _ = hf.load_weights(str(tmp_path / "hf"))
    original = torch.load(tiny_run / "ckpt_4.pt", weights_only=True)["model"]
    assert weights.keys() == original.keys()
    assert all(torch.equal(weights[k], original[k]) for k in original)
    assert GPTConfig(**args) == GPTConfig(**torch.load(tiny_run / "ckpt_4.pt", weights_only=True)["model_args"])


def test_bf16_export_without_biases_is_large_enough_to_shard(tmp_path, monkeypatch):
    """bias=False becomes zero biases (transformers' GPT-2 always has them); past SHARD_BYTES the
    weights go into shards with an index, which transformers follows."""
    model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, bias=False))
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": dict(
        n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, bias=False), "iter_num": 0},
        str(tmp_path / "run"), 0, keep_last_n=0, log=lambda m: None)
    monkeypatch.setattr(hf, "SHARD_BYTES", 20_000)
    hf.export(str(tmp_path / "run"), str(tmp_path / "hf"), log=lambda m: None)
    index = json.loads((tmp_path / "hf" / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32).eval()
    assert reference.transformer.h[0].mlp.c_fc.bias.abs().sum() == 0
    x = torch.randint(0, 64, (2, 16))
    bf16_model = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, bias=False))
    bf16_model.load_state_dict({k: v.bfloat16().float() for k, v in model.state_dict().items()})
    assert (logits_of(bf16_model.eval(), x) - logits_of(reference, x)).abs().max() <= 1e-4


def test_a_bias_free_model_comes_back_bias_free(tmp_path):
    args = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, bias=False)
    model = GPT(GPTConfig(**args))
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": args, "iter_num": 0},
                               str(tmp_path / "run"), 0, keep_last_n=0, log=lambda m: None)
    hf.export(str(tmp_path / "run"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["bias"] is False
    imported, weights, _ = hf.load_weights(str(tmp_path / "hf"))
    assert imported["bias"] is False and weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    tuned = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", dtype=torch.float32)
    with torch.no_grad():
        tuned.transformer.h[1].mlp.c_fc.bias.fill_(0.5)  # biases trained in transformers since: kept
    tuned.save_pretrained(tmp_path / "tuned")
    imported, weights, _ = hf.load_weights(str(tmp_path / "tuned"))
    assert imported["bias"] is True and weights["transformer.h.1.mlp.c_fc.bias"].eq(0.5).all()


def test_exported_tokenizer_encodes_like_tiktoken(tmp_path, gpt2_rank_file):
    """A GPT-2-encoded checkpoint (vocab padded to 50304) exports 50257 rows and GPT-2's tokenizer."""
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=50304, bias=True)
    model = GPT(GPTConfig(**args))
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": args, "iter_num": 7,
                                "encoding": gpt2_rank_file}, str(tmp_path / "run"), 7, keep_last_n=0,
                               log=lambda m: None)
    hf.export(str(tmp_path / "run" / "ckpt_7.pt"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    encoding = get_encoding(gpt2_rank_file)
    for text in ["hello world", "  Ünïcödé 東京 🚀 x=1;\n\n\tdef f():\n    return 'it's'", (REPO / "model.py").read_text()]:
        assert tokenizer.encode(text) == encoding.encode_ordinary(text)
    assert tokenizer.eos_token_id == 50256
    reference = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert reference.config.vocab_size == 50257
    x = torch.randint(0, 50257, (1, 8))
    assert (logits_of(model.eval(), x)[..., :50257] - logits_of(reference, x)).abs().max() <= 1e-4


def test_a_run_starts_from_weights_then_resumes_itself(tmp_path, data_dir, hf_folder, tiny_run):
    # from a Hugging Face folder: the architecture comes from it, iteration 0
    out = tmp_path / "from_hf"
    first = train_from(out, data_dir, f"--init_weights={hf_folder}", "--max_iters=2", "--vocab_size=128")
    assert "starting from" in first.stdout and "iter 1:" in first.stdout
    state = torch.load(out / "ckpt_2.pt", weights_only=True)
    assert state["model_args"]["activation"] == "gelu_tanh" and state["model_args"]["n_tokens"] == 100
    again = train_from(out, data_dir, f"--init_weights={hf_folder}", "--max_iters=4", "--vocab_size=128")
    assert "resuming after 2 completed steps" in again.stdout and "starting from" not in again.stdout
    # from our own checkpoint, on other data: not refused as a resume would be
    other = tmp_path / "other_data"
    other.mkdir()
    rng = np.random.default_rng(5)
    for split, n in (("train", 5000), ("val", 500)):
        rng.integers(0, 64, n).astype(np.uint16).tofile(other / f"{split}.bin")
    tuned = tmp_path / "tuned"
    result = train(tuned, str(other), f"--init_weights={tiny_run / 'ckpt_4.pt'}", "--max_iters=2", "--bias=True")
    assert "starting from" in result.stdout and "iter 1:" in result.stdout and (tuned / "ckpt_2.pt").exists()


def test_old_checkpoints_without_the_new_architecture_keys_still_resume(tmp_path, data_dir):
    out = tmp_path / "old"
    train(out, data_dir, "--max_iters=2")
    state = torch.load(out / "ckpt_2.pt", weights_only=True)
    for key in ("activation", "n_tokens"):
        state["model_args"].pop(key, None)
    torch.save(state, out / "ckpt_2.pt")
    assert "resuming after 2 completed steps" in train(out, data_dir, "--max_iters=3").stdout


def broken_folder(tmp_path, hf_folder, case):
    folder = tmp_path / case
    folder.mkdir()
    if case == "untied":
        hf_model(tie_word_embeddings=False).save_pretrained(folder)
        config = json.loads((folder / "config.json").read_text())
        config["tie_word_embeddings"] = True  # a config that claims ties over weights that are not
        (folder / "config.json").write_text(json.dumps(config))
        return folder
    config = json.loads((hf_folder / "config.json").read_text())
    weights = (hf_folder / "model.safetensors").read_bytes()
    config.update({"llama": {"model_type": "llama"}, "layer_idx": {"scale_attn_by_inverse_layer_idx": True},
                   "bad_config": {"n_embd": "wide"}}.get(case, {}))
    if case != "plain":
        (folder / "config.json").write_text(json.dumps(config))
    if case in ("llama", "truncated", "layer_idx", "bad_config"):
        (folder / "model.safetensors").write_bytes(weights[: len(weights) // 2] if case == "truncated" else weights)
    return folder


@pytest.mark.parametrize("case,expected", [
    ("llama", "only GPT-2-style models"), ("truncated", "missing or truncated"), ("no_weights", "no model.safetensors"),
    ("nonexistent", "no such model"), ("untied", "differs from the token embedding"),
    ("layer_idx", "scale_attn_by_inverse_layer_idx=True"),
    ("bad_config", "not a readable GPT-2 config"), ("plain", "neither a Hugging Face folder")])
def test_bad_weights_give_one_line(tmp_path, data_dir, hf_folder, case, expected):
    folder = tmp_path / "nowhere" if case == "nonexistent" else broken_folder(tmp_path, hf_folder, case)
    with pytest.raises(hf.WeightsError, match=expected):
        hf.from_pretrained(str(folder))
    result = train(tmp_path / "out", data_dir, f"--init_weights={folder}", "--max_iters=1", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: init_weights: ") and expected in last


def test_bad_exports_give_one_line_and_write_nothing(tmp_path, tiny_run):
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=512, bias=True)
    checkpoint.save_checkpoint({"model": GPT(GPTConfig(**args)).state_dict(), "model_args": args, "iter_num": 1,
                                "encoding": "bytes"}, str(tmp_path / "big_vocab"), 1, keep_last_n=0, log=lambda m: None)
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "file").write_text("x")
    (tmp_path / "a_file").write_text("x")
    cases = [(tmp_path / "big_vocab", tmp_path / "a", "not padding"),
             (tiny_run, tmp_path / "a_file", "not an empty folder"),
             (tmp_path / "missing", tmp_path / "b", "no such checkpoint"),
             (tmp_path / "taken", tmp_path / "c", "holds no checkpoint"),
             (tiny_run, tmp_path / "taken", "not an empty folder"),
             (tiny_run, tmp_path / "a_file" / "hf", "cannot write the export beside")]  # below a file
    for source, out, expected in cases:
        result = run_script("scripts/export_hf.py", str(source), str(out))
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
        assert result.stderr.startswith("error: ") and expected in result.stderr, result.stderr
        assert out in (tmp_path / "taken", tmp_path / "a_file") or not os.path.exists(out)
    assert list((tmp_path / "taken").iterdir()) == [tmp_path / "taken" / "file"]
    assert not list(tmp_path.glob("*.tmp-export"))


@pytest.mark.e2e  # a process: huggingface_hub reads HF_HUB_OFFLINE and HF_HOME when it is imported
def test_gpt2_by_name_offline_without_a_cached_copy_is_one_line(tmp_path, data_dir):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "empty_cache"), OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "train.py", "config/train_tiny.py", *TINY_ANY_VOCAB, "--init_from=gpt2",
                             f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'out'}"],
                            cwd=REPO, capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: init_from: cannot get gpt2")


def test_a_byte_level_run_exports_a_byte_level_tokenizer(tmp_path):
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=320, bias=True)
    model = GPT(GPTConfig(**args))
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": args, "iter_num": 3, "encoding": "bytes"},
                               str(tmp_path / "run"), 3, keep_last_n=0, log=lambda m: None)
    hf.export(str(tmp_path / "run"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    text = "def f(x):\n    return 'naïve café' * 2\n\n"
    assert tokenizer.encode(text) == list(text.encode()) and tokenizer.eos_token_id == 256
    assert transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").config.vocab_size == 257


LLAMA_ARGS = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=320, bias=False, position="rope",
                  rope_theta=500.0, norm="rmsnorm", activation="swiglu", tie_embeddings=False)


def test_gpt3_with_an_untied_head_exports_as_gpt2_with_its_own_head(tmp_path):
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=320, bias=True, tie_embeddings=False)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args)).eval()
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": args, "iter_num": 3, "encoding": "bytes"},
                               str(tmp_path / "run"), 3, keep_last_n=0, log=lambda m: None)
    hf.export(str(tmp_path / "run"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    gpt2 = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert type(gpt2).__name__ == "GPT2LMHeadModel" and not gpt2.config.tie_word_embeddings
    x = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(2))
    assert (logits_of(model, x)[..., :257] - gpt2(x).logits).abs().max() <= 1e-5
    args_back, weights, _ = hf.load_weights(str(tmp_path / "hf"))  # and back, with its own head
    assert not args_back["tie_embeddings"] and weights.keys() == model.state_dict().keys()
    back = GPT(GPTConfig(**args_back)).eval()
    back.load_state_dict(weights)
    assert torch.equal(logits_of(back, x)[..., :257], logits_of(model, x)[..., :257])


def test_an_encoding_that_does_not_load_is_refused_and_another_can_be_named(tmp_path):
    """Without its encoding an export would keep the padding rows and no end-of-text: another model."""
    args = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, vocab_size=320, bias=True)
    checkpoint.save_checkpoint({"model": GPT(GPTConfig(**args)).state_dict(), "model_args": args, "iter_num": 3,
                                "encoding": str(tmp_path / "moved.tiktoken")}, str(tmp_path / "run"), 3,
                               keep_last_n=0, log=lambda m: None)
    result = run_script("scripts/export_hf.py", str(tmp_path / "run"), str(tmp_path / "hf"))
    [line] = result.stderr.strip().splitlines()
    assert result.returncode == 1 and line.startswith("error: the encoding ") and "pass --encoding" in line
    assert not (tmp_path / "hf").exists()
    result = run_script("scripts/export_hf.py", str(tmp_path / "run"), str(tmp_path / "hf"), "--encoding", "bytes")
    assert result.returncode == 0, result.stderr
    assert transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").config.eos_token_id == 256


def save_modern(folder, **changes):
    args = {**LLAMA_ARGS, **changes}
    torch.manual_seed(0)
    model = GPT(GPTConfig(**args))
    with torch.no_grad():  # gains away from 1, so that a misplaced norm weight shows
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    checkpoint.save_checkpoint({"model": model.state_dict(), "model_args": args, "iter_num": 3, "encoding": "bytes"},
                               str(folder), 3, keep_last_n=0, log=lambda m: None)
    return model


def assert_scores_like_the_model(model, folder):
    """The exported folder's transformers logits equal the model's in float32 (the byte encoding's 257 tokens), and
    lm-eval's own `hf` model scores a continuation from the local folder as the model does. Returns the
    transformers model."""
    exported = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    x = torch.randint(0, 257, (2, 16), generator=torch.Generator().manual_seed(2))
    ours = logits_of(model.eval(), x)[..., :257]
    assert (ours - exported(x).logits).abs().max() <= 1e-5
    from lm_eval.models.huggingface import HFLM
    lm = HFLM(pretrained=str(folder), dtype="float32", device="cpu", batch_size=2)
    [(logprob, greedy)] = lm.loglikelihood([type("Request", (), {"args": ("def f", "(x):")})()])
    tokens = [ord(c) for c in "def f(x):"]
    expected = torch.log_softmax(logits_of(model, torch.tensor([tokens]))[0, :-1, :257], -1)
    assert logprob == pytest.approx(sum(expected[i - 1, tokens[i]].item() for i in range(5, 9)), abs=1e-4)
    return exported


@pytest.mark.parametrize("tied, bias", [(False, False), (True, False), (False, True)])
def test_llamas_settings_export_as_llama_with_the_same_logits(tmp_path, tied, bias):
    """Llama's settings, the head tied to the embedding or its own (transformers' tie_word_embeddings), and with
    biases (attention_bias and mlp_bias; save_modern sets them away from 0)."""
    model = save_modern(tmp_path / "run", tie_embeddings=tied, bias=bias)
    result = run_script("scripts/export_hf.py", str(tmp_path / "run"), str(tmp_path / "hf"), "--dtype", "float32")
    assert result.returncode == 0 and "as LlamaForCausalLM" in result.stderr + result.stdout, result.stderr
    llama = assert_scores_like_the_model(model, tmp_path / "hf")
    assert type(llama).__name__ == "LlamaForCausalLM" and llama.config.vocab_size == 257  # the bytes' padding dropped
    assert llama.config.tie_word_embeddings == tied and llama.config.attention_bias == llama.config.mlp_bias == bias


@pytest.mark.parametrize("tied", [False, True])
def test_qk_norm_on_llamas_settings_exports_as_qwen3_with_the_same_logits(tmp_path, tied):
    """QK-norm is what Qwen3 adds to Llama: its q_norm and k_norm gains are written as ones, and the config carries
    what Qwen3Config's defaults (Qwen3-8B's) would get wrong: head_dim, rms_norm_eps, rope_theta, no sliding window.
    Greedy generation through transformers' KV cache continues as the model's own does."""
    model = save_modern(tmp_path / "run", tie_embeddings=tied, qk_norm=True)
    result = run_script("scripts/export_hf.py", str(tmp_path / "run"), str(tmp_path / "hf"), "--dtype", "float32")
    assert result.returncode == 0 and "as Qwen3ForCausalLM" in result.stderr + result.stdout, result.stderr
    qwen3 = assert_scores_like_the_model(model, tmp_path / "hf")
    config = qwen3.config
    assert type(qwen3).__name__ == "Qwen3ForCausalLM" and config.vocab_size == 257
    assert config.tie_word_embeddings == tied and (config.head_dim, config.rms_norm_eps) == (16, 1e-5)
    assert config.rope_parameters == dict(rope_type="default", rope_theta=500.0)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["rope_theta"] == 500.0  # transformers 4 reads it
    assert config.sliding_window is None and set(config.layer_types) == {"full_attention"}
    assert not config.attention_bias and not hasattr(config, "mlp_bias")
    gains = [p for name, p in qwen3.named_parameters() if name.endswith(("q_norm.weight", "k_norm.weight"))]
    assert len(gains) == 2 * 2 and all(torch.equal(p, torch.ones(16)) for p in gains)
    prompt = torch.tensor([[ord(c) for c in "def f"]])
    model.config.n_tokens = 257  # past the bytes' tokens, rows the export dropped: masked out here too
    with torch.no_grad():
        theirs = qwen3.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)
    assert torch.equal(model.generate(prompt, 8, top_k=1), theirs)
    with pytest.raises(hf.WeightsError, match="holds a 'qwen3' model"):  # import reads GPT-2 folders only
        hf.load_weights(str(tmp_path / "hf"))


@pytest.mark.parametrize("changes, layout, named", [
    (dict(logit_softcap=15.0), "Llama", "logit_softcap=15.0"),
    (dict(activation="relu2"), "Llama", "activation='relu2'"),
    (dict(qk_norm=True, bias=True), "Qwen3", "bias=True"),  # Qwen3's MLP has no biases
    (dict(qk_norm=True, logit_softcap=15.0), "Qwen3", "logit_softcap=15.0"),
    # GPT-3's settings plus one: named against GPT-2's layout, the nearer
    (dict(position="learned", norm="layernorm", activation="gelu", tie_embeddings=True, qk_norm=True), "GPT-2",
     "qk_norm=True"),
    (dict(position="learned", norm="layernorm", activation="gelu", logit_softcap=15.0), "GPT-2", "logit_softcap=15.0"),
    (dict(position="learned", activation="gelu", logit_softcap=15.0), "GPT-2", "norm='rmsnorm', logit_softcap=15.0"),
    (dict(position="learned", activation="relu2"), "Llama", "position='learned', activation='relu2'")])  # a tie
def test_a_mix_neither_gpt2_llama_nor_qwen3_has_is_named_against_the_nearest_layout(changes, layout, named):
    """Llama's, or Qwen3's for a model with QK-norm, or GPT-2's: only the settings that keep it from exporting."""
    with pytest.raises(hf.WeightsError) as refused:
        hf.export_layout(GPTConfig(**{**LLAMA_ARGS, **changes}), "run")
    assert str(refused.value).startswith(f"run: {layout}'s layout, the nearest, has no {named}: transformers loads")


def test_a_mix_no_layout_has_is_refused_in_one_line_with_nothing_written(tmp_path):
    save_modern(tmp_path / "run", logit_softcap=15.0)
    result = run_script("scripts/export_hf.py", str(tmp_path / "run"), str(tmp_path / "hf"))
    assert result.returncode == 1 and "Traceback" not in result.stderr and not (tmp_path / "hf").exists()
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: ") and "Llama's layout, the nearest, has no logit_softcap=15.0: " in line
