"""Guardrails found by trying the project as a new user: one job per folder, devices and memory checked
before anything is spent, encodings found from anywhere, a useful validation split, messages that
name the real cause, crashes in train.log, --help, closed pipes, and a failing rank ending the job. The
scripts run in this interpreter (run_here) where what they decide is the point, in processes (`e2e`)
where a second live process, a pipe, tmux, a compiler or torchrun is."""
import base64
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from trainer import RunError, bins, runlock, runlog
from conftest import REPO, python, run_here, torchrun, wait_for
from test_train import TINY, train

ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(*args, env=None):
    """A script in a process of its own."""
    return python(args, env=dict(ENV, **(env or {})))


def last_line(text):
    return text.strip().splitlines()[-1]


# 1. one job per folder

@pytest.mark.e2e
def test_a_second_run_into_the_same_out_dir_is_refused_until_the_first_dies(tmp_path, data_dir):
    out = tmp_path / "out"
    first = subprocess.Popen([sys.executable, "train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}",
                              f"--out_dir={out}", "--max_iters=1000000", "--checkpoint_interval=1000000"],
                             cwd=REPO, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(out, "step", first, since=2)
        second = train(out, data_dir, "--max_iters=2", check=False)
        assert second.returncode == 1 and "Traceback" not in second.stderr
        line = last_line(second.stderr)
        assert line.startswith(f"error: {out} is in use by another training run (pid {first.pid} on ")
        assert "train.py config/train_tiny.py" in line
        assert (out / "train.log").read_text().count("=== ") == 1  # the second run wrote nothing there
    finally:
        first.send_signal(signal.SIGKILL)  # kill -9 leaves no stale lock: the kernel drops it
        first.wait()
    assert "done: 3 steps" in train(out, data_dir, "--max_iters=3", "--init_from=scratch").stdout


def test_a_prepare_job_holds_its_data_dir(tmp_path):
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": f"document {i}"}) + "\n" for i in range(10)))
    held = runlock.hold(str(tmp_path / "data"), "prepare job")
    try:
        result = run_here(["data/pile/prepare.py", "--source", source, "--data_dir", tmp_path / "data",
                           "--encoding", "bytes"])  # this process holds it through another open file
        assert result.returncode == 1 and f"is in use by another prepare job (pid {os.getpid()} on" in result.stderr
    finally:
        held.close()
    assert run_here(["data/pile/prepare.py", "--source", source, "--data_dir", tmp_path / "data",
                     "--encoding", "bytes"]).returncode == 0
    blocked = run_here(["train.py", "config/train_tiny.py", f"--out_dir={source}/out"])  # a folder inside a file
    assert blocked.returncode == 1 and "Traceback" not in blocked.stderr
    assert blocked.stderr.strip().splitlines()[-1].startswith(f"error: cannot write to {source}/out: Not a directory")
    given_a_file = run_here(["train.py", "config/train_tiny.py", f"--out_dir={source}"])  # a checkpoint's, say
    assert given_a_file.returncode == 1 and given_a_file.stderr.strip().splitlines()[-1] == \
        f"error: {source} is a file, not a folder: give the folder it lies in ({tmp_path}), or another"


# 2. devices

@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="needs a machine without a GPU")
@pytest.mark.parametrize("device,expected", [("cuda", "sees no GPU here"), ("cuda:1", "sees no GPU here"),
                                             ("gpu", "'gpu' is not a device"), ("cuda:x", "'cuda:x' is not a device")])
