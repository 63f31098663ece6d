"""train.py's decisions, called in-process: the configuration's help and provenance, the start point,
the model config every tool builds, the wrapping, the step verdict and the step line."""
import os
import sys

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import configurator
from model import GPT, model_config
from trainer import checkpoint, checkpointer, faults, hardware, parallel, runlog
from trainer.checkpointer import StartError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import plan  # noqa: E402

quiet = lambda line: None  # noqa: E731
TINY = ["config/train_tiny.py", "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=16"]


def test_every_key_has_a_one_line_help_shown_by_usage():
    assert configurator.missing_help() == [], "keys without a line in configurator.HELP"
    assert set(k for group in configurator.HELP.values() for k in group) <= set(configurator.DEFAULTS)
    text = configurator.usage()
    for group, keys in configurator.HELP.items():
        assert f"\n{group}:\n" in text
        for key, line in keys.items():
            assert "\n" not in line and f"  {key} = {configurator.DEFAULTS[key]!r}  # {line}" in text


def test_the_config_records_where_each_value_came_from(tmp_path):
    extra = tmp_path / "extra.py"
    extra.write_text("n_layer = 4  # the value train_tiny.py gives it too\n_private = 1\n")
    cfg = configurator.load_config(["config/train_tiny.py", str(extra), "--n_head=2"])
    assert cfg.sources["n_head"] == "on the command line"
    assert cfg.sources["n_layer"] == f"in {extra}"  # the last file that set it
    assert cfg.sources["n_embd"] == "in config/train_tiny.py" and cfg.sources["beta2"] == "by default"
    assert "sources" not in vars(cfg)  # never saved among the settings


def save_run(out_dir, iter_num, **model_args):
    args = {**dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=320, bias=False, activation="gelu",
                   n_tokens=0), **model_args}
    checkpoint.save_checkpoint({"model": {}, "iter_num": iter_num, "model_args": args}, str(out_dir), iter_num, 0,
                               log=quiet)


def start_point(*argv):
    cfg = configurator.load_config([*TINY, *argv])
    return cfg, checkpointer.start_point(cfg, configurator.DEFAULTS, True, quiet)


def test_start_point_continues_scratch_or_refuses(tmp_path):
    out = tmp_path / "run"
    cfg, start = start_point(f"--out_dir={out}")  # auto, nothing there: scratch
    assert start.state is None and start.saved_args is None and start.origin is None
    for argv, message in [(["--init_from=resume"], "has no checkpoint; use init_from='auto'"),
                          ([f"--init_weights={out}", "--init_from=resume"], "drop one of them"),
                          ([f"--init_from={out}/ckpt_9.pt"], "no such checkpoint")]:
        with pytest.raises(StartError, match=message):
            start_point(f"--out_dir={out}", *argv)
    save_run(out, 4, activation="gelu_tanh")  # a key the config leaves at its default
    cfg, start = start_point(f"--out_dir={out}")
    assert start.state["iter_num"] == 4 and start.origin == "the checkpoint"
    assert cfg.activation == "gelu_tanh" and cfg.sources["activation"] == "from the checkpoint"  # what it implies
    assert model_config(cfg, start.saved_args).activation == "gelu_tanh"
    with pytest.raises(StartError, match="init_from='scratch' but .* holds 1 checkpoint"):
        start_point(f"--out_dir={out}", "--init_from=scratch")


def test_an_architecture_conflict_names_where_it_was_set(tmp_path):
    out = tmp_path / "run"
    save_run(out, 2)
    with pytest.raises(StartError, match=r"n_layer=3 \(set on the command line\) conflicts with the "
                                                 r"checkpoint's n_layer=2"):
        start_point(f"--out_dir={out}", "--n_layer=3")
    wider = tmp_path / "wider.py"
    wider.write_text("n_embd = 48\n")
    with pytest.raises(StartError, match=rf"n_embd=48 \(set in {wider}\) conflicts"):
        start_point(f"--out_dir={out}", str(wider))


def test_init_from_a_path_rolls_back_the_newer_checkpoints(tmp_path):
    out = tmp_path / "run"
    for n in (2, 4, 6):
        save_run(out, n)
    _, start = start_point(f"--out_dir={out}", f"--init_from={out}/ckpt_4.pt")
    assert start.state["iter_num"] == 4 and [n for n, _ in checkpoint.list_checkpoints(str(out))] == [4, 2]


