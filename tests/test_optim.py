"""Memory-lean optimizers (optim.py): each mode trains, resumes bit-exactly from checkpoints that load
with weights_only, refuses a mode change on resume, and is priced right by memory.py and plan.py."""
import json
import subprocess
import sys

import pytest
import torch
import torchao.optim  # noqa: F401  (allow-lists its optimizer-state tensor subclasses for torch.load here)

import memory
import optim
from conftest import REPO
from model import GPT, GPTConfig
from test_train import assert_same_weights, train

LOW_BIT = ["adamw8bit", "adamw4bit"]
# wide enough that the matrices have >= 4096 values, which torchao quantizes (smaller ones stay fp32)
MODEL = ["--n_embd=64", "--max_iters=8", "--eval_interval=0"]


def losses(log):
    return [float(line.split("loss ")[1].split(",")[0]) for line in log.splitlines() if line.startswith("iter ")]


@pytest.mark.parametrize("mode", LOW_BIT)
def test_a_low_bit_mode_trains_and_resumes_exactly(tmp_path, data_dir, mode):
    whole = train(tmp_path / "whole", data_dir, *MODEL, f"--optimizer={mode}").stdout
    seen = losses(whole)
    assert len(seen) == 8 and seen[-1] < seen[0]
    train(tmp_path / "split", data_dir, *MODEL, f"--optimizer={mode}", "--max_iters=4")
    assert "resuming after 4" in train(tmp_path / "split", data_dir, *MODEL, f"--optimizer={mode}").stdout
    assert_same_weights(tmp_path / "whole" / "ckpt_8.pt", tmp_path / "split" / "ckpt_8.pt")
    # a fresh process, torchao not imported: the checkpoint still loads with weights_only=True
    probe = subprocess.run([sys.executable, "-c", f"import checkpoint; s = checkpoint.load_checkpoint("
                            f"{str(tmp_path / 'whole' / 'ckpt_8.pt')!r}, log=print); "
                            "print(type(next(iter(s['optimizer']['state'].values()))['exp_avg']).__name__)"],
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert probe.returncode == 0 and probe.stdout.strip().endswith("OptimState" + mode[5:]), probe.stderr


def test_a_mode_change_on_resume_is_refused_with_the_way_out(tmp_path, data_dir):
    train(tmp_path / "run", data_dir, *MODEL, "--max_iters=2")
    result = train(tmp_path / "run", data_dir, *MODEL, "--optimizer=adamw8bit", check=False)
    last = result.stdout.strip().splitlines()[-1]
    assert result.returncode == 1 and last.startswith("error: the checkpoint holds adamw state but optimizer='adamw8bit'")
    assert "init_weights" in last


def test_memory_and_plan_price_each_mode():
    with torch.device("meta"):
        model = GPT(GPTConfig(n_layer=32, n_head=32, n_embd=4096, block_size=2048, vocab_size=50304, bias=False))
    n = model.get_num_params(non_embedding=False)
    for mode in optim.OPTIMIZERS:
        assert memory.estimate(model, 4, optimizer=mode)["optimizer"] == optim.STATE_BYTES[mode] * n
    assert optim.STATE_BYTES["adamw8bit"] < 2.1 and optim.STATE_BYTES["adamw4bit"] < 1.1
    result = subprocess.run([sys.executable, "scripts/plan.py", "config/train_gpt3_6b_80gb.py", "--gpu", "h100",
                             "--json"], cwd=REPO, capture_output=True, text=True, timeout=120)
    plan = json.loads(result.stdout)
    assert plan["optimizer"] == "adamw4bit" and plan["fits"]
    assert plan["memory_gb"]["total"] <= 0.95 * 85.5  # the 80 GB config leaves 5% of the card free
    assert plan["total_gb_by_policy"]["full"] < 0.95 * 85.5