def test_a_device_this_machine_lacks_is_one_line(tmp_path, data_dir, device, expected):
    result = train(tmp_path / "out", data_dir, f"--device={device}", check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr and expected in last_line(result.stderr)
    env_check = run_here(["scripts/check_env.py", "config/train_tiny.py", f"--device={device}", f"--data_dir={data_dir}"])
    assert env_check.returncode == 1 and any(line.startswith("FAIL") and expected in line
                                             for line in env_check.stdout.splitlines())


# 3. memory

def test_a_config_that_cannot_fit_is_refused_before_allocating(tmp_path, data_dir):
    result = train(tmp_path / "out", data_dir, "--memory_budget_gb=0.0001", check=False)  # 100 kB
    line = last_line(result.stderr)
    assert result.returncode == 1 and "building the model" not in result.stdout
    assert line.startswith("error: the estimated peak is") and "over the 0.1 MB budget (memory_budget_gb)" in line
    assert "ignore_memory_estimate=True" in line
    forced = train(tmp_path / "forced", data_dir, "--memory_budget_gb=0.0001", "--ignore_memory_estimate=True",
                   "--max_iters=1")
    assert "done: 1 steps" in forced.stdout and "does not fit, starting anyway" in forced.stdout


def test_check_env_fails_a_cpu_config_larger_than_ram(data_dir):
    result = run_here(["scripts/check_env.py", "config/train_gpt3_6b.py", "--device=cpu", f"--data_dir={data_dir}"])
    assert result.returncode == 1
    assert any(line.startswith("FAIL  device=cpu: host RAM") for line in result.stdout.splitlines())


def test_bench_names_an_oom_kill_and_shows_usage_without_a_config():
    sys.path.insert(0, str(REPO / "scripts"))
    import bench
    assert bench.failure(-9, "")[0] == "oom" and "out-of-memory killer" in bench.failure(-9, "")[1]
    usage = run_here(["scripts/bench.py"])
    assert usage.returncode == 2 and usage.stdout.startswith("usage: bench.py CONFIG")


# 4. encodings found from anywhere

def test_meta_json_finds_its_rank_file_by_path_then_by_hash(tmp_path):
    ranks = tmp_path / "ranks" / "mine.tiktoken"  # a rank file of its own: no copy of it in .cache/
    ranks.parent.mkdir()
    tokens = [bytes([b]) for b in range(256)] + [b"he", b"ll", b"hell", b"hello"]
    ranks.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens)))
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": f"hello world {i}"}) + "\n" for i in range(50)))
    data = tmp_path / "data"
    assert run_here(["data/pile/prepare.py", "--source", source, "--data_dir", data, "--encoding",
                     os.path.relpath(ranks, REPO), "--val_fraction", "0.5"]).returncode == 0
    meta = json.loads((data / "meta.json").read_text())
    assert meta["encoding"] == str(ranks) and len(meta["encoding_sha256"]) == 64  # absolute, and its hash
    from trainer import tokenizer
    assert tokenizer.find(meta["encoding"], meta["encoding_sha256"], [str(data)]) == str(ranks)
    ranks.rename(data / "moved.tiktoken")  # moved beside the bins: found by its hash
    assert tokenizer.find(meta["encoding"], meta["encoding_sha256"], [str(data)]) == str(data / "moved.tiktoken")
    (data / "moved.tiktoken").unlink()
    with pytest.raises(ValueError, match=f"sha256 {meta['encoding_sha256'][:16]}"):
        tokenizer.find(meta["encoding"], meta["encoding_sha256"], [str(data)])
    ranks.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % i for i, t in enumerate(tokens[:-1])))
    with pytest.raises(ValueError, match="has changed since"):  # edited in place: it would tokenize differently
        tokenizer.find(meta["encoding"], meta["encoding_sha256"], [str(data)])


def test_a_rank_file_on_a_volume_mounted_elsewhere_is_found_under_the_working_folder(tmp_path, monkeypatch):
    """meta.json recorded /old/mount/project/tok/mine.tiktoken; the volume is now at tmp_path/new, and the
    command runs from the project's folder there: tok/mine.tiktoken, with the recorded hash, is the file."""
    from trainer import tokenizer
    project = tmp_path / "new" / "project"
    (project / "tok").mkdir(parents=True)
    (project / "tok" / "mine.tiktoken").write_bytes(b"".join(base64.b64encode(bytes([b])) + b" %d\n" % b
                                                             for b in range(256)))
    sha256 = tokenizer.file_sha256(project / "tok" / "mine.tiktoken")
    monkeypatch.chdir(project)
    assert tokenizer.find("/old/mount/project/tok/mine.tiktoken", sha256) == os.path.join("tok", "mine.tiktoken")
    with pytest.raises(ValueError, match="is not there"):  # another file of that name: not the one recorded
        tokenizer.find("/old/mount/project/tok/mine.tiktoken", "0" * 64)


