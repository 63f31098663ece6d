"""model.py's modern internals (issue 39): position='rope', norm='rmsnorm', qk_norm, activation 'relu2' and
'swiglu', tie_embeddings=False, logit_softcap. The defaults must leave GPT-3 exactly as it was; each setting
must train, resume bit-exactly and be refused when changed at a resume; bad values are one line."""
import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

import configurator
import model as model_module
from conftest import REPO, VOCAB, run_here, torchrun
from model import GPT, GPTConfig, swiglu_hidden
from trainer import metrics, optim, precision

BEFORE = "a304d18"  # the last commit before the settings: its model.py is the reference the defaults must equal
TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64)
# each setting alone, as the A/B runs take them (scripts/ab.py's --key=value)
SETTINGS = {"rope": dict(position="rope"), "rmsnorm": dict(norm="rmsnorm"), "qk_norm": dict(qk_norm=True),
            "relu2": dict(activation="relu2"), "swiglu": dict(activation="swiglu"),
            "untied": dict(tie_embeddings=False), "softcap": dict(logit_softcap=15.0)}
LLAMA = dict(position="rope", norm="rmsnorm", activation="swiglu", tie_embeddings=False, bias=False)


def model_before():
    """model.py as it was before the settings, imported from git as a module of its own."""
    try:
        source = subprocess.run(["git", "show", f"{BEFORE}:model.py"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs the git history with {BEFORE} (a shallow clone lacks it)")
    spec = importlib.util.spec_from_loader("model_before", loader=None)
    module = importlib.util.module_from_spec(spec)
    exec(compile(source, "model_before.py", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("bias", [False, True])
def test_defaults_are_bit_identical_to_the_model_before(bias):
    before = model_before()
    torch.manual_seed(0)
    old = before.GPT(before.GPTConfig(**TINY, bias=bias, dropout=0.1))
    torch.manual_seed(0)
    new = GPT(GPTConfig(**TINY, bias=bias, dropout=0.1))
    old_state, new_state = old.state_dict(), new.state_dict()
    assert list(old_state) == list(new_state)
    assert all(torch.equal(old_state[k], new_state[k]) for k in old_state)
    idx = torch.randint(0, 64, (3, 16), generator=torch.Generator().manual_seed(1))
    old.eval(), new.eval()
    assert torch.equal(old(idx, every_position=True)[0], new(idx, every_position=True)[0])
    old.train(), new.train()
    torch.manual_seed(2)
    old_loss = old(idx, targets=idx)[1]
    old_loss.backward()
    torch.manual_seed(2)
    new_loss = new(idx, targets=idx)[1]
    new_loss.backward()
    assert torch.equal(old_loss, new_loss)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(old.parameters(), new.parameters()))


@pytest.mark.parametrize("fields, message", [
    (dict(position="alibi"), "position must be one of 'learned', 'rope', got 'alibi'"),
    (dict(norm="batchnorm"), "norm must be one of 'layernorm', 'rmsnorm', got 'batchnorm'"),
    (dict(activation="geglu"), "activation must be one of 'gelu', 'gelu_tanh', 'relu2', 'swiglu', got 'geglu'"),
    (dict(position="rope", n_embd=96, n_head=32), "the head size n_embd/n_head must be even, got 96/32 = 3"),
    (dict(logit_softcap=-1.0), "logit_softcap must be 0 (off) or more, got -1.0"),
])
def test_bad_settings_are_one_line(fields, message, tmp_path):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        GPTConfig(**{**TINY, **fields})
    result = run_here(["train.py", "config/train_tiny.py", f"--out_dir={tmp_path}", "--max_iters=1",
                       *(f"--{k}={v}" for k, v in fields.items())])
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert message in result.stderr.strip().splitlines()[-1]


def test_swiglu_matches_the_4x_mlp_in_parameters():
    assert swiglu_hidden(4096) == 10944 and swiglu_hidden(128) == 352  # GPT-3 6.7B's width; the tiny config's
    for width in (128, 768, 4096):
        dense = 2 * width * 4 * width
        assert dense <= 3 * width * swiglu_hidden(width) < dense * 1.04
    model = GPT(GPTConfig(**TINY, activation="swiglu", bias=False))
    assert model.transformer.h[0].mlp.c_gate.weight.shape == (swiglu_hidden(32), 32)


def test_each_setting_changes_what_it_says():
    keys = lambda **f: set(GPT(GPTConfig(**TINY, **f)).state_dict())  # noqa: E731
    default = keys()
    assert default - keys(position="rope") == {"transformer.wpe.weight"}
    assert keys(norm="rmsnorm", bias=True) == {k for k in keys(bias=True) if not k.endswith(("ln_1.bias", "ln_2.bias", "ln_f.bias"))}
    assert keys(activation="swiglu") - default == {f"transformer.h.{i}.mlp.c_gate.{kind}" for i in range(2)
                                                   for kind in ("weight", "bias")}
    assert keys(qk_norm=True) == keys(activation="relu2") == keys(logit_softcap=30.0) == default
    tied, untied = GPT(GPTConfig(**TINY)), GPT(GPTConfig(**TINY, tie_embeddings=False))
    assert tied.lm_head.weight is tied.transformer.wte.weight
    assert untied.lm_head.weight is not untied.transformer.wte.weight
    assert untied.get_num_params(non_embedding=False) == tied.get_num_params(non_embedding=False) + 64 * 32
    assert untied.get_num_params() == tied.get_num_params()  # the matmuls' weights: the head once either way


def test_rope_attends_by_relative_position():
    """Rotated queries and keys: a dot product depends on how far apart two positions are, not where."""
    q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16, dtype=torch.float64)
    def score(i, j):
        cos_i, sin_i = model_module.rope_angles(torch.tensor([i]), 16, 10000.0)
        cos_j, sin_j = model_module.rope_angles(torch.tensor([j]), 16, 10000.0)
        return (model_module.rotate(q, cos_i.double(), sin_i.double()) *
                model_module.rotate(k, cos_j.double(), sin_j.double())).sum()
    assert torch.allclose(score(3, 1), score(10, 8)) and torch.allclose(score(0, 0), (q * k).sum())
    assert not torch.allclose(score(3, 1), score(3, 2))


@pytest.mark.parametrize("cap", [0.0, 2.0])
def test_softcapped_chunked_loss_and_gradients_equal_full_logits(cap):
    torch.manual_seed(0)
    x = torch.randn(10, 8, requires_grad=True)
    w = (3 * torch.randn(24, 8)).requires_grad_()
    targets = torch.randint(0, 20, (10,))
    targets[3] = -1
    loss = model_module.lm_head_loss(x, w, targets, n_tokens=20, chunk_rows=4, cap=cap)
    gx, gw = torch.autograd.grad(loss, (x, w))
    logits = x @ w.t()
    logits = cap * torch.tanh(logits / cap) if cap else logits
    expected = F.cross_entropy(torch.cat([logits[:, :20], torch.full_like(logits[:, 20:], float("-inf"))], 1),
                               targets, ignore_index=-1)
    ex, ew = torch.autograd.grad(expected, (x, w))
    assert torch.allclose(loss, expected) and torch.allclose(gx, ex, atol=1e-6) and torch.allclose(gw, ew, atol=1e-6)
    if cap:
        assert torch.allclose(gx.new_tensor(0.0), gx[3]) and not torch.allclose(gx, torch.autograd.grad(
            model_module.lm_head_loss(x, w, targets, 20, 4), x)[0])


def test_softcap_bounds_every_logit():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, logit_softcap=0.5)).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(100)
    logits = model(torch.randint(0, 64, (2, 16)), every_position=True)[0]
    raw = GPT(GPTConfig(**TINY))
    raw.load_state_dict(model.state_dict())
    assert logits.abs().max() <= 0.5 < raw.eval()(torch.randint(0, 64, (2, 16)), every_position=True)[0].abs().max()


