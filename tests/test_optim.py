"""Memory-lean optimizers (optim.py, offload.py): each mode trains, resumes bit-exactly from checkpoints
that load with weights_only, refuses a mode change on resume, and is priced right by cost.py and plan.py."""
import contextlib
import io
import json
import os
import shutil
import sys

import pytest
import torch
import torchao.optim  # noqa: F401  (allow-lists its optimizer-state tensor subclasses for torch.load here)

import configurator
from trainer import checkpoint, cost, metrics, optim
from conftest import REPO, python, run_here
from model import GPT, GPTConfig
from test_train import assert_same_weights, train

# (optimizer, master_weights, optimizer_offload): the modes beside fp32 AdamW, each code path once (4-bit AdamW
# over fp32 weights takes the path of 8-bit's over fp32 weights: torchao's one low-bit class, our one call)
MODES = [("adamw8bit", "float32", False), ("adamw", "bfloat16", False), ("adamw4bit", "bfloat16", False),
         ("adamw", "float32", True), ("adamw", "bfloat16", True)]
# wide enough that the matrices have >= 4096 values, which torchao quantizes (smaller ones stay fp32), and
# a context of 64, so that the position table is (64, 64) as the embedding and attention's projection are:
# where torchao's step is compiled (see eager), it compiles once per parameter shape
MODEL = ["--n_embd=64", "--block_size=64", "--max_iters=8", "--eval_interval=0"]
STATE_TYPE = {"adamw": "Tensor", "adamw8bit": "OptimState8bit", "adamw4bit": "OptimState4bit"}


def flags(optimizer, master_weights, offload=False):
    return [f"--optimizer={optimizer}", f"--master_weights={master_weights}", f"--optimizer_offload={offload}",
            *(["--dtype=bfloat16"] if master_weights == "bfloat16" else [])]


def losses(out_dir):
    return [r["loss"] for r in metrics.read(out_dir, "step")]


def eager():
    """torch.compile off. torchao compiles its step once per parameter shape, seconds each with a cold cache,
    and what a mode saves and resumes does not depend on it: the runs below step eagerly. The compiled step
    trains and resumes in the leanest mode's test here and in test_distributed's e2e runs."""
    return torch.compiler.set_stance("force_eager")


def resumes_exactly(out, split, data_dir, *args):
    """A copy of out's ckpt_4.pt (TINY saves every 4) resumed in split to step 8 ends with out's weights."""
    split.mkdir()
    shutil.copy(out / "ckpt_4.pt", split)
    assert "resuming after 4" in train(split, data_dir, *args).stdout
    assert_same_weights(out / "ckpt_8.pt", split / "ckpt_8.pt")


@pytest.fixture(scope="module")
def whole(tmp_path_factory, data_dir):
    """mode -> the out_dir of its uninterrupted 8-step run, trained once for the tests that read it."""
    runs = {}

    def run(mode):
        if mode not in runs:
            runs[mode] = tmp_path_factory.mktemp("whole")
            with eager():
                train(runs[mode], data_dir, *MODEL, *flags(*mode))
        return runs[mode]
    return run


# Resumed in this interpreter, stepping eagerly. A fresh process reads these checkpoints in the probe test below;
# fresh processes resume compiled low-bit state in test_distributed (8-bit AdamW through a torchrun restart),
# AdamW's in test_train.
@pytest.mark.parametrize("optimizer,master_weights,offload", MODES)
def test_each_mode_trains_and_resumes_exactly(tmp_path, whole, data_dir, optimizer, master_weights, offload):
    mode = flags(optimizer, master_weights, offload)
    out = whole((optimizer, master_weights, offload))
    seen = losses(out)
    assert len(seen) == 8 and seen[-1] < seen[0]
    with eager():
        resumes_exactly(out, tmp_path / "split", data_dir, *MODEL, *mode)
    weight = torch.load(out / "ckpt_8.pt", weights_only=True)["model"]["transformer.h.0.mlp.c_fc.weight"]
    assert weight.dtype == getattr(torch, master_weights)


