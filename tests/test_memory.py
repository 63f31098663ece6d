"""cost.py: the activation formulas against the tensors autograd really saves, the simulation on fake
tensors against the same step on real ones, the estimate against the simulation (small configs and
GPT-3 6.7B), and what 'auto' picks for a budget."""
import types

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import configurator
from conftest import REPO
from model import GPT, GPTConfig
from trainer import cost, machine

GB = 1e9


def meta_model(**kwargs):
    with torch.device("meta"):
        return GPT(GPTConfig(**kwargs))


_SIMULATED = {}


def simulated(config, batch_size, dtype="bfloat16"):
    """cost.simulate on fake tensors, once per setting in this module: tests read the same steps, and
    each costs seconds."""
    key = repr((config, batch_size, dtype))
    if key not in _SIMULATED:
        _SIMULATED[key] = cost.simulate(config, batch_size, cost.Setup(dtype))
    return _SIMULATED[key]


def estimated(config, batch_size, dtype, attention="flash"):
    with torch.device("meta"):
        return cost.estimate(GPT(config), batch_size, cost.Setup(dtype, attention=attention))["total"]


# -----------------------------------------------------------------------------
# the per-block formulas, checked against what autograd saves

B, T, C, N_HEAD, V = 3, 20, 48, 4, 80  # no activation shape equals a weight's, so weights are told apart


