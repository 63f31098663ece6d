"""model.py: activation checkpointing is exact (also compiled) and saves memory, parameter counts, meta
build, generate, the chunked LM head's loss; precision.py: weights cast once per step, bit-identical."""
from contextlib import nullcontext

import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import model as model_module
from model import GPT, GPTConfig
from trainer import precision

TINY = dict(block_size=32, vocab_size=96, n_layer=4, n_head=4, n_embd=64, bias=True)


def loss_and_grads(config, seed=0, compile_blocks=False):
    torch.manual_seed(seed)
    model = GPT(config)
    model.train()
    if compile_blocks:  # aot_eager: Dynamo and AOTAutograd as in training, without the C++ compiler's minutes
        for block in model.transformer.h:
            block.compile(backend="aot_eager")
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, config.vocab_size, (3, config.block_size), generator=g)
    targets = torch.randint(0, config.vocab_size, (3, config.block_size), generator=g)
    torch.manual_seed(seed + 1)  # the same dropout masks in both runs
    _, loss = model(idx, targets)
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("dropout", [0.0, 0.1])
@pytest.mark.parametrize("policy, recompute_blocks", [("full", -1), ("full", 2), ("selective", -1), ("selective", 2)])
def test_checkpointing_gives_same_loss_and_gradients(policy, recompute_blocks, dropout):
    plain = GPTConfig(**TINY, dropout=dropout)
    ckpt = GPTConfig(**TINY, dropout=dropout, activation_checkpointing=policy, recompute_blocks=recompute_blocks)
    loss_a, grads_a = loss_and_grads(plain)
    loss_b, grads_b = loss_and_grads(ckpt)
    assert torch.equal(loss_a, loss_b)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-5, atol=1e-7, msg=name)


def test_selective_checkpointing_compiles_per_block():
    """train.py compiles each block in place; the checkpoint inside its forward is traced with it."""
    plain = GPTConfig(**TINY, dropout=0.1)
    loss_a, grads_a = loss_and_grads(plain)
    loss_b, grads_b = loss_and_grads(GPTConfig(**TINY, dropout=0.1, activation_checkpointing="selective"),
                                     compile_blocks=True)
    torch.testing.assert_close(loss_a, loss_b)
    for name in grads_a:
        torch.testing.assert_close(grads_a[name], grads_b[name], rtol=1e-4, atol=1e-6, msg=name)


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="activation_checkpointing must be one of none, selective, full"):
        GPTConfig(**TINY, activation_checkpointing="auto")


def saved_activation_bytes(config):
    """Bytes autograd keeps for backward in one forward pass, parameters excluded."""
    torch.manual_seed(0)
    model = GPT(config)
    param_ptrs = {p.data_ptr() for p in model.parameters()}
    total = 0

    def pack(t):
        nonlocal total
        if t.data_ptr() not in param_ptrs:
            total += t.numel() * t.element_size()
        return t

    idx = torch.randint(0, config.vocab_size, (4, config.block_size))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        _, loss = model(idx, idx)
    loss.backward()
    return total


def test_checkpointing_keeps_far_fewer_activations():
    config = dict(TINY, n_layer=8, dropout=0.1)
    full = saved_activation_bytes(GPTConfig(**config))
    ckpt = saved_activation_bytes(GPTConfig(**config, activation_checkpointing="full"))
    half = saved_activation_bytes(GPTConfig(**config, activation_checkpointing="full", recompute_blocks=4))
    # Per block, only the input (B*T*C floats) is kept instead of dozens of tensors.
    assert ckpt * 5 < full
    assert ckpt < half < full


def test_gpt3_6b_parameter_count_on_meta():
    config = GPTConfig(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False)
    with torch.device("meta"):
        model = GPT(config)
    assert model.get_num_params(non_embedding=False) == 6_657_150_976
    assert model.get_num_params() == 6_648_762_368
    assert model.lm_head.weight.is_meta


def test_generate_shape_and_top_k():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).eval()
    idx = torch.zeros((2, 5), dtype=torch.long)
    out = model.generate(idx, max_new_tokens=40, top_k=1)  # runs past block_size 32: sliding window
    assert out.shape == (2, 45)
    assert torch.equal(out[:, :5], idx)
    # top_k=1 is greedy decoding: every token is the argmax of the model's own prediction
    for t in range(5, 45):
        logits, _ = model(out[:, max(0, t - 32):t])
        assert torch.equal(logits[:, -1].argmax(-1), out[:, t])


