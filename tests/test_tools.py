"""The day-to-day tools around a run: check_env.py on a CPU-only machine, plot_log.py on a real
metrics.jsonl (with a roll back in it), launch.sh in tmux (skipped where tmux is absent), quickstart.sh."""
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_here, wait_for
from test_train import TINY, train

sys.path.insert(0, str(REPO / "scripts"))
import check_env  # noqa: E402
from trainer import metrics  # noqa: E402
import plot_log  # noqa: E402

ENV = dict(os.environ, OMP_NUM_THREADS="1")


@pytest.fixture(scope="module")
def rolled_back_run(tmp_path_factory, data_dir):
    """A real out_dir: 6 steps, then a roll back to step 3 retrained to 6 with another learning rate,
    so metrics.jsonl holds steps 4..6 twice, the later ones different."""
    out = tmp_path_factory.mktemp("run")
    common = ["--max_iters=6", "--eval_interval=3", "--checkpoint_interval=3"]
    train(out, data_dir, *common)
    train(out, data_dir, *common, f"--init_from={out / 'ckpt_3.pt'}", "--learning_rate=1e-2")
    return out


def test_plot_log_draws_the_run_as_it_continued(rolled_back_run, tmp_path, capsys):
    records = metrics.read(rolled_back_run)
    assert [r["iter"] for r in records if r["kind"] == "start"] == [0, 3]  # the roll back started at 3
    steps = [r for r in records if r["kind"] == "step"]
    first, rerun = ({r["iter"]: r["loss"] for r in part} for part in (steps[:6], steps[6:]))
    assert sorted(rerun) == [4, 5, 6] and first[6] != rerun[6]  # the higher learning rate took another path
    drawn = plot_log.curves(records)
    assert sorted(drawn["train"]) == [1, 2, 3, 4, 5, 6] and sorted(drawn["val"]) == [0, 3, 6]
    assert {n: drawn["train"][n] for n in (4, 5, 6)} == rerun  # the roll back's steps, not the abandoned ones
    assert drawn["events"]["start"] == [3]  # a dotted line at 3
    png = tmp_path / "loss.png"
    plot_log.main([str(rolled_back_run / "train.log"), "--out", str(png)])  # a file in the out_dir will do
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    printed = capsys.readouterr().out
    assert "6 iterations (1..6), 3 evals, last val loss" in printed and printed.endswith("resumed 1 time(s)\n")


def test_plot_log_draws_forecasts_rollbacks_and_weight_schedule_and_val_set_changes(tmp_path, capsys):
    record = metrics.Metrics(tmp_path)
    record("start", 0, params=124_000_000)
    for n in range(1, 9):
        record("step", n, loss=4 - n / 10, tokens_per_sec=1000.0)
    record("eval", 4, val_loss=3.7)
    record("forecast", 4, at_iter=20, val_loss=3.1, error=0.05)
    record("rollback", 5, from_iter=8, first_spike=7)  # steps 6..8 are taken again
    record("step", 6, loss=float("nan"), tokens_per_sec=None)  # skipped: null figures
    record("weights_changed", 6)
    record("schedule_changed", 6, changes=["max_iters 8 -> 20"], lr_from=6)
    record("val_set_changed", 7, was=[2, 4], now=[2, 8])
    record("hellaswag", 6, acc_norm=0.3, acc=0.29, n=24)
    drawn = plot_log.curves(metrics.read(tmp_path))
    assert sorted(drawn["train"]) == [1, 2, 3, 4, 5, 6] and drawn["train"][6] != drawn["train"][6]  # nan
    assert drawn["forecast"] == [(20, 3.1, 0.05)] and drawn["params"] == 124_000_000
    assert drawn["events"] == {"start": [], "rollback": [5], "weights_changed": [6], "schedule_changed": [6],
                               "val_set_changed": [7]}
    assert drawn["hellaswag"] == {6: 0.3} and 6 not in drawn["speed"]
    plot_log.main([str(tmp_path), "--out", str(tmp_path / "plot.png")])
    assert capsys.readouterr().out.endswith("rolled back 1 time(s), 1 forecast(s)\n")


