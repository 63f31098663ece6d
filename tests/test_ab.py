"""scripts/ab.py end to end on a tiny model: two seeds a side, its JSON and PNG, and tokens-to-target."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, VOCAB

TINY = (f"--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --vocab_size={VOCAB} --batch_size=4 "
        "--gradient_accumulation_steps=1 --warmup_iters=2 --max_iters=12 --lr_decay_iters=12 --eval_interval=4 "
        "--eval_iters=2 --log_interval=4")


@pytest.mark.e2e
def test_ab_reports_both_sides_over_two_seeds(data_dir, tmp_path):
    result = subprocess.run(
        [sys.executable, "scripts/ab.py", "config/train_tiny.py", "--a", "--learning_rate=1e-4",
         "--b", "--learning_rate=3e-3", "--common", f"{TINY} --data_dir={data_dir}", "--seeds", "2",
         "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads((tmp_path / "ab.json").read_text())
    assert report["seeds"] == [1337, 1338] and len(report["curves"]["a"]) == 2
    a, b = report["a_final_val_loss"], report["b_final_val_loss"]
    assert len(a["per_seed"]) == 2 and a["min"] <= a["mean"] <= a["max"]
    assert b["mean"] < a["mean"]  # 30x the learning rate learns far more in 12 steps
    assert report["tokens_ratio"] > 1 and report["b_tokens_to_a_final"] <= report["a_tokens"]
    assert (tmp_path / "ab.png").stat().st_size > 0
    assert "tokens-to-target" in result.stdout