@pytest.mark.e2e
def test_each_modes_checkpoint_loads_with_weights_only_where_torchao_is_not_imported(tmp_path, whole):
    # one process of its own for all the modes, torchao not imported: each checkpoint still loads with weights_only
    paths = [str(whole(mode) / "ckpt_8.pt") for mode in MODES]
    (tmp_path / "probe.py").write_text(
        f"import sys; sys.path.insert(0, {str(REPO)!r}); print('torchao' in sys.modules)\n"
        "from trainer import checkpoint\n"
        f"for path in {paths!r}:\n"
        "    s = checkpoint.load_checkpoint(path, log=lambda line: None)\n"
        "    state = s['optimizer']['state']['transformer.h.0.mlp.c_fc.weight']\n"
        "    print(sorted(state), type(state['exp_avg']).__name__)\n")
    probe = python([tmp_path / "probe.py"], env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert probe.returncode == 0, probe.stderr
    before, *lines = probe.stdout.splitlines()
    assert before == "False" and len(lines) == len(MODES)  # the process started without torchao
    for (optimizer, master_weights, offload), line in zip(MODES, lines):
        assert line.endswith(" " + STATE_TYPE[optimizer]), line
        # offload's fp32 master is saved where it is not the weight itself
        assert ("'master'" in line) == (offload and master_weights == "bfloat16"), line


def test_offload_steps_as_adamw_does_and_keeps_an_fp32_master_behind_bf16_weights():
    config = GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=16, vocab_size=64)
    torch.manual_seed(0)
    on_device, offloaded, bf16 = GPT(config), GPT(config), GPT(config)
    for model in (offloaded, bf16):
        model.load_state_dict(on_device.state_dict())
    optim.use_bf16_weights(bf16)
    adamw = torch.optim.AdamW(optim.param_groups(on_device, 0.1), lr=1e-2, betas=(0.9, 0.95), fused=True)
    host = optim.build(offloaded, "adamw", 0.1, 1e-2, (0.9, 0.95), "cpu", offload=True)
    host_bf16 = optim.build(bf16, "adamw", 0.1, 1e-2, (0.9, 0.95), "cpu", "bfloat16", offload=True)
    saved_early = host_bf16.state_dict()["state"]  # a save before any step holds the real masters
    in_order = [p for group in host_bf16.param_groups for p in group["params"]]
    assert all(torch.equal(saved_early[i]["master"], p.float()) for i, p in enumerate(in_order))
    x = torch.randint(0, 64, (4, 16))
    for _ in range(3):
        for model, optimizer in ((on_device, adamw), (offloaded, host), (bf16, host_bf16)):
            model(x, x)[1].backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
    for a, b in zip(on_device.parameters(), offloaded.parameters()):
        assert torch.equal(a, b)  # PyTorch's fused AdamW, on the host instead
    for p in bf16.parameters():
        master = host_bf16.state[p]["master"]
        assert p.dtype == torch.bfloat16 and master.dtype == torch.float32 and torch.equal(p, master.to(torch.bfloat16))
    # the state dict is AdamW's: it loads into torch.optim.AdamW and back
    adamw.load_state_dict(host.state_dict())
    host.load_state_dict(adamw.state_dict())
    assert host.masters_from_weights  # AdamW's state has no master: the weights give it at the next step
    # and AdamW keeps running its own way, not the way of whatever saved the state (offload's foreach=None)
    built = optim.build(on_device, "adamw", 0.1, 1e-2, (0.9, 0.95), "cpu")
    built.load_state_dict(host.state_dict())
    assert [g["foreach"] for g in built.param_groups] == [False, False]