def test_generate_top_k_restricts_choices():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).eval()
    idx = torch.zeros((1, 1), dtype=torch.long)
    logits, _ = model(idx)
    allowed = set(torch.topk(logits[0, -1], 3).indices.tolist())
    seen = {model.generate(idx, 1, temperature=2.0, top_k=3)[0, -1].item() for _ in range(50)}
    assert seen <= allowed and len(seen) > 1


@pytest.mark.parametrize("modern", [{}, dict(position="rope", norm="rmsnorm", qk_norm=True, activation="swiglu",
                                             tie_embeddings=False, logit_softcap=15.0)])
def test_kv_cache_matches_full_recompute(modern):
    """Sampling, and past block_size the sliding window, with RoPE's cached keys rotated where they were made."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY, **modern)).eval()
    idx = torch.randint(0, 96, (2, 7))
    torch.manual_seed(5)
    cached = model.generate(idx, 30, use_cache=True)
    torch.manual_seed(5)
    uncached = model.generate(idx, 30, use_cache=False)
    assert torch.equal(cached, uncached)


@pytest.mark.parametrize("device_type, dtype, expected", [("cpu", "bfloat16", torch.float32),
                                                           ("cpu", "float32", torch.bfloat16),
                                                           ("cuda", "bfloat16", torch.bfloat16),  # and by default
                                                           (None, None, torch.bfloat16)])
def test_bf16_attention_runs_in_fp32_only_on_the_cpu(device_type, dtype, expected, monkeypatch):
    """precision.fp32_attention_on_cpu: a CPU bf16 run's attention gets fp32 q, k, v (3.7x faster there) and
    hands bf16 back; anywhere else, and in the memory simulations (no call), attention stays in bf16."""
    seen = []
    attention = F.scaled_dot_product_attention

    def recording(q, k, v, **kwargs):
        y = attention(q, k, v, **kwargs)
        seen.append((q.dtype, y.dtype))  # fp32 out too: autocast, left on, would run it in bf16 whatever q was
        return y

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY))
    if device_type:
        precision.fp32_attention_on_cpu(model, device_type, dtype)
    idx = torch.randint(0, 96, (2, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(idx, idx)[1]
    loss.backward()
    assert seen == [(expected, expected)] * 4 and torch.isfinite(model.transformer.h[0].attn.c_attn.weight.grad).all()
    reference = model(idx, idx)[1]  # fp32 throughout: the bf16 loss is within bf16's rounding of it
    torch.testing.assert_close(loss.float(), reference, rtol=2e-2, atol=2e-2)


# -----------------------------------------------------------------------------
# the chunked LM head: the loss of the full logits, without them

PADDED = dict(TINY, n_tokens=90)  # vocab_size 96 pads 90 tokens: the last 6 logits are -inf


def batch_with_ignored_targets(config):
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, config.n_tokens, (3, config.block_size), generator=g)
    targets = torch.randint(0, config.n_tokens, (3, config.block_size), generator=g)
    targets[:, ::5] = -1
    targets[1] = -1  # a whole row ignored, as padding would be
    return idx, targets


def full_logits_loss(model, idx, targets):
    """The loss as model.py computed it before the chunked head: F.cross_entropy on every logit."""
    logits = model(idx, every_position=True)[0]
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_chunked_loss_and_gradients_equal_cross_entropy_on_full_logits(dtype, tolerance, monkeypatch):
    monkeypatch.setattr(model_module, "LOSS_CHUNK_ROWS", 7)  # 96 rows: 13 chunks of 7, the last of 5
    config = GPTConfig(**PADDED)
    idx, targets = batch_with_ignored_targets(config)
    results = []
    for loss_of in (lambda m: m(idx, targets), lambda m: (None, full_logits_loss(m, idx, targets))):
        torch.manual_seed(0)
        model = GPT(config)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            logits, loss = loss_of(model)
        loss.backward()
        assert logits is None
        results.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (loss, grads), (reference, reference_grads) = results
    torch.testing.assert_close(loss, reference, rtol=tolerance, atol=tolerance)
    for name in grads:  # the tied wte/lm_head weight included
        torch.testing.assert_close(grads[name], reference_grads[name], rtol=tolerance, atol=tolerance, msg=name)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-6), (torch.bfloat16, 1e-2)])
def test_chunked_head_gradients_wrt_hidden_states_and_weight(dtype, tolerance):
    torch.manual_seed(0)
    x = torch.randn(2, 19, 64, requires_grad=True)  # the hidden states, as ln_f gives them
    weight = (0.1 * torch.randn(96, 64)).requires_grad_()
    targets = torch.randint(0, 90, (2, 19))
    targets[0, :4] = -1
    grads = []
    for chunked in (True, False):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            if chunked:
                loss = model_module.lm_head_loss(x, weight, targets, 90, 8)
            else:
                logits = F.linear(x, weight)
                logits[..., 90:] = float("-inf")
                loss = F.cross_entropy(logits.view(-1, 96), targets.view(-1), ignore_index=-1)
        grads.append((loss.detach(), *torch.autograd.grad(loss, (x, weight))))
    for ours, reference in zip(*grads):
        torch.testing.assert_close(ours, reference, rtol=tolerance, atol=tolerance)


class LargestLogits(TorchDispatchMode):
    """The most rows any contiguous tensor (transposes of (rows, V) weights aside) with a vocab-wide
    last dimension has, forward and backward."""

    def __init__(self, vocab_size):
        super().__init__()
        self.vocab_size, self.rows = vocab_size, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.dim() and t.is_contiguous() and t.size(-1) == self.vocab_size:
                self.rows = max(self.rows, t.numel() // self.vocab_size)
        return out


def test_chunked_head_never_holds_the_full_logits(monkeypatch):
    monkeypatch.setattr(model_module, "LOSS_CHUNK_ROWS", 16)
    config = GPTConfig(**PADDED)
    idx, targets = batch_with_ignored_targets(config)  # 3 x 32 = 96 rows of logits in all
    model = GPT(config)
    for loss_of, rows in ((lambda: model(idx, targets)[1], 16), (lambda: full_logits_loss(model, idx, targets), 96)):
        with LargestLogits(config.vocab_size) as seen, torch.autocast("cpu", dtype=torch.bfloat16):
            loss_of().backward()
        assert seen.rows == rows


def test_logits_without_targets_last_or_every_position():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**PADDED)).eval()
    idx = torch.randint(0, 90, (2, 9))
    last, _ = model(idx)
    every, _ = model(idx, every_position=True)
    assert last.shape == (2, 1, 96) and every.shape == (2, 9, 96)
    torch.testing.assert_close(last[:, 0], every[:, -1])
    assert torch.isinf(every[..., 90:]).all() and torch.isfinite(every[..., :90]).all()


# -----------------------------------------------------------------------------
# weights cast to bf16 once per step (trainer/precision.py)

class WeightCasts(TorchDispatchMode):
    """Counts bf16 casts of the blocks' matmul weights."""

    def __init__(self, weights):
        super().__init__()
        self.storages, self.count = {w.data_ptr() for w in weights}, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten._to_copy.default and kwargs.get("dtype") == torch.bfloat16 \
                and args[0].data_ptr() in self.storages:
            self.count += 1
        return func(*args, **(kwargs or {}))