def test_every_setting_trains_through_the_checkpointing_policies():
    """Selective and full recompute give the loss and gradients of no recompute with all settings on."""
    torch.manual_seed(0)
    idx = torch.randint(0, 64, (2, 16))
    grads = {}
    for policy in ("none", "selective", "full"):
        torch.manual_seed(0)
        model = GPT(GPTConfig(**TINY, **LLAMA, qk_norm=True, logit_softcap=15.0, activation_checkpointing=policy))
        loss = model(idx, targets=idx)[1]
        loss.backward()
        grads[policy] = (loss, [p.grad for p in model.parameters()])
    for policy in ("selective", "full"):
        assert torch.equal(grads[policy][0], grads["none"][0])
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(grads[policy][1], grads["none"][1]))


def test_configurator_knows_every_architecture_key():
    assert all(key in configurator.DEFAULTS for key in model_module.ARCHITECTURE_KEYS)
    assert all(configurator.DEFAULTS[key] == getattr(GPTConfig, key) for key in SETTINGS_KEYS)


SETTINGS_KEYS = sorted({key for fields in SETTINGS.values() for key in fields} | {"rope_theta"})


TRAIN_ARGS = ["--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", f"--vocab_size={VOCAB}", "--batch_size=4",
              "--gradient_accumulation_steps=2", "--warmup_iters=2", "--lr_decay_iters=8", "--eval_interval=3",
              "--eval_iters=2", "--log_interval=1", "--checkpoint_interval=3", "--keep_last_n=5"]