def saved_bytes(n_layer, dtype, policy="none", kernel=SDPBackend.FLASH_ATTENTION, **internals):
    """Bytes of the distinct storages autograd keeps for backward, weights and their casts excluded."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=32, vocab_size=V, n_layer=n_layer, n_head=N_HEAD, n_embd=C, bias=False,
                          activation_checkpointing=policy, **internals))
    weight_shapes = {s for p in model.parameters() for s in (tuple(p.shape), tuple(p.shape)[::-1])}
    storages = {}

    def pack(t):
        if tuple(t.shape) not in weight_shapes:
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()  # q, k, v share one
        return t

    idx = torch.randint(0, V, (B, T))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), sdpa_kernel(kernel), autocast:
        loss = model(idx, idx)[1]
    loss.backward()
    return sum(storages.values())


# model.py's internals beyond GPT-3's, alone and together (the preset's and Llama's)
MODERN = dict(position="rope", norm="rmsnorm", qk_norm=True, activation="relu2", tie_embeddings=False,
              logit_softcap=15.0)
LLAMA = dict(position="rope", norm="rmsnorm", activation="swiglu", tie_embeddings=False)
INTERNALS = [{}, dict(position="rope"), dict(norm="rmsnorm"), dict(qk_norm=True), dict(activation="relu2"),
             dict(activation="swiglu"), dict(position="rope", qk_norm=True), MODERN, LLAMA]


@pytest.mark.parametrize("internals", INTERNALS)
@pytest.mark.parametrize("dtype, act_bytes", [("bfloat16", 2), ("float32", 4)])
def test_block_activation_formula(dtype, act_bytes, internals):
    per_block = (saved_bytes(3, dtype, **internals) - saved_bytes(1, dtype, **internals)) / 2
    config = GPTConfig(block_size=T, vocab_size=V, n_head=N_HEAD, n_embd=C, **internals)
    assert per_block == cost.block_activation_bytes(B, T, C, N_HEAD, act_bytes, config if internals else None)
    if internals:
        return
    # a fully checkpointed block keeps only its fp32 input
    per_ckpt_block = (saved_bytes(3, dtype, "full") - saved_bytes(1, dtype, "full")) / 2
    assert per_ckpt_block == 4 * B * T * C == cost.kept_block_bytes("full", B, T, C, N_HEAD, act_bytes)


def test_kept_head_fits_the_formula_and_keeps_no_logits():
    # One checkpointed block keeps just its input; the rest is the head (ln_f input and stats,
    # lm_head input) and a few ids: idx (the targets here too), positions, and two scalars. The
    # chunked loss keeps no logits for backward (it recomputes each chunk's): nothing per B*T*V.
    head = saved_bytes(1, "bfloat16", "full") - 4 * B * T * C
    ids = 8 * B * T + 8 * T + 4 + 4
    assert head == (4 + 2) * B * T * C + 8 * B * T + ids


# -----------------------------------------------------------------------------
# the simulation, and the estimate against it

SMALL = [dict(block_size=256, vocab_size=4096, n_layer=4, n_head=8, n_embd=256),
         dict(block_size=128, vocab_size=320, n_layer=4, n_head=4, n_embd=128),
         dict(block_size=512, vocab_size=1024, n_layer=2, n_head=8, n_embd=512)]


@pytest.mark.parametrize("policy", ["selective"])  # the policy with the most machinery
def test_simulation_matches_the_same_step_on_real_tensors(policy):
    config = GPTConfig(**SMALL[1], bias=False, activation_checkpointing=policy)  # the shape whose real step is cheap
    fake = simulated(config, 4)
    real = cost.simulate(config, 4, fake=False)
    assert fake["total"] == pytest.approx(real["total"], rel=0.1)
    # the steady state: weights, gradients and both AdamW moments at the peak
    params = list(meta_model(**SMALL[1], bias=False).parameters())
    n = sum(p.numel() for p in params)
    assert (fake["weights"], fake["grads"]) == (4 * n, 4 * n)
    assert fake["optimizer"] == 8 * n + 4 * len(params)  # both moments, and each tensor's fp32 step count


POLICIES = [("none", -1), ("selective", -1), ("full", -1), ("full", 2)]


# every policy on every shape in one dtype, each policy meeting both (a simulation costs seconds): SMALL[1]
# in bf16 under the three policies test_selective_keeps_between_none_and_full reads
DTYPES = [("float32", "bfloat16", "float32", "bfloat16"), ("bfloat16", "bfloat16", "bfloat16", "float32"),
          ("bfloat16", "float32", "bfloat16", "float32")]


@pytest.mark.parametrize("shape, policy, recompute_blocks, dtype", [
    (shape, policy, recompute_blocks, DTYPES[j][i])
    for j, shape in enumerate(SMALL) for i, (policy, recompute_blocks) in enumerate(POLICIES)])
def test_estimate_agrees_with_the_simulation(shape, policy, recompute_blocks, dtype):
    config = GPTConfig(**shape, bias=False, activation_checkpointing=policy, recompute_blocks=recompute_blocks)
    assert estimated(config, 4, dtype) == pytest.approx(simulated(config, 4, dtype)["total"], rel=0.05)


@pytest.mark.parametrize("internals", [MODERN, LLAMA])
@pytest.mark.parametrize("policy", ["none", "selective", "full"])
def test_estimate_agrees_with_the_simulation_with_the_modern_internals(internals, policy):
    config = GPTConfig(**SMALL[0], bias=False, activation_checkpointing=policy, **internals)
    assert estimated(config, 4, "bfloat16") == pytest.approx(simulated(config, 4)["total"], rel=0.05)


@pytest.mark.parametrize("internals", [{}, MODERN, LLAMA])
def test_estimate_agrees_with_the_simulation_at_6b_shapes(internals):
    """The H200's setting, GPT-3 6.7B's width, context and vocabulary with selective checkpointing at
    micro-batch 4, in 2 of its 32 blocks: each block keeps the same, and the SMALL shapes check how the
    blocks add up (all 32 took 40-70 s of fake tensors on 2 busy cores; plan.py --simulate does them).
    The modern internals too: an untied head's 50304 x 4096 weights, gradients and moments are counted,
    RoPE's missing position table is not."""
    shape = dict(GPT3_6B, n_layer=2, **internals)
    config = GPTConfig(**shape, activation_checkpointing="selective")
    simulated = cost.simulate(config, 4)
    n = sum(p.numel() for p in meta_model(**shape).parameters())
    untied, rope = not config.tie_embeddings, config.position == "rope"
    assert n == sum(p.numel() for p in meta_model(**GPT3_6B | dict(n_layer=2)).parameters()) + untied * 50304 * 4096 \
        - rope * 2048 * 4096 + (config.activation == "swiglu") * 2 * (3 * 4096 * 10944 - 8 * 4096 ** 2)
    assert simulated["weights"] + simulated["grads"] + simulated["optimizer"] == pytest.approx(16 * n, rel=1e-3)
    assert estimated(config, 4, "bfloat16") == pytest.approx(simulated["total"], rel=0.05)


