"""Ctrl-C before a tool's own handlers: one line and exit status 130, not a KeyboardInterrupt traceback from deep in
an import (importing torch takes seconds, more on a GPU box). It imports nothing but the standard library, so an
entry point can install it before anything else. It hears SIGINT even where the process inherited it ignored
(`cmd &` in a script), which Python otherwise keeps."""
import contextlib
import os
import signal
import sys

PARENT = os.getppid()  # the launcher (torchrun) as the process started, before seconds of imports: elastic.py


def stop_signals():
    """The signals a long job stops on (train.py, a ladder, a prepare job): SIGINT and SIGTERM always, though a shell
    starts a background job (`cmd &` in a script) with SIGINT ignored; SIGHUP unless nohup left it ignored."""
    hang_up = [signal.SIGHUP] if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN else []
    return [signal.SIGINT, signal.SIGTERM, *hang_up]


def stop_at_once(tool, meaning):
    """From now on a SIGINT (or SIGTERM, or SIGHUP: stop_signals) prints `{tool}: stopped by SIG... {meaning}` and
    exits 128 + the signal (130 for SIGINT), until the tool installs handlers of its own (train.py's
    elastic.StopSignal, which saves). For work that nothing half-writes: the exit is immediate (os._exit, after
    flushing what was printed), since a SystemExit raised in the middle of an import can surface as another
    exception with a traceback (class creation wraps one raised in __set_name__)."""

    def stop(signum, frame):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe or stream: nothing more to tell it
            sys.stdout.flush()
            print(f"{tool}: stopped by {signal.Signals(signum).name} {meaning}", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    for sig in stop_signals():
        signal.signal(sig, stop)