def train(out_dir, data_dir, *overrides, check=True):
    result = run_here(["train.py", "config/train_tiny.py", f"--data_dir={data_dir}", f"--out_dir={out_dir}",
                       *TRAIN_ARGS, *overrides])
    if check and result.returncode != 0:
        raise AssertionError(f"train.py exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


@pytest.mark.parametrize("name", SETTINGS)
def test_each_setting_trains_resumes_exactly_and_is_refused_if_changed(name, tmp_path, data_dir):
    flags = [f"--{key}={value}" for key, value in SETTINGS[name].items()]
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    train(straight, data_dir, "--max_iters=6", *flags)
    train(stopped, data_dir, "--max_iters=3", *flags)
    train(stopped, data_dir, "--max_iters=6")  # the settings come back from the checkpoint
    a, b = (torch.load(out / "ckpt_6.pt", weights_only=True) for out in (straight, stopped))
    assert all(a["model_args"][key] == value for key, value in SETTINGS[name].items())
    assert a["model"].keys() == b["model"].keys() and all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    plain = tmp_path / "plain"
    train(plain, data_dir, "--max_iters=3")
    refused = train(plain, data_dir, "--max_iters=6", *flags, check=False)
    key, value = next(iter(SETTINGS[name].items()))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert (f"{key}={value!r} (set on the command line) conflicts with the checkpoint's "
            f"{key}={getattr(GPTConfig, key)!r}") in refused.stderr


# -----------------------------------------------------------------------------
# everything else knows the settings: Muon, fp8, recompute, FSDP

def test_muon_takes_the_blocks_matrices_and_swiglus_gate_adamw_the_embeddings_and_untied_head():
    model = GPT(GPTConfig(**TINY, **LLAMA))
    muon = {name for name, p in model.named_parameters() if optim.is_muon_matrix(name, p)}
    assert "transformer.h.0.mlp.c_gate.weight" in muon and len(muon) == 2 * 5  # qkv, proj, fc, gate, proj
    assert not muon & {"lm_head.weight", "transformer.wte.weight", "transformer.h.0.ln_1.weight"}


def test_fp8_converts_swiglus_gate_and_leaves_the_untied_head_bf16():
    model = GPT(GPTConfig(**TINY, **LLAMA))
    converted, total = precision.convert(model, "tensorwise")
    assert (converted, total) == (2 * 5, 2 * 5 + 1)
    assert type(model.lm_head) is torch.nn.Linear and type(model.transformer.h[0].mlp.c_gate) is not torch.nn.Linear


MODERN_FLAGS = [f"--{k}={v}" for k, v in dict(LLAMA, qk_norm=True, activation="relu2", logit_softcap=15.0).items()]


@pytest.mark.parametrize("flags", [["--optimizer=muon"], ["--fp8=tensorwise", "--dtype=bfloat16"],
                                   ["--activation_checkpointing=selective"]])
def test_muon_fp8_and_selective_recompute_train_the_modern_internals(flags, tmp_path, data_dir):
    train(tmp_path / "run", data_dir, "--max_iters=6", *MODERN_FLAGS, *flags)
    steps = metrics.read(tmp_path / "run", "step")
    assert len(steps) == 6 and all(math.isfinite(r["loss"]) for r in steps) and steps[-1]["loss"] < steps[0]["loss"]


@pytest.mark.e2e  # torchrun's processes are the point
def test_fsdp_on_two_processes_matches_one_with_the_modern_internals(tmp_path, data_dir):
    common = [*MODERN_FLAGS, "--max_iters=6", "--gradient_accumulation_steps=4", "--dropout=0.0"]
    train(tmp_path / "single", data_dir, *common)
    args = ["train.py", "config/train_tiny.py", f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'fsdp'}",
            *TRAIN_ARGS, *common, "--strategy=fsdp"]
    result = torchrun(["--standalone", "--nproc_per_node=2"], args, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stderr[-3000:]
    losses = [[r["loss"] for r in metrics.latest_per_iter(metrics.read(tmp_path / out, "step"))]
              for out in ("single", "fsdp")]
    assert len(losses[0]) == 6 and losses[1] == pytest.approx(losses[0], abs=2e-4)


def test_plan_prices_the_modern_preset_with_its_untied_head_as_the_simulation_does(capsys):
    """plan.py on config/train_gpt3_6b_modern.py: GPT-3 6.7B's count less the position table plus the untied
    head; the estimate within 5% of the fake-tensor simulation, at 6.7B's width, context and vocabulary in 2
    of its blocks (all 32: python scripts/plan.py config/train_gpt3_6b_modern.py --gpu h200 --simulate)."""
    sys.path.insert(0, str(REPO / "scripts"))
    import plan
    preset = str(REPO / "config" / "train_gpt3_6b_modern.py")
    plan.main([preset, "--gpu", "h200", "--json"])
    full = json.loads(capsys.readouterr().out)
    assert full["params"] == 6_657_150_976 - 2048 * 4096 + 50304 * 4096
    plan.main([preset, "--gpu", "h200", "--n_layer=2", "--simulate", "--json"])
    two = json.loads(capsys.readouterr().out)
    assert two["memory_gb"]["total"] == pytest.approx(two["simulated"]["total"], rel=0.05)
