"""metrics.jsonl as the interface: wandb gets the same records, flattened into charts, and no tool or test
reads train.log's words with a regular expression (train.log is for people)."""
import re

from trainer import metrics
from conftest import REPO


class FakeRun:  # what metrics.to_wandb uses of a wandb run
    def __init__(self):
        self.logged = []

    def log(self, values):
        self.logged.append(values)


def test_wandb_charts_the_records_metrics_jsonl_gets(tmp_path):
    run = FakeRun()
    record = metrics.Metrics(tmp_path)
    record.forward = lambda r: metrics.to_wandb(run, r)
    record("step", 3, loss=2.5, mfu=None, peak_memory={"host_rss": 10, "allocated": 20})
    record("eval", 3, val_loss=2.4, sources={"web": 2.3})
    record("stop", 4, signal="SIGTERM")  # no number in it: nothing to chart
    record("save", 4, asynchronous=True)  # a flag is no chart either
    assert run.logged == [{"iter": 3, "step/loss": 2.5, "step/peak_memory/host_rss": 10,
                           "step/peak_memory/allocated": 20},
                          {"iter": 3, "eval/val_loss": 2.4, "eval/sources/web": 2.3}]
    assert [r["kind"] for r in metrics.read(tmp_path)] == ["step", "eval", "stop", "save"]


def test_no_tool_or_test_parses_the_log_with_a_regex():
    """A file that uses `re` names neither train.log nor the step line's words: tools read metrics.jsonl."""
    uses_re = re.compile(r"\bre\.(search|match|fullmatch|findall|finditer|compile|sub)\(")
    offenders = []
    for path in [*REPO.glob("scripts/**/*.py"), *REPO.glob("tests/*.py"), REPO / "train.py"]:
        text = path.read_text()
        if path.name != "test_metrics_interface.py" and uses_re.search(text) and (
                "train.log" in text or "iter (" in text or "val loss" in text):
            offenders.append(str(path.relative_to(REPO)))
    assert offenders == []
