"""optimizer='muon' (optim.MuonAdamW): torch's Muon on the blocks' matrices and AdamW on the rest, as one
optimizer that steps as the two would apart, resumes bit-exactly, is refused where it cannot compose,
is priced by cost.py and plan.py, and under torchrun (DDP, FSDP2) gives one process's losses."""
import copy
import shutil

import pytest
import torch

import configurator
from model import GPT, GPTConfig
from test_optim import plan_json
from test_train import assert_same_weights, train
from trainer import cost, optim

MUON = ["--optimizer=muon", "--max_iters=8", "--eval_interval=0"]


def tiny_gpt():
    torch.manual_seed(0)
    return GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=2, n_head=2, n_embd=32, bias=True))


def step(model, x, *optimizers):
    """One training step of model on the batch x (inputs and targets alike), by each optimizer in turn."""
    model.zero_grad()
    model(x, x)[1].backward()
    for o in optimizers:
        o.step()


def test_muon_on_the_blocks_matrices_steps_as_torchs_muon_and_adamw_apart_and_reloads():
    ours_model, apart_model, reloaded_model = tiny_gpt(), tiny_gpt(), tiny_gpt()
    ours = optim.build(ours_model, "muon", 0.1, 1e-3, (0.9, 0.95), "cpu")
    names = {p: n for n, p in ours_model.named_parameters()}
    assert {n: sorted(ours.state[p]) for p, n in names.items()} == {  # made at build, as AdamW's is
        n: ["momentum_buffer"] if optim.is_muon_matrix(n, p) else ["exp_avg", "exp_avg_sq", "step"]
        for n, p in ours_model.named_parameters()}
    under_muon = sorted(names[p] for p in ours.muon.param_groups[0]["params"])
    assert under_muon == sorted(f"transformer.h.{i}.{m}.weight" for i in range(2)
                                for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"))
    n_muon = sum(p.numel() for p in ours.muon.param_groups[0]["params"])
    assert n_muon == 2 * (3 + 1 + 4 + 4) * 32 * 32
    assert ours.describe() == f"muon: {n_muon:,} parameters under Muon (8 matrices), " \
                              f"{ours_model.get_num_params(False) - n_muon:,} under AdamW"
    # the same steps as torch's two optimizers side by side, with Moonshot's lr adjustment
    params = dict(apart_model.named_parameters())
    matrices = [p for n, p in params.items() if optim.is_muon_matrix(n, p)]
    rest = [p for n, p in params.items() if not optim.is_muon_matrix(n, p)]
    muon = torch.optim.Muon(matrices, lr=1e-3, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    adamw = torch.optim.AdamW([{"params": [p for p in rest if p.dim() == 2], "weight_decay": 0.1},
                               {"params": [p for p in rest if p.dim() < 2], "weight_decay": 0.0}],
                              lr=1e-3, betas=(0.9, 0.95), foreach=False)
    x = torch.randint(0, 64, (4, 16))
    for _ in range(3):
        step(ours_model, x, ours)
        step(apart_model, x, muon, adamw)
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), apart_model.parameters()))
    # through a state dict into a fresh one (as a resume does): the next steps are the same
    reloaded_model.load_state_dict(ours_model.state_dict())
    reloaded = optim.build(reloaded_model, "muon", 0.1, 1e-3, (0.9, 0.95), "cpu")
    reloaded.load_state_dict(copy.deepcopy(ours.state_dict()))  # a copy: a loaded state dict shares tensors
    optim.set_lr(reloaded, 2e-3)
    optim.set_lr(ours, 2e-3)
    for _ in range(2):
        step(ours_model, x, ours)
        step(reloaded_model, x, reloaded)
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), reloaded_model.parameters()))