def train_steps(step_context, forward_context, policy, steps=2, micro_steps=3):
    """train.py's loop in small: AdamW steps over accumulated micro-batches with dropout. Returns the
    weights, the last step's gradients and how many block weight casts were made."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**dict(TINY, n_layer=2), dropout=0.1, activation_checkpointing=policy))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    casts = WeightCasts([m.weight for m in model.transformer.h.modules() if isinstance(m, torch.nn.Linear)])
    for _ in range(steps):
        with step_context, casts:
            for _ in range(micro_steps):
                idx = torch.randint(0, TINY["vocab_size"], (2, TINY["block_size"]), generator=g)
                with forward_context:
                    loss = model(idx, idx)[1]
                (loss / micro_steps).backward()
        grads = [p.grad.clone() for p in model.parameters()]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach() for p in model.parameters()], grads, casts.count


@pytest.mark.parametrize("policy", ["none", "full", "selective"])
def test_casting_once_per_step_is_bit_identical(policy):
    every_time = train_steps(nullcontext(), torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False),
                             policy)
    once = train_steps(*precision.step_cast_contexts("cpu"), policy)
    # the same bf16 values from the same fp32 weights, the same gradients through each cast
    for a, b in zip(every_time[0] + every_time[1], once[0] + once[1]):
        assert torch.equal(a, b)
    block_matmuls, steps, micro_steps = 2 * 4, 2, 3
    forwards = 1 if policy == "none" else 2  # a checkpointed block casts again when it recomputes
    assert every_time[2] == block_matmuls * steps * micro_steps * forwards
    assert once[2] == block_matmuls * steps
