"""
What a training run says, and where: every line to stdout and to <out_dir>/train.log (appended across
restarts, so `tail -f` needs no tee), from rank 0 only; a failure as one line the user can act on, from
any rank, on stderr (where the tools that run train.py read it: why_it_failed) and in train.log; and an
unexpected crash with its traceback in train.log too, where a dead run is looked at. Either also leaves
its line in out_dir/FAILURES, which a restarted run reports (elastic.py). The step line is built here
(step_line, StepClock) from the same figures metrics.jsonl records for tools.
"""
import os
import sys
import time
import traceback

from trainer import RunError, elastic, machine


class StepClock:
    """Step times for the log: the first step's (warm-up, compilation) said once; the eta from the wall time since
    it ended, per step, so that evaluations and checkpoint saves, which step_time leaves out, count in it too."""

    def __init__(self, compiling=False, log=print):
        self.compiling, self.log, self.steps, self.since = compiling, log, 0, None

    def lap(self, seconds):
        """Count a step that took `seconds`, just ended; the first one is logged."""
        self.steps += 1
        if self.steps == 1:
            self.log(f"first step took {seconds:.1f}s (includes warm-up{' and compilation' if self.compiling else ''})")
            self.since = time.perf_counter()

    def eta(self, steps_left):
        """Seconds for steps_left more steps, or None before a step after the first."""
        if self.steps < 2:
            return None
        return steps_left * (time.perf_counter() - self.since) / (self.steps - 1)


def step_line(iteration, figures, memory, world_size=1, eta=None, show_hfu=False):
    """The line train.log shows for a step (tools read metrics.jsonl's step record, of the same figures: loss,
    step_time, tokens_per_sec, lr, grad_norm, mfu, hfu). memory: the peak's text (machine.peak_memory_text);
    show_hfu where recompute makes hfu differ from mfu; eta in seconds."""
    f = figures
    line = (f"iter {iteration}: loss {f['loss']:.4f}, time {f['step_time'] * 1000:.0f}ms, mfu {machine.percent(f['mfu'])}, "
            f"tok/s {f['tokens_per_sec']:,.0f}")
    if world_size > 1:
        line += f" ({f['tokens_per_sec'] / world_size:,.0f} per GPU)"
    line += f", lr {f['lr']:.3e}, grad norm {f['grad_norm']:.3f}, mem {memory}"
    if show_hfu:
        line += f", hfu {machine.percent(f['hfu'])}"
    if eta is not None:
        line += f", eta {eta / 3600:.1f}h" if eta >= 3600 else f", eta {eta / 60:.1f}min"
    return line


class RunLog:
    def __init__(self, out_dir, rank=0):
        self.path, self.rank = os.path.join(out_dir, "train.log"), rank
        self.file = open(self.path, "a") if rank == 0 else None
        # error -> its one line, or None: each explains a library's error (a compilation failing, a hung
        # collective) that train.py's own code cannot raise as a RunError; train.py adds them
        self.explainers = []

    def __call__(self, message):
        if self.file is None:
            return
        try:
            print(message, flush=True)
        except OSError:  # the terminal hung up (SSH dropped, tmux killed): train.log still gets it all
            sys.stdout = open(os.devnull, "w")
        try:
            self.file.write(message + "\n")
            self.file.flush()
        except OSError as e:  # a full disk: no checkpoint could be written either, so the run ends here, in one line
            self._let_go_of_the_file()
            raise RunError(f"cannot write {self.path}: {e.strerror}; free space on its disk, then run the same "
                           "command (the checkpoints already written are untouched)") from None

    def _write(self, text):
        """text into train.log from the crash hook, where a full disk must not raise again: stderr has it."""
        try:
            self.file.write(text)
            self.file.flush()
        except OSError:
            self._let_go_of_the_file()

    def _let_go_of_the_file(self):
        """train.log closed (its unwritten tail dropped) and replaced by nothing, so that the error's own line and
        the interpreter's exit do not fail on it again, each with a traceback of its own."""
        try:
            self.file.close()
        except OSError:
            pass
        self.file = open(os.devnull, "w")

    def crash(self, kind, value, tb):
        """sys.excepthook, on every rank: a RunError is its one line, `error: ...`; a library error an explainer
        knows is its one line too, the traceback kept in train.log for a bug report; anything else is the
        traceback as usual, also in train.log, with a last line. Another rank's line goes to train.log too,
        where `tail -f` shows why the job ended (torchrun then stops the other ranks). The process then
        exits with status 1, as after any uncaught exception."""
        if isinstance(value, RunError):
            self.error(str(value))
            return
        line = next(filter(None, (explain(value) for explain in self.explainers)), None)
        if line is None:
            sys.__excepthook__(kind, value, tb)
        if issubclass(kind, KeyboardInterrupt):
            return
        if self.file is not None:
            self._write("".join(traceback.format_exception(kind, value, tb)))
        first = str(value).splitlines()[0] if str(value) else ""
        self.error(line or f"train.py crashed: {kind.__name__}: {first} (traceback above; under torchrun, look "
                   "for another rank's error first)")

    def error(self, message):
        """`error: message` (another rank's: `rank N error: message`) on stderr, where a script that runs train.py
        reads why it failed (why_it_failed), in train.log, and in out_dir/FAILURES."""
        elastic.leave_note(os.path.dirname(self.path), self.rank, message)
        line = f"error: {message}" if self.file is not None else f"rank {self.rank} error: {message}"
        try:
            print(line, file=sys.stderr, flush=True)
        except OSError:  # the terminal hung up: train.log still gets it
            pass
        if self.file is not None:
            self._write(line + "\n")
            return
        try:
            with open(self.path, "a") as f:
                f.write(line + "\n")
        except OSError:  # out_dir not shared with this node: stderr has it
            pass


def why_it_failed(returncode, stderr):
    """The line of a failed train.py's stderr (or of torchrun's, around it) that says why: its `error: ...` or the
    last exception (torchrun's report of a failed child comes after both, and says only that it failed); else
    stderr's last line; else how it ended (the OOM killer's kill -9 leaves no line). Every tool that runs
    train.py reports its failure with this one line."""
    lines = [line.strip() for line in stderr.strip().splitlines()]
    said = [line for line in lines if (line.startswith("error: ") or " error: " in line
                                       or line.split(": ", 1)[0].endswith("Error")) and "ChildFailedError" not in line]
    ended = f"killed by signal {-returncode}" if returncode < 0 else f"exit status {returncode}"
    return (said or lines or [f"{ended}, with no error line (its train.log may say more)"])[-1]
