"""runlog.py's step line and clock, and the line that says why a run failed (its crash hook: test_guardrails.py)."""
import io

import pytest

from trainer import RunError, runlog


def test_the_step_line_and_its_clock(monkeypatch):
    """The eta is the wall time per step since the first ended: an evaluation or a save between steps, which
    step_time leaves out, counts in it (it used to average step times alone, and ran low)."""
    now = [100.0]
    monkeypatch.setattr(runlog.time, "perf_counter", lambda: now[0])
    said = []
    clock = runlog.StepClock(compiling=True, log=said.append)
    clock.lap(3.0)
    assert said == ["first step took 3.0s (includes warm-up and compilation)"] and clock.eta(10) is None
    now[0] += 1.0
    clock.lap(1.0)
    assert len(said) == 1 and clock.eta(7200) == 7200.0
    now[0] += 3.0  # an evaluation of 2 s, then a step of 1 s
    clock.lap(1.0)
    assert clock.eta(10) == 20.0
    figures = dict(loss=2.0, step_time=0.1, tokens_per_sec=97038, lr=1e-4, grad_norm=0.5, mfu=0.4, hfu=0.5)
    line = runlog.step_line(5, figures, "1.0GB RSS", 8, 7200.0)
    assert line == ("iter 5: loss 2.0000, time 100ms, mfu 40.0%, tok/s 97,038 (12,130 per GPU), lr 1.000e-04, "
                    "grad norm 0.500, mem 1.0GB RSS, eta 2.0h")
    assert runlog.step_line(1, dict(figures, mfu=None), "m", show_hfu=True).endswith("mem m, hfu 50.0%")


def test_a_failed_runs_reason_is_its_error_line_else_the_last_exception_else_how_it_ended():
    """train.py writes its `error: ...` to stderr (and train.log); torchrun's report of a failed child comes after
    it and says only that it failed. A run killed with no line says how it ended."""
    why = runlog.why_it_failed
    assert why(1, "W1207 a warning\nerror: no train.bin in data/quickstart: prepare the data first\n") == \
        "error: no train.bin in data/quickstart: prepare the data first"
    assert why(1, "rank 1 error: bad shard\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
                  "train.py FAILED\n") == "rank 1 error: bad shard"
    assert why(1, "Traceback ...\nOSError: disk full\n") == "OSError: disk full"
    assert why(1, "Killed\n") == "Killed"
    assert why(-9, "") == "killed by signal 9, with no error line (its train.log may say more)"


def test_a_full_disk_under_train_log_ends_the_run_in_one_line(tmp_path, capsys):
    """ENOSPC on train.log: one RunError naming the file (the crash hook's line then reaches stderr without a
    second failure on the same file), where it was three tracebacks, one of them sys.excepthook's own."""
    log = runlog.RunLog(str(tmp_path))

    class Full(io.StringIO):
        def flush(self):
            raise OSError(28, "No space left on device")
    log.file = Full()
    with pytest.raises(RunError, match=r"^cannot write .*train.log: No space left on device; free space on its disk"):
        log("iter 5: loss 2.0000")
    log.file = Full()
    log.crash(RunError, RunError("the same disk again"), None)
    assert capsys.readouterr().err.endswith("error: the same disk again\n")