def test_one_model_config_for_train_plan_and_bench():
    cfg = configurator.load_config([*TINY, "--activation=gelu_tanh", "--activation_checkpointing=auto"])
    config = model_config(cfg)
    assert config.activation == "gelu_tanh" and config.activation_checkpointing == "none"  # auto: none until settled
    assert plan.build_meta_model(cfg).config == config  # plan.py once built one without `activation`
    assert plan.build_meta_model(cfg, "full", 1).config == model_config(cfg, activation_checkpointing="full",
                                                                           recompute_blocks=1)
    saved = dict(n_layer=3, n_head=2, n_embd=32, block_size=8, vocab_size=64, bias=True, activation="gelu", n_tokens=50)
    from_checkpoint = model_config(cfg, saved)
    assert (from_checkpoint.n_layer, from_checkpoint.bias, from_checkpoint.n_tokens) == (3, True, 50)
    assert model_config(saved_args=saved, dropout=0.1).dropout == 0.1


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_wrap_per_mode(one_process_group):
    cfg = configurator.load_config(TINY)
    assert parallel.mode(cfg, False) == "single" and parallel.mode(cfg, True) == "ddp"
    cfg.master_weights = "bfloat16"
    assert parallel.mode(cfg, True) == "by_hand"
    cfg.master_weights, cfg.strategy = "float32", "hsdp"
    assert parallel.mode(cfg, True) == "fsdp"
    cfg.strategy = "ddp"
    model = GPT(model_config(cfg))
    assert parallel.wrap(model, cfg, "single", 1, "cpu", 0, quiet) is model
    wrapped = parallel.wrap(model, cfg, "ddp", 1, "cpu", 0, quiet)
    assert isinstance(wrapped, DDP) and all(p.grad is not None and not p.grad.any() for p in model.parameters())
    parallel.sync_gradients(wrapped, False)
    assert wrapped.require_backward_grad_sync is False
    assert parallel.agree(True, "cpu") and not parallel.agree(False, "cpu")
    assert parallel.same_on_every_rank(torch.tensor(2.5), torch.tensor(1.0)) == [2.5, 1.0]
    assert parallel.all_finite(model.parameters(), "cpu")


def test_the_step_verdict_counts_non_finite_steps_and_judges_spikes():
    guard = faults.SpikeGuard(window=3, loss_z=2.0, grad_z=0.0, rollback_after=2)
    assert guard.verdict(1, float("nan"), 1.0, {"at": 1}) == faults.NONFINITE
    assert guard.verdict(2, 1.0, float("inf"), {"at": 2}) == faults.NONFINITE
    assert (guard.nonfinite_in_a_row, guard.nonfinite_total) == (2, 2) and guard.burst(2) == (1, {"at": 1})
    for step, loss in [(3, 1.0), (4, 1.1), (5, 0.9)]:
        assert guard.verdict(step, loss, 1.0, {}) is None
    assert guard.nonfinite_in_a_row == 0
    assert guard.verdict(6, 50.0, 1.0, {}, judged=False) is None  # before warmup: not judged
    assert guard.verdict(7, 50.0, 1.0, {}).startswith("loss 50 is ")
    guard.rollbacks = [{"at": 9, "to": 4, "first_spike": 7}]
    assert guard.replayed(8) and not guard.replayed(10)


def test_the_step_line_and_its_clock():
    said = []
    clock = runlog.StepClock(compiling=True, log=said.append)
    clock.lap(3.0)
    assert said == ["first step took 3.0s (includes warm-up and compilation)"] and clock.eta(10) is None
    clock.lap(1.0)
    assert len(said) == 1 and clock.eta(7200) == 7200.0
    figures = dict(loss=2.0, step_time=0.1, tokens_per_sec=97038, lr=1e-4, grad_norm=0.5, mfu=0.4, hfu=0.5)
    line = runlog.step_line(5, figures, "1.0GB RSS", 8, clock.eta(7200))
    assert line == ("iter 5: loss 2.0000, time 100ms, mfu 40.0%, tok/s 97,038 (12,130 per GPU), lr 1.000e-04, "
                    "grad norm 0.500, mem 1.0GB RSS, eta 2.0h")
    assert runlog.step_line(1, dict(figures, mfu=None), "m", show_hfu=True).endswith("mem m, hfu 50.0%")


def test_utilisation_counts_recompute_only_where_it_runs():
    cfg = configurator.load_config(TINY)
    for policy, recomputes in [("none", False), ("full", True)]:
        config = model_config(cfg, activation_checkpointing=policy)
        use = hardware.Utilisation(1000, 100, config, peak_tflops=1.0, world_size=2)
        mfu, hfu = use(2e9)
        assert use.recomputes is recomputes and (hfu > mfu) is recomputes
        assert mfu == pytest.approx(use.model * 1e9 / 1e12)
    assert hardware.Utilisation(1000, 100, model_config(cfg), 0.0, 1)(1e6) == (None, None)
