"""Run a script as `python SCRIPT ARGS...` would, without paying for `import torch` each time.

Most of the suite runs train.py as a user does, in a process of its own, and each of those processes
spent ~3 s of its ~4 importing torch: minutes of the suite's 2-core budget. Here one "warm" Python per
test worker imports torch once, runs nothing (so no OpenMP thread pool exists to be broken by a fork),
and forks a child per run. The child gets the request's working directory, environment, argv and
stdio, then runs the script as __main__; SystemExit, uncaught exceptions, sys.excepthook, atexit
and thread joins behave as in a fresh interpreter, because the child leaves through the ordinary
interpreter exit. Its exit code and output come back as a subprocess.CompletedProcess.

What a fork cannot change falls back to a real subprocess: variables read when torch or the
interpreter load (TORCH*, PYTORCH*, OMP_*, MKL*, LD_*, PYTHON*, ...) set to anything other than
what the warm process started with; and interpreter options such as `-c CODE`.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading

# Read once, when the interpreter, torch or its OpenMP runtime load: a forked child cannot change them.
READ_AT_LOAD = ("TORCH", "PYTORCH", "OMP_", "MKL", "KMP_", "GOMP", "LD_", "PYTHON", "CUDA", "HIP", "ROCM", "HSA")
WARM_ENV = {"OMP_NUM_THREADS": "1"}  # what the tests' runs ask for: tiny models gain nothing from threads

SERVER = r"""
import json, os, runpy, sys
import numpy, torch, torch._dynamo, torch.distributed.fsdp, torch.distributed.checkpoint  # the slow imports, once
replies = os.fdopen(os.dup(1), "w")
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 1)
for line in sys.stdin:
    request = json.loads(line)
    out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the run: from here on this process is `python SCRIPT ARGS` and never returns to the loop
        os.dup2(devnull, 0); os.dup2(out, 1); os.dup2(err, 2)
        for fd in (out, err, devnull, replies.fileno()):
            os.close(fd)
        os.setpgid(0, 0)  # its own process group, as the tests' kills expect of a subprocess
        os.chdir(request["cwd"])
        os.environ.clear(); os.environ.update(request["env"])
        sys.argv = request["argv"]
        sys.path[0] = os.path.dirname(os.path.abspath(sys.argv[0]))
        runpy.run_path(sys.argv[0], run_name="__main__")
        sys.exit(0)
    os.close(out); os.close(err)
    replies.write(f"{pid}\n"); replies.flush()
    replies.write(f"{os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}\n"); replies.flush()
"""

_server = None
_lock = threading.Lock()


def _start_server(cwd):
    global _server
    env = dict(os.environ, **WARM_ENV)
    _server = subprocess.Popen([sys.executable, "-c", SERVER], cwd=cwd, env=env, stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    _server.env = env
    return _server


def _forkable(env):
    server_env = _server.env if _server else dict(os.environ, **WARM_ENV)
    return all(env.get(k) == server_env.get(k) for k in set(env) | set(server_env) if k.startswith(READ_AT_LOAD))


def _read_line(timeout):
    ready, _, _ = select.select([_server.stdout], [], [], timeout)
    return _server.stdout.readline() if ready else None


def run(argv, cwd, env=None, timeout=300):
    """subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)."""
    env = dict(os.environ if env is None else env)
    if str(argv[0]).startswith("-") or not _forkable(env):  # `python -c CODE` and the like: a real one
        return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    with _lock, tempfile.TemporaryDirectory() as tmp:
        server = _server if _server and _server.poll() is None else _start_server(cwd)
        out, err = os.path.join(tmp, "stdout"), os.path.join(tmp, "stderr")
        server.stdin.write(json.dumps({"argv": [str(a) for a in argv], "cwd": str(cwd), "env": env,
                                       "stdout": out, "stderr": err}) + "\n")
        server.stdin.flush()
        pid = int(_read_line(60))
        code = _read_line(timeout)
        if code is None:  # as subprocess.run does: kill it, then raise
            os.killpg(pid, signal.SIGKILL)
            _read_line(60)
            raise subprocess.TimeoutExpired([sys.executable, *argv], timeout)
        with open(out, errors="replace") as f, open(err, errors="replace") as g:
            return subprocess.CompletedProcess([sys.executable, *argv], int(code), f.read(), g.read())
