"""Shared pytest pieces: the repo root on sys.path, the `e2e` marker for tests whose point is a real
process (`pytest -m "not e2e"` runs the in-process rest), the helpers that start those processes, and
GPT-2's BPE ranks for offline tests."""
import contextlib
import gc
import importlib.util
import io
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

# numpy's OpenBLAS picks its kernels by CPU, and an AVX-512 Xeon's round otherwise than an AVX2 machine's (or an
# EPYC's, which get these): a near tie in a fit the docs quote then falls the other way (docs/ladder_evidence.md,
# "The s-shaped form, fitted"). These kernels on every x86 CPU, here and in the processes the tests start; before
# numpy is imported, which reads it.
if platform.machine() in ("x86_64", "AMD64"):
    os.environ.setdefault("OPENBLAS_CORETYPE", "Haswell")
import numpy as np  # noqa: E402
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from trainer import faults, metrics  # noqa: E402  (after the repo root is on sys.path)
# every Python the tests start skips the ~1 s collection at exit (fast_exit/sitecustomize.py says why;
# README's test section has the measurement)
FAST_EXIT = str(REPO / "tests" / "fast_exit")
if FAST_EXIT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [FAST_EXIT, os.environ.get("PYTHONPATH")]))
# Tiny models gain nothing from threads, and two test workers on 2 cores would fight over them: here
# (torch reads it as the test modules import it; xdist's controller, which runs no test, never imports
# torch) and in every process the tests start.
os.environ["OMP_NUM_THREADS"] = "1"
# Inductor's CPU kernels as scalar C++, here and in every process the tests start: the tests check what
# compiled code computes, not its speed, and without SIMD a cold compile takes a third less time or more
# (README's test section has the measurement; TORCHINDUCTOR_VEC_ISA_OK=1 keeps SIMD).
# Read when torch._inductor.config is first imported, which torchao does after this, as the test modules load.
os.environ.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "0")


def pytest_configure(config):
    config.addinivalue_line("markers", "e2e: starts real processes (signals, torchrun, resume across processes, "
                                       "the launchers, the README's commands); `-m \"not e2e\"` leaves them out")


def load_script(name, path):
    """A script (path: from the repo root) imported as module name, without running its __main__ block."""
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def python(args, cwd=REPO, env=None, timeout=300):
    """`python ARGS` in a fresh interpreter, as a user runs it: a CompletedProcess with its output."""
    return subprocess.run([sys.executable, *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def run_here(args, env=None, cwd=REPO):
    """`python ARGS` (a script and its arguments) run in this interpreter, for a test whose point is what the
    script decides rather than its process: torch's import, seconds a process, is paid once. Returns a
    CompletedProcess as python() does (exit status, stdout, stderr; an uncaught exception goes through the
    script's sys.excepthook, as at a process's end). env: variables added for the run. What the script set
    for its process is put back afterwards: argv, sys.path, the environment, the working folder, signal handlers,
    excepthook, torch's threads and compiled graphs, and the faults faults.py read from TRAINER_FAULTS."""
    import torch  # here, not at the top: xdist's controller imports this file and runs no test
    script, *rest = map(str, args)
    path = Path(cwd) / script
    if "kill" in (env or {}).get(faults.VARIABLE, os.environ.get(faults.VARIABLE, "")):
        raise ValueError("a kill fault would kill this interpreter, the test runner's: run the script with python()")
    saved = (sys.argv, list(sys.path), dict(os.environ), os.getcwd(), sys.excepthook, torch.get_num_threads(),
             faults.active, {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)})
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    namespace = {"__name__": "__main__", "__file__": str(path)}
    sys.argv = [script, *rest]
    sys.path.insert(0, str(path.parent))  # as `python SCRIPT` puts the script's folder first
    os.environ.update(env or {})
    os.chdir(cwd)
    faults.active = faults.Faults(os.environ.get(faults.VARIABLE, ""))
    gc.freeze()  # what the interpreter held before: the collection afterwards scans only what the run made
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                exec(compile(path.read_text(), str(path), "exec"), namespace)
            except SystemExit as e:  # as the interpreter ends: a message goes to stderr with status 1
                code = e.code if isinstance(e.code, int) else 0 if e.code is None else (print(e.code, file=sys.stderr) or 1)
            except BaseException:
                sys.excepthook(*sys.exc_info())
                code = 1
    finally:
        sys.argv, sys.path[:], environ, cwd_before, sys.excepthook, threads, faults.active, handlers = saved
        os.environ.clear()
        os.environ.update(environ)
        os.chdir(cwd_before)
        torch.set_num_threads(threads)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        namespace.clear()
        gc.collect()  # closes what the script left open: its train.log, metrics.jsonl and out_dir's lock
        gc.unfreeze()
        torch._dynamo.reset()
    return subprocess.CompletedProcess([sys.executable, script, *rest], code, stdout.getvalue(), stderr.getvalue())


def torchrun_command(launcher_args, script_args):
    """`python -m torch.distributed.run LAUNCHER_ARGS SCRIPT ARGS`: torchrun with this interpreter."""
    return [sys.executable, "-m", "torch.distributed.run", *launcher_args, *map(str, script_args)]


def torchrun(launcher_args, script_args, cwd=REPO, env=None, timeout=300):
    return python(torchrun_command(launcher_args, script_args)[1:], cwd, env, timeout)


def wait_for(out_dir, kind, proc=None, since=0, timeout=120):
    """Until out_dir/metrics.jsonl has a `kind` record at iteration `since` or later, while proc (if given)
    runs: wait_for(out, "step", proc, since=2) returns once a run is past its start-up and first step."""
    deadline = time.time() + timeout
    path = Path(out_dir) / metrics.FILE
    while not (path.exists() and any(r["iter"] >= since for r in metrics.read(path, kind))):
        assert time.time() < deadline, f"no {kind!r} record at iteration {since} or later in {path}"
        assert proc is None or proc.poll() is None, proc.communicate()
        time.sleep(0.05)


def sigint_heard(pid):
    """Whether the process no longer ignores SIGINT (bit 1 of /proc's SigIgn mask: signal 2)."""
    with open(f"/proc/{pid}/status") as f:
        ignored = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return not ignored & (1 << (signal.SIGINT - 1))


@pytest.fixture(scope="session")
def gpt2_rank_file():
    """GPT-2's ranks as a .tiktoken file (scripts/fetch_gpt2_ranks.sh puts them in .cache/).

    Skipped where the file is absent, unless REQUIRE_GPT2_RANKS=1 (CI sets it) makes that a failure.
    """
    path = Path(os.environ.get("GPT2_TIKTOKEN", REPO / ".cache" / "gpt2.tiktoken"))
    if not path.is_file():
        if os.environ.get("REQUIRE_GPT2_RANKS") == "1":
            pytest.fail(f"{path} is missing: run scripts/fetch_gpt2_ranks.sh")
        pytest.skip(f"{path} is missing: run scripts/fetch_gpt2_ranks.sh")
    return str(path)


VOCAB = 64  # the tiny token bins' vocabulary; tests train with --vocab_size=VOCAB


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """Token bins with learnable structure: a few repeated 'sentences' of ids."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    sentences = [rng.integers(0, VOCAB, size=rng.integers(5, 12)) for _ in range(20)]
    for split, n in (("train", 3000), ("val", 300)):
        ids = np.concatenate([sentences[i] for i in rng.integers(0, len(sentences), size=n)])
        ids.astype(np.uint16).tofile(folder / f"{split}.bin")
    return str(folder)