def test_plot_log_loss_axis_leaves_out_the_first_steps():
    train = {n: 11.0 if n == 1 else 3.0 - n / 100 for n in range(1, 101)}  # 11 nats at the start
    low, high = plot_log.loss_limits(train, {0: 10.9, 50: 2.6, 100: 2.1})
    assert 1.9 < low < 2.0 and 2.95 < high < 3.1  # the range after the first 5 steps, with a margin
    assert plot_log.loss_limits({1: 11.0, 2: 3.0}, {}) is None  # too short to leave any out


def test_plot_log_bad_input(tmp_path):
    """One line each, nothing written: a folder that is not there (never the one above it, whose metrics.jsonl is
    another run's), a file that is not a run's, a run without steps, an extension matplotlib cannot write."""
    record = metrics.Metrics(tmp_path)  # the folder above holds a run
    record("step", 1, loss=3.0)
    (tmp_path / "started").mkdir()
    metrics.Metrics(tmp_path / "started")("start", 0)
    (tmp_path / "notes.txt").write_text("")
    mistyped, pdff = tmp_path / "gpt3_6bb", tmp_path / "x.pdff"
    for args, message in (([mistyped], f"plot_log: {mistyped} does not exist: give a run's out_dir (or its "
                                       "train.log or metrics.jsonl)"),
                          ([mistyped / "train.log"], "train.log does not exist"),
                          ([tmp_path / "notes.txt"], "notes.txt is not a run's out_dir, train.log or metrics.jsonl"),
                          ([tmp_path / "started"], "no 'step' records"),
                          ([tmp_path, "--out", pdff], f"plot_log: --out {pdff}: matplotlib cannot write .pdff files; "
                                                      "end it in one of .avif, .eps"),
                          ([tmp_path, "--out", tmp_path / "x"], "x: it has no extension; end it in one of .avif")):
        with pytest.raises(SystemExit) as e:
            plot_log.main(list(map(str, args)))
        assert message in str(e.value.code) and "\n" not in str(e.value.code), e.value.code
    assert not list(tmp_path.rglob("*.png")) and not (tmp_path / "x").exists()


def test_plot_log_skips_malformed_records(tmp_path, capsys):
    """A record without its iteration or figures, or not an object, is skipped with one warning that counts
    them; a torn last line (a kill, or a write under way) is skipped silently, as metrics.read does."""
    record = metrics.Metrics(tmp_path)
    for n in range(1, 5):
        record("step", n, loss=4 - n / 10)
    with open(tmp_path / metrics.FILE, "a") as f:
        # nulls where train.py writes numbers (another writer's): not drawn, nor a TypeError in matplotlib
        f.write('{"kind": "forecast", "iter": 4, "at_iter": 60, "val_loss": null, "error": null}\n'
                '{"kind": "hellaswag", "iter": 4, "acc_norm": null}\n')
        f.write('{"kind": "step"}\n[1, 2]\n{"kind": "eval", "iter": 4}\n{"kind": "step", "iter": 5, "lo')
    plot_log.main([str(tmp_path / metrics.FILE)])
    out, err = capsys.readouterr()
    assert err == (f"plot_log: warning: skipped 3 malformed record(s) in {tmp_path / metrics.FILE} (not an object "
                   "with a kind, an iter and its figures)\n")
    assert "4 iterations (1..4), 0 evals" in out and (tmp_path / "loss.png").stat().st_size > 0


