"""The learning-rate schedules (schedule.py) and cooldown forks (start.py): the shapes, and one fork through
train.py (in this process), which must anneal the model and leave its source's out_dir byte-for-byte as it was."""
import hashlib
import types

import pytest

import configurator
from conftest import VOCAB, run_here
from trainer import checkpointer, forecast, metrics, schedule


def cfg(**overrides):
    return types.SimpleNamespace(**{**configurator.DEFAULTS, **dict(warmup_iters=10, lr_decay_iters=100, max_iters=100,
                                                                     learning_rate=1.0, min_lr=0.1), **overrides})


def test_cosine_is_the_default_and_gpt3s():
    c = cfg()
    assert c.lr_schedule == "cosine"
    assert schedule.learning_rate(0, c) == pytest.approx(1 / 11)
    assert schedule.learning_rate(10, c) == pytest.approx(1.0)
    assert schedule.learning_rate(55, c) == pytest.approx(0.55)  # half way down the cosine
    assert schedule.learning_rate(100, c) == schedule.learning_rate(500, c) == 0.1


@pytest.mark.parametrize("shape", ["sqrt", "linear"])
def test_wsd_warms_up_holds_then_decays_over_the_last_fraction(shape):
    c = cfg(lr_schedule="wsd", lr_decay_shape=shape, lr_decay_fraction=0.2)
    lrs = [schedule.learning_rate(it, c) for it in range(101)]
    assert lrs[:10] == sorted(lrs[:10]) and lrs[9] < 1.0
    assert set(lrs[10:81]) == {1.0}  # stable until the decay starts at 80% of lr_decay_iters
    assert schedule.decay_start(c) == 80
    assert all(a > b for a, b in zip(lrs[80:100], lrs[81:100]))
    assert lrs[100] == 0.1
    half = {"sqrt": 1 - 0.5 ** 0.5, "linear": 0.5}[shape]
    assert lrs[90] == pytest.approx(0.1 + 0.9 * half)


def test_sqrt_decays_faster_at_first_than_linear():
    sqrt, linear = cfg(lr_schedule="wsd"), cfg(lr_schedule="wsd", lr_decay_shape="linear")
    assert sqrt.lr_decay_shape == "sqrt"  # the default: Hägele et al.'s 1-sqrt
    assert schedule.learning_rate(82, sqrt) < schedule.learning_rate(82, linear)


def test_a_cooldown_decays_from_the_schedules_value_at_its_start():
    c = cfg(lr_schedule="wsd", cooldown_iters=20)
    assert schedule.learning_rate(40, c, cooldown_from=40) == 1.0
    assert schedule.learning_rate(50, c, cooldown_from=40) == pytest.approx(0.1 + 0.9 * (1 - 0.5 ** 0.5))
    assert schedule.learning_rate(60, c, cooldown_from=40) == pytest.approx(0.1)
    cosine = cfg(cooldown_iters=20, lr_decay_shape="linear")
    start = schedule.learning_rate(30, cosine)
    assert schedule.learning_rate(40, cosine, cooldown_from=30) == pytest.approx(0.1 + 0.5 * (start - 0.1))


def test_the_log_says_which_schedule_and_where_the_decay_starts():
    assert "wsd" in schedule.describe(cfg(lr_schedule="wsd")) and "until iter 80" in schedule.describe(
        cfg(lr_schedule="wsd"))
    assert "cosine" in schedule.describe(cfg())
    assert "from iter 40" in schedule.describe(cfg(cooldown_iters=20), cooldown_from=40)


@pytest.mark.parametrize("override, word", [
    ({"lr_schedule": "step"}, "lr_schedule"), ({"lr_decay_fraction": 0.0}, "lr_decay_fraction"),
    ({"lr_decay_fraction": 1.5}, "lr_decay_fraction"), ({"lr_decay_shape": "cubic"}, "lr_decay_shape"),
    ({"cooldown_iters": -1}, "cooldown_iters")])
def test_bad_schedule_settings_are_one_line(override, word):
    problem = configurator.check(cfg(**override), 1)
    assert word in problem and "\n" not in problem
    assert configurator.check(cfg(lr_decay_fraction=1.0, lr_schedule="wsd"), 1) is None


def test_a_fork_needs_a_checkpoint_path_and_its_own_out_dir(tmp_path):
    assert checkpointer.fork_problem(cfg()) is None
    assert "init_from" in checkpointer.fork_problem(cfg(cooldown_iters=5, init_from="auto"))
    own = checkpointer.fork_problem(cfg(cooldown_iters=5, init_from=str(tmp_path / "ckpt_4.pt"), out_dir=str(tmp_path)))
    assert "own out_dir" in own
    assert checkpointer.fork_problem(cfg(cooldown_iters=5, init_from=str(tmp_path / "ckpt_4.pt"),
                                         out_dir=str(tmp_path / "fork"))) is None


