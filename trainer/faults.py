"""What goes wrong in training and how the run meets it: loss spikes and non-finite steps, which the SpikeGuard
(at the end of this file) skips and rolls back from, and the faults the tests inject into training, checkpoint
saves and data preparation, one scheme for all three.

TRAINER_FAULTS holds space-separated faults, each a name and, where it has one, `@` and the steps or
chunks it fires at (1-based): `TRAINER_FAULTS="nan@3,4 kill_before_rotate"`. It is read once, when this
module is imported at start-up, so nothing in the training loop reads the environment. Names:
  training (at steps):  nan (the step's loss), spike (loss and gradients x1000, not in steps replayed after
                        an automatic rollback), rank_error (the last rank fails), crash (the last rank raises,
                        in a torchrun job's first attempt only), hang (the last rank sleeps; SIGTERM kills it)
  checkpoints:          kill_after_temp_write, kill_before_rotate (SIGKILL there), disk_full (a write fails
                        with ENOSPC once bytes are on the disk)
  preparation (at chunks): kill_appended, kill_synced, kill_committed (SIGKILL at that stage of chunk k)
"""
import math
import os
import signal
import time
from collections import deque

from trainer import RunError

VARIABLE = "TRAINER_FAULTS"
AT_STEPS = ("nan", "spike", "rank_error", "crash", "hang")
AT_CHUNKS = ("kill_appended", "kill_synced", "kill_committed")
ONCE = ("kill_after_temp_write", "kill_before_rotate", "disk_full")


class Faults:
    def __init__(self, spec="", restarted=False):
        """spec as TRAINER_FAULTS holds it; restarted: this is a torchrun restart (crash does not fire again)."""
        self.points, self.restarted = {}, restarted
        for item in spec.split():
            name, _, at = item.partition("@")
            if name not in (*AT_STEPS, *AT_CHUNKS, *ONCE) or bool(at) == (name in ONCE):
                raise ValueError(f"{VARIABLE}: unknown fault {item!r}")
            self.points[name] = {int(n) for n in at.split(",")} if at else None
        self.training = any(name in self.points for name in AT_STEPS)

    def fires(self, name, at=None):
        """Whether fault `name` is set (at step or chunk `at`, for those that take one)."""
        return name in self.points and (at is None or at in self.points[name])

    def kill(self, name, at=None):
        """SIGKILL this process here if fault `name` fires: a crash nothing can clean up after."""
        if self.fires(name, at):
            os.kill(os.getpid(), signal.SIGKILL)

    def wrap(self, step_loss, parameters, last_rank, replayed, settle):
        """train.py's step_loss(iteration, ...) -> the step's loss, with the training faults of each step injected
        once its gradients are complete; step_loss itself when none is set, so a run without faults runs none of
        this. parameters(): the model's; replayed(iteration): the step replays data after an automatic rollback;
        settle(): every rank, the background save in flight finished (the checkpointer's wait)."""
        if not self.training:
            return step_loss
        return lambda iteration, *args: self.step(iteration, step_loss(iteration, *args), parameters(), last_rank,
                                                  replayed, settle)

    def step(self, step, loss, parameters, last_rank, replayed, settle=lambda: None):
        """The training faults of step `step`: its loss, poisoned or not; rank_error stops the run (RunError).
        A crash waits, on every rank, for the save in flight: a real crash may lose it (the previous checkpoint
        is then the resume point), but a test names the step it resumes from. (A save that failed raises its
        CheckpointError there instead.)"""
        if self.fires("spike", step) and not replayed(step):  # as if the loss itself had been x1000
            for p in parameters:
                if p.grad is not None:
                    p.grad.mul_(1000.0)
            loss = loss * 1000.0
        if last_rank and self.fires("rank_error", step):
            raise RunError("injected error on the last rank")
        if self.fires("crash", step) and not self.restarted:
            settle()
            if last_rank:
                raise RuntimeError("injected crash on the last rank")
        if last_rank and self.fires("hang", step):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a rank stuck in C++ would ignore it: SIGKILL follows
            time.sleep(3600)
        return loss * float("nan") if self.fires("nan", step) else loss

