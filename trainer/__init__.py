"""The trainer's mechanisms, one job per module; train.py, sample.py and scripts/ are their entry points.

The modules are stacked in floors (layers), lowest first. A module imports only from its own floor or
lower ones, and never in a cycle (tests/test_layout.py checks both), so data flows one way: text, bins,
model, training, checkpoints, evaluation.
  1. cli, elastic, faults, interrupt, machine, metrics, runlock, runlog, tokenizer: the machine, the run's
     telemetry (train.log, metrics.jsonl, wandb), stopping and restarting, spikes and injected faults
  2. bins, preparation, checkpoint: bytes on disk: token bins, their sampler and mixtures, the prepare job,
     checkpoints (the .pt and sharded formats, the files on disk, synchronous and background writes)
  3. model.py (top level): the GPT itself, which imports nothing of ours
  4. precision, offload, optim, cost, schedule, forecast, ladder, ladder_analysis, parallel: how a model is trained
     (on one GPU or many), what it costs, and how its loss scales with size
  5. checkpointer, evaluation, hf, lm_eval_adapter: where a run starts and the Checkpointer (what a checkpoint
     holds, when it is written, how it goes back in), evaluation (val loss, HellaSwag), Hugging Face's layout,
     lm-evaluation-harness over the model
"""


class RunError(Exception):
    """A refusal or a run failure the user can act on: str() is one line. Every module's error derives from it,
    and train.py's crash hook (runlog.RunLog.crash) prints it as `error: ...` on the failing rank's behalf."""