def test_split_qkv_steps_the_fused_qkv_as_torchs_muon_steps_q_k_and_v_as_three_matrices():
    """muon_split_qkv: c_attn's three (C, C) row blocks each orthogonalised, and their lr adjusted, as torch's Muon
    does three matrices of their own (modded-nanogpt's, Moonshot's and nanochat's layout); the rest as before."""
    ours_model, fused_model = tiny_gpt(), tiny_gpt()
    ours = optim.build(ours_model, "muon", 0.1, 1e-3, (0.9, 0.95), "cpu", muon_split_qkv=True)
    fused = optim.build(fused_model, "muon", 0.1, 1e-3, (0.9, 0.95), "cpu")
    assert ours.describe().startswith("muon: 24,576 parameters under Muon (8 matrices, qkv as q, k and v apart)")
    qkv = ours_model.transformer.h[0].attn.c_attn.weight
    apart = [torch.nn.Parameter(block.detach().clone()) for block in qkv.chunk(3)]
    muon = torch.optim.Muon(apart, lr=1e-3, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    x = torch.randint(0, 64, (4, 16))
    for _ in range(3):
        step(ours_model, x, ours)
        step(fused_model, x, fused)
        for p, grad in zip(apart, qkv.grad.chunk(3)):
            p.grad = grad.clone()
        muon.step()
    assert torch.equal(qkv, torch.cat(apart))
    assert not torch.equal(qkv, fused_model.transformer.h[0].attn.c_attn.weight)  # the fused step is another
    split_flops = optim.newton_schulz_flops(ours_model, split_qkv=True) - optim.newton_schulz_flops(ours_model)
    assert split_flops == 2 * (3 * optim.matrix_newton_schulz_flops(32, 32) - optim.matrix_newton_schulz_flops(96, 32))
    # the fast recipe sets it, and its ladder's AdamW recipe runs beside it: no effect without Muon, not refused
    fast_adamw = configurator.load_config(["config/train_gpt3_6b_fast.py", "--optimizer=adamw"])
    assert configurator.check(fast_adamw, 1) is None


def test_what_muon_does_not_compose_with_is_refused_in_one_line():
    def check(*overrides):
        return configurator.check(configurator.load_config(["config/train_tiny.py", "--optimizer=muon", *overrides]), 1)
    assert check() is None and check("--fp8=tensorwise", "--dtype=bfloat16") is None
    for refused in (["--master_weights=bfloat16", "--dtype=bfloat16"], ["--optimizer_offload=True"]):
        assert check(*refused).startswith("optimizer='muon' steps fp32 weights on the device: set "
                                          "master_weights='float32' and optimizer_offload=False")


@pytest.mark.e2e
def test_a_muon_run_resumes_bit_exactly_and_refuses_another_optimizer(tmp_path, data_dir):
    whole = train(tmp_path / "whole", data_dir, *MUON).stdout
    assert "muon: 24,576 parameters under Muon (8 matrices), 2,720 under AdamW" in whole
    (tmp_path / "split").mkdir()  # the whole run's checkpoint of step 4 (TINY saves every 4), resumed
    shutil.copy(tmp_path / "whole" / "ckpt_4.pt", tmp_path / "split")
    # in a fresh process: Muon's momentum and its AdamW half come from the file alone
    assert "resuming after 4" in train(tmp_path / "split", data_dir, *MUON, process=True).stdout
    assert_same_weights(tmp_path / "whole" / "ckpt_8.pt", tmp_path / "split" / "ckpt_8.pt")
    # q, k and v apart from here on: the same state, another step, said at the resume
    apart = train(tmp_path / "split", data_dir, *MUON, "--max_iters=9", "--muon_split_qkv=True").stdout
    assert "note: muon_split_qkv False -> True since the checkpoint: from here on Muon orthogonalises q, k and v " \
           "apart" in apart
    refused = train(tmp_path / "split", data_dir, *MUON, "--optimizer=adamw", "--max_iters=10", check=False)
    assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1].startswith(
        "error: the checkpoint holds Muon on the blocks' matrices and AdamW on the rest, fp32 weights state but "
        "this config asks for AdamW, fp32 weights: resume with optimizer='muon'")


