"""Loss spikes: skipped, a burst rolls back to the right checkpoint with the right data skipped, the
number of rollbacks is bounded, and a stop and resume through all of it stays bit-exact."""
import math

import pytest
import torch

from trainer import RunError, faults, metrics
from test_train import TINY, assert_same_weights, train

SPIKY = ["--max_iters=16", "--warmup_iters=2", "--eval_interval=0", "--checkpoint_interval=2",
         "--gradient_accumulation_steps=2", "--dropout=0.0", "--spike_window=4", "--spike_loss_z=3",
         "--spike_grad_z=0", "--spike_rollback_after=3", "--spike_rollback_margin=2", "--spike_skip_batches=2"]
WINDOWS_PER_STEP = 4 * 2  # batch_size x gradient_accumulation_steps
assert "--batch_size=4" in TINY


def position(state):
    """The epoch and position of a checkpoint's one data source (bins.py's state)."""
    (source,) = state["sampler"]["sources"].values()
    return {k: source[k] for k in ("epoch", "position")}


def spiky(out_dir, data_dir, *overrides, at="9,10,11", check=True):
    return train(out_dir, data_dir, *SPIKY, *overrides, env={"TRAINER_FAULTS": f"spike@{at}" if at else ""}, check=check)


def test_the_guard_judges_against_accepted_history_only():
    guard = faults.SpikeGuard(window=4, loss_z=3.0, grad_z=0.0, rollback_after=2)
    for i, loss in enumerate([3.0, 3.1, 2.9, 3.0], 1):
        assert guard.judge(i, loss, 1.0, {"position": i}) is None  # filling the window: never a spike
    assert guard.judge(5, 30.0, 1.0, {"position": 5}).startswith("loss 30")
    assert guard.judge(6, 3.05, 50.0, {"position": 6}) is None  # grad_z 0: the norm is not judged
    assert guard.judge(7, 31.0, 1.0, {"position": 7})  # the spike at 5 did not raise the bar
    assert guard.burst(7) == (5, {"position": 5}) and guard.skipped == 2
    assert guard.burst(9) is None  # 5 has left the window of 4 steps


@pytest.fixture(scope="module")
def burst(tmp_path_factory, data_dir):
    """A 16-step run through the burst at 9-11 and its rollback: (out_dir, its stdout)."""
    out = tmp_path_factory.mktemp("burst")
    return out, spiky(out, data_dir).stdout


def test_a_burst_rolls_back_and_skips_the_spikes_data(burst):
    out, log = burst
    assert log.count("loss spike, step skipped") == 3
    assert "rolled back to iter 6 (1 of max 3) after a burst of skipped steps from iter 9" in log
    moved = sorted(p.name for p in (out / "rolled_back").rglob("ckpt_*.pt"))
    assert moved == ["ckpt_10.pt", "ckpt_8.pt"]  # written during the burst, set aside
    # saved again at once, so a kill before the next save still skips the data: step 9 began after
    # 8 batches, and the data goes on 2 batches past it
    state = torch.load(out / "ckpt_6.pt", weights_only=True)
    assert state["iter_num"] == 6 and position(state) == {"epoch": 0, "position": (8 + 2) * WINDOWS_PER_STEP}
    assert state["spikes"]["rollbacks"] == [{"at": 11, "to": 6, "first_spike": 9}]
    assert state["spikes"]["skipped"] == 3  # the run's count, not the older checkpoint's
    state = torch.load(out / "ckpt_8.pt", weights_only=True)  # steps 7 and 8 took 2 more
    assert position(state) == {"epoch": 0, "position": (8 + 2 + 2) * WINDOWS_PER_STEP}
    assert (out / "ckpt_16.pt").exists() and "done: 16 steps" in log


