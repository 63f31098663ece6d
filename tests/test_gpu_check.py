"""scripts/gpu_check.sh on the CPU with a tiny model: a whole run writes every line's result; a run
stopped after its first line keeps that line in valid JSON and says why the rest did not run; a
budget too small for anything skips every line, saying so. Each gpu_check.sh costs its environment
check and a few train.py launches, so the lines are few and tiny, and only the whole run runs bench.py
and check_env.py for real: the others test gpu_check.sh's own logic with stand-ins for them."""
import json
import os
import signal
import subprocess
import sys
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
    # the line naming its policy is the one that simulates
    proc = gpu_check(out, [f"{TINY} --batch_size=2 --activation_checkpointing=full", f"{TINY} --save_resume"])
    stdout = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, stdout
    report = json.loads(out.read_text())
    assert report["finished"] and report["seconds"] <= report["budget_s"] == 540
    assert report["env_report"] and isinstance(report["env_exit"], int)  # check_env.py's lines and status
    sweep, save_resume = report["runs"]
    assert sweep["exit"] == 0 and sweep["status"] == "ok" and sweep["seconds"] >= 0 and sweep["skipped"] is None
    assert sweep["args"].endswith(" --simulate") and not save_resume["args"].endswith(" --simulate")
    [setting] = sweep["bench"]["settings"]
    assert setting["label"] == "batch 2, recompute all" and setting["status"] == "ok" and setting["fits"]
    assert setting["compared"] == "allocated" and setting["estimated_gb"] > 0 and "simulated_gb" in setting
    assert sweep["bench"]["best"] == setting and "batch 2, recompute all, " in stdout
    checkpoint = save_resume["bench"]["save_resume"]
    assert save_resume["exit"] == 0 and checkpoint["status"] == "ok" and checkpoint["checkpoint_gb"] > 0
    assert checkpoint["save_s"] > 0 and checkpoint["load_s"] > 0 and "saved in " in stdout  # from the runs' records
    assert not list(tmp_path.glob("*.tmp-*"))  # every write renamed its temp file


def test_a_budget_too_small_skips_every_line_saying_why(tmp_path):
    out = tmp_path / "check.json"
    proc = gpu_check(out, [TINY, f"{TINY} --save_resume"], GPU_CHECK_BUDGET="10")
    stdout = proc.communicate(timeout=120)[0]
    assert proc.returncode == 0, stdout
    report = json.loads(out.read_text())
    assert report["finished"] and report["env_exit"] is None  # no time for the environment check either
    assert all(r["exit"] is None and r["bench"] is None and r["skipped"].startswith("skipped: out of time (")
               for r in report["runs"])


def stand_in_python(tmp_path, settings="[]"):
    """PYTHON for gpu_check.sh: the real one, except that bench.py answers at once (a result with these
    settings) but hangs on a --save_resume line, and check_env.py answers ok. gpu_check.sh's own logic (the
    order, the estimate's verdicts, the budget, the timeout, a signal) runs as it would; bench.py's own runs
    and check_env.py are tested in test_a_whole_run_writes_every_line."""
    calls = tmp_path / "bench_calls.txt"
    script = tmp_path / "python"
    script.write_text(f"""#!/usr/bin/env bash
case "$1" in
    scripts/bench.py) echo "$*" >> {calls}
        case " $* " in *" --save_resume "*) exec sleep 600 ;; esac
        echo '{{"settings": {settings}, "best": null}}'; exit 0 ;;
    scripts/check_env.py) echo "ok    stand-in"; exit 0 ;;
esac
exec {sys.executable} "$@"
""")
    script.chmod(0o755)
    return str(script), calls


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """One gpu_check.sh for two tests: a line the estimate refuses, one that runs, then one that hangs (the
    stand-in's bench.py on a --save_resume line) until a TERM. (The JSON once the first line that runs is
    done, the JSON after the TERM, the exit status, bench.py's calls.)"""
    folder = tmp_path_factory.mktemp("stopped")
    out, (python, calls) = folder / "check.json", stand_in_python(folder, '[{"status": "ok"}]')
    refused = f"{TINY} --activation_checkpointing=none --memory_budget_gb=0.000001"
    proc = gpu_check(out, [refused, f"{TINY} --activation_checkpointing=full", f"{TINY} --save_resume",
                           f"{TINY} --save_resume"], PYTHON=python)
    deadline = time.time() + 300
    while time.time() < deadline:  # until the JSON written after the line that runs (a kill now keeps this)
        report = json.loads(out.read_text()) if out.exists() else {"runs": [{}, {"exit": None}]}
        if report["runs"][1]["exit"] is not None:
            break
        time.sleep(0.5)
    while time.time() < deadline and "--save_resume" not in (calls.read_text() if calls.exists() else ""):
        time.sleep(0.2)  # until the next line's bench.py has started (a TERM before it would find none)
    proc.send_signal(signal.SIGTERM)  # the slot ending while the next line runs
    proc.communicate(timeout=60)
    return report, json.loads(out.read_text()), proc.returncode, calls.read_text()