# 5. a useful validation split

@pytest.mark.e2e  # the same command twice: the first job's pool workers must be gone, as they are with its process
def test_a_small_corpus_gets_a_validation_split_worth_evaluating(tmp_path):
    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "gamma", "delta", "epsilon"]
    source = tmp_path / "docs.jsonl"
    source.write_text("".join(json.dumps({"text": " ".join(rng.choice(words, 40))}) + "\n" for _ in range(3000)))
    result = run("data/pile/prepare.py", "--source", str(source), "--data_dir", str(tmp_path / "data"),
                 "--encoding", "bytes", "--min_val_tokens", "50000")
    assert result.returncode == 0 and "val_fraction 0.0005 raised to" in result.stdout
    meta = json.loads((tmp_path / "data" / "meta.json").read_text())
    assert meta["splits"]["val"]["tokens"] >= 0.5 * 50000  # not a handful of documents
    assert meta["splits"]["val"]["tokens"] <= 0.15 * (meta["splits"]["train"]["tokens"] + meta["splits"]["val"]["tokens"])
    capped = ["data/pile/prepare.py", "--source", str(source), "--data_dir", str(tmp_path / "tiny"),
              "--encoding", "bytes", "--max_tokens", "5000"]
    tiny = run(*capped)
    assert "raised to 0.1:" in tiny.stdout  # a tenth of the 5000 tokens kept, not of the whole source
    assert "fewer than --min_val_tokens" in tiny.stderr
    assert "already prepared" in run(*capped).stdout  # the same command is the same job


# 6. messages that name the real cause

def test_messages_name_the_real_cause(tmp_path, data_dir):
    out = tmp_path / "out"
    train(out, data_dir, "--max_iters=2")
    conflict = train(out, data_dir, "--n_layer=3", check=False)
    assert "n_layer=3 (set on the command line) conflicts with the checkpoint's n_layer=2" in last_line(conflict.stderr)
    config = tmp_path / "mine.py"
    config.write_text("batch_size = 8\n")
    typed = run_here(["train.py", config, "--batch_size=eight"])
    assert typed.returncode == 2 and "batch_size must be int like its value so far (8)" in typed.stderr
    resumed = train(out, data_dir, "--max_iters=4", "--lr_decay_iters=80").stdout
    assert "note: the schedule changed since the checkpoint (lr_decay_iters 40 -> 80, max_iters 2 -> 4)" in resumed
    assert "best val loss inf" not in resumed


# 7. crashes reach train.log

def test_an_unexpected_crash_is_written_to_train_log(tmp_path, data_dir, monkeypatch):
    import model
    monkeypatch.setattr(model.GPT, "forward", lambda *a, **k: 1 / 0)
    result = train(tmp_path / "out", data_dir, check=False)
    log = (tmp_path / "out" / "train.log").read_text()
    assert result.returncode == 1 and "ZeroDivisionError" in result.stderr
    assert "Traceback (most recent call last)" in log
    assert last_line(log).startswith("error: train.py crashed: ZeroDivisionError: division by zero")


def test_a_run_error_is_one_line_and_so_is_a_library_error_an_explainer_knows(tmp_path, capsys):
    """runlog's crash hook, train.py's sys.excepthook: a RunError (every refusal's class) is its one line with
    no traceback; a library's error that an explainer knows is its line, the traceback kept in train.log."""
    log = runlog.RunLog(str(tmp_path))
    log.explainers.append(lambda e: "the library failed: do this" if isinstance(e, LookupError) else None)
    for error in (bins.BinError("data/x/train.bin: odd size"), KeyError("deep inside a library")):
        try:
            raise error
        except Exception as e:
            log.crash(type(e), e, e.__traceback__)
    out, err = capsys.readouterr()
    assert err.splitlines() == ["error: data/x/train.bin: odd size", "error: the library failed: do this"]
    assert "Traceback" not in err and not out  # stderr: where the tools that run train.py read why it failed
    written = (tmp_path / "train.log").read_text()
    assert written.count("Traceback") == 1 and "KeyError" in written  # the library's, for a bug report


