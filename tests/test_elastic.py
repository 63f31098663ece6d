"""elastic.py's restart note: which runs and ranks it blames (the stop vote: test_stopping.py; hung ranks and
restarts under torchrun: test_distributed.py)."""
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, wait_for
from trainer import checkpoint, elastic, metrics


def test_a_run_outside_torchrun_clears_the_failures_note_without_telling_it(tmp_path, monkeypatch):
    """A single-process run that failed at start-up leaves FAILURES; the next run is no torchrun restart."""
    monkeypatch.delenv("TORCHELASTIC_RESTART_COUNT", raising=False)
    elastic.leave_note(str(tmp_path), 0, "data_mixture: the weights sum to zero")
    assert elastic.restart_line(str(tmp_path)) is None
    assert not (tmp_path / elastic.FAILURES).exists()  # nor is it told at a later torchrun restart
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    assert elastic.restart_line(str(tmp_path)).endswith("no rank left a message: one was killed (kill -9, the OOM "
                                                        "killer) or its node went away; torchrun's output names its exit code")


def test_the_rank_that_left_no_line_is_named_first():
    notes = [f"rank {r}: train.py crashed: RuntimeError: Connection reset by peer" for r in (0, 1, 3)]
    line = elastic.died(notes, 4)
    assert line.startswith("rank 2 left no line: killed (kill -9") and line.endswith("; ".join(notes))
    assert elastic.died(notes, 2) == "; ".join(notes[:2] + notes[2:])  # all who were there spoke


@pytest.mark.e2e
def test_a_rank_killed_with_sigkill_is_named_at_the_restart(tmp_path, data_dir):
    """torchrun --max-restarts=1 with 2 ranks; local rank 1 gets kill -9 after its first step."""
    import psutil
    from test_distributed import ARGS, ENV
    out = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            "--max-restarts=1", "train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}",
                            f"--out_dir={out}", "--max_iters=12"], cwd=REPO, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, env=dict(ENV, TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"))
    try:
        for _ in range(1200):  # up to two minutes for the first attempt's first step
            if (out / "train.log").is_file() and "\niter 1: " in (out / "train.log").read_text():
                break
            time.sleep(0.1)
        else:
            pytest.fail("the first attempt did not reach its first step in two minutes")
        rank_1 = [p for p in psutil.Process(job.pid).children(recursive=True) if environ(p).get("LOCAL_RANK") == "1"]
        assert len(rank_1) == 1, "no single process with LOCAL_RANK=1"
        rank_1[0].send_signal(signal.SIGKILL)
        stdout, _ = job.communicate(timeout=300)
        assert job.returncode == 0, stdout[-3000:]
        assert "elastic: restart 1 of 1; the attempt before ended with: rank 1 left no line: killed (kill -9" in stdout
    finally:
        job.kill()


@pytest.mark.e2e
def test_the_workers_stop_and_save_when_torchrun_itself_is_killed(tmp_path, data_dir):
    """kill -9 of torchrun: the kernel sends its workers SIGTERM (elastic.on_launcher_death), so they stop
    and save as at any signal, where they used to train on holding the out_dir's lock."""
    import psutil
    from test_distributed import ARGS, ENV
    out = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            "train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}", f"--out_dir={out}",
                            "--max_iters=100000"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=ENV)
    try:
        wait_for(out, "step", job, since=1)
        workers = psutil.Process(job.pid).children(recursive=True)
        job.send_signal(signal.SIGKILL)
        gone, alive = psutil.wait_procs(workers, timeout=120)
        assert not alive, f"{len(alive)} worker(s) still training two minutes after torchrun was killed"
        stop = metrics.read(out, "stop")
        assert stop and stop[-1]["signal"] == "SIGTERM"
        assert checkpoint.list_checkpoints(str(out))[0][0] == stop[-1]["iter"]
    finally:
        for p in psutil.Process().children(recursive=True):
            p.kill()


@pytest.mark.e2e
def test_workers_whose_torchrun_is_killed_during_start_up_exit_and_free_the_out_dir(tmp_path, data_dir):
    """kill -9 of torchrun while its workers start: one already in init_process_group waited there, in C++ with the
    GIL held, for the dead launcher's store (half an hour), holding the out_dir's lock; one still importing torch
    had not yet asked the kernel for a signal. Both now exit at once (elastic.on_launcher_death), with nothing to
    save, and the same command can run."""
    import psutil
    from test_distributed import ARGS, ENV
    out = tmp_path / "run"
    job = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                            "train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}", f"--out_dir={out}"],
                           cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    try:
        deadline = time.time() + 120
        while "CPU: " not in ((out / "train.log").read_text() if (out / "train.log").exists() else ""):
            assert time.time() < deadline and job.poll() is None
            time.sleep(0.01)
        workers = psutil.Process(job.pid).children(recursive=True)
        job.send_signal(signal.SIGKILL)
        gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"{len(alive)} worker(s) left 30 s after torchrun was killed in their start-up"
        assert not (out / metrics.FILE).exists() or not metrics.read(out, "step")
    finally:
        for p in psutil.Process().children(recursive=True):
            p.kill()


def environ(process):
    """A process's environment, or none where it ended between the listing and the reading."""
    import psutil
    try:
        return process.environ()
    except psutil.Error:
        return {}
