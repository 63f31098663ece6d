"""Ctrl-C before a tool's own handlers: one line and exit status 130, not a KeyboardInterrupt traceback from deep in
an import (importing torch takes seconds, more on a GPU box). It imports nothing but the standard library, so an
entry point can install it before anything else. It hears SIGINT even where the process inherited it ignored
(`cmd &` in a script), which Python otherwise keeps."""
import signal
import sys


def stop_at_once(tool, meaning):
    """From now on a SIGINT prints `{tool}: stopped by SIGINT {meaning}` and exits 130, until the tool installs
    handlers of its own (train.py's elastic.StopSignal, which saves). For work that nothing half-writes."""

    def stop(signum, frame):
        print(f"{tool}: stopped by SIGINT {meaning}", file=sys.stderr, flush=True)
        sys.exit(130)

    signal.signal(signal.SIGINT, stop)
