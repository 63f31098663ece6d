"""memory.py: the activation formulas against the tensors autograd really saves, the simulation on fake
tensors against the same step on real ones, the estimate against the simulation (small configs and
GPT-3 6.7B), and what 'auto' picks for a budget."""
import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from model import GPT, GPTConfig
from trainer import memory

GB = 1e9


def meta_model(**kwargs):
    with torch.device("meta"):
        return GPT(GPTConfig(**kwargs))


def estimate_before_margin(config, batch_size, dtype):
    with torch.device("meta"):
        e = memory.estimate(GPT(config), batch_size, dtype)
    return e["total"] - e["margin"]


# -----------------------------------------------------------------------------
# the per-block formulas, checked against what autograd saves

B, T, C, N_HEAD, V = 3, 20, 48, 4, 80  # no activation shape equals a weight's, so weights are told apart


def saved_bytes(n_layer, dtype, policy="none"):
    """Bytes of the distinct storages autograd keeps for backward, weights and their casts excluded."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=V, n_layer=n_layer, n_head=N_HEAD, n_embd=C, bias=False,
                          activation_checkpointing=policy))
    weight_shapes = {s for p in model.parameters() for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    storages = {}

    def pack(t):
        if tuple(t.shape) not in weight_shapes:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()  # q, k, v share one
        return t

    idx = torch.randint(0, V, (B, T))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel(SDPBackend.FLASH_ATTENTION), autocast:
        loss = model(idx, idx)[1]
    loss.backward()
    return sum(storages.values())


@pytest.mark.parametrize("dtype, act_bytes", [("bfloat16", 2), ("float32", 4)])
def test_block_activation_formula(dtype, act_bytes):
    per_block = (saved_bytes(3, dtype) - saved_bytes(1, dtype)) / 2
    assert per_block == memory.block_activation_bytes(B, T, C, N_HEAD, act_bytes)
    # a fully checkpointed block keeps only its fp32 input
    per_ckpt_block = (saved_bytes(3, dtype, "full") - saved_bytes(1, dtype, "full")) / 2
    assert per_ckpt_block == 4 * B * T * C == memory.kept_block_bytes("full", B, T, C, N_HEAD, act_bytes)


def test_kept_head_and_logits_fit_the_formulas():
    # One checkpointed block keeps just its input; the rest is the head (ln_f input and stats,
    # lm_head input), the fp32 log-probs (4 of the 12 B per logit at the peak of backward) and a
    # few ids: idx (the targets here too), positions, and a scalar.
    head = saved_bytes(1, "bfloat16", "full") - 4 * B * T * C
    ids = 8 * B * T + 8 * T + 4
    assert head == (4 + 2) * B * T * C + 8 * B * T + 4 * B * T * V + ids


# -----------------------------------------------------------------------------
# the simulation, and the estimate against it

SMALL = [dict(block_size=256, vocab_size=4096, n_layer=4, n_head=8, n_embd=256),
         dict(block_size=128, vocab_size=320, n_layer=4, n_head=4, n_embd=128),
         dict(block_size=512, vocab_size=1024, n_layer=2, n_head=8, n_embd=512)]


@pytest.mark.parametrize("policy", ["none", "selective", "full"])
def test_simulation_matches_the_same_step_on_real_tensors(policy):
    config = GPTConfig(**SMALL[0], bias=False, activation_checkpointing=policy)
    fake = memory.simulate(config, 4)
    real = memory.simulate(config, 4, fake=False)
    assert fake["total"] == pytest.approx(real["total"], rel=0.1)
    # the steady state: weights, gradients and both AdamW moments at the peak
    n = sum(p.numel() for p in meta_model(**SMALL[0], bias=False).parameters())
    assert (fake["weights"], fake["grads"]) == (4 * n, 4 * n)
    assert fake["optimizer"] == pytest.approx(8 * n, rel=1e-5)  # and AdamW's step counts


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("policy, recompute_blocks", [("none", -1), ("selective", -1), ("full", -1), ("full", 2)])
@pytest.mark.parametrize("shape", SMALL)
def test_estimate_agrees_with_the_simulation(shape, policy, recompute_blocks, dtype):
    config = GPTConfig(**shape, bias=False, activation_checkpointing=policy, recompute_blocks=recompute_blocks)
    simulated = memory.simulate(config, 4, dtype)["total"]
    assert estimate_before_margin(config, 4, dtype) == pytest.approx(simulated, rel=0.05)


def test_estimate_agrees_with_the_simulation_at_6b():
    """The H200's setting, GPT-3 6.7B with selective checkpointing at micro-batch 4: ~20 s of fake tensors."""
    config = GPTConfig(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False,
                       activation_checkpointing="selective")
    simulated = memory.simulate(config, 4)
    assert simulated["weights"] + simulated["grads"] + simulated["optimizer"] == pytest.approx(106.5 * GB, rel=1e-3)
    assert estimate_before_margin(config, 4, "bfloat16") == pytest.approx(simulated["total"], rel=0.05)


