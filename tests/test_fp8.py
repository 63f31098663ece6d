"""precision.py: fp8 training through torchao on the CPU (torch._scaled_mm's CPU kernel), at tiny shapes.

What runs here is torchao's real Float8Linear forward and backward; only the GPUs' fp8 kernels are not."""
import io
import os

import pytest
import torch

from model import GPT, GPTConfig
from trainer import optim, precision

FNUZ = (torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)  # the MI300 series' flavour


def needs_fnuz(recipe):
    """Skipped where this CPU's torch._scaled_mm refuses the recipe's fnuz calls, as start-up's probe says (an Intel
    Xeon whose oneDNN has fp8 kernels refuses them with one scale a tensor; an AMD EPYC takes them)."""
    problem = precision.kernel_problem(recipe, "cpu", dtypes=FNUZ)
    return pytest.mark.skipif(problem is not None, reason=str(problem))


def tiny(n_embd=64, n_layer=1, **kwargs):
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=n_layer, n_head=2, n_embd=n_embd, bias=False, **kwargs))


def float8_linears(model):
    from torchao.float8.float8_linear import Float8Linear
    return [m for m in model.modules() if isinstance(m, Float8Linear)]


def test_only_the_blocks_linear_layers_convert():
    model = tiny(n_layer=2)
    before = {name: id(p) for name, p in model.named_parameters()}
    assert precision.convert(model, "tensorwise") == (8, 9)  # 4 a block; the LM head stays
    assert not float8_linears(model.lm_head) and model.transformer.wte.weight is model.lm_head.weight
    assert {name: id(p) for name, p in model.named_parameters()} == before  # the same Parameters: optimizers see no change
    assert precision.describe("tensorwise", 8, 9) == \
        "fp8 tensorwise: 8 of 9 linear layers converted (the LM head and embeddings stay bf16)"


def test_layers_the_kernels_cannot_take_stay_bf16():
    assert precision.convert(tiny(n_embd=40), "rowwise") == (0, 5)  # 40 features: not a multiple of 16


@pytest.mark.parametrize("recipe, dtypes, expected", [
    ("tensorwise", None, (torch.float8_e4m3fn, torch.float8_e4m3fn, torch.float8_e5m2)),
    ("tensorwise", FNUZ, (torch.float8_e4m3fnuz, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)),
    ("rowwise", FNUZ, (torch.float8_e4m3fnuz,) * 3),  # rowwise casts gradients to e4m3 too
])
def test_float8_flavour_is_explicit(recipe, dtypes, expected):
    model = tiny()
    precision.convert(model, recipe, dtypes=dtypes)
    for layer in float8_linears(model):
        c = layer.config
        casts = (c.cast_config_input, c.cast_config_weight, c.cast_config_grad_output)
        assert tuple(cast.target_dtype for cast in casts) == expected
        assert c.cast_config_input_for_grad_weight.target_dtype == expected[0]


def test_mi300_gets_fnuz_and_everything_else_ocp():
    assert precision.float8_dtypes("gfx942:sramecc+:xnack-") == FNUZ
    assert precision.float8_dtypes("gfx950") == (torch.float8_e4m3fn, torch.float8_e5m2)  # MI350: OCP
    assert precision.float8_dtypes() == (torch.float8_e4m3fn, torch.float8_e5m2)  # no ROCm GPU here


def test_fp8_all_gather_only_where_torchao_has_it():
    model = tiny()
    precision.convert(model, "tensorwise", fsdp=True)
    assert all(layer.config.enable_fsdp_float8_all_gather for layer in float8_linears(model))
    model = tiny()
    precision.convert(model, "rowwise", fsdp=True)
    assert not any(layer.config.enable_fsdp_float8_all_gather for layer in float8_linears(model))
    assert "in bf16 (torchao's fp8 all-gather is tensorwise only)" in precision.describe("rowwise", 4, 5, fsdp=True)


@pytest.mark.parametrize("capability, gfx, fp8", [
    ((8, 0), None, False),  # A100
    ((8, 9), None, True),  # L40S, RTX 4090
    ((9, 0), None, True),  # H100, H200
    (None, "gfx90a:sramecc+:xnack-", False),  # MI250X
    (None, "gfx942:sramecc+:xnack-", True),  # MI300X, MI300A, MI325X
    (None, "gfx950", True),  # MI355X
])
def test_which_gpus_have_fp8_units(capability, gfx, fp8):
    assert precision.has_fp8_units(capability, gfx) == fp8