def test_an_offload_checkpoint_resumes_into_fused_adamw_and_back(tmp_path):
    """Offload saves fused=None and CPU steps; torch's load_state_dict puts `step` on the parameters' device
    only where the saved group says fused or capturable. build()'s AdamW loads as it runs instead. On a GPU
    that is fused AdamW; build(device_type='cuda') makes one over CPU parameters, PyTorch's fused CPU AdamW,
    which takes the same path (on the CPU the step's device cannot differ: the spy shows what torch saw)."""
    config = GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=32)
    torch.manual_seed(0)
    offloaded, on_device = GPT(config), GPT(config)
    host = optim.build(offloaded, "adamw", 0.1, 1e-2, (0.9, 0.95), "cpu", offload=True)
    x = torch.randint(0, 32, (2, 8))

    def train_step(model, optimizer):
        model(x, x)[1].backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    train_step(offloaded, host)
    def through_a_file(model, optimizer):  # as a resume reads it: from disk, on the CPU
        state = dict(zip(("model", "optimizer", "iter_num"), (*checkpoint.full_state(model, optimizer), 1)), model_args={})
        return checkpoint.load_checkpoint(checkpoint.save_checkpoint(state, tmp_path, 1, 1, log=print), log=print)
    fused = optim.build(on_device, "adamw", 0.1, 1e-2, (0.9, 0.95), "cuda")
    seen = []
    fused.register_load_state_dict_pre_hook(lambda _, saved: seen.append([g["fused"] for g in saved["param_groups"]]))
    saved = through_a_file(offloaded, host)
    assert {g["fused"] for g in saved["optimizer"]["param_groups"]} == {None}
    checkpoint.restore(saved, on_device, fused)
    assert seen == [[True, True]] and all(g["fused"] for g in fused.param_groups)
    for p in on_device.parameters():
        state = fused.state[p]
        assert state["step"].dtype == torch.float32 and state["step"].device == p.device and state["step"].item() == 1
        assert state["exp_avg"].device == p.device and state["exp_avg"].dtype == torch.float32
    train_step(offloaded, host)
    train_step(on_device, fused)
    for a, b in zip(offloaded.parameters(), on_device.parameters()):
        assert torch.equal(a, b)  # the step after the resume, as the host would have made it
    # and back: fused AdamW's steps and moments into the host's buffers, in place and in fp32
    back = optim.build(offloaded, "adamw", 0.1, 1e-2, (0.9, 0.95), "cpu", offload=True)
    checkpoint.restore(through_a_file(on_device, fused), offloaded, back)
    for p, q in zip(offloaded.parameters(), on_device.parameters()):
        state = back.state[p]
        assert state["step"].device.type == "cpu" and state["step"].dtype == torch.float32 and state["step"].item() == 2
        assert torch.equal(state["exp_avg_sq"], fused.state[q]["exp_avg_sq"])


