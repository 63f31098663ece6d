"""trainer/cli.py: the scripts' mistakes on the command line are one line, with the near miss of a misspelt flag."""
import types

import pytest

from conftest import run_here
from trainer import cli


def test_an_error_is_one_line_naming_the_near_miss(capsys):
    p = cli.ArgumentParser(prog="tool.py", allow_abbrev=False)  # else --num_sample abbreviates --num_samples
    p.add_argument("--num_samples", type=int)
    p.add_argument("--start")
    with pytest.raises(SystemExit) as e:
        p.parse_args(["--num_sample=2"])
    assert e.value.code == 2 and capsys.readouterr().err == (
        "tool.py: error: unrecognized arguments: --num_sample=2; did you mean --num_samples? (--help lists the "
        "options)\n")
    with pytest.raises(SystemExit):
        p.parse_args(["--num_samples", "two"])
    assert capsys.readouterr().err == ("tool.py: error: argument --num_samples: invalid int value: 'two' (--help "
                                       "lists the options)\n")
    with pytest.raises(SystemExit):
        p.parse_args(["--zzz"])  # nothing near: no guess
    assert capsys.readouterr().err == "tool.py: error: unrecognized arguments: --zzz (--help lists the options)\n"


@pytest.mark.parametrize("args, says", [
    (["sample.py", "--num_sample=2"], "sample.py: error: unrecognized arguments: --num_sample=2; did you mean "
                                      "--num_samples?"),
    (["scripts/plan.py", "config/train_gpt3_6b.py", "--gpu", "h20"], "plan.py: error: argument --gpu: invalid "
                                                                     "choice: 'h20'"),
    (["scripts/plan.py", "config/train_gpt3_6b.py", "--gpus", "0"], "plan.py: error: --gpus must be at least 1, got 0"),
])
def test_the_scripts_use_it(args, says):
    result = run_here(args)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1 and result.stderr.startswith(says), \
        result.stderr


def test_plan_takes_a_gpu_name_in_capitals():
    result = run_here(["scripts/plan.py", "config/train_gpt3_6b.py", "--gpu", "H200"])
    assert result.returncode == 0 and "989.4 TFLOPS" in result.stdout, result.stderr


def test_below_least_names_the_first_flag_out_of_range_and_its_value():
    """Which flag, and what it got: the scripts' messages listed every rule at once."""
    args = types.SimpleNamespace(limit=None, batch_size=4, poll=float("nan"), top_k=-1)
    assert cli.below_least(args, {"limit": 1, "batch_size": 1}) is None  # unset is not checked
    assert cli.below_least(args, {"limit": 1, "poll": 0, "top_k": 0}) == "--poll must be at least 0, got nan"
    assert cli.below_least(args, {"top_k": 0}) == "--top_k must be at least 0, got -1"