def test_the_cpu_runs_fp8_and_mps_is_refused_in_one_line():
    assert precision.device_problem("cpu") is None
    assert precision.device_problem("mps").startswith("fp8 runs on CUDA and ROCm GPUs and on the CPU, not on device=mps")


def steps(model, n=4):
    """Losses of n AdamW steps on one batch, under bf16 autocast as train.py runs them."""
    optimizer = optim.build(model, "adamw", 0.0, 3e-3, (0.9, 0.95), "cpu")
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1))
    losses = []
    for _ in range(n):
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            loss = model(x, x)[1]
        loss.backward()
        optim.step(optimizer, 0, "cpu")
        optimizer.zero_grad(set_to_none=True)
        precision.update_weight_scales(model)  # without FSDP: nothing to do, and harmless
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("recipe, model_kwargs, dtypes", [
    ("tensorwise", {}, None),
    ("rowwise", {}, None),
    ("tensorwise", {"activation_checkpointing": "selective"}, None),
    ("rowwise", {"activation_checkpointing": "full"}, None),
    pytest.param("tensorwise", {}, FNUZ, marks=needs_fnuz("tensorwise")),
    pytest.param("rowwise", {}, FNUZ, marks=needs_fnuz("rowwise")),
])
def test_fp8_trains_like_bf16(recipe, model_kwargs, dtypes):
    baseline = steps(tiny(**model_kwargs))
    model = tiny(**model_kwargs)
    precision.convert(model, recipe, dtypes=dtypes)
    losses = steps(model)
    assert losses[-1] < losses[0] - 0.05  # it learns
    assert losses == pytest.approx(baseline, rel=0.02)  # and as bf16 does, within fp8's rounding


def test_bf16_master_weights_get_fp32_gradients():
    """master_weights='bfloat16': Float8Linear casts the bf16 weight as it would an fp32 one, and its gradient
    lands in the weight's fp32 grad_dtype. (The optimizer's step is optim.py's, unchanged: the weights are
    the same Parameters; tests/test_optim.py runs it.)"""
    grads = []
    for recipe in ("", "tensorwise"):
        model = tiny()
        optim.use_bf16_weights(model)
        if recipe:
            precision.convert(model, recipe)
        with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
            model(*(torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(1)),) * 2)[1].backward()
        grads.append(model.transformer.h[0].mlp.c_fc.weight.grad)
    assert grads[1].dtype == torch.float32 and model.transformer.h[0].mlp.c_fc.weight.dtype == torch.bfloat16
    assert torch.nn.functional.cosine_similarity(grads[0].flatten(), grads[1].flatten(), dim=0) > 0.98


def test_selective_checkpointing_keeps_the_fp8_matmuls():
    """model.py's selective policy sees Float8Linear's matmul as aten.mm (torchao's tensor subclass runs
    _scaled_mm below the policy), so it keeps their outputs as it does in bf16 instead of recomputing them."""
    import model as model_module
    from torch.utils.checkpoint import CheckpointPolicy
    model = tiny(activation_checkpointing="selective")
    precision.convert(model, "tensorwise")
    block, decisions = model.transformer.h[0], []
    policy = block.policy

    def recording(ctx, op, *args, **kwargs):
        decisions.append((op, policy(ctx, op, *args, **kwargs)))
        return decisions[-1][1]
    block.policy = recording
    steps(model, n=1)
    kept = [op for op, decision in decisions if decision == CheckpointPolicy.MUST_SAVE and op in model_module._MATMUL_OPS]
    assert len(kept) >= 3  # c_attn, attention's c_proj, c_fc (the MLP's c_proj is recomputed by design)


def test_checkpoints_hold_ordinary_weights_both_ways():
    converted = tiny(n_layer=2)
    precision.convert(converted, "tensorwise")
    steps(converted, n=1)
    buffer = io.BytesIO()
    torch.save(converted.state_dict(), buffer)
    buffer.seek(0)
    saved = torch.load(buffer, weights_only=True)
    assert all(type(t) is torch.Tensor for t in saved.values())  # no torchao type in the file
    plain = tiny(n_layer=2)
    plain.load_state_dict(saved)  # strict: the same keys and shapes (sample.py, export_hf)
    assert saved.keys() == plain.state_dict().keys()
    again = tiny(n_layer=2)
    precision.convert(again, "rowwise")  # and back, under another recipe: fp8 on or off at a resume
    again.load_state_dict(plain.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), saved.values()))


@pytest.mark.skipif(os.environ.get("FP8_COMPILE_TEST") != "1", reason="compiling Float8Linear blocks on the CPU takes "
                    "about 2 minutes (inductor's C++): FP8_COMPILE_TEST=1 runs it")