def test_selective_keeps_between_none_and_full():
    # fake tensors: test_simulation_matches_the_same_step_on_real_tensors shows they count what real ones do
    shape = SMALL[1]
    B, T, C, H = 4, shape["block_size"], shape["n_embd"], shape["n_head"]
    peaks = {p: simulated(GPTConfig(**shape, bias=False, activation_checkpointing=p), B)
             for p in ("none", "selective", "full")}
    activations = {p: s["activations"] + s["other"] for p, s in peaks.items()}
    assert activations["full"] < activations["selective"] < activations["none"]
    # per block, selective keeps its input and 9 bf16 tensors per element instead of 8 + 14 x 2 B
    kept = {p: cost.kept_block_bytes(p, B, T, C, H, 2) for p in ("none", "selective", "full")}
    assert kept["selective"] == 22 * B * T * C + 4 * B * H * T
    # the peak comes at the loss, where every block holds what it keeps, and without checkpointing
    # also its weights' bf16 casts (2 B x 12 C^2)
    saved = (activations["none"] - activations["selective"]) / shape["n_layer"]
    assert saved == pytest.approx(kept["none"] - kept["selective"] + 2 * 12 * C**2, rel=0.1)


# -----------------------------------------------------------------------------
# auto

GPT3_6B = dict(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False)


def auto(budget_gb, batch_size=4, accumulation=160, gpus=1):
    return cost.choose_auto(meta_model(**GPT3_6B), batch_size, accumulation, budget_gb * GB,
                            cost.Setup(gpus=gpus))


def test_auto_at_6b_per_gpu():
    mi300x, h200 = auto(205.8), auto(150.8)
    assert (mi300x.activation_checkpointing, mi300x.batch_size, mi300x.gradient_accumulation_steps) == ("none", 4, 160)
    assert (h200.activation_checkpointing, h200.batch_size) == ("selective", 4)
    assert mi300x.peak_gb <= 205.8 and h200.peak_gb <= 150.8
    # less memory: the fewest fully recomputed blocks that fit, then all of them, then smaller micro-batches
    partial = auto(135)  # selective at micro-batch 4 needs 139.1 GB with the margin
    assert partial.activation_checkpointing == "full" and 0 < partial.recompute_blocks < 32
    more = auto(128)
    assert more.activation_checkpointing == "full" and more.recompute_blocks > partial.recompute_blocks
    tight = auto(118)  # full checkpointing at micro-batch 4 needs 119.4 GB with the margin
    assert tight.batch_size < 4 and tight.batch_size * tight.gradient_accumulation_steps == 640
    assert auto(100) is None  # weights, gradients and moments alone are 106.5 GB


def test_auto_prefers_a_larger_micro_batch_at_the_same_global_batch():
    roomy = auto(400)
    assert (roomy.activation_checkpointing, roomy.batch_size, roomy.gradient_accumulation_steps) == ("none", 8, 80)
    # the micro-batches divide among the GPUs: 24 sequences over 4 GPUs go 2 x 12, not 4 x 6
    assert auto(400, gpus=2).batch_size == 8
    assert (auto(400, batch_size=4, accumulation=6, gpus=4).batch_size,
            auto(400, batch_size=4, accumulation=6, gpus=4).gradient_accumulation_steps) == (2, 12)


# -----------------------------------------------------------------------------
# the math kernel's T x T matrices

