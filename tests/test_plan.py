"""scripts/plan.py: the 6.7B figures against hand arithmetic, the activation formulas against the
tensors autograd really saves, and the command line (its own flags apart from config overrides)."""
import io
import json
import sys
from contextlib import redirect_stdout

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from conftest import REPO
from model import GPT, GPTConfig

sys.path.insert(0, str(REPO / "scripts"))
import plan  # noqa: E402

P_6B = 6_657_150_976  # every parameter; 6,648,762,368 without the position embeddings
CONFIG_6B = str(REPO / "config" / "train_gpt3_6b.py")


def run_plan(capsys, *args):
    plan.main([CONFIG_6B, *args, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def mi300x():
    """The 6.7B plan on one MI300X, made once for the module (capsys is per test)."""
    out = io.StringIO()
    with redirect_stdout(out):
        plan.main([CONFIG_6B, "--gpu", "mi300x", "--json"])
    return json.loads(out.getvalue())


def test_6b_on_one_mi300x(mi300x):
    p = mi300x
    assert p["params"] == P_6B
    assert p["tokens_per_iter"] == 4 * 160 * 2048 == 1_310_720
    assert p["total_tokens"] == pytest.approx(300e9, rel=1e-4)
    assert p["flops_per_token"] == 6 * 6_648_762_368 + 12 * 32 * 4096 * 2048
    assert p["flops_per_token"] == pytest.approx(4.311e10, rel=1e-3)
    assert p["total_flops"] == pytest.approx(1.29e22, rel=0.01)
    # full recompute: every block's forward again, about a third more executed
    assert 0.3 < p["recompute_flops_per_token"] / p["flops_per_token"] < 0.34
    m = p["memory_gb"]
    assert m["weights"] == pytest.approx(4 * P_6B / 1e9)  # fp32 master weights only
    assert m["weights"] + m["grads"] + m["optimizer"] == pytest.approx(16 * P_6B / 1e9) == pytest.approx(106.5, abs=0.1)
    # bf16 casts autograd keeps (the autocast cache is off): with full checkpointing the block
    # being recomputed, the one being differentiated, and the head: 2 B x (2 x 12 x 4096^2 + 50304 x 4096)
    assert m["autocast_bf16_weights"] == pytest.approx(2 * (2 * 12 * 4096**2 + 50304 * 4096) / 1e9)
    assert m["activations"] == m["activations_full_checkpointing"] < 10 < 30 < m["activations_no_checkpointing"]
    assert m["total"] == pytest.approx(sum(v for k, v in m.items() if not k.startswith(("activations_", "total"))))
    assert p["fits"] and m["total"] < 192
    assert p["peak_tflops"] == 1307.4 and p["mfu"] == 0.4
    # 1.29e22 FLOPs at 40% of 1307.4 TFLOPS: ~286 days, ~$13.7k at $2/h
    assert p["days"] == pytest.approx(p["total_flops"] / (0.4 * 1307.4e12) / 86400)
    assert 285 < p["days"] < 288 and p["cost_usd"] == pytest.approx(13_740, rel=0.01)
    assert p["checkpoint_gb"] == pytest.approx(12 * P_6B / 1e9)
    assert p["suggestions"] == []  # fits, and under a year


def test_h200_and_multi_gpu(capsys, mi300x):
    h200 = run_plan(capsys, "--gpu", "h200")
    assert h200["peak_tflops"] == 989.4 and h200["gpu_memory_gb"] == pytest.approx(151.4, abs=0.05)  # 141 GiB
    assert h200["days"] == pytest.approx(mi300x["days"] * 1307.4 / 989.4)
    assert any("more GPUs" in s for s in h200["suggestions"])  # over a year on one H200
    ddp = run_plan(capsys, "--gpus", "8", "--gpu=mi300x")
    fsdp = run_plan(capsys, "--gpus", "8", "--gpu=mi300x", "--strategy=fsdp")
    for p in (ddp, fsdp):
        assert p["days"] == pytest.approx(mi300x["days"] / 8)
        assert p["cost_usd"] == pytest.approx(mi300x["cost_usd"])  # the same GPU-hours
    assert ddp["memory_gb"]["total"] == pytest.approx(mi300x["memory_gb"]["total"])  # DDP replicates everything
    single, sharded = mi300x["memory_gb"], fsdp["memory_gb"]
    for key in ("weights", "grads", "optimizer"):
        assert sharded[key] == pytest.approx(single[key] / 8)
    # the autocast cache holds casts of the gathered weights: not sharded
    assert sharded["autocast_bf16_weights"] == single["autocast_bf16_weights"]
    assert 0 < sharded["fsdp_unsharded"] < 5 and sharded["activations"] == single["activations"]


def test_what_to_change_when_it_does_not_fit(capsys):
    p = run_plan(capsys, "--gpu", "h100", "--gradient_checkpointing=False")
    assert not p["fits"] and p["memory_gb"]["total"] > 80
    text = " ".join(p["suggestions"])
    assert "--gradient_checkpointing=True" in text and "--strategy=fsdp" in text and "mi300x" in text


def test_text_report(capsys):
    plan.main([CONFIG_6B, "--gpu", "mi300x"])
    out = capsys.readouterr().out
    for expected in ("6,657,150,976", "1,310,720 per iteration", "AdamW moments", "autocast bf16 weight copies",
                     "fits", "286", "$13,7"):
        assert expected in out


@pytest.mark.parametrize("args, message", [
    (["--gpu", "h300"], "invalid choice"),
    (["--mfu", "40"], "--mfu is a fraction"),
    (["--gpus", "3"], "does not divide among 3 GPUs"),
    (["--n_lyer=3"], "unknown config key 'n_lyer'"),  # a config override, told apart from plan's flags
    (["--n_head=33"], "divisible by n_head"),
])
def test_bad_input_is_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        plan.main([CONFIG_6B, *args])
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_own_flags_and_overrides_mix(capsys):
    p = run_plan(capsys, "--gpu=a100", "--batch_size=2", "--mfu", "0.5", "--price_per_hour=3")
    assert p["tokens_per_iter"] == 2 * 160 * 2048 and p["gpu"] == "a100" and p["mfu"] == 0.5
    assert p["cost_usd"] == pytest.approx(p["days"] * 24 * 3)


# -----------------------------------------------------------------------------
# the activation formulas, checked against what autograd saves

B, T, C, N_HEAD, V = 3, 20, 48, 4, 80  # no activation shape equals a weight's, so weights are told apart


def saved_bytes(n_layer, dtype, gradient_checkpointing=False):
    """Bytes of the distinct storages autograd keeps for backward, weights and their casts excluded."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=V, n_layer=n_layer, n_head=N_HEAD, n_embd=C, bias=False,
                          gradient_checkpointing=gradient_checkpointing))
    weight_shapes = {s for p in model.parameters() for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    storages = {}

    def pack(t):
        if tuple(t.shape) not in weight_shapes:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()  # q, k, v share one
        return t

    idx = torch.randint(0, V, (B, T))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel(SDPBackend.FLASH_ATTENTION), autocast:
        _, loss = model(idx, idx)
    loss.backward()
    return sum(storages.values())


@pytest.mark.parametrize("dtype, act_bytes", [("bfloat16", 2), ("float32", 4)])
def test_block_activation_formula(dtype, act_bytes):
    per_block = (saved_bytes(3, dtype) - saved_bytes(1, dtype)) / 2
    assert per_block == plan.block_activation_bytes(B, T, C, N_HEAD, act_bytes)
    # a checkpointed block keeps only its fp32 input
    per_ckpt_block = (saved_bytes(3, dtype, True) - saved_bytes(1, dtype, True)) / 2
    assert per_ckpt_block == 4 * B * T * C


def test_kept_head_and_logits_fit_the_formulas():
    # One checkpointed block keeps just its input; the rest is the head plan counts (ln_f input
    # and stats, lm_head input), the fp32 log-probs (4 of plan's 12 B per logit at the peak of
    # backward) and a few ids: idx (the targets here too), positions, and a scalar.
    head = saved_bytes(1, "bfloat16", True) - 4 * B * T * C
    ids = 8 * B * T + 8 * T + 4
    assert head == (4 + 2) * B * T * C + 8 * B * T + 4 * B * T * V + ids


def test_without_checkpointing_every_bf16_cast_is_kept(capsys):
    p = run_plan(capsys, "--gradient_checkpointing=False")
    # autograd keeps every matmul weight's bf16 cast for backward: the 13.3 GB the original plan forgot
    assert p["memory_gb"]["autocast_bf16_weights"] == pytest.approx(2 * (32 * 12 * 4096**2 + 50304 * 4096) / 1e9)
    assert p["memory_gb"]["autocast_bf16_weights"] == pytest.approx(13.3, abs=0.05)