def test_per_block_compile():
    """train.py's compile=True: each block compiled in place, after conversion."""
    model = tiny()
    precision.convert(model, "tensorwise")
    for block in model.transformer.h:
        block.compile()
    losses = steps(model, n=2)
    assert all(torch.isfinite(torch.tensor(losses)))


def test_mfu_note():
    assert precision.mfu_note(1307.4, 2614.9) == ("note: mfu is against the bf16 peak (1307.4 TFLOPS) even with fp8, "
                                                  "as peers report it; the fp8 peak is 2614.9 TFLOPS")
    assert precision.mfu_note(989.4, None).endswith("the fp8 peak is unknown")


def _fsdp_worker(rank, folder):
    """One of 2 gloo processes: fp8 tensorwise under FSDP2 as train.py shards it, 2 steps, then the full state dict."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=2)
    model = tiny()
    precision.convert(model, "tensorwise", fsdp=True)
    mixed = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.transformer.h:
        fully_shard(block, mp_policy=mixed)
    fully_shard(model, mp_policy=mixed)
    losses = steps(model, n=2)  # update_weight_scales now all-reduces the weights' maxima
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if rank == 0:
        torch.save((losses, state), f"{folder}/result.pt")
    dist.destroy_process_group()


@pytest.mark.e2e
def test_fsdp2_all_gathers_fp8_and_saves_ordinary_weights(tmp_path):
    torch.multiprocessing.start_processes(_fsdp_worker, args=(str(tmp_path),), nprocs=2, start_method="spawn")
    losses, state = torch.load(tmp_path / "result.pt", weights_only=True)
    assert losses[1] < losses[0]
    assert all(type(t) is torch.Tensor for t in state.values())  # not torchao's fp8-all-gather weight type
    tiny().load_state_dict(state)


FP8_RUN = ["--dtype=bfloat16", "--fp8=tensorwise", "--n_embd=32", "--eval_interval=0", "--checkpoint_interval=2"]


def test_an_fp8_run_resumes_exactly_switches_off_and_exports(tmp_path, data_dir):
    """train.py with fp8: a run stopped at 2 and resumed to 4 equals the uninterrupted one bit for bit;
    the same checkpoint continues with fp8 off (noted in the log); its export computes what it does."""
    from test_hf import assert_export_matches
    from test_train import assert_same_weights, train
    from trainer import checkpoint, hf

    whole = train(tmp_path / "whole", data_dir, *FP8_RUN, "--max_iters=4")
    assert "fp8 tensorwise: 8 of 9 linear layers converted" in whole.stdout
    train(tmp_path / "split", data_dir, *FP8_RUN, "--max_iters=2")
    train(tmp_path / "split", data_dir, *FP8_RUN, "--max_iters=4")
    assert_same_weights(tmp_path / "whole" / "ckpt_4.pt", tmp_path / "split" / "ckpt_4.pt")
    (tmp_path / "off").mkdir()
    off = train(tmp_path / "off", data_dir, *[a for a in FP8_RUN if not a.startswith("--fp8")], "--max_iters=4",
                f"--init_from={tmp_path / 'whole' / 'ckpt_2.pt'}")
    assert "note: fp8 tensorwise -> off since the checkpoint" in off.stdout and "fp8 tensorwise:" not in off.stdout
    hf.export(str(tmp_path / "whole" / "ckpt_4.pt"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    state = checkpoint.load_checkpoint(str(tmp_path / "whole" / "ckpt_4.pt"), log=lambda m: None)
    assert_export_matches(tmp_path / "hf", state["model_args"], state["model"])


def test_the_fp8_estimate_agrees_with_its_simulation(policy="none"):  # where fp8 changes what a block keeps
    """cost.estimate prices what Float8Linear keeps (no bf16 weight copies) within 5% of the simulated
    step. On the CPU Float8Linear returns fp32 where a GPU returns bf16, so the simulation is the higher."""
    from trainer import cost
    config = GPTConfig(block_size=256, vocab_size=4096, n_layer=2, n_head=8, n_embd=256, bias=False,
                       activation_checkpointing=policy)  # 2 blocks: the simulation's cost grows with depth
    simulated = cost.simulate(config, 8, cost.Setup("bfloat16", fp8="tensorwise"))["total"]
    with torch.device("meta"):
        model = GPT(config)
    estimated = cost.estimate(model, 8, cost.Setup("bfloat16", fp8="tensorwise"))["total"]
    assert estimated == pytest.approx(simulated, rel=0.05) and estimated <= simulated
    assert estimated < cost.estimate(model, 8, cost.Setup("bfloat16"))["total"]