def test_check_env_on_cpu(tmp_path, data_dir, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ckpt_5.pt").write_bytes(b"")  # one checkpoint already takes its share of the disk
    args = [str(REPO / "config" / "train_tiny.py"), *TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path / 'out'}"]
    result = run_here(["scripts/check_env.py", *args])
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


def test_check_env_fails_what_train_py_refuses_for_the_processes_torchrun_gives_it(data_dir, capsys, monkeypatch):
    """A reviewer's --strategy=fdsp, and 3 micro-batches over 2 processes, passed check_env and failed in train.py;
    and a sharded strategy was sized for one process, a whole model's memory."""
    args = [str(REPO / "config" / "train_tiny.py"), *TINY, f"--data_dir={data_dir}", "--device=cpu"]
    for extra, processes, line in (
            (["--strategy=fdsp"], None, "FAIL  settings: strategy must be 'ddp', 'fsdp' or 'hsdp', got 'fdsp'"),
            (["--gradient_accumulation_steps=3"], "2", "FAIL  settings: gradient_accumulation_steps=3 must divide"),
            (["--strategy=fsdp"], None, "WARN  strategy=fsdp checked for one process: WORLD_SIZE=N python"),
            (["--gradient_accumulation_steps=2"], "2", "ok    settings: as train.py checks them, for 2 process(es)")):
        if processes:
            monkeypatch.setenv("WORLD_SIZE", processes)
        else:
            monkeypatch.delenv("WORLD_SIZE", raising=False)
        try:
            check_env.main([*args, *extra])
        except SystemExit:
            pass
        assert any(out.startswith(line) for out in capsys.readouterr().out.splitlines()), line


@pytest.mark.e2e
def test_shell_scripts_parse_and_launch_usage(tmp_path):
    for script in ("launch.sh", "quickstart.sh"):
        subprocess.run(["bash", "-n", str(REPO / "scripts" / script)], check=True)
    usage = subprocess.run(["bash", "scripts/launch.sh"], cwd=REPO, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
    missing = subprocess.run(["bash", "scripts/launch.sh", "config/nope.py"], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 1 and "config file not found" in missing.stderr


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt install tmux)")
def test_launch_shows_a_start_up_error_that_never_reached_train_log(tmp_path, data_dir):
    """The lock is taken before train.log opens: its refusal is the pane's, not the old run's last log lines."""
    from trainer import runlock
    env = {k: v for k, v in ENV.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path), SESSION="test_locked", LAUNCH_WAIT="8")
    out = tmp_path / "out"
    out.mkdir()
    (out / "train.log").write_text("iter 1: loss 5.0 (an older run's)\n")
    held = runlock.hold(str(out), "training run")
    try:
        result = subprocess.run(["bash", "scripts/launch.sh", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}",
                                 f"--out_dir={out}"], cwd=REPO, capture_output=True, text=True, env=env,
                                stdin=subprocess.DEVNULL, timeout=60)
    finally:
        held.close()
        subprocess.run(["tmux", "kill-server"], capture_output=True, env=env)
    assert result.returncode == 1 and "exited at start-up" in result.stderr
    assert "is in use by another training run" in result.stderr and "an older run's" not in result.stderr


@pytest.mark.e2e
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
        wait_for(out, "step", since=2)
        assert "already running" in launch().stdout  # no second train.py on the same out_dir
        assert log.read_text().count("=== ") == 1
        tmux("send-keys", "-t", "=test_run:", "C-c")  # the safe stop: train.py saves, then exits
        wait_for(out, "stop")
        assert metrics.read(out, "stop")[-1]["signal"] == "SIGINT"
        assert "run the same command to continue" in log.read_text()
        deadline = time.time() + 30
        while tmux("display-message", "-p", "-t", "=test_run:", "#{pane_dead}") != "1":
            assert time.time() < deadline
            time.sleep(0.2)
        relaunched = launch().stdout
        assert "has ended" in relaunched and "started" in relaunched  # as after a reboot: resume
        # the final lines are train.log's (under torchrun the pane's end with torchrun's traceback)
        ended = relaunched.split("its final lines:\n", 1)[1].split("\nstarted ", 1)[0]
        assert "run the same command to continue" in ended and ended in log.read_text()
        wait_for(out, "start", since=1)  # the relaunch resumed
    finally:
        tmux("kill-server")


@pytest.mark.e2e
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
