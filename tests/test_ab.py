"""scripts/ab.py end to end on a tiny model: two seeds a side, its JSON and PNG, and tokens-to-target; run again,
its runs reused, or refused where a side asks for other settings. ab.py runs in this interpreter, and so do three
of its four train.py runs; the last one is the real process ab.py starts. Its refusals of bad input, in-process."""
import json
import subprocess
import sys

import pytest

import configurator
from conftest import REPO, VOCAB, run_here
from trainer import metrics

sys.path.insert(0, str(REPO / "scripts"))
import ab  # noqa: E402

TINY = (f"--n_layer=2 --n_head=2 --n_embd=32 --block_size=16 --vocab_size={VOCAB} --batch_size=4 "
        "--gradient_accumulation_steps=1 --warmup_iters=2 --max_iters=12 --lr_decay_iters=12 --eval_interval=4 "
        "--eval_iters=2 --log_interval=4 --min_lr=1e-5")  # min_lr below both sides' learning rates


@pytest.mark.e2e  # the last train.py is a process
def test_ab_reports_both_sides_over_two_seeds(data_dir, tmp_path, monkeypatch):
    real, started = subprocess.run, []

    def train_here(command, **kwargs):
        """ab.py's train.py commands, run here but for the last."""
        if command[1:2] != ["train.py"] or len(started) == 3:
            return real(command, **kwargs)
        started.append(command)
        result = run_here(command[1:], env={"OMP_NUM_THREADS": "1"})
        return subprocess.CompletedProcess(command, result.returncode, result.stdout, result.stderr)

    def ab_run(b):
        return run_here(["scripts/ab.py", "config/train_tiny.py", "--a", "--learning_rate=1e-4", "--b", b,
                         "--common", f"{TINY} --data_dir={data_dir}", "--seeds", "2", "--out", str(tmp_path)])

    monkeypatch.setattr(subprocess, "run", train_here)
    result = ab_run("--learning_rate=3e-3")
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
    again = ab_run("--learning_rate=3e-3")  # the same runs, by their real config.json: reused, none trained
    assert again.returncode == 0 and "+ train.py" not in again.stdout and len(started) == 3, again.stderr
    assert json.loads((tmp_path / "ab.json").read_text())["b_final_val_loss"] == b
    other = ab_run("--learning_rate=1e-5")  # B's runs hold 3e-3's results: refused, not reported as 1e-5's
    assert other.returncode == 1 and "+ train.py" not in other.stdout and len(started) == 3
    assert other.stderr.strip() == (f"error: {tmp_path / 'b_1337'} was trained with learning_rate=0.003 where this "
                                    "A/B sets learning_rate=1e-05: use another --out, or delete the run to train "
                                    "it again")


def finished(out_dir, argv, **saved):
    """out_dir as a done run of train.py's argv would leave it (config.json, eval and done records), saved: the
    config.json values train.py settled otherwise."""
    out_dir.mkdir(parents=True)
    configurator.save_json(configurator.load_config(argv), out_dir / "config.json", **saved)
    record = metrics.Metrics(out_dir)
    record("eval", 4, tokens=256, val_loss=3.5)
    record("done", 4)


def no_training(command, **kwargs):
    raise AssertionError(f"trained {command}")


