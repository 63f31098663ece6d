"""stopping.py's handlers in a process of their own: a run started in the background from a script
inherits SIGINT ignored, and `kill -INT` must still stop it; nohup's ignored SIGHUP stays ignored."""
import signal
import subprocess
import sys

from conftest import REPO

CHILD = """
import signal, sys, time
from trainer.stopping import StopSignal
stop = StopSignal()
print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)
deadline = time.time() + 60
while not stop.received and time.time() < deadline:
    time.sleep(0.05)
print(stop.name(), flush=True)
"""


def ignoring_sigint_and_sighup():  # what `cmd &` in a script and nohup leave a process with
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


def test_sigint_stops_a_run_that_started_with_it_ignored():
    child = subprocess.Popen([sys.executable, "-c", CHILD], cwd=REPO, stdout=subprocess.PIPE, text=True,
                             preexec_fn=ignoring_sigint_and_sighup)
    try:
        assert child.stdout.readline().strip() == "True"  # the hang-up nohup ignores stays ignored
        child.send_signal(signal.SIGINT)
        assert child.communicate(timeout=60)[0].strip() == "SIGINT"
    finally:
        child.kill()
