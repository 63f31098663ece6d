"""elastic.py's stop handlers in a process of their own: a run started in the background from a script
inherits SIGINT ignored, and `kill -INT` must still stop it; nohup's ignored SIGHUP stays ignored; a
second Ctrl-C while the run saves is answered, and neither interrupts the save nor kills the process."""
import select
import signal
import subprocess
import sys

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e  # signals to a real process

CHILD = """
import signal, sys, time
from trainer.elastic import StopSignal
stop = StopSignal()
print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)
deadline = time.time() + 60
while not stop.received and time.time() < deadline:
    time.sleep(0.05)
print(stop.name(), flush=True)
sys.stdin.readline()  # "saving": the parent sends a second SIGINT, then lets it finish
print("saved", flush=True)
"""


def ignoring_sigint_and_sighup():  # what `cmd &` in a script and nohup leave a process with
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def read_line(stream, timeout=60):
    assert select.select([stream], [], [], timeout)[0], "the child said nothing for a minute"
    return stream.readline().strip()


def test_sigint_stops_a_run_that_started_with_it_ignored_and_a_second_one_is_answered():
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, preexec_fn=ignoring_sigint_and_sighup)
    try:
        assert read_line(child.stdout) == "True"  # the hang-up nohup ignores stays ignored
        child.send_signal(signal.SIGINT)
        assert read_line(child.stdout) == "SIGINT"
        # the second signal is sent only once the first was heard: two that reach the process during one
        # long C call (a matmul) run the Python handler once, which is the kernel's business, not ours
        child.send_signal(signal.SIGINT)
        assert read_line(child.stderr).startswith("SIGINT: already stopping after this micro-batch and saving")
        stdout, _ = child.communicate("\n", timeout=60)
        assert stdout.strip() == "saved" and child.returncode == 0
    finally:
        child.kill()
