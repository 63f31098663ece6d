"""
Saver: train.py's saves, in either format, synchronous or in the background (checkpoint_async).

Each format's save is one path in two halves (checkpoint.start_save for a .pt, sharded_checkpoint's for a
folder): start_save stages the state, and the finish it returns writes it by the temp-file, fsync and
rename steps. A synchronous save runs the finish at once; an asynchronous one first copies the state to
host memory, then runs the finish on a thread while training goes on, so the training stall is that copy.
A kill during the write leaves the previous checkpoint the newest loadable one either way.
"""
import threading
import time

from trainer import checkpoint, sharded_checkpoint
from trainer.checkpoint import CheckpointError


class Saver:
    """At most one save is in flight: wait() (every rank, at the next save, a rollback and the end of the
    run) finishes the previous one, logs when it had to wait, and raises CheckpointError if it failed, so a
    failed write is never silently lost. group: the process group of a sharded save's collectives and of
    wait()'s barrier (gloo where saves run in the background: their collectives run on the CPU beside
    training's)."""

    def __init__(self, asynchronous=False, group=None, log=print):
        self.asynchronous, self.group, self.log = asynchronous, group, log
        self.thread = self.error = self.name = None

    def save_checkpoint(self, state, out_dir, iter_num, keep_last_n):
        """Rank 0: out_dir/ckpt_<iter_num>.pt, as checkpoint.save_checkpoint writes it."""
        self._finish(f"ckpt_{iter_num}.pt", checkpoint.start_save(
            state, out_dir, iter_num, keep_last_n, self.log, host_copy=self.asynchronous))

    def save_sharded(self, model, optimizer, trainer_state, out_dir, iter_num, keep_last_n):
        """Every rank: out_dir/ckpt_<iter_num>/, as sharded_checkpoint.save_sharded writes it."""
        self._finish(f"ckpt_{iter_num}/", sharded_checkpoint.start_save(
            model, optimizer, trainer_state, out_dir, iter_num, keep_last_n, self.log, self.group,
            host_copy=self.asynchronous))

    def _finish(self, name, finish):
        if not self.asynchronous:
            finish()
            return

        def run():
            try:
                finish()
            except BaseException as e:  # kept for wait(), which raises it in the training thread
                self.error = e
        self.name, self.thread = name, threading.Thread(target=run, name=f"save {name}", daemon=True)
        self.thread.start()

    def wait(self):
        """Every rank: the save in flight (if any) is complete, on every rank; CheckpointError if it failed.
        The barrier is on `group`, whose timeout allows for a whole write."""
        if self.thread is not None:
            if self.thread.is_alive():
                t0 = time.time()
                self.thread.join()
                self.log(f"waited {time.time() - t0:.1f}s for the background save of {self.name} to finish")
            self.thread, error, self.error = None, self.error, None
            if error is not None:
                if isinstance(error, CheckpointError):
                    raise error
                raise CheckpointError(f"the background save of {self.name} failed: "
                                      f"{checkpoint._one_line(error)}") from error
        checkpoint._barrier(self.group)
