"""model.py: activation checkpointing is exact (also compiled) and saves memory, parameter counts, meta
build, generate."""
import pytest
import torch

from model import GPT, GPTConfig

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


def test_kv_cache_matches_full_recompute():
    torch.manual_seed(0)
    model = GPT(GPTConfig(**TINY)).eval()
    idx = torch.randint(0, 96, (2, 7))
    torch.manual_seed(5)
    cached = model.generate(idx, 30, use_cache=True)
    torch.manual_seed(5)
    uncached = model.generate(idx, 30, use_cache=False)
    assert torch.equal(cached, uncached)