@pytest.mark.parametrize("name, offload", [("adamw", False), ("adamw", True), ("muon", False), ("adamw8bit", False)])
def test_a_resume_steps_with_the_configs_weight_decay_and_betas(tmp_path, name, offload):
    """A resume that changes weight_decay or the betas (its note says so) steps with the new ones: the loaded
    optimizer state used to bring back the checkpoint's, whatever the config said."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=8, vocab_size=32))
    before = optim.build(model, name, 0.1, 1e-2, (0.9, 0.95), "cpu", offload=offload)
    x = torch.randint(0, 32, (2, 8))
    model(x, x)[1].backward()
    before.step()
    state = dict(zip(("model", "optimizer"), checkpoint.full_state(model, before)), iter_num=1, model_args={})
    saved = checkpoint.load_checkpoint(checkpoint.save_checkpoint(state, tmp_path, 1, 1, log=print), log=print)
    after = optim.build(model, name, 0.0, 1e-2, (0.8, 0.99), "cpu", offload=offload)
    checkpoint.restore(saved, model, after)
    assert {g["weight_decay"] for g in after.param_groups} == {0.0}
    assert {tuple(g["betas"]) for g in after.param_groups if "betas" in g} == {(0.8, 0.99)}


def test_the_leanest_mode_composes_with_compile_and_full_checkpointing_and_resumes_exactly(tmp_path, data_dir):
    # compiled: the model per block, and torchao's 4-bit step over bf16 weights with its stochastic rounding
    leanest = [*MODEL, *flags("adamw4bit", "bfloat16"), "--compile=True", "--activation_checkpointing=full"]
    train(tmp_path / "run", data_dir, *leanest)
    seen = losses(tmp_path / "run")
    assert len(seen) == 8 and seen[-1] < seen[0]
    resumes_exactly(tmp_path / "run", tmp_path / "split", data_dir, *leanest)


def test_bf16_weights_save_before_their_first_step_and_refuse_fsdp(tmp_path, data_dir):
    with eager():
        skipped = train(tmp_path / "run", data_dir, *MODEL, *flags("adamw", "bfloat16"), "--max_iters=4",
                        env={"TRAINER_FAULTS": "nan@1,2,3,4"})  # no step taken when ckpt_4 is saved
        assert "saved" in skipped.stdout and "resuming after 4" in train(
            tmp_path / "run", data_dir, *MODEL, *flags("adamw", "bfloat16"), "--max_iters=6").stdout
    for source, dest in ((tmp_path / "run" / "ckpt_6.pt", tmp_path / "sharded"),
                         (tmp_path / "sharded" / "ckpt_6", tmp_path / "back")):  # converted in its own mode
        assert run_here(["scripts/convert_checkpoint.py", source, dest]).returncode == 0
    before, after = (torch.load(p, weights_only=True) for p in (tmp_path / "run" / "ckpt_6.pt", tmp_path / "back" / "ckpt_6.pt"))
    assert all(torch.equal(before["model"][k], after["model"][k]) and after["model"][k].dtype == torch.bfloat16
               for k in before["model"])
    under_torchrun = configurator.check(configurator.load_config(
        ["config/train_tiny.py", "--strategy=fsdp", *flags("adamw", "bfloat16")]), 1, distributed=True)
    assert "master_weights='bfloat16' runs without FSDP" in under_torchrun  # train.py fails with check()'s line
    check = configurator.check(configurator.load_config(["config/train_tiny.py", "--optimizer=adamw8bit",
                                                         "--optimizer_offload=True"]), 1)
    assert check.startswith("optimizer_offload=True runs PyTorch's AdamW on the host, not 'adamw8bit'")


def test_a_mode_change_on_resume_is_refused_with_the_way_out(tmp_path, data_dir):
    train(tmp_path / "run", data_dir, *MODEL, "--max_iters=2")
    result = train(tmp_path / "run", data_dir, *MODEL, "--optimizer=adamw8bit", check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("error: the checkpoint holds AdamW, fp32 weights state but "
                                                      "this config asks for 8-bit AdamW (torchao), fp32 weights")
    assert "resume with optimizer='adamw', master_weights='float32'" in last and "init_weights" in last
    # with fp32 weights, offload on or off is the same AdamW state in another place: both ways resume
    assert "resuming after 2" in train(tmp_path / "run", data_dir, *MODEL, "--max_iters=3",
                                       "--optimizer_offload=True").stdout
    assert "resuming after 3" in train(tmp_path / "run", data_dir, *MODEL, "--max_iters=4").stdout
    train(tmp_path / "bf16", data_dir, *MODEL, *flags("adamw", "bfloat16", True), "--max_iters=2")
    refused = train(tmp_path / "bf16", data_dir, *MODEL, *flags("adamw", "bfloat16"), check=False)
    assert refused.returncode == 1 and "holds AdamW on the host (offload), bf16 weights" in refused.stderr


def test_bf16_weights_accumulate_their_gradients_in_fp32():
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 1, bias=False)
    optim.use_bf16_weights(model)
    x = torch.randn(160, 256).to(torch.bfloat16)
    for row in x:  # 160 micro-batches, as the 6.7B config accumulates; each one's gradient is `row`
        model(row).sum().backward()
    exact = x.double().sum(0)
    assert model.weight.dtype == torch.bfloat16 and model.weight.grad.dtype == torch.float32
    torch.testing.assert_close(model.weight.grad[0].double(), exact, rtol=0, atol=1e-4)
    in_bf16 = torch.zeros(256, dtype=torch.bfloat16)
    for row in x:  # what bf16 accumulation would have given: each addition rounds to the sum's coarse step
        in_bf16 += row
    assert (in_bf16.double() - exact).abs().max() > 0.01


def plan_json(*argv):
    """scripts/plan.py --json's answer, in-process: the decision is a function call."""
    sys.path.insert(0, str(REPO / "scripts"))
    import plan
    with contextlib.redirect_stdout(io.StringIO()) as out:
        plan.main([*argv, "--json"])
    return json.loads(out.getvalue())


