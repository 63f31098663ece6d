"""What a new user tripped over (issue 28, items 11-16): eval.py --watch heard Ctrl-C only in the
foreground, and messages gave advice that did not work."""
import select
import signal
import subprocess
import sys

import pytest

from conftest import REPO


def read_line(stream, timeout=120):
    assert select.select([stream], [], [], timeout)[0], "the child said nothing for two minutes"
    return stream.readline().strip()


@pytest.mark.e2e
def test_eval_watch_started_in_the_background_stops_on_sigint(tmp_path):
    """`python scripts/eval.py --watch OUT &` in a script starts with SIGINT ignored; kill -INT must still stop it."""
    child = subprocess.Popen([sys.executable, "scripts/eval.py", "--watch", str(tmp_path), "--poll", "60",
                              "--device", "cpu"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert read_line(child.stdout).startswith(f"watch: {tmp_path}: 0 checkpoint(s) scored before")
        child.send_signal(signal.SIGINT)  # it waits out its 60 s poll: only the signal can end it this soon
        stdout, stderr = child.communicate(timeout=60)
        assert child.returncode == 130, stderr
        assert stdout.startswith("watch: stopped by SIGINT") and "Traceback" not in stderr
    finally:
        child.kill()