@pytest.mark.e2e
def test_muon_under_ddp_fsdp_and_hsdp_matches_one_process(tmp_path, data_dir):
    """DDP steps each matrix as torch's Muon does, on the all-reduced gradients; FSDP2 and HSDP orthogonalise each
    matrix on its owner rank and scatter the shards back (split_qkv's three blocks too); all follow one process's
    losses and weights, through an FSDP resume."""
    from test_distributed import final_weights, losses, run
    args = ["--optimizer=muon", "--max_iters=4", "--eval_interval=0"]
    run(tmp_path / "one", data_dir, *args)  # one process: in this interpreter
    run(tmp_path / "ddp", data_dir, *args, nproc=2)
    run(tmp_path / "fsdp", data_dir, *args, "--strategy=fsdp", "--max_iters=2", nproc=2)
    assert "resuming after 2" in run(tmp_path / "fsdp", data_dir, *args, "--strategy=fsdp", nproc=2).stdout
    # HSDP's 2-D mesh (1 replica x 2 shards): the owner is found on the mesh's shard dimension
    run(tmp_path / "hsdp", data_dir, *args, "--strategy=hsdp", "--hsdp_shard_size=2", nproc=2)
    # q, k and v apart: the owner orthogonalises the gathered matrix's three blocks
    run(tmp_path / "one_split", data_dir, *args, "--muon_split_qkv=True")
    run(tmp_path / "fsdp_split", data_dir, *args, "--muon_split_qkv=True", "--strategy=fsdp", nproc=2)
    for out, reference in (("ddp", "one"), ("fsdp", "one"), ("hsdp", "one"), ("fsdp_split", "one_split")):
        one = final_weights(tmp_path / reference, 4)
        assert losses(tmp_path / out) == pytest.approx(losses(tmp_path / reference), abs=2e-4), out
        # Newton-Schulz runs in bf16: a gradient summed in another order can move an update by a bf16 step
        # (lr x 0.2 sqrt(96) x 2^-8 ~ 2e-5 a step here), more than test_distributed's fp32 tolerance
        for name, weight in final_weights(tmp_path / out, 4).items():
            torch.testing.assert_close(weight, one[name], rtol=0, atol=2e-4, msg=f"{out}: {name}")


def test_memory_prices_muons_momentum_and_its_step():
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=32, n_head=32, n_embd=4096, block_size=2048, vocab_size=50304, bias=False))
    n, matrices = model.get_num_params(non_embedding=False), 32 * 12 * 4096 ** 2
    assert optim.muon_share(model) == matrices / n
    assert cost.estimate(model, 4, cost.Setup(optimizer="muon"))["optimizer"] == pytest.approx(4 * matrices + 8 * (n - matrices))
    assert optim.checkpoint_bytes(n, ("muon", "float32", False), optim.muon_share(model)) == \
        pytest.approx(4 * n + 4 * matrices + 8 * (n - matrices))
    # a step-dominated toy (one token row, wide matrices): the estimate's step temporaries match the simulation's
    config = GPTConfig(n_layer=1, n_head=4, n_embd=512, block_size=8, vocab_size=64, activation_checkpointing="none")
    with torch.device("meta"):
        toy = GPT(config)
    estimated, simulated = cost.estimate(toy, 1, cost.Setup(optimizer="muon")), cost.simulate(config, 1, cost.Setup(optimizer="muon"))
    assert estimated["optimizer"] == pytest.approx(simulated["optimizer"], rel=1e-4)  # AdamW's step counters
    assert estimated["total"] == pytest.approx(simulated["total"], rel=0.05)


def test_plan_shows_what_muons_state_buys_at_6_7b_on_an_h200():
    def plan(*overrides):
        return plan_json("config/train_gpt3_6b.py", "--gpu", "h200", *overrides)
    adamw, muon = plan(), plan("--optimizer=muon")
    saved = 4 * 32 * 12 * 4096 ** 2 / 1e9  # 4 bytes a matrix value: Muon's one momentum for AdamW's two
    assert adamw["memory_gb"]["optimizer"] - muon["memory_gb"]["optimizer"] == pytest.approx(saved)
    for policy, total in adamw["total_gb_by_policy"].items():
        assert total - muon["total_gb_by_policy"][policy] == pytest.approx(saved), policy
    # what it buys: no recompute at all, where AdamW needs selective checkpointing
    assert (adamw["activation_checkpointing"], muon["activation_checkpointing"]) == ("selective", "none")
    assert 0 < muon["muon_seconds_per_iter"] < 0.02 * muon["seconds_per_iter"] and adamw["muon_seconds_per_iter"] == 0
    assert muon["checkpoint_gb"] == pytest.approx(adamw["checkpoint_gb"] - saved)


def test_spike_rollback_restores_muons_momentum_bit_exactly(tmp_path, data_dir):
    """A burst of spikes rolls a Muon run back to a checkpoint (its momentum with it); stopped in the middle of
    the burst and resumed, the run ends where the uninterrupted one does, bit for bit."""
    from test_spikes import spiky
    assert "rolled back to iter 6" in spiky(tmp_path / "whole", data_dir, "--optimizer=muon").stdout
    spiky(tmp_path / "split", data_dir, "--optimizer=muon", "--max_iters=10")
    assert "rolled back to iter 6" in spiky(tmp_path / "split", data_dir, "--optimizer=muon").stdout
    assert_same_weights(tmp_path / "whole" / "ckpt_16.pt", tmp_path / "split" / "ckpt_16.pt")
