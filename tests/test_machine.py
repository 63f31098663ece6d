"""machine.py: the right peak for the right GPU, and the FLOPs arithmetic behind MFU."""
import pytest
import torch

import configurator
from model import GPT, GPTConfig, model_config
from trainer import cost, machine

TINY = ["config/train_tiny.py", "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=16"]


@pytest.mark.parametrize(
    "name, gfx, cus, key, peak",
    [
        ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 304, "mi300x", 1307.4),
        ("AMD Instinct MI300X VF", "gfx942", 304, "mi300x", 1307.4),
        ("AMD Radeon Graphics", "gfx942:sramecc+:xnack-", 304, "mi300x", 1307.4),  # generic ROCm name
        ("AMD Radeon Graphics", "gfx942", 228, "mi300a", 980.6),
        ("AMD Instinct MI325X", "gfx942", 304, "mi325x", 1307.4),  # the name tells it from an MI300X
        ("AMD Instinct MI250X/MI250", "gfx90a", 110, "mi250x", 191.5),
        ("NVIDIA H200", None, 132, "h200", 989.4),
        ("NVIDIA H100 80GB HBM3", None, 132, "h100", 989.4),
        ("NVIDIA H100 PCIe", None, 114, "h100-pcie", 756.0),
        ("NVIDIA A100-SXM4-80GB", None, 108, "a100", 312.0),
        ("NVIDIA A100-SXM4-40GB", None, 108, "a100-40gb", 312.0),
        # MI300X / MI325X partitions keep the whole chip's name: the CUs say which part of it this is
        ("AMD Instinct MI300X", "gfx942:sramecc+:xnack-", 38, "mi300x-cpx", 1307.4 / 8),
        ("AMD Instinct MI300X", "gfx942", 76, "mi300x-qpx", 1307.4 / 4),
        ("AMD Instinct MI300X VF", "gfx942", 152, "mi300x-dpx", 1307.4 / 2),
        ("AMD Instinct MI325X", "gfx942", 38, "mi325x-cpx", 1307.4 / 8),
    ],
)
def test_identify_gpu(name, gfx, cus, key, peak):
    assert machine.identify_gpu(name, gfx, cus) == key
    assert machine.GPUS[key].peak_tflops == peak


@pytest.mark.parametrize("key, bf16, fp8", [
    ("mi300x", 1307.4, 2614.9), ("mi325x", 1307.4, 2614.9), ("mi300a", 980.6, 1961.2), ("h200", 989.4, 1978.9),
    ("h100", 989.4, 1978.9), ("h100-pcie", 756.0, 1513.0), ("a100", 312.0, None), ("mi250x", 191.5, None),
    ("mi300x-cpx", 1307.4 / 8, 2614.9 / 8),
])
def test_dense_fp8_peaks(key, bf16, fp8):
    assert (machine.GPUS[key].peak_tflops, machine.GPUS[key].fp8_tflops) == (bf16, fp8)


def test_a_partition_gets_its_share_and_odd_counts_are_not_guessed():
    cpx = machine.GPUS["mi300x-cpx"]
    assert cpx.name == "AMD Instinct MI300X (CPX partition, 1/8)" and cpx.memory_gb == 24
    assert machine.identify_gpu("AMD Instinct MI300X", "gfx942", 300) is None  # no partition mode makes 300 CUs
    assert machine.identify_gpu("AMD Instinct MI300A", "gfx942", 38) is None  # MI300A partitions: not in the table
    assert machine.identify_gpu("AMD Radeon Graphics", "gfx942", 38) is None  # which chip's? unknown


def test_the_smaller_cards_of_the_lean_recipes_are_known():
    assert [machine.identify_gpu(n) for n in ("NVIDIA GeForce RTX 4090", "NVIDIA L40S", "NVIDIA RTX A6000")] == \
        ["rtx4090", "l40s", "a6000"]
    assert machine.GPUS["a100-80gb"].capacity_gb > 85


def test_unknown_gpu_is_not_guessed():
    assert machine.identify_gpu("NVIDIA GeForce RTX 3090") is None
    assert machine.identify_gpu("NVIDIA H800 NVL") is None  # an NVL part the table lacks
    assert machine.identify_gpu("AMD Radeon Graphics", "gfx1100", 48) is None
    assert cost.utilisation(1e9, 1e4, 0.0) is None


def test_6b_flops_per_token():
    config = GPTConfig(block_size=2048, vocab_size=50304, n_layer=32, n_head=32, n_embd=4096, bias=False)
    with torch.device("meta"):
        model = GPT(config)
    fpt = cost.flops_per_token(model.get_num_params(), 32, 4096, 2048)
    assert fpt == 6 * 6_648_762_368 + 12 * 32 * 4096 * 2048
    assert fpt == pytest.approx(4.311e10, rel=1e-3)
    # 300B tokens of it: ~1.29e22 FLOPs, about 286 days at 40% MFU on one MI300X
    days = fpt * 300e9 / (0.4 * machine.GPUS["mi300x"].peak_tflops * 1e12) / 86400
    assert fpt * 300e9 == pytest.approx(1.29e22, rel=0.01) and 280 < days < 290
    block = sum(p.numel() for p in model.transformer.h[0].parameters())
    extra = cost.recompute_flops_per_token(block, 32, 4096, 2048)
    assert 0.3 < extra / fpt < 0.34  # full recompute costs about a third more


def test_utilisation():
    # 1e10 FLOPs/token at 1e4 tokens/s on a 1000-TFLOPS part: 10%
    assert cost.utilisation(1e10, 1e4, 1000.0) == pytest.approx(0.1)


def test_resolve_device():
    assert machine.resolve_device("auto") == ("cpu", "cpu")  # no GPU in the tests
    assert machine.resolve_device("cuda", 3) == ("cuda:3", "cuda")  # each torchrun process its own GPU
    assert machine.resolve_device("cuda:1") == ("cuda:1", "cuda")
    assert machine.resolve_device("cpu") == ("cpu", "cpu")
    assert machine.percent(None) == "n/a" and machine.percent(0.4567) == "45.7%"


def test_utilisation_counts_recompute_only_where_it_runs():
    cfg = configurator.load_config(TINY)
    for policy, recomputes in [("none", False), ("full", True)]:
        config = model_config(cfg, activation_checkpointing=policy)
        use = cost.Utilisation(1000, 100, config, peak_tflops=1.0, world_size=2)
        mfu, hfu = use(2e9)
        head = cost.head_recompute_flops_per_token(config.vocab_size, config.n_embd)  # the chunked loss's, always
        assert use.recomputes is recomputes and (use.hardware > use.model + head) is recomputes
        assert mfu == pytest.approx(use.model * 1e9 / 1e12) and hfu >= mfu * (1 + head / use.model) - 1e-12
    assert cost.Utilisation(1000, 100, model_config(cfg), 0.0, 1)(1e6) == (None, None)