active = Faults(os.environ.get(VARIABLE, ""), restarted=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0")


# -----------------------------------------------------------------------------
# loss spikes: the guard that skips them and rolls a burst back
# Loss spikes, caught without a human awake: an update whose loss or gradient norm stands far above
# its recent history is skipped (as llm.c does), and a burst of them rolls the run back to a
# checkpoint well before the first one and skips the data around it (PaLM's recipe, automated).
#
# A step is a spike when its loss (or norm) is more than `loss_z` (`grad_z`) standard deviations above
# the mean of the last `window` accepted steps; it is judged only once that window is full. Skipped
# steps never enter the window, so a spike does not raise the bar for the next one. A burst is
# `rollback_after` skipped steps (spikes or non-finite) within `window` steps. Everything here is
# plain numbers, saved in checkpoints, so a resumed run judges exactly as the original would have.

NONFINITE = "non-finite"  # verdict() on a step whose loss or gradient norm is not finite
APPLY, SKIP, ROLL_BACK = "apply", "skip", "roll back"  # after_step(): what becomes of a step


def _ignore(*args, **kwargs):
    pass


class SpikeGuard:
    def __init__(self, window, loss_z, grad_z, rollback_after, max_nonfinite=10, log=_ignore, record=_ignore):
        """max_nonfinite: non-finite steps in a row that stop the run; log and record: train.log's
        lines and metrics.jsonl's records (runlog, metrics) of the steps after_step() skips."""
        self.window, self.loss_z, self.grad_z, self.rollback_after = window, loss_z, grad_z, rollback_after
        self.max_nonfinite, self.log, self.record = max_nonfinite, log, record
        self.history = deque(maxlen=window)  # (loss, grad norm) of accepted steps
        self.skipped_at = deque()  # (iteration, data position at its start) of recent skipped steps
        self.skipped = 0  # spikes skipped in the whole run
        self.rollbacks = []  # one {'at', 'to', 'first_spike'} per automatic rollback
        self.nonfinite_in_a_row = self.nonfinite_total = 0  # saved: a run stopped amid a streak keeps counting it

    @property
    def on(self):
        return self.loss_z > 0 or self.grad_z > 0

    def after_step(self, iteration, loss, grad_norm, data_position, judged=True):
        """What becomes of step `iteration`, whose loss and grad norm every rank has alike: APPLY its update, SKIP
        it (a spike or a non-finite step, logged and recorded here), or ROLL_BACK (it ends a burst of skipped
        steps; burst() says from where). Too many non-finite steps in a row stop the run (RunError)."""
        reason = self.verdict(iteration, loss, grad_norm, data_position, judged)
        if reason == NONFINITE:
            self.log(f"iter {iteration}: non-finite loss {loss} or grad norm {grad_norm}: step skipped "
                     f"({self.nonfinite_in_a_row} in a row, {self.nonfinite_total} in all)")
            self.record("nonfinite", iteration, loss=loss, grad_norm=grad_norm, in_a_row=self.nonfinite_in_a_row)
        elif reason:
            self.log(f"iter {iteration}: loss spike, step skipped: {reason} ({self.skipped} skipped in all)")
            self.record("spike", iteration, loss=loss, grad_norm=grad_norm, reason=reason, skipped=self.skipped)
        if self.burst(iteration):
            return ROLL_BACK  # and where no checkpoint is old enough, the rollback asks stop_if_diverged()
        self.stop_if_diverged(iteration)
        return SKIP if reason else APPLY

    def stop_if_diverged(self, iteration):
        """Too many non-finite steps in a row stop the run: a RunError (the count is 0 after a finite step)."""
        if self.nonfinite_in_a_row >= self.max_nonfinite:
            raise self.diverged(iteration, f"{self.nonfinite_in_a_row} non-finite steps in a row; stopping without "
                                           "saving. Roll back with --init_from=<an earlier ckpt_N.pt> and a lower "
                                           "learning_rate")

    def diverged(self, iteration, why):
        """The RunError that stops a run whose loss will not stay finite, or down after rollbacks, its `diverged`
        record written first: an outcome of the learning rate, which scripts/ladder.py's sweeps rank last."""
        self.record("diverged", iteration, reason=why)
        return RunError(why)

    def verdict(self, iteration, loss, grad_norm, data_position, judged=True):
        """Why this step's update is skipped (NONFINITE, or judge()'s spike reason), or None: apply it. A non-finite
        step is counted and noted toward a burst; spikes are judged only where `judged` (after warmup)."""
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            self.nonfinite_in_a_row += 1
            self.nonfinite_total += 1
            self.note_skipped(iteration, data_position)
            return NONFINITE
        self.nonfinite_in_a_row = 0
        return self.judge(iteration, loss, grad_norm, data_position) if judged else None

    def judge(self, iteration, loss, grad_norm, data_position):
        """Why this step is a spike ('loss 9.1 is 12.3 sd above its mean 3.2'), or None, then it is
        accepted into the history. data_position: the sampler's state at the step's start."""
        if self.on and len(self.history) == self.window:
            for name, value, z, column in (("loss", loss, self.loss_z, 0), ("grad norm", grad_norm, self.grad_z, 1)):
                values = [h[column] for h in self.history]
                mean = sum(values) / len(values)
                sd = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
                if z > 0 and value > mean + z * max(sd, 1e-6 * abs(mean)):
                    self.skipped += 1
                    self.note_skipped(iteration, data_position)
                    return f"{name} {value:.4g} is {(value - mean) / max(sd, 1e-12):.1f} sd above its mean {mean:.4g}"
        self.history.append((loss, grad_norm))
        return None

    def replayed(self, iteration):
        """Whether step `iteration` runs again after an automatic rollback, on data past the spike's."""
        return any(r["first_spike"] <= iteration <= r["at"] for r in self.rollbacks)

    def note_skipped(self, iteration, data_position):
        """A skipped step of any kind (spike or non-finite), toward a burst."""
        self.skipped_at.append((iteration, data_position))

    def burst(self, iteration):
        """(iteration, data position) of the first skipped step of a burst ending at `iteration`, or None."""
        while self.skipped_at and self.skipped_at[0][0] <= iteration - self.window:
            self.skipped_at.popleft()
        if self.rollback_after > 0 and len(self.skipped_at) >= self.rollback_after:
            return self.skipped_at[0]
        return None

    def state_dict(self):
        return {"history": [list(h) for h in self.history], "skipped_at": [list(s) for s in self.skipped_at],
                "skipped": self.skipped, "rollbacks": list(self.rollbacks),
                "nonfinite_in_a_row": self.nonfinite_in_a_row, "nonfinite_total": self.nonfinite_total}

    def load_state_dict(self, state, after_rollback=False):
        """A checkpoint's statistics. after_rollback: the burst that caused it is dealt with, and the run
        keeps its own counts of skipped steps and rollbacks (and the limit on them), not the older checkpoint's."""
        self.history = deque((tuple(h) for h in state["history"]), maxlen=self.window)
        if after_rollback:
            self.skipped_at, self.nonfinite_in_a_row = deque(), 0
        else:
            self.skipped_at = deque(tuple(s) for s in state["skipped_at"])
            self.skipped, self.rollbacks = state["skipped"], list(state["rollbacks"])
            # older checkpoints did not keep them: their counts start again
            self.nonfinite_in_a_row, self.nonfinite_total = (state.get(k, 0) for k in ("nonfinite_in_a_row",
                                                                                      "nonfinite_total"))


def rollback_target(checkpoints, first_spike, margin):
    """(N, path) of the newest checkpoint at least `margin` steps before first_spike (the spike is step
    first_spike), or None. checkpoints: checkpoint.list_checkpoints' newest-first (N, path) list."""
    return next(((n, path) for n, path in checkpoints if n <= first_spike - 1 - margin), None)
