"""A checkpoint written before the Checkpointer (issue 37) still loads and resumes exactly.

The old checkpoint is made here, not stored: train.py as it was at a304d18 (the last commit before the
Checkpointer, taken from git) trains four steps of this file's tiny model (spike guard on, so its state is in the
file too), and today's train.py resumes it. Both read conftest's bins from a folder named `data`: a source's
name is its folder's name, and a checkpoint's sampler state is kept per source name.
"""
import os
import shutil
import subprocess

import pytest

from conftest import REPO, python, run_here
from trainer import metrics

BEFORE = "a304d18"  # the last commit whose train.py wrote checkpoints without the Checkpointer
ARGS = [
    "--n_layer=1", "--n_head=2", "--n_embd=16", "--block_size=16", "--vocab_size=64", "--batch_size=4",
    "--gradient_accumulation_steps=2", "--dropout=0.1", "--learning_rate=3e-3", "--min_lr=3e-4", "--warmup_iters=2",
    "--lr_decay_iters=40", "--eval_interval=0", "--eval_iters=2", "--log_interval=1", "--checkpoint_interval=4",
    "--keep_last_n=1", "--device=cpu", "--dtype=float32", "--wandb_log=False", "--spike_loss_z=5", "--spike_grad_z=5",
    "--spike_window=3", "--max_iters=8",
]


def train(out_dir, data):
    result = run_here(["train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data}", f"--out_dir={out_dir}"])
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def train_before(out_dir, data, tmp_path):
    """Four steps of train.py at BEFORE, in a process of its own (its modules are not today's), into out_dir."""
    tree = tmp_path / BEFORE
    tree.mkdir()
    try:
        archive = subprocess.run(["git", "archive", BEFORE], cwd=REPO, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs the git history with {BEFORE} (a shallow clone lacks it)")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    args = [a for a in ARGS if not a.startswith("--max_iters=")]
    result = python(["train.py", "config/train_tiny.py", *args, "--max_iters=4", f"--data_dir={data}",
                     f"--out_dir={out_dir}"], cwd=tree, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout + result.stderr


def steps(out_dir):
    return [(r["iter"], r["loss"], r["grad_norm"], r["lr"]) for r in metrics.read(out_dir, "step")]


@pytest.mark.e2e
def test_a_checkpoint_from_before_the_checkpointer_resumes_to_an_uninterrupted_runs_losses(tmp_path, data_dir):
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    train(tmp_path / "whole", data)
    written = tmp_path / "written"
    train_before(written, data, tmp_path)
    resumed = tmp_path / "resumed"
    resumed.mkdir()
    shutil.copy(written / "ckpt_4.pt", resumed)  # the checkpoint alone, as a user would bring it
    assert "resuming after 4 completed steps" in train(resumed, data).stdout
    assert [s[0] for s in steps(resumed)] == [5, 6, 7, 8]
    assert steps(resumed) == steps(tmp_path / "whole")[4:]
