"""
<out_dir>/metrics.jsonl: what a run tells tools, one JSON object per line, each with a `kind`, the
iteration `iter` and the wall-clock `time` beside its figures (docs/metrics.md lists them). train.log is
for people; plot_log.py, bench.py, gpu_check.sh, ab.py, eval.py --watch and the tests read this file,
through read(), so rewording a log line breaks no tool.

Weights & Biases, where a run turns it on, charts the same records (start_wandb, to_wandb): optional, and
never allowed to hang or prompt inside tmux. Without credentials it logs offline (`wandb sync` later); if
the server cannot be reached it falls back to offline too, since the run matters more than its charts. The
run id lives in checkpoints, so a resume continues the same charts.
"""
import json
import math
import netrc
import os
import secrets
import time

FILE = "metrics.jsonl"


def _plain(value):
    """A non-finite float as null: JSON has no NaN, and a tool should not choke on a skipped step."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


class Metrics:
    """Appends records to out_dir/metrics.jsonl from rank 0 (the others' calls do nothing), and hands each
    to `forward` where one is set (train.py sets to_wandb, so wandb charts the same records)."""

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
    A line torn by a kill, or of bytes that are not UTF-8, is skipped. A resumed or rolled-back run appends, so an
    iteration can appear twice: the later record is the one that stands."""
    if os.path.isdir(path):
        path = os.path.join(path, FILE)
    records = []
    with open(path, errors="replace") as f:  # a byte that is not UTF-8 spoils its line (not JSON), not the file
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


# -----------------------------------------------------------------------------
# wandb: the same records as charts

def wandb_has_credentials():
    """An API key in the environment or ~/.netrc (where `wandb login` puts it), looked up without wandb."""
    try:
        return bool(os.environ.get("WANDB_API_KEY") or netrc.netrc().authenticators("api.wandb.ai"))
    except (OSError, netrc.NetrcParseError):
        return False


def start_wandb(project, name, config, run_id=None, log=print):
    """(wandb run, its id): resumes the run with run_id, or starts one with a new id."""
    import wandb

    mode = os.environ.get("WANDB_MODE")
    if mode is None and not wandb_has_credentials():  # wandb would prompt for a key
        log("warning: no wandb credentials (wandb login / WANDB_API_KEY); logging offline, `wandb sync` later")
        mode = "offline"
    run_id = run_id or secrets.token_hex(4)
    try:
        run = wandb.init(project=project, name=name, id=run_id, resume="allow", config=config, mode=mode,
                         settings=wandb.Settings(init_timeout=60))
    except Exception as e:  # no network, server trouble
        log(f"warning: wandb.init failed ({type(e).__name__}: {e}); logging offline")
        run = wandb.init(project=project, name=name, id=run_id, resume="allow", config=config, mode="offline")
    # charts run along 'iter', not wandb's own step: that must only grow, and a rollback takes iter back
    run.define_metric("iter")
    run.define_metric("*", step_metric="iter")
    return run, run_id


def to_wandb(run, record):
    """One metrics.jsonl record into the run's charts, each number as `<kind>/<figure>` along `iter`
    (step/loss, eval/val_loss, eval/sources/web, step/peak_memory/allocated, ...); text, flags and
    missing figures stay out of the charts."""
    values = {}

    def add(name, value):
        if isinstance(value, dict):
            for key, inner in value.items():
                add(f"{name}/{key}", inner)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            values[name] = value

    for key, value in record.items():
        if key not in ("kind", "iter", "time"):
            add(f"{record['kind']}/{key}", value)
    if values:
        run.log({"iter": record["iter"], **values})


def finish_wandb(run):
    """The end of a run's wandb run (None: there is none)."""
    if run is not None:
        run.finish()