def test_memory_and_plan_price_each_mode():
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=32, n_head=32, n_embd=4096, block_size=2048, vocab_size=50304, bias=False))
    n = model.get_num_params(non_embedding=False)
    for mode in optim.STATE_BYTES:  # the AdamW modes ('muon': tests/test_muon.py)
        assert cost.estimate(model, 4, cost.Setup(optimizer=mode))["optimizer"] == optim.STATE_BYTES[mode] * n
    assert optim.STATE_BYTES["adamw8bit"] < 2.1 and optim.STATE_BYTES["adamw4bit"] < 1.1
    lean = cost.estimate(model, 4, cost.Setup(optimizer="adamw4bit", master_weights="bfloat16"))
    assert lean["weights"] == 2 * n and lean["grads"] == 4 * n and lean["autocast_bf16_weights"] == 0
    plan = plan_json("config/train_gpt3_6b_80gb.py", "--gpu", "h100")
    assert (plan["optimizer"], plan["master_weights"]) == ("adamw4bit", "bfloat16") and plan["fits"]
    assert plan["memory_gb"]["total"] <= 0.95 * 85.5  # the 80 GB config leaves 5% of the card free
    assert plan["activation_checkpointing"] == "selective"  # the room bf16 weights leave
    assert plan["total_gb_by_policy"]["full"] < 0.95 * 85.5


def test_stochastic_rounding_is_the_same_on_every_rank_whatever_its_dropout_stream():
    results = []
    for rank in range(2):
        torch.manual_seed(0)
        model = torch.nn.Linear(64, 64, bias=False)  # 4096 values: quantized state
        optim.use_bf16_weights(model)  # 4-bit over bf16: the step the leanest mode's runs above have compiled
        optimizer = optim.build(model, "adamw4bit", 0.1, 1e-3, (0.9, 0.95), "cpu", "bfloat16")
        torch.manual_seed(100 + rank)  # each rank's own stream, as train.py seeds it for dropout
        model(torch.randn(8, 64).to(torch.bfloat16)).square().sum().backward()
        model.weight.grad.copy_(torch.full_like(model.weight.grad, 1.0))  # the averaged gradient, equal on all
        before = model.weight.detach().clone()
        optim.step(optimizer, seed=7, device_type="cpu")
        results.append((model.weight.detach().clone(), torch.rand(1)))
        assert not torch.equal(model.weight, before)
    assert torch.equal(results[0][0], results[1][0])  # the same rounding
    assert not torch.equal(results[0][1], results[1][1])  # and each rank's own stream goes on untouched



# each mode under one policy, the two alternating (a simulation costs a second or two): what a mode changes
# (weights, moments, the step's temporaries) does not depend on the policy, and each policy meets both weights
@pytest.mark.parametrize("mode, policy", [(mode, [("selective", -1), ("full", 1)][i % 2])
                                          for i, mode in enumerate(optim.RECIPES)])
def test_the_estimate_of_each_mode_matches_the_simulation(mode, policy):
    # 2 blocks, one of them recomputed under "full": the simulation's cost grows with the depth, the margins do not
    config = GPTConfig(block_size=256, vocab_size=4096, n_layer=2, n_head=8, n_embd=256, bias=False,
                       activation_checkpointing=policy[0], recompute_blocks=policy[1])
    simulated = cost.simulate(config, 4, cost.Setup("bfloat16", *mode))
    with torch.device("meta"):
        estimated = cost.estimate(GPT(config), 4, cost.Setup("bfloat16", *mode))
    n = sum(p.numel() for p in GPT(config).parameters())
    per_param = optim.bytes_per_param(*mode)
    master_weights = mode[1]
    assert simulated["weights"] == per_param["weights"] * n
    assert simulated["optimizer"] == pytest.approx(per_param["optimizer"] * n, rel=0.02)  # small tensors unquantized
    # within 1% for fp32 weights; with bf16 weights the estimate keeps LayerNorm's fp32 input copies, as a
    # GPU's autocast makes them and the CPU's does not, and prices the chunked head's one chunk (B*T rows
    # here) at its many-chunk peak, so it is a little above the CPU's simulation, never below
    rel = 0.01 if master_weights == "float32" else 0.04
    assert estimated["total"] == pytest.approx(simulated["total"], rel=rel)
    assert master_weights == "float32" or estimated["total"] >= simulated["total"]


