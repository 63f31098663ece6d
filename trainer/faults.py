"""Faults the tests inject into training, checkpoint saves and data preparation: one scheme for all three.

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
import os
import signal
import time

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

    def wrap(self, step_loss, parameters, last_rank, replayed):
        """train.py's step_loss(iteration, ...) -> the step's loss, with the training faults of each step injected
        once its gradients are complete; step_loss itself when none is set, so a run without faults runs none of
        this. parameters(): the model's; replayed(iteration): the step replays data after an automatic rollback."""
        if not self.training:
            return step_loss
        return lambda iteration, *args: self.step(iteration, step_loss(iteration, *args), parameters(), last_rank,
                                                  replayed)

    def step(self, step, loss, parameters, last_rank, replayed):
        """The training faults of step `step`: its loss, poisoned or not; rank_error stops the run (RunError)."""
        if self.fires("spike", step) and not replayed(step):  # as if the loss itself had been x1000
            for p in parameters:
                if p.grad is not None:
                    p.grad.mul_(1000.0)
            loss = loss * 1000.0
        if last_rank and self.fires("rank_error", step):
            raise RunError("injected error on the last rank")
        if last_rank and self.fires("crash", step) and not self.restarted:
            raise RuntimeError("injected crash on the last rank")
        if last_rank and self.fires("hang", step):
            signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a rank stuck in C++ would ignore it: SIGKILL follows
            time.sleep(3600)
        return loss * float("nan") if self.fires("nan", step) else loss

active = Faults(os.environ.get(VARIABLE, ""), restarted=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0")
