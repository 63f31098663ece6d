"""scripts/ab.py end to end on a tiny model: two seeds a side, its JSON and PNG, and tokens-to-target.
ab.py runs in this interpreter, and so do three of its four train.py runs; the last one is the real
process ab.py starts."""
import json
import subprocess

import pytest

from conftest import VOCAB, run_here

TINY = (f"--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --vocab_size={VOCAB} --batch_size=4 "
        "--gradient_accumulation_steps=1 --warmup_iters=2 --max_iters=12 --lr_decay_iters=12 --eval_interval=4 "
        "--eval_iters=2 --log_interval=4")


@pytest.mark.e2e  # the last train.py is a process
def test_ab_reports_both_sides_over_two_seeds(data_dir, tmp_path, monkeypatch):
    real, started = subprocess.run, []

    def train_here(command, **kwargs):
        """ab.py's train.py commands, run here but for the last (its stdout is thrown away, as ab.py does)."""
        if command[1:2] != ["train.py"] or len(started) == 3:
            return real(command, **kwargs)
        started.append(command)
        result = run_here(command[1:], env={"OMP_NUM_THREADS": "1"})
        return subprocess.CompletedProcess(command, result.returncode, None, result.stderr)

    monkeypatch.setattr(subprocess, "run", train_here)
    result = run_here(["scripts/ab.py", "config/train_tiny.py", "--a", "--learning_rate=1e-4",
                       "--b", "--learning_rate=3e-3", "--common", f"{TINY} --data_dir={data_dir}", "--seeds", "2",
                       "--out", str(tmp_path)])
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(started) == 3 and result.stdout.count("+ train.py ") == 4  # and one real process
    report = json.loads((tmp_path / "ab.json").read_text())
    assert report["seeds"] == [1337, 1338] and len(report["curves"]["a"]) == 2
    a, b = report["a_final_val_loss"], report["b_final_val_loss"]
    assert len(a["per_seed"]) == 2 and a["min"] <= a["mean"] <= a["max"]
    assert b["mean"] < a["mean"]  # 30x the learning rate learns far more in 12 steps
    assert report["tokens_ratio"] > 1 and report["b_tokens_to_a_final"] <= report["a_tokens"]
    assert (tmp_path / "ab.png").stat().st_size > 0
    assert "tokens-to-target" in result.stdout