def test_a_run_stopped_after_its_first_line_keeps_it(stopped):
    report, final, returncode, _ = stopped
    assert report["runs"][1]["exit"] == 0 and not report["finished"]
    assert report["runs"][2]["skipped"].startswith("not run: gpu_check.sh had not finished")
    assert returncode == 143
    _, first, *rest = final["runs"]
    assert first["exit"] == 0 and first["bench"]["settings"][0]["status"] == "ok" and not final["finished"]
    assert all(r["bench"] is None and r["skipped"].startswith("not run: gpu_check.sh was stopped by a signal")
               for r in rest)


def test_fp8_comes_second_and_third_and_a_line_cut_by_the_budget_says_timeout(tmp_path):
    """The default lines on a tiny model: auto compiled, fp8 tensorwise, fp8 rowwise, then the save and resume,
    which the budget cuts (it hangs here): reported as a timeout, the lines after it out of time."""
    out, (python, calls) = tmp_path / "check.json", stand_in_python(tmp_path)
    # 40 s: the lines' setup (lines.py imports torch) takes 5-8 s idle and 14 s or more on a loaded CPU, the three
    # lines before the save a second each, and the save must still have its minimum and the 10 s reserve left, or it
    # is "out of time" instead of cut by the budget
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=python, GPU_CHECK_BUDGET="40", GPU_CHECK_MIN_S="3",
               GPU_CHECK_MODEL=f"{TINY} --dtype=bfloat16")
    env.pop("GPU_CHECK_RUNS", None)
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(out)], cwd=REPO, env=env, text=True,
                          capture_output=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads(out.read_text())["runs"]
    assert [r["args"].split(TINY)[1].split() for r in runs[:5]] == [
        ["--dtype=bfloat16", "--compile=True"], ["--dtype=bfloat16", "--compile=True", "--fp8=tensorwise"],
        ["--dtype=bfloat16", "--compile=True", "--fp8=rowwise"], ["--dtype=bfloat16", "--save_resume"],
        ["--dtype=bfloat16", "--compile=False"]]
    assert [r["status"] for r in runs[:3]] == ["ok"] * 3
    cut = runs[3]
    assert cut["status"] == "timeout" and cut["exit"] in (124, 137) and cut["bench"] is None
    assert "timeout: killed after" in proc.stdout
    assert all(r["status"] == "skipped" and r["skipped"].startswith("skipped: out of time") for r in runs[4:])
    # the sweep follows, and its first line, naming its policy, is the one line that would simulate
    assert "--activation_checkpointing=none" in runs[5]["args"]
    assert [r["args"].endswith("--simulate") for r in runs].count(True) == 1 and runs[5]["args"].endswith("--simulate")
    assert "--simulate" not in calls.read_text()  # the lines that ran did not simulate


def test_the_estimate_drops_what_it_refuses_before_running_it(stopped):
    _, final, _, calls = stopped
    dropped, kept, *_ = final["runs"]
    assert dropped["status"] == "skipped" and dropped["skipped"].startswith("skipped: the estimate refuses it: ")
    assert "memory_budget_gb" in dropped["skipped"] and dropped["bench"] is None
    assert kept["status"] == "ok" and kept["args"].endswith("--simulate")  # the first line that runs simulates
    # the line that ran and the one stopped, not the refused one
    assert calls.count("scripts/bench.py") == 2 and "memory_budget_gb" not in calls
