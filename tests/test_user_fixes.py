"""What a new user tripped over (issue 28, items 11-16): eval.py --watch heard Ctrl-C only in the
foreground, and messages gave advice that did not work."""
import importlib.util
import select
import shlex
import signal
import subprocess
import sys

import pytest

import configurator
from conftest import REPO
from trainer import bins, mixture


def load_script(name, path):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def read_line(stream, timeout=120):
    assert select.select([stream], [], [], timeout)[0], "the child said nothing for two minutes"
    return stream.readline().strip()


@pytest.mark.e2e
def test_eval_watch_started_in_the_background_stops_on_sigint(tmp_path):
    """`python scripts/eval.py --watch OUT &` in a script starts with SIGINT ignored; kill -INT must still stop it."""
    child = subprocess.Popen([sys.executable, "scripts/eval.py", "--watch", str(tmp_path), "--poll", "60",
                              "--device", "cpu"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        assert read_line(child.stdout).startswith(f"watch: {tmp_path}: 0 checkpoint(s) scored before")
        child.send_signal(signal.SIGINT)  # it waits out its 60 s poll: only the signal can end it this soon
        stdout, stderr = child.communicate(timeout=60)
        assert child.returncode == 130, stderr
        assert stdout.startswith("watch: stopped by SIGINT") and "Traceback" not in stderr
    finally:
        child.kill()


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
        mixture.open_mixture({data_dir: 0.5, typo: 0.5}, 16, 64, 0, mixed=True)
    message = str(e.value)
    assert f"change the data_mixture key {typo!r} to one of them" in message and "set data_dir" not in message
    with pytest.raises(bins.BinError, match=r"set data_dir \(or dataset\) to one of them"):
        mixture.open_mixture({typo: 1.0}, 16, 64, 0)  # a run on data_dir alone keeps the data_dir advice


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