def test_ab_reuses_a_run_by_its_settings(tmp_path, monkeypatch):
    """A done run of the same settings is reused; one of other settings is refused, naming its folder, the
    setting and what to do; a cooldown fork's max_iters, which train.py sets to the fork's end, is not compared."""
    monkeypatch.setattr(subprocess, "run", no_training)
    side, out = "--learning_rate=2e-3", tmp_path / "a_1337"
    finished(out, ["config/train_tiny.py", "--checkpoint_interval=0", side, "--seed=1337", f"--out_dir={out}"])
    assert ab.run("config/train_tiny.py", [], [side], 1337, out, None) == [(256, 3.5)]
    with pytest.raises(SystemExit) as e:
        ab.run("config/train_tiny.py", [], ["--learning_rate=1e-5"], 1337, out, None)
    assert str(e.value.code).startswith(f"error: {out} was trained with learning_rate=0.002 where this A/B sets "
                                        "learning_rate=1e-05: use another --out, or delete the run")
    fork, argv = tmp_path / "b_1337", ["--cooldown_iters=4", "--max_iters=100"]
    finished(fork, ["config/train_tiny.py", "--checkpoint_interval=0", *argv, "--seed=1337", f"--out_dir={fork}"],
             max_iters=8)  # forked at 4
    assert ab.run("config/train_tiny.py", [], argv, 1337, fork, out) == [(256, 3.5)]
    other = tmp_path / "b_7"  # a fork from another checkpoint is another run, though every other setting matches
    finished(other, ["config/train_tiny.py", "--checkpoint_interval=0", "--cooldown_iters=4", "--init_from=a/ckpt_4.pt",
                     "--seed=7", f"--out_dir={other}"], max_iters=8)
    with pytest.raises(SystemExit) as e:
        ab.run("config/train_tiny.py", [], ["--cooldown_iters=4", "--init_from=a/ckpt_2.pt"], 7, other, out)
    assert f"{other} was forked from a/ckpt_4.pt where this A/B forks from a/ckpt_2.pt" in str(e.value.code)


def test_ab_says_why_train_py_failed(tmp_path, monkeypatch):
    """train.py's `error: ...` line is on its stderr (trainer/runlog.py): ab.py's one line carries it."""
    failed = subprocess.CompletedProcess([], 1, None, "W1207 a library's warning\nerror: no train.bin in /nowhere\n\n")
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: failed)
    with pytest.raises(SystemExit) as e:
        ab.run("config/train_tiny.py", [], ["--learning_rate=2e-3"], 1337, tmp_path / "a_1337", None)
    assert e.value.code == f"error: train.py for {tmp_path / 'a_1337'} failed: error: no train.bin in /nowhere"


def test_ab_refuses_no_seeds(tmp_path):
    result = run_here(["scripts/ab.py", "config/train_tiny.py", "--a", "--learning_rate=2e-3", "--b",
                       "--learning_rate=4e-3", "--seeds", "0", "--out", str(tmp_path)])
    assert result.returncode == 2 and "ab.py: error: --seeds must be at least 1, got 0" in result.stderr
    assert "Traceback" not in result.stderr and not any(tmp_path.iterdir())


@pytest.mark.parametrize("sides, message", [
    (["--a", "'--learning_rate=3e-3", "--b", "--learning_rate=4e-3"],
     """--a "'--learning_rate=3e-3": No closing quotation"""),
    (["--a", "", "--b", ""], "--a '' and --b '' give the same settings over config/train_tiny.py"),
    (["--a", "--learning_rate=2e-3", "--b", "--learning_rate=0.002 --min_lr=2e-4"],  # the config's own values
     "give the same settings over config/train_tiny.py: give B what it changes"),
    (["--a", "--learning_rate=3e-3", "--b", "--out_dir=/tmp/x"],
     "--b sets --out_dir=/tmp/x, which ab.py sets for each run (--seeds, --out): drop it"),
    (["--a", "--learning_rate=3e-3", "--b", "--learning_rate=4e-3", "--common", "--seed=7"],
     "--common sets --seed=7, which ab.py sets for each run"),
    (["--a", "--learning_rat=3e-3", "--b", ""], "unknown config key 'learning_rat'"),
])
def test_ab_refuses_sides_it_cannot_compare_in_one_line(tmp_path, monkeypatch, sides, message):
    """An unbalanced quote, two sides of the same settings (a 1.00x by construction) and a key ab.py sets per run
    (which would be overridden without a word) are refused before anything trains."""
    monkeypatch.setattr(subprocess, "run", no_training)
    result = run_here(["scripts/ab.py", "config/train_tiny.py", *sides, "--out", str(tmp_path)])
    assert result.returncode != 0 and [message in line for line in result.stderr.strip().splitlines()] == [True], \
        result.stderr
    assert "Traceback" not in result.stderr and result.stderr.count("error") == 1
    assert not any(tmp_path.iterdir())
