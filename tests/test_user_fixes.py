"""What a new user tripped over (issue 28, items 11-16): messages gave advice that did not work, and the
elastic note blamed the wrong runs and ranks. (eval.py --watch heard Ctrl-C only in the foreground: test_harness.py.)"""
import importlib.util
import shlex
import signal
import subprocess
import sys
import time

import pytest

import configurator
from conftest import REPO
from trainer import bins, elastic


def load_script(name, path):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def advice_after(marker, message):
    """The command or setting a message advises, from `marker` to the end (or the next ' (')."""
    return message.split(marker, 1)[1].split(" (")[0]


def test_eval_with_no_checkpoint_advises_a_command_eval_accepts(tmp_path, capsys):
    """It used to suggest --out_dir / --init_from, which eval.py rejects: the advice now ends with an eval.py call."""
    eval_script = load_script("eval_script", "scripts/eval.py")
    for source in (tmp_path, tmp_path / "missing"):
        with pytest.raises(SystemExit) as e:
            eval_script.main([str(source), "--device", "cpu"])
        err = capsys.readouterr().err.strip()
        assert e.value.code == 1 and err.startswith(f"error: {source} ") and "--out_dir" not in err
        suggested = shlex.split(err.rsplit("then python ", 1)[1])
        assert suggested[0] == "scripts/eval.py"
        eval_script.parse_args(suggested[1:])  # what it suggests parses (a SystemExit would fail the test)


def test_a_missing_mixture_folder_names_the_mixture_key(tmp_path, data_dir):
    """A data_mixture with a typo in one folder: the advice is the data_mixture key to change, not data_dir."""
    typo = str(tmp_path / "pilee")
    with pytest.raises(bins.BinError) as e:
        bins.open_mixture({data_dir: 0.5, typo: 0.5}, 16, 64, 0, mixed=True)
    message = str(e.value)
    assert f"change the data_mixture key {typo!r} to one of them" in message and "set data_dir" not in message
    with pytest.raises(bins.BinError, match=r"set data_dir \(or dataset\) to one of them"):
        bins.open_mixture({typo: 1.0}, 16, 64, 0)  # a run on data_dir alone keeps the data_dir advice


def test_a_broken_data_mixture_shows_the_expected_form_which_works(tmp_path):
    for broken in ("{data/pile:0.7}", "data/pile"):
        with pytest.raises(configurator.ConfigError) as e:
            configurator.load_config([f"--data_mixture={broken}"])
        # the shell strips the quotes around what the message suggests; load_config gets the rest
        suggested = shlex.split(advice_after("write it as ", str(e.value)))
        assert configurator.load_config(suggested).data_mixture == {"data/pile": 0.7, "data/dclm": 0.3}
    config = tmp_path / "mix.py"
    config.write_text('data_mixture = "data/pile"\n')
    with pytest.raises(configurator.ConfigError) as e:
        configurator.load_config([str(config)])
    config.write_text(advice_after("write it as ", str(e.value)) + "\n")
    assert configurator.load_config([str(config)]).data_mixture == {"data/pile": 0.7, "data/dclm": 0.3}


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
        rank_1 = [p for p in psutil.Process(job.pid).children(recursive=True) if p.environ().get("LOCAL_RANK") == "1"]
        assert len(rank_1) == 1, "no single process with LOCAL_RANK=1"
        rank_1[0].send_signal(signal.SIGKILL)
        stdout, _ = job.communicate(timeout=300)
        assert job.returncode == 0, stdout[-3000:]
        assert "elastic: restart 1 of 1; the attempt before ended with: rank 1 left no line: killed (kill -9" in stdout
    finally:
        job.kill()


@pytest.mark.parametrize("cores, load, default, threads", [(2, 13.7, 2, 1), (4, 1.6, 4, 2), (4, 0.3, 4, 4), (16, 0.0, 8, 8)])
def test_a_cpu_run_takes_the_idle_cores_at_most_one_a_physical_core(monkeypatch, cores, load, default, threads):
    """The cores less the 1-minute load average (rounded), never above torch's default of one a physical core."""
    from trainer import environment
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(environment.os, "sched_getaffinity", lambda pid: set(range(cores)))
    monkeypatch.setattr(environment.os, "getloadavg", lambda: (load, load, load))
    monkeypatch.setattr(environment.torch, "get_num_threads", lambda: default)
    chosen = []
    monkeypatch.setattr(environment.torch, "set_num_threads", chosen.append)
    assert environment.use_cpu_threads().startswith(f"CPU: {threads} thread(s) ({cores} cores, load average {load:.1f}")
    assert chosen == [threads]


def test_omp_num_threads_decides_where_set(monkeypatch):
    from trainer import environment
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(environment.torch, "set_num_threads", lambda n: pytest.fail("OMP_NUM_THREADS was overridden"))
    assert environment.use_cpu_threads() == f"CPU: {environment.torch.get_num_threads()} thread(s), as OMP_NUM_THREADS says"
