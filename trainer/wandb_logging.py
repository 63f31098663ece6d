"""
Weights & Biases for a training run: optional, and never allowed to hang or prompt inside tmux. Without
credentials it logs offline (`wandb sync` later); if the server cannot be reached it falls back to
offline too, since the run matters more than its charts. The run id lives in checkpoints, so a resume
continues the same charts.
"""
import netrc
import os
import secrets


def has_credentials():
    """An API key in the environment or ~/.netrc (where `wandb login` puts it), looked up without wandb."""
    try:
        return bool(os.environ.get("WANDB_API_KEY") or netrc.netrc().authenticators("api.wandb.ai"))
    except (OSError, netrc.NetrcParseError):
        return False


def start(project, name, config, run_id=None, log=print):
    """(wandb run, its id): resumes the run with run_id, or starts one with a new id."""
    import wandb

    mode = os.environ.get("WANDB_MODE")
    if mode is None and not has_credentials():  # wandb would prompt for a key
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


def log(run, record):
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


def finish(run):
    """The end of a run's wandb run (None: there is none)."""
    if run is not None:
        run.finish()