def test_math_attention_keeps_what_the_formula_says():
    def per_block(dtype, kernel):
        return (saved_bytes(3, dtype, kernel=kernel) - saved_bytes(1, dtype, kernel=kernel)) / 2
    for dtype, act_bytes in [("bfloat16", 2), ("float32", 4)]:
        extra = per_block(dtype, SDPBackend.MATH) - per_block(dtype, SDPBackend.FLASH_ATTENTION)
        assert extra == cost.math_attention_bytes(B, T, C, N_HEAD, act_bytes)


@pytest.mark.parametrize("policy", ["none", "full"])
def test_math_attention_estimate_errs_high_but_near(policy):
    config = GPTConfig(**SMALL[1], bias=False, activation_checkpointing=policy)
    simulated = cost.simulate(config, 4, cost.Setup(attention="math"))["total"]
    assert simulated <= estimated(config, 4, "bfloat16", "math") <= 1.05 * simulated
    assert estimated(config, 4, "bfloat16", "math") > estimated(config, 4, "bfloat16")


def test_math_attention_changes_what_auto_picks():
    # with the math kernel no recompute keeps 32 blocks of T x T probabilities: 69 GB more at 6.7B
    flash = cost.choose_auto(meta_model(**GPT3_6B), 4, 160, 205.8 * GB)
    math = cost.choose_auto(meta_model(**GPT3_6B), 4, 160, 205.8 * GB, cost.Setup(attention="math"))
    assert flash.activation_checkpointing == "none" and math.activation_checkpointing == "selective"
    with pytest.raises(ValueError, match="attention='maths'"):
        cost.estimate(meta_model(**GPT3_6B), 4, cost.Setup(attention="maths"))


# -----------------------------------------------------------------------------
# the one rule: fits, the budget, and settle

def test_fits_by_kind():
    assert cost.fits(100, 105) and not cost.fits(100, 104.9)  # an estimate gets the fragmentation margin
    assert cost.fits(100, 105, "allocated") and not cost.fits(100, 104.9, "allocated")
    assert cost.fits(100, 100, "reserved") and not cost.fits(100.1, 100, "reserved")  # already holds it
    assert cost.needed_bytes(100) == 100 * (1 + cost.FRAGMENTATION_MARGIN) == 105
    with pytest.raises(ValueError, match="kind='peak'"):
        cost.fits(1, 2, "peak")


def run_config(**overrides):
    """train.py's config for the memory keys settle reads."""
    keys = dict(activation_checkpointing="auto", recompute_blocks=-1, batch_size=4, gradient_accumulation_steps=160,
                dtype="bfloat16", strategy="ddp", optimizer="adamw", master_weights="float32",
                optimizer_offload=False, ignore_memory_estimate=False, fp8="", hsdp_shard_size=0)
    return types.SimpleNamespace(**{**keys, **overrides})


def test_the_tiny_config_fits_one_gb():
    cfg = configurator.load_config([str(REPO / "config" / "train_tiny.py"), "--activation_checkpointing=auto",
                                    "--memory_budget_gb=1"])
    budget = cost.device_budget("cpu", cfg.memory_budget_gb)
    assert (budget.bytes, budget.source) == (1e9, "memory_budget_gb")
    model = meta_model(**{k: getattr(cfg, k) for k in ("n_layer", "n_head", "n_embd", "block_size", "vocab_size")})
    choice = cost.settle(model, cfg, budget)
    assert choice.fits and choice.activation_checkpointing == "none" and choice.peak_gb < 0.1
    assert cost.start_up_line(choice, budget) == \
        f"memory: estimated peak {cost.size_text(choice.peak_gb * 1e9)} of 1.0 GB budget (memory_budget_gb)"


