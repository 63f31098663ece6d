"""Run a script as `python SCRIPT ARGS...` would, without paying for `import torch` each time.

Most of the suite runs train.py as a user does, in a process of its own, and each of those processes
spent ~3 s of its ~4 importing torch: minutes of the suite's 2-core budget. Here one "warm" Python per
test worker imports torch once, runs nothing (so no OpenMP thread pool exists to be broken by a fork),
and forks a child per run. The child gets the request's working directory, environment, argv and
stdio, then runs the script (or `-m` module) as __main__; SystemExit, uncaught exceptions,
sys.excepthook, atexit and thread joins behave as in a fresh interpreter, because the child leaves
through the ordinary interpreter exit. Its exit code and output come back as a
subprocess.CompletedProcess.

Processes the tests start and signal (subprocess.Popen) and torchrun with its workers come from the
same warm Python: warm_worker.py, a Python that imports nothing heavy, stands for `python -u SCRIPT
ARGS`. It asks the warm Python over a Unix socket to fork the script with its own environment, working
directory and stdio, relays every signal it gets to that fork, and exits as it exits; popen_command()
is its command line, and torchrun_argv() names it as torchrun's worker script. A fork whose
warm_worker.py is killed outright (torchrun's last resort, SIGKILL) is killed too.

What a fork cannot change falls back to a real process: variables read when torch or the interpreter
load (TORCH*, PYTHONPATH, OMP_*, MKL*, LD_*, ...) set to anything other than what the warm process
started with, and interpreter options other than `-m`.
"""
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

# Read once, when the interpreter, torch or its OpenMP runtime load: a forked child cannot change them.
# (CXX and CC: inductor's config, imported with torch._dynamo, takes its C++ compiler from them)
READ_AT_LOAD = ("TORCH", "PYTORCH", "OMP_", "MKL", "KMP_", "GOMP", "LD_", "PYTHON", "CUDA", "HIP", "ROCM", "HSA",
                "CXX", "CC")
# ... except these, read when they are used: torchrun sets the first three for its workers, and inductor
# sets the last two in the test worker's own environment the first time it compiles there
READ_WHEN_USED = ("TORCHELASTIC_", "TORCH_NCCL_", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "TORCHINDUCTOR_CACHE_DIR",
                  "KMP_DUPLICATE_LIB_OK")
SOCKET_VARIABLE = "WARM_PYTHON_SOCKET"  # where warm_worker.py finds the warm Python
WORKER = str(Path(__file__).resolve().parent / "warm_worker.py")

SERVER = r"""
import gc, json, os, runpy, select, shutil, signal, socket, sys
START_ENV = dict(os.environ)  # as started: importing torch sets some (CUDA_MODULE_LOADING)
import numpy, torch, torch._dynamo, torch.distributed.fsdp, torch.distributed.checkpoint  # the slow imports, once
sys.path.insert(0, sys.argv[2])
from warm_python import forkable
del sys.path[0]
gc.freeze()  # what torch made on import is never garbage: a fork's collections skip it (and its pages stay shared)
replies_fd = os.dup(1)
replies = os.fdopen(replies_fd, "w", closefd=False)  # a fork closes replies_fd itself
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 1)
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(sys.argv[1])
listener.listen(64)
replies.write("ready\n"); replies.flush()  # torch imported, the socket bound


def become(request, stdio, new_group, sockets):
    # from here on this process is `python SCRIPT ARGS` (or `python -m MODULE ARGS`) and never returns to the loop
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    for fd in {*stdio, devnull, replies_fd, *(s.detach() for s in sockets)}:
        if fd > 2:
            os.close(fd)
    if new_group:
        os.setpgid(0, 0)  # its own process group, as the tests' kills expect of a subprocess
    else:  # for warm_worker.py, which stands for `python -u`
        sys.stdout.reconfigure(line_buffering=True); sys.stderr.reconfigure(line_buffering=True)
    os.chdir(request["cwd"])
    os.environ.clear(); os.environ.update(request["env"])
    argv = request["argv"]
    if argv[0] == "-m":
        sys.argv, sys.path[0] = argv[1:], os.getcwd()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv, sys.path[0] = argv, os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    sys.exit(0)


def send(connection, message):  # to a client that may be gone
    try:
        connection.send(message)
    except OSError:
        pass


def gone(connection):  # readable: a client sends nothing after its request, so it has closed its end
    try:
        return not connection.recv(16)
    except OSError:
        return True


def read_request():  # a line on stdin from warm_python.run(), or None at its end
    line = b""
    while not line.endswith(b"\n"):
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return None
        line += chunk
    return json.loads(line)


run_pid, workers = None, {}  # the pid of run()'s request; {pid: connection} of the workers'
while True:
    ready = select.select([0, listener, *workers.values()], [], [], 0.05)[0]
    if 0 in ready:
        request = read_request()
        if request is None:  # the test worker is gone: so are its runs and the socket
            for pid in [run_pid, *workers]:
                if pid:
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(os.path.dirname(sys.argv[1]), ignore_errors=True)
            sys.exit(0)
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        sys.stdout.flush(); sys.stderr.flush()
        run_pid = os.fork()
        if run_pid == 0:
            become(request, [devnull, out, err], True, [listener, *workers.values()])
        os.close(out); os.close(err)
        replies.write(f"{run_pid}\n"); replies.flush()
    if listener in ready:
        connection = listener.accept()[0]
        message, stdio, _, _ = socket.recv_fds(connection, 1 << 20, 3)
        if not message or len(stdio) != 3:  # a client that died before it asked
            connection.close()
        elif not forkable(json.loads(message)["env"], START_ENV):
            send(connection, b"refused")
            connection.close()
        else:
            pid = os.fork()
            if pid == 0:
                become(json.loads(message), stdio, False, [listener, connection, *workers.values()])
            workers[pid] = connection
            send(connection, str(pid).encode())  # if its client is gone, the next pass kills the fork
        for fd in stdio:
            os.close(fd)
    for pid, connection in list(workers.items()):
        if connection in ready and gone(connection):  # its client was killed: so is it
            os.kill(pid, signal.SIGKILL)
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == 0:
            break
        code = os.waitstatus_to_exitcode(status)
        if pid == run_pid:
            run_pid = None
            replies.write(f"{code}\n"); replies.flush()
        elif pid in workers:
            connection = workers.pop(pid)
            send(connection, str(code).encode())
            connection.close()
"""