def test_plan_names_the_fastest_mode_that_fits_the_card():
    plan = plan_json("config/train_gpt3_6b.py", "--gpu", "h100")
    modes = {(m["optimizer"], m["master_weights"], m["optimizer_offload"]): m for m in plan["modes"]}
    # the memory modes, and Muon beside them (shown, never suggested to an AdamW config)
    assert set(modes) == {*optim.RECIPES, ("muon", "float32", False)} and not modes[("adamw", "float32", False)]["fits"]
    # leaner modes leave more room for activations, so less recompute
    assert modes[("adamw4bit", "bfloat16", False)]["step_time"] < modes[("adamw8bit", "float32", False)]["step_time"]
    # offload leaves the most room of all, but its copies cost time: 40 GB over PCIe a step at 6.7B
    offloaded = modes[("adamw", "bfloat16", True)]  # the only mode with room to recompute nothing
    assert [m for m in modes.values() if m["activation_checkpointing"] == "none"] == [offloaded]
    assert 1.005 < offloaded["step_time"] < 1.05
    # the most precise of the modes that need no full recompute at the config's micro-batch
    assert any("a leaner memory mode: --optimizer=adamw8bit --master_weights=bfloat16 --optimizer_offload=False"
               in s for s in plan["suggestions"])
    host = plan_json("config/train_gpt3_6b_80gb.py", "--gpu", "h100", "--optimizer=adamw", "--optimizer_offload=True")
    # 12 B/param, and the pinned allocator's rounding of each tensor to a power of two (c_attn's 201 MB: 268)
    assert 12 < host["host_memory_gb"]["optimizer_offload"] * 1e9 / host["params"] < 14 and host["memory_gb"]["optimizer"] == 0
    assert host["checkpoint_gb"] == pytest.approx(14 * host["params"] / 1e9)  # bf16 weights, fp32 master and moments


def test_build_decays_only_matrices():
    model = GPT(GPTConfig(block_size=32, vocab_size=96, n_layer=2, n_head=4, n_embd=64, bias=True))
    opt = optim.build(model, "adamw", 0.1, 1e-3, (0.9, 0.95), "cpu")
    decay, no_decay = opt.param_groups
    assert decay["weight_decay"] == 0.1 and all(p.dim() == 2 for p in decay["params"])
    assert no_decay["weight_decay"] == 0.0 and all(p.dim() == 1 for p in no_decay["params"])
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == model.get_num_params(False)


def test_adamw_state_is_made_at_build_and_trains_as_lazy_state_does():
    """The moments exist before the first forward (the allocator's unsplit memory goes to them), and
    the steps are those of PyTorch's own lazily initialised AdamW, bit for bit."""
    torch.manual_seed(0)
    built, lazy = (GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32)) for _ in range(2))
    lazy.load_state_dict(built.state_dict())
    ours = optim.build(built, "adamw", 0.1, 1e-3, (0.9, 0.95), "cpu")
    assert all(set(ours.state[p]) == {"step", "exp_avg", "exp_avg_sq"} for p in built.parameters())
    theirs = torch.optim.AdamW(optim.param_groups(lazy, 0.1), lr=1e-3, betas=(0.9, 0.95), foreach=False)
    x = torch.randint(0, 64, (4, 16))
    for _ in range(3):
        for model, optimizer in ((built, ours), (lazy, theirs)):
            optimizer.zero_grad()
            model(x, x)[1].backward()
            optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(built.parameters(), lazy.parameters()))