def test_an_unreadable_rollback_target_stops_the_run_with_nothing_moved(tmp_path, data_dir):
    out = tmp_path / "run"
    spiky(out, data_dir, "--max_iters=10", at="")
    (out / "ckpt_8.pt").write_bytes(b"not a checkpoint")
    result = spiky(out, data_dir, at="11,12,13", check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert last.startswith("error: loss spike burst from iter 11, and no rollback: ") and "ckpt_8.pt" in last
    assert {p.name for p in out.glob("ckpt_*.pt")} >= {"ckpt_10.pt", "ckpt_12.pt"}
    assert not (out / "rolled_back").exists()


def test_stop_and_resume_through_spikes_and_rollback_is_bit_exact(tmp_path, data_dir, burst):
    spiky(tmp_path / "split", data_dir, "--max_iters=10")  # stops in the middle of the burst
    resumed = spiky(tmp_path / "split", data_dir).stdout
    assert "rolled back to iter 6" in resumed
    assert_same_weights(burst[0] / "ckpt_16.pt", tmp_path / "split" / "ckpt_16.pt")


def test_a_rollback_to_a_checkpoint_of_the_old_val_set_keeps_its_best_from_being_a_bar(tmp_path, data_dir):
    """A resume on another batch_size scores other val windows; a rollback past the resume to a checkpoint saved
    before it brings back that checkpoint's best, which is of the old windows: reset again, without a second note."""
    out = tmp_path / "run"
    spiky(out, data_dir, "--max_iters=10", "--eval_interval=2", at="")
    assert math.isfinite(torch.load(out / "ckpt_8.pt", weights_only=True)["best_val_loss"])
    log = spiky(out, data_dir, "--batch_size=8", at="11,12,13").stdout
    assert "rolled back to iter 8 " in log and log.count("note: the val set changed") == 1
    state = torch.load(out / "ckpt_8.pt", weights_only=True)  # saved again at once after the rollback
    assert state["val_set"] == [2, 8] and state["best_val_loss"] == math.inf


def test_rollbacks_are_limited(tmp_path, data_dir):
    result = spiky(tmp_path / "run", data_dir, "--max_rollbacks=1", at="9,10,11,13,14,15", check=False)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert last.startswith("error: loss spikes again at iter 13 after 1 automatic rollback(s) (max_rollbacks=1)")
    [diverged] = metrics.read(tmp_path / "run", "diverged")  # the ladder's sweeps read it as the rate's outcome
    assert diverged["reason"].startswith("loss spikes again at iter 13")


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


def test_after_step_answers_apply_skip_or_roll_back_and_says_why():
    said, records = [], []
    guard = faults.SpikeGuard(window=3, loss_z=2.0, grad_z=0.0, rollback_after=2, max_nonfinite=3, log=said.append,
                              record=lambda kind, it, **figures: records.append((kind, it)))
    assert [guard.after_step(i, 1.0 + i / 100, 1.0, {"at": i}) for i in (1, 2, 3)] == [faults.APPLY] * 3
    assert guard.after_step(4, 9.0, 1.0, {"at": 4}) == faults.SKIP and said[-1].startswith("iter 4: loss spike, step skipped")
    assert guard.after_step(5, 9.0, 1.0, {"at": 5}) == faults.ROLL_BACK and guard.burst(5) == (4, {"at": 4})
    assert records == [("spike", 4), ("spike", 5)]
    guard.skipped_at.clear()  # as a rollback with no checkpoint old enough leaves it
    guard.rollback_after = 0  # no bursts: non-finite steps in a row stop the run at max_nonfinite
    assert guard.after_step(6, float("nan"), 1.0, {}) == faults.SKIP and "non-finite loss nan" in said[-1]
    assert guard.after_step(7, float("nan"), 1.0, {}) == faults.SKIP
    with pytest.raises(RunError, match="3 non-finite steps in a row; stopping without saving"):
        guard.after_step(8, 1.0, float("inf"), {})
    assert records[-2:] == [("nonfinite", 8), ("diverged", 8)]