_server = None
_lock = threading.Lock()


def forkable(env, server_env):
    """Whether a fork of a Python started with server_env can run with env."""
    return all(env.get(k) == server_env.get(k) for k in set(env) | set(server_env)
               if k.startswith(READ_AT_LOAD) and not k.startswith(READ_WHEN_USED))


def _start_server(cwd):
    global _server
    env = dict(os.environ)
    folder = tempfile.mkdtemp(prefix="warm_python_")
    _server = subprocess.Popen([sys.executable, "-c", SERVER, os.path.join(folder, "socket"), os.path.dirname(WORKER)],
                               cwd=cwd, env=env,
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _server.env, _server.socket = env, os.path.join(folder, "socket")
    if _read_line(300) != "ready\n":
        raise RuntimeError("the warm Python did not start: see the test's stderr")
    return _server


def _running_server(cwd):
    return _server if _server and _server.poll() is None else _start_server(cwd)


def _read_line(timeout):
    ready, _, _ = select.select([_server.stdout], [], [], timeout)
    return _server.stdout.readline() if ready else None


def run(argv, cwd, env=None, timeout=300):
    """subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)."""
    env = dict(os.environ if env is None else env)
    server_env = _server.env if _server else dict(os.environ)
    if (str(argv[0]).startswith("-") and argv[0] != "-m") or not forkable(env, server_env):  # a real one
        return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    with _lock, tempfile.TemporaryDirectory() as tmp:
        server = _running_server(cwd)
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


def popen_command(script_argv):
    """`python SCRIPT ARGS` (or `python -m MODULE ARGS`) as a warm fork, for subprocess.Popen with
    worker_env()'s environment: signals sent to the Popen reach the script, its exit code is the Popen's."""
    return [sys.executable, WORKER, *map(str, script_argv)]


def torchrun_argv(launcher_args, script_argv):
    """`-m torch.distributed.run LAUNCHER_ARGS SCRIPT ARGS`, each worker a warm fork."""
    return ["-m", "torch.distributed.run", *launcher_args, WORKER, *map(str, script_argv)]


def worker_env(env, cwd):
    """env, telling warm_worker.py where this test worker's warm Python listens (started here if need be)."""
    with _lock:
        return dict(env, **{SOCKET_VARIABLE: _running_server(cwd).socket})


def torchrun(launcher_args, script_argv, cwd, env, timeout=300):
    """As subprocess.run([sys.executable, *torchrun_argv(...)], capture_output=True, ...): torchrun and its
    workers all warm forks."""
    return run(torchrun_argv(launcher_args, script_argv), cwd, worker_env(env, cwd), timeout)
