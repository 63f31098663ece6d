"""scripts/gpu_check.sh on the CPU with a tiny model: a whole run writes every line's result; a run
stopped after its first line keeps that line in valid JSON and says why the rest did not run; a
budget too small for anything skips every line, saying so. Each gpu_check.sh costs its environment
check and a few train.py launches, so the lines are few and tiny."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.e2e  # gpu_check.sh runs bench.py's train.py processes

TINY = " ".join(["config/train_tiny.py", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32",
                 "--vocab_size=64", "--device=cpu", "--dtype=float32"])


def gpu_check(out, runs, **settings):
    """gpu_check.sh writing out, started (not waited for), one line of GPU_CHECK_RUNS per item of runs."""
    env = dict(os.environ, OMP_NUM_THREADS="1", GPU_CHECK_RUNS="\n".join(runs), GPU_CHECK_STEPS="1",
               GPU_CHECK_GRAD_ACCUM="1", GPU_CHECK_MIN_S="5", **settings)
    return subprocess.Popen(["bash", "scripts/gpu_check.sh", str(out)], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_a_whole_run_writes_every_line(tmp_path):
    out = tmp_path / "check.json"
    proc = gpu_check(out, [f"{TINY} --sweep --batch_sizes=2 --recompute=all", f"{TINY} --save_resume"])
    stdout = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, stdout
    report = json.loads(out.read_text())
    assert report["finished"] and report["seconds"] <= report["budget_s"] == 540
    assert report["env_report"] and isinstance(report["env_exit"], int)  # check_env.py's lines and status
    sweep, save_resume = report["runs"]
    assert sweep["exit"] == 0 and sweep["seconds"] >= 0 and sweep["skipped"] is None
    [setting] = sweep["bench"]["settings"]
    assert setting["label"] == "batch 2, recompute all" and setting["status"] == "ok" and setting["fits"]
    assert setting["compared"] == "allocated" and setting["estimated_gb"] > 0 and "simulated_gb" in setting
    assert sweep["bench"]["best"] == setting and "batch 2, recompute all, " in stdout
    checkpoint = save_resume["bench"]["save_resume"]
    assert save_resume["exit"] == 0 and checkpoint["status"] == "ok" and checkpoint["checkpoint_gb"] > 0
    assert checkpoint["save_s"] >= 0 and checkpoint["load_s"] > 0 and "saved in " in stdout
    assert not list(tmp_path.glob("*.tmp-*"))  # every write renamed its temp file


def test_a_run_stopped_after_its_first_line_keeps_it(tmp_path):
    out = tmp_path / "check.json"
    proc = gpu_check(out, [TINY, TINY, TINY])
    deadline = time.time() + 300
    while time.time() < deadline:  # until the JSON written after the first line (a kill now keeps this)
        report = json.loads(out.read_text()) if out.exists() else {"runs": [{"exit": None}]}
        if report["runs"][0]["exit"] is not None:
            break
        time.sleep(0.5)
    assert report["runs"][0]["exit"] == 0 and not report["finished"]
    assert report["runs"][1]["skipped"].startswith("not run: gpu_check.sh had not finished")
    proc.send_signal(signal.SIGTERM)  # the slot ending while the second line runs
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    report = json.loads(out.read_text())
    first, *rest = report["runs"]
    assert first["exit"] == 0 and first["bench"]["settings"][0]["status"] == "ok" and not report["finished"]
    assert all(r["bench"] is None and r["skipped"].startswith("not run: gpu_check.sh was stopped by a signal")
               for r in rest)


def test_a_budget_too_small_skips_every_line_saying_why(tmp_path):
    out = tmp_path / "check.json"
    proc = gpu_check(out, [TINY, f"{TINY} --save_resume"], GPU_CHECK_BUDGET="10")
    stdout = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, stdout
    report = json.loads(out.read_text())
    assert report["finished"] and report["env_exit"] is None  # no time for the environment check either
    assert all(r["exit"] is None and r["bench"] is None and r["skipped"].startswith("skipped: out of time (")
               for r in report["runs"])
