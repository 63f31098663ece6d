"""The day-to-day tools around a run: check_env.py on a CPU-only machine, plot_log.py on a real
train.log (with a roll back in it), launch.sh in tmux (skipped where tmux is absent), quickstart.sh."""
import os
import shutil
import subprocess
import sys
import time

import pytest

import warm_python
from conftest import REPO
from test_train import TINY, train

sys.path.insert(0, str(REPO / "scripts"))
import check_env  # noqa: E402
import plot_log  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def rolled_back_run(tmp_path_factory, data_dir):
    """A real out_dir: 6 steps, then a roll back to step 3 retrained to 6 with another learning rate,
    so train.log holds steps 4..6 twice, the later ones different."""
    out = tmp_path_factory.mktemp("run")
    common = ["--max_iters=6", "--eval_interval=3", "--checkpoint_interval=3"]
    train(out, data_dir, *common)
    train(out, data_dir, *common, f"--init_from={out / 'ckpt_3.pt'}", "--learning_rate=1e-2")
    return out


def logged_losses(lines):
    return {int(line.split(":")[0][5:]): float(line.split("loss ")[1].split(",")[0])
            for line in lines if line.startswith("iter ")}


def test_plot_log_draws_the_run_as_it_continued(rolled_back_run, tmp_path, capsys):
    log = rolled_back_run / "train.log"
    text = log.read_text()
    assert text.count("=== ") == 2
    first, rerun = (logged_losses(run.splitlines()) for run in text.split("=== ")[1:])
    assert first[6] != rerun[6]  # the higher learning rate took another path from step 4 on
    train_points, val = plot_log.parse_log(text.splitlines())
    assert sorted(train_points) == [1, 2, 3, 4, 5, 6] and sorted(val) == [0, 3, 6]
    assert {n: train_points[n][0] for n in (4, 5, 6)} == rerun  # the roll back's steps, not the abandoned ones
    png = tmp_path / "loss.png"
    plot_log.main([str(log), "--out", str(png)])
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert plot_log.parse_resumes(text.splitlines()) == [3]  # the roll back: a dotted line at 3
    printed = capsys.readouterr().out
    assert "6 iterations (1..6), 3 evals, last val loss" in printed and printed.endswith("resumed 1 time(s)\n")


def test_plot_log_loss_axis_leaves_out_the_first_steps():
    train = {n: (11.0 if n == 1 else 3.0 - n / 100, 1000.0) for n in range(1, 101)}  # 11 nats at the start
    low, high = plot_log.loss_limits(train, {0: 10.9, 50: 2.6, 100: 2.1})
    assert 1.9 < low < 2.0 and 2.95 < high < 3.1  # the range after the first 5 steps, with a margin
    assert plot_log.loss_limits({1: (11.0, 1.0), 2: (3.0, 1.0)}, {}) is None  # too short to leave any out


def test_plot_log_reads_a_torchrun_line():
    line = ("iter 5: loss 2.0000, time 100ms, mfu 40.0%, tok/s 97,038 (12,130 per GPU), lr 1.000e-04, "
            "grad norm 0.500, mem 130.1GB, hfu 53.0%, eta 100.0h")
    assert plot_log.parse_log([line]) == ({5: (2.0, 97038.0)}, {})


def test_plot_log_bad_input(tmp_path):
    (tmp_path / "empty.log").write_text("=== a restart line and nothing else\n")
    for path, message in ((tmp_path / "missing.log", "cannot read"), (tmp_path / "empty.log", "no 'iter N")):
        with pytest.raises(SystemExit) as e:
            plot_log.main([str(path)])
        assert message in str(e.value.code)


