"""A process that stands for `python -u SCRIPT ARGS` run as a warm fork (warm_python.py): torchrun's
worker script in the tests (warm_python.torchrun_argv), and the Popen-able form of a warm run
(warm_python.popen_command). It asks the test worker's warm Python to fork SCRIPT ARGS with this
process's environment, working directory and stdio, passes on every signal it is sent, and exits as the
fork exits. It imports nothing heavy, so it starts in milliseconds instead of seconds. With no warm
Python to ask, or an environment a fork cannot take, it becomes `python -u SCRIPT ARGS` itself."""
import json
import os
import signal
import socket
import sys

RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


def become_python():
    os.execv(sys.executable, [sys.executable, "-u", *sys.argv[1:]])


def relay(pid):
    def handler(signum, frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:  # it has just ended: its exit code is on the way
            pass
    for sig in RELAYED:
        signal.signal(sig, handler)


def main():
    path = os.environ.get("WARM_PYTHON_SOCKET")  # warm_python.SOCKET_VARIABLE
    if not path:
        become_python()
    warm = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        warm.connect(path)
    except OSError:
        become_python()
    request = {"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}
    socket.send_fds(warm, [json.dumps(request).encode()], [0, 1, 2])
    reply = warm.recv(64)
    if reply == b"refused":
        become_python()
    relay(int(reply))
    code = warm.recv(64)
    if not code:
        sys.exit("warm_worker.py: the warm Python ended before the run did")
    code = int(code)
    if code < 0:  # ended by a signal: so is this process, as torchrun expects of its worker
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    sys.exit(code)


if __name__ == "__main__":
    main()
