"""
<out_dir>/metrics.jsonl: what a run tells tools, one JSON object per line, each with a `kind`, the
iteration `iter` and the wall-clock `time` beside its figures (docs/metrics.md lists them). train.log is
for people; plot_log.py, bench.py, gpu_check.sh, ab.py, eval.py --watch and the tests read this file,
through read(), so rewording a log line breaks no tool.
"""
import json
import math
import os
import time

FILE = "metrics.jsonl"


def _plain(value):
    """A non-finite float as null: JSON has no NaN, and a tool should not choke on a skipped step."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class Metrics:
    """Appends records to out_dir/metrics.jsonl from rank 0 (the others' calls do nothing), and hands each
    to `forward` where one is set (train.py sets wandb_logging's, so wandb charts the same records)."""

    def __init__(self, out_dir, enabled=True):
        self.file, self.forward = None, None
        if enabled:
            path = os.path.join(out_dir, FILE)
            self.file = open(path, "a")
            if self.file.tell() and not _ends_with_newline(path):  # a line torn by a kill: the next starts afresh
                self.file.write("\n")

    def __call__(self, kind, iteration, **figures):
        if self.file is None:
            return
        record = {"kind": kind, "iter": iteration, "time": round(time.time(), 3),
                  **{k: _plain(v) for k, v in figures.items()}}
        self.file.write(json.dumps(record) + "\n")  # one write of a whole line, flushed: a kill tears at most one
        self.file.flush()
        if self.forward:
            self.forward(record)


def _ends_with_newline(path):
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def read(path, kind=None):
    """The records of a metrics.jsonl (or of the one in an out_dir), oldest first, only `kind`'s if given.
    A line torn by a kill is skipped. A resumed or rolled-back run appends, so an iteration can appear
    twice: the later record is the one that stands."""
    if os.path.isdir(path):
        path = os.path.join(path, FILE)
    records = []
    with open(path) as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if kind is None or record.get("kind") == kind:
                records.append(record)
    return records


def latest_per_iter(records):
    """One record per iteration, the latest, in iteration order: a curve without a rollback's repeats."""
    return sorted({r["iter"]: r for r in records}.values(), key=lambda r: r["iter"])
