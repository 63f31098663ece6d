"""Host memory priced beside GPU memory (cost.host_estimate, cost.host_problem): offload's pinned state,
async checkpoint staging, batches, the loader; train.py refuses a run whose host memory does not fit, in one
line, before the model is built; plan.py prints the estimate."""
import functools
import sys
import types

import pytest
import torch

import configurator
from conftest import REPO, run_here
from model import GPT, GPTConfig
from trainer import cost, offload, optim
from test_train import TINY

sys.path.insert(0, str(REPO / "scripts"))
import plan  # noqa: E402


def config(*overrides):
    return types.SimpleNamespace(**vars(configurator.load_config(["config/train_gpt3_6b.py", *overrides])))


@functools.cache
def meta_model():
    """Small shapes (6.7B's take seconds to build even on the meta device; plan.py's test has them)."""
    with torch.device("meta"):
        return GPT(GPTConfig(n_layer=2, n_head=4, n_embd=256, block_size=2048, vocab_size=50304))


def test_the_estimate_adds_up_its_parts():
    cfg = config("--optimizer_offload=True", "--checkpoint_async=True")
    model = meta_model()
    numels = [p.numel() for p in model.parameters()]
    one = cost.host_estimate(model, cfg, 4)
    assert one["optimizer_offload"] == offload.host_bytes(numels, 4)  # 89 GB of pinned master and moments
    assert one["checkpoint_staging"] == optim.checkpoint_bytes(sum(numels), optim.mode_of(vars(cfg)))  # 80 GB
    assert one["total"] == pytest.approx(sum(v for k, v in one.items() if k != "total"))
    # DDP on 8 GPUs of one machine: every process its own offload state, rank 0 alone stages the .pt
    eight = cost.host_estimate(model, cfg, 4, world_size=8, processes=8)
    assert eight["optimizer_offload"] == 8 * one["optimizer_offload"]
    assert eight["checkpoint_staging"] == one["checkpoint_staging"]
    assert eight["runtime"] == 8 * cost.RUNTIME_HOST_BYTES and eight["batches"] == 8 * one["batches"]
    # FSDP over 2 machines of 8: each process stages its shard, a machine holds 8 of the 16
    sharded = cost.host_estimate(model, config("--strategy=fsdp", "--checkpoint_async=True"), 4, 16, 8)
    assert sharded["checkpoint_staging"] == pytest.approx(one["checkpoint_staging"] / 2)
    assert sharded["optimizer_offload"] == 0
    # synchronous saves and no offload: only the small parts
    plain = cost.host_estimate(model, config(), 4)
    assert plain["optimizer_offload"] == plain["checkpoint_staging"] == 0 and plain["total"] < one["total"]
    # a CPU run's training step lives in host memory too, with the allocator's margin
    assert cost.host_estimate(model, config(), 4, device_peak=1e9)["training_step"] == cost.needed_bytes(1e9)


def test_host_problem_is_one_line_naming_what_to_change():
    estimate = {"optimizer_offload": 89.2e9, "checkpoint_staging": 79.9e9, "batches": 0.0, "loader": 0.1e9,
                "runtime": 2e9, "training_step": 0.0}
    estimate["total"] = sum(estimate.values())
    assert cost.host_problem(estimate, (256e9, "the machine's memory")) is None
    problem = cost.host_problem(estimate, (128e9, "the machine's memory"))
    assert "\n" not in problem and "171.2 GB" in problem and "128.0 GB" in problem
    assert "optimizer_offload=False" in problem and "checkpoint_async=False" in problem


def test_train_refuses_offload_and_async_on_a_small_host_before_building(tmp_path, data_dir, monkeypatch):
    """train.py in this process, on a host sized halfway between what its run needs without offload and
    async saves and what it needs with them: one line, before the model is built."""
    estimates, real = [], cost.host_estimate

    def recording(model, cfg, *args):
        estimates.append((model, cfg, args))
        return real(model, cfg, *args)

    def halfway():
        model, cfg, args = estimates[-1]
        plain = types.SimpleNamespace(**{**vars(cfg), "optimizer_offload": False, "checkpoint_async": False})
        return (real(model, plain, *args)["total"] + real(model, cfg, *args)["total"]) / 2, "the machine's memory"

    monkeypatch.setattr(cost, "host_estimate", recording)
    monkeypatch.setattr(cost, "host_capacity", halfway)
    args = ["config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path}"]
    stopped = run_here(["train.py", *args, "--optimizer_offload=True", "--checkpoint_async=True"],
                       env={name: "" for name in cost.ALLOCATOR_VARIABLES})
    out = stopped.stdout
    errors = [line for line in stopped.stderr.splitlines() if line.startswith("error:")]
    assert stopped.returncode == 1 and len(errors) == 1, stopped.stderr
    assert errors[0].startswith("error: host memory: the estimate is") and "optimizer_offload=False" in errors[0] \
        and "checkpoint_async=False" in errors[0] and "training step" in errors[0]  # a CPU run's step is host memory
    assert "building the model" not in out
    # the same host takes the run without them, by the same rule
    model, cfg, run_args = estimates[-1]
    plain = types.SimpleNamespace(**{**vars(cfg), "optimizer_offload": False, "checkpoint_async": False})
    assert cost.host_problem(real(model, plain, *run_args)) is None


def test_plan_prints_the_host_memory_line(capsys):
    plan.main(["config/train_gpt3_6b.py", "--gpu", "h200", "--optimizer_offload=True", "--checkpoint_async=True"])
    lines = [line for line in capsys.readouterr().out.splitlines() if "host memory:" in line]
    assert len(lines) == 1 and "171.2 GB per machine" in lines[0] and "optimizer offload 89.2" in lines[0] \
        and "checkpoint staging 79.9" in lines[0]