def test_five_percent_over_is_refused_and_says_what_fits():
    model = meta_model(**GPT3_6B)
    peak = cost.estimate(model, 4, checkpointing=("none", -1))["total"]  # 160.1 GB
    cfg = run_config(activation_checkpointing="none")
    assert cost.settle(model, cfg, cost.stated_budget(cost.needed_bytes(peak), "card")).fits
    for over in (1.05, 1.0):  # the estimate 5% over the budget (once let through by a 1.1 factor); the budget = the peak
        with pytest.raises(cost.DoesNotFit):
            cost.settle(model, cfg, cost.stated_budget(peak / over, "card"))
    tight = cost.stated_budget(peak, "card")
    with pytest.raises(cost.DoesNotFit) as e:
        cost.settle(model, cfg, tight)
    message = str(e.value)
    needed = cost.needed_bytes(peak)
    assert "\n" not in message and f"{peak / 1e9:.1f} GB ({needed / 1e9:.1f} GB with the 5% fragmentation margin)" in message
    assert f"{peak / 1e9:.1f} GB budget (card)" in message
    selective = cost.estimate(model, 4, checkpointing=("selective", -1))["total"]
    assert f"activation_checkpointing=auto would run selective, micro-batch 4 x 160 ({selective / 1e9:.1f} GB)" in message
    assert "ignore_memory_estimate=True" in message
    assert e.value.refused.activation_checkpointing == "none" and not e.value.refused.fits
    started = cost.settle(model, run_config(activation_checkpointing="none", ignore_memory_estimate=True), tight)
    assert not started.fits and "does not fit, starting anyway" in cost.start_up_line(started, tight)


def test_auto_refuses_naming_the_smallest_setting():
    with pytest.raises(cost.DoesNotFit) as e:
        cost.settle(meta_model(**GPT3_6B), run_config(), cost.stated_budget(100 * GB, "card"))
    smallest = cost.estimate(meta_model(**GPT3_6B), 1, checkpointing=("full", -1))["total"]
    assert f"full checkpointing at micro-batch 1 is estimated at {smallest / GB:.1f} GB" in str(e.value)
    assert "nothing fits the 100.0 GB budget (card)" in str(e.value)


def test_budget_on_the_cpu_is_the_machine():
    budget = cost.device_budget("cpu")
    assert budget.bytes == budget.total_bytes == machine.memory_capacity("cpu") and budget.fixed_cost_bytes == 0


def test_budget_on_a_gpu_counts_free_cached_and_ours(monkeypatch):
    """The CUDA branch on a fake device (no GPU here): 80 GB card, 2 GB of our tensors before the first
    kernels, which leave a 0.1 GB workspace in the allocator and take 0.5 GB outside it; 1 GB cached unused."""
    state = dict(free=70e9, reserved=3e9, allocated=2e9)

    def first_kernels(device):
        state.update(free=state["free"] - 0.5e9, allocated=state["allocated"] + 0.1e9)

    monkeypatch.setattr(cost, "load_first_kernels", first_kernels)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (state["free"], 80e9))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: state["reserved"])
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: state["allocated"])
    budget = cost.device_budget(torch.device("cuda", 0))
    assert budget.bytes == pytest.approx(69.5e9 + 0.9e9 + 2e9)  # free + cached unused + ours
    assert budget.fixed_cost_bytes == pytest.approx(80e9 - budget.bytes) and budget.source == "free after start-up"
    monkeypatch.setattr(machine, "memory_capacity", lambda device: 80e9)
    assert cost.device_budget(torch.device("cuda", 0), 40).bytes == 40e9  # the user's word, nothing measured


def test_expandable_segments_unless_the_user_chose_allocator_settings():
    environ = {}
    assert cost.use_expandable_segments(environ, hip_version=None) == "expandable_segments:True"
    assert environ == dict.fromkeys(("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True")
    assert cost.use_expandable_segments(environ := {}, hip_version="7.0.51831") == "expandable_segments:True"
    assert "no expandable segments" in cost.use_expandable_segments(environ := {}, hip_version="6.4.43482")
    assert environ == {}
    for name in cost.ALLOCATOR_VARIABLES:
        environ = {name: "max_split_size_mb:512"}
        assert cost.use_expandable_segments(environ) == f"{name}=max_split_size_mb:512 (yours)"
        assert environ == {name: "max_split_size_mb:512"}