def test_run_error_is_the_one_base_of_the_trainers_errors():
    import configurator
    found = {f"{module.__name__}.{name}": thing for module in [configurator, *map(importlib.import_module, (
                 f"trainer.{p.stem}" for p in sorted((REPO / "trainer").glob("*.py")) if p.stem != "__init__"))]
             for name, thing in vars(module).items()
             if isinstance(thing, type) and issubclass(thing, Exception) and thing.__module__ == module.__name__}
    strays = sorted(name for name, cls in found.items() if not issubclass(cls, RunError))
    assert not strays
    assert len(found) >= 13


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed: scripts/launch.sh runs training in a tmux session (apt install tmux)")
def test_launch_reports_a_run_that_dies_at_start(tmp_path, data_dir):
    env = {k: v for k, v in ENV.items() if k != "TMUX"}
    env.update(TMUX_TMPDIR=str(tmp_path), LAUNCH_WAIT="60")  # it reports as soon as the run dies; a busy machine is slow to start
    bad = subprocess.run(["bash", "scripts/launch.sh", "config/train_tiny.py", "--learning_rat=1"], cwd=REPO,
                         capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, timeout=60)
    assert bad.returncode == 2 and "unknown config key 'learning_rat'" in bad.stderr
    dies = subprocess.run(["bash", "scripts/launch.sh", "config/train_tiny.py", f"--out_dir={tmp_path / 'out'}",
                           f"--data_dir={tmp_path / 'no_data'}"], cwd=REPO, capture_output=True, text=True,
                          env=env, stdin=subprocess.DEVNULL, timeout=120)  # beyond LAUNCH_WAIT: launch.sh's message
    subprocess.run(["tmux", "kill-server"], env=env, capture_output=True)
    assert dies.returncode == 1 and "exited at start-up" in dies.stderr and "no_data" in dies.stderr


# 8. habits

def test_help_and_budget_notes():
    help_text = run_here(["train.py", "--help"])
    assert help_text.returncode == 0 and help_text.stdout.startswith("usage: python train.py")
    assert "  learning_rate = 0.0006" in help_text.stdout and run_here(["train.py", "-h"]).returncode == 0
    doubled = run_here(["scripts/plan.py", "config/train_gpt3_6b.py", "--batch_size=8"])
    assert "the overrides change the run from 300.0B to 600.0B tokens" in doubled.stderr


@pytest.mark.e2e
def test_a_closed_pipe_is_no_traceback():
    piped = subprocess.run(f"{sys.executable} scripts/plan.py config/train_gpt3_6b.py | head -1", shell=True,
                           cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


# 9. a failing rank ends the job

@pytest.mark.e2e
def test_a_failing_rank_ends_the_whole_job_within_seconds(tmp_path, data_dir):
    out = tmp_path / "out"
    started = time.time()
    result = torchrun(["--standalone", "--nproc_per_node=2"], [
        "train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={out}", "--max_iters=50",
        "--gradient_accumulation_steps=4"], env=dict(ENV, TRAINER_FAULTS="rank_error@3"))
    assert result.returncode != 0 and time.time() - started < 90
    assert "rank 1 error: injected error on the last rank" in result.stderr
    assert "rank 1 error: injected error on the last rank" in (out / "train.log").read_text()


@pytest.mark.e2e  # inductor finds its compiler once a process
def test_a_compilation_failure_is_one_line_naming_compile_false(tmp_path, data_dir):
    """Inductor's CPU kernels need a C++ compiler: with none, the first compiled forward fails, and the
    user reads one line with the way out (the traceback stays in train.log for a bug report)."""
    result = run("train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={tmp_path}",
                 "--compile=True", "--max_iters=1", "--eval_interval=0",
                 env={"CXX": "/nonexistent/c++", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "no_cached_kernels")})
    assert result.returncode != 0
    assert "--compile=False" in last_line(result.stderr) and "Traceback" not in result.stderr
    assert "Traceback" in (tmp_path / "train.log").read_text()