def test_selective_keeps_between_none_and_full():
    peaks = {p: memory.simulate(GPTConfig(**SMALL[0], bias=False, activation_checkpointing=p), 4, fake=False)
             for p in ("none", "selective", "full")}
    activations = {p: s["activations"] + s["other"] for p, s in peaks.items()}
    assert activations["full"] < activations["selective"] < activations["none"]
    # per block, selective keeps its input and 9 bf16 tensors per element instead of 8 + 14 x 2 B
    kept = {p: memory.kept_block_bytes(p, 4, 256, 256, 8, 2) for p in ("none", "selective", "full")}
    assert kept["selective"] == 22 * 4 * 256 * 256 + 4 * 4 * 8 * 256
    # the peak comes at the loss, where every block holds what it keeps, and without checkpointing
    # also its weights' bf16 casts (2 B x 12 C^2)
    saved = (activations["none"] - activations["selective"]) / SMALL[0]["n_layer"]
    assert saved == pytest.approx(kept["none"] - kept["selective"] + 2 * 12 * 256**2, rel=0.1)


# -----------------------------------------------------------------------------
# auto

GPT3_6B = dict(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False)


def auto(budget_gb, batch_size=4, accumulation=160, gpus=1):
    return memory.choose_auto(meta_model(**GPT3_6B), batch_size, accumulation, budget_gb * GB, gpus=gpus)


def test_auto_at_6b_per_gpu():
    mi300x, h200 = auto(205.8), auto(150.8)
    assert (mi300x.activation_checkpointing, mi300x.batch_size, mi300x.gradient_accumulation_steps) == ("none", 4, 160)
    assert (h200.activation_checkpointing, h200.batch_size) == ("selective", 4)
    assert mi300x.peak_gb <= 205.8 and h200.peak_gb <= 150.8
    # less memory: the fewest fully recomputed blocks that fit, then all of them, then smaller micro-batches
    partial = auto(140)
    assert partial.activation_checkpointing == "full" and 0 < partial.recompute_blocks < 32
    more = auto(128)
    assert more.activation_checkpointing == "full" and more.recompute_blocks > partial.recompute_blocks
    tight = auto(120)  # full checkpointing at micro-batch 4 needs 123.2 GB
    assert tight.batch_size < 4 and tight.batch_size * tight.gradient_accumulation_steps == 640
    assert auto(100) is None  # weights, gradients and moments alone are 106.5 GB


def test_auto_prefers_a_larger_micro_batch_at_the_same_global_batch():
    roomy = auto(400)
    assert (roomy.activation_checkpointing, roomy.batch_size, roomy.gradient_accumulation_steps) == ("none", 8, 80)
    # the micro-batches divide among the GPUs: 24 sequences over 4 GPUs go 2 x 12, not 4 x 6
    assert auto(400, gpus=2).batch_size == 8
    assert (auto(400, batch_size=4, accumulation=6, gpus=4).batch_size,
            auto(400, batch_size=4, accumulation=6, gpus=4).gradient_accumulation_steps) == (2, 12)