def test_check_env_on_cpu(tmp_path, data_dir, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ckpt_5.pt").write_bytes(b"")  # one checkpoint already takes its share of the disk
    args = [str(REPO / "config" / "train_tiny.py"), *TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'out'}"]
    result = warm_python.run(["scripts/check_env.py", *args], cwd=REPO, env=ENV, timeout=120)
    out = result.stdout
    if "no GPU visible" not in out:
        pytest.skip("a GPU is visible: this test is about what a CPU-only machine reports")
    assert result.returncode == 0, out + result.stderr
    assert "cannot check the device" in out and "fused AdamW: needs a GPU" in out
    assert "attention runs the flash kernel on the CPU" in out
    assert "needs 10 more checkpoint(s)" in out and "1 there now" in out  # keep_last_n=10, + 1 being written
    assert "train.bin:" in out and "no meta.json" in out and "Traceback" not in result.stderr
    with pytest.raises(SystemExit) as e:
        check_env.main([*args, "--data_dir=/nonexistent/data"])
    assert e.value.code == 1 and "FAIL  no train.bin in /nonexistent/data" in capsys.readouterr().out


def test_shell_scripts_parse_and_launch_usage(tmp_path):
    for script in ("launch.sh", "quickstart.sh"):
        subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=True)
    usage = subprocess.run(["bash", "scripts/launch.sh"], cwd=REPO, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    missing = subprocess.run(["bash", "scripts/launch.sh", "config/nope.py"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 1 and "config file not found" in missing.stderr


def wait_for(path, text, timeout=120):
    deadline = time.time() + timeout
    while text not in (path.read_text() if path.exists() else ""):
        assert time.time() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.2)


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: scripts/launch.sh runs training in a tmux session (apt install tmux)")
def test_launch_survives_relaunch_stops_safely_and_resumes(tmp_path, data_dir):
    env = {k: v for k, v in ENV.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path), SESSION="test_run")  # a tmux server of its own
    out = tmp_path / "out"
    args = ["config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={out}",
            "--max_iters=100000", "--checkpoint_interval=100000", "--gradient_accumulation_steps=8"]

    def launch():
        return subprocess.run(["bash", "scripts/launch.sh", *args], cwd=REPO, capture_output=True, text=True,
                              env=env, stdin=subprocess.DEVNULL, timeout=60)

    def tmux(*command):
        return subprocess.run(["tmux", *command], capture_output=True, text=True, env=env).stdout.strip()

    log = out / "train.log"
    try:
        assert "started" in launch().stdout
        wait_for(log, "iter 2:")
        assert "already running" in launch().stdout  # no second train.py on the same out_dir
        assert log.read_text().count("=== ") == 1
        tmux("send-keys", "-t", "=test_run:", "C-c")  # the safe stop: train.py saves, then exits
        wait_for(log, "stopped by SIGINT")
        wait_for(log, "run the same command to continue")
        deadline = time.time() + 30
        while tmux("display-message", "-p", "-t", "=test_run:", "#{pane_dead}") != "1":
            assert time.time() < deadline
            time.sleep(0.2)
        relaunched = launch().stdout
        assert "has ended" in relaunched and "started" in relaunched  # as after a reboot: resume
        wait_for(log, "resuming after")
    finally:
        tmux("kill-server")


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: scripts/launch.sh runs training in a tmux session (apt install tmux)")
def test_launch_reports_a_start_up_death_in_whole_lines(tmp_path):
    """The pane is 80 columns wide and train.log's first line, the command, is longer: the report must
    not begin with the tail of it, wrapped."""
    env = {k: v for k, v in ENV.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path), SESSION="test_dies", LAUNCH_WAIT="120")
    out = tmp_path / ("a_long_folder_name_" * 6) / "out"
    dies = subprocess.run(["bash", "scripts/launch.sh", "config/train_tiny.py", *TINY, f"--out_dir={out}",
                           f"--data_dir={tmp_path / 'no_data'}"], cwd=REPO, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=180)
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
    assert dies.returncode == 1, dies.stdout + dies.stderr
    reported = dies.stderr.split("its last lines:\n", 1)[1].splitlines()
    logged = (out / "train.log").read_text().splitlines()
    assert reported and all(line in logged for line in reported), (reported, logged)
    assert not any(line.startswith(("=== ", "Pane is dead")) for line in reported)
    assert reported[-1].startswith(f"error: no train.bin in {tmp_path / 'no_data'}")