TINY = ["config/train_tiny.py", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16",
        f"--vocab_size={VOCAB}", "--batch_size=4", "--gradient_accumulation_steps=2", "--learning_rate=3e-3",
        "--min_lr=3e-4", "--warmup_iters=2", "--max_iters=40", "--lr_decay_iters=40", "--lr_schedule=wsd",
        "--eval_interval=20", "--eval_iters=4", "--log_interval=10", "--checkpoint_interval=10", "--keep_last_n=10"]


def train(data_dir, *overrides):
    result = run_here(["train.py", *TINY, f"--data_dir={data_dir}", *overrides])
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def hashes(folder):
    return {p.relative_to(folder): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def test_a_cooldown_fork_anneals_and_leaves_its_source_untouched(data_dir, tmp_path):
    source, fork = tmp_path / "run", tmp_path / "fork"
    train(data_dir, f"--out_dir={source}", "--max_iters=20")  # the stable phase of a 40-iteration WSD run
    before = hashes(source)
    command = [f"--init_from={source}/ckpt_20.pt", f"--out_dir={fork}", "--cooldown_iters=10"]
    train(data_dir, *command, "--max_iters=40", "--checkpoint_interval=5", "--log_interval=1")
    assert hashes(source) == before  # nothing written, locked, tidied or rotated there
    at_source = metrics.read(source, "eval")[-1]
    cooled = metrics.read(fork, "eval")[-1]
    assert (at_source["iter"], cooled["iter"]) == (20, 30)
    assert cooled["val_loss"] < at_source["val_loss"]
    lrs = [r["lr"] for r in metrics.read(fork, "step")]
    assert lrs[0] == pytest.approx(3e-3) and lrs == sorted(lrs, reverse=True) and lrs[-1] < 5e-4
    # the same command after an interruption goes on from the fork's own newest checkpoint
    (fork / "ckpt_30.pt").unlink()
    again = train(data_dir, *command, "--max_iters=40", "--checkpoint_interval=5")
    assert "resuming after 25 completed steps" in again.stdout
    assert metrics.read(fork, "eval")[-1]["val_loss"] == pytest.approx(cooled["val_loss"], abs=1e-6)
    # a fork from another checkpoint into the same folder is another fork, not this one continued
    other = run_here(["train.py", *TINY, f"--data_dir={data_dir}", f"--init_from={source}/ckpt_10.pt",
                      f"--out_dir={fork}", "--cooldown_iters=10", "--max_iters=40"])
    assert other.returncode != 0 and (f"{fork} holds a cooldown fork from iter 20, and this command forks from "
                                      f"{source}/ckpt_10.pt (iter 10): give this fork a new --out_dir") in other.stderr


def test_the_first_step_a_new_schedule_moves_is_where_the_old_ones_evaluations_stop_counting():
    assert schedule.first_difference(cfg(), cfg(max_iters=200), 100) == 100  # max_iters alone moves no rate
    assert schedule.first_difference(cfg(), cfg(lr_decay_iters=200), 100) == 11  # the cosine, from its first step
    wsd = dict(lr_schedule="wsd", lr_decay_fraction=0.2)
    assert schedule.first_difference(cfg(**wsd), cfg(**wsd, lr_decay_iters=200), 100) == 81  # the old decay's
    assert schedule.first_difference(cfg(), cfg(learning_rate=2.0), 100) == 0


def test_a_run_extended_after_its_end_records_the_change_and_its_forecast_leaves_out_the_old_decay(data_dir, tmp_path):
    """nanoGPT's way to train longer, a larger max_iters (and lr_decay_iters) on the same command: the evaluations
    made under the old cosine, its end's after the decay most of all, are another run's, not points of this one."""
    out = tmp_path / "run"
    train(data_dir, f"--out_dir={out}", "--max_iters=20", "--lr_schedule=cosine", "--lr_decay_iters=20")
    longer = train(data_dir, f"--out_dir={out}", "--max_iters=40", "--lr_schedule=cosine", "--lr_decay_iters=40")
    changed, = metrics.read(out, "schedule_changed")
    assert changed["iter"] == 20 and changed["changes"] == ["lr_decay_iters 20 -> 40", "max_iters 20 -> 40"]
    assert changed["lr_from"] == 3  # warmup_iters=2: the cosine moved from the step after it
    assert "the forecast leaves out the evaluations after iter 3" in longer.stdout
    evals = [r["iter"] for r in metrics.latest_per_iter(metrics.read(out, "eval"))]
    assert evals == [0, 20, 40] and [first for first, last in forecast.measured_otherwise(metrics.read(out))] == [3]
