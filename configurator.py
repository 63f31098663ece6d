"""
Every setting a run can have, with its default and one-line help, and the one way to change them:

    python train.py config/train_gpt3_6b.py --batch_size=2 --wandb_log=False

Config files are plain Python assignments, applied in order, then --key=value overrides.
train.py, scripts/plan.py and scripts/bench.py all resolve a config through load_config(),
so they can never disagree about what a config means. Every key must already exist in
DEFAULTS and keep its type (an int is accepted where a float is expected); anything else
is an error that names the key, never a silent new global. Names starting with '_' in a
config file are that file's private helpers (e.g. `_tokens = 300e9`) and are ignored.
The loaded Config remembers where each value came from (`cfg.sources`), for messages that say so.
"""
import ast
import difflib
import json
import os
import sys
import threading
import types
from pathlib import Path

from trainer import RunError, cli

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "config")  # the repository's

# The defaults are GPT-3 125M on The Pile (GPT-3 paper, Table 2.1: context 2048, AdamW betas
# 0.9/0.95, weight decay 0.1, clip 1.0); config/ files state what differs. HELP says what each key does.
DEFAULTS = dict(
    # I/O
    out_dir="out",
    eval_interval=1000,
    log_interval=10,
    eval_iters=100,
    eval_only=False,
    hellaswag_interval=1000,
    hellaswag_file="",
    hellaswag_limit=0,
    forecast_prior="",
    init_from="auto",
    init_weights="",
    checkpoint_interval=1000,
    checkpoint_minutes=60.0,
    keep_last_n=3,
    # wandb
    wandb_log=False,
    wandb_project="gpt3",
    wandb_run_name="run",
    # data
    dataset="pile",
    data_dir="",
    data_mixture={},
    gradient_accumulation_steps=8,
    batch_size=32,
    block_size=2048,
    seed=1337,
    # model
    n_layer=12,
    n_head=12,
    n_embd=768,
    vocab_size=50304,
    dropout=0.0,
    bias=False,
    activation="gelu",
    position="learned",
    rope_theta=10000.0,
    norm="layernorm",
    qk_norm=False,
    tie_embeddings=True,
    logit_softcap=0.0,
    activation_checkpointing="auto",
    recompute_blocks=-1,
    memory_budget_gb=0.0,
    ignore_memory_estimate=False,
    # optimizer
    optimizer="adamw",
    muon_split_qkv=False,
    master_weights="float32",
    optimizer_offload=False,
    learning_rate=6e-4,
    max_iters=572205,
    weight_decay=1e-1,
    beta1=0.9,
    beta2=0.95,
    grad_clip=1.0,
    max_nonfinite_steps=10,
    # loss spikes
    spike_window=100,
    spike_loss_z=5.0,
    spike_grad_z=5.0,
    spike_rollback_after=5,
    spike_rollback_margin=100,
    spike_skip_batches=250,
    max_rollbacks=3,
    # learning-rate schedule
    decay_lr=True,
    warmup_iters=715,
    lr_decay_iters=572205,
    min_lr=6e-5,
    lr_schedule="cosine",
    lr_decay_fraction=0.2,
    lr_decay_shape="sqrt",
    cooldown_iters=0,
    # system
    strategy="ddp",
    hsdp_shard_size=0,
    collective_timeout_minutes=10.0,
    checkpoint_async=False,
    backend="auto",
    device="auto",
    dtype="bfloat16",
    fp8="",
    compile=False,
    peak_tflops=0.0,
)

# One line per key, grouped as `python train.py --help` shows them (tests/test_house.py: every key has one).
HELP = {
    "I/O": dict(
        out_dir="the run's folder: checkpoints, train.log, metrics.jsonl and config.json",
        eval_interval="iterations between evaluations on the validation batches (0: off)",
        log_interval="iterations between step lines in train.log and step records in metrics.jsonl",
        eval_iters="validation batches per evaluation (the same batches every time)",
        eval_only="evaluate once and exit",
        hellaswag_interval="iterations between HellaSwag evaluations (and at the end); 0: off",
        hellaswag_file="data/hellaswag/prepare.py's hellaswag.json or the official jsonl; '': beside the bins",
        hellaswag_limit="score only the first N examples (0: all 10,042)",
        forecast_prior="a scaling ladder's ladder.json or its folder (scripts/ladder.py), or 'PATH:RECIPE': its "
                       "prediction and a forecast from its curve shape beside the in-run forecast "
                       "(trainer/forecast.py)",
        init_from="'auto' (newest loadable checkpoint, else scratch), 'scratch', 'resume', a ckpt path to roll back "
                  "to, or 'gpt2', 'gpt2-medium', 'gpt2-large', 'gpt2-xl' (a new run from OpenAI's weights)",
        init_weights="a new run from these weights (a Hugging Face GPT-2 folder, a ckpt_N.pt or ckpt_N/): "
                     "iteration 0, fresh optimizer and data order; resumed as 'auto' once it has checkpoints",
        checkpoint_interval="iterations between checkpoints, independent of eval; 0: never save (benchmarks)",
        checkpoint_minutes="also save when this much wall-clock time passed since the last save (0: off)",
        keep_last_n="checkpoints kept, newest by iteration number (<= 0: keep all)",
    ),
    "wandb": dict(
        wandb_log="log to Weights & Biases (offline, with the same run id, when there are no credentials)",
        wandb_project="the wandb project",
        wandb_run_name="the wandb run's name",
    ),
    "data": dict(
        dataset="the data/<dataset> folder data_dir defaults to",
        data_dir="folder with train.bin / val.bin; '' means data/<dataset>",
        data_mixture='{folder: weight} drawn from instead of data_dir, e.g. {"data/pile": 0.7, "data/dclm": 0.3}',
        gradient_accumulation_steps="micro-batches per optimizer step (over all processes)",
        batch_size="sequences per micro-batch: 32 x 8 x 2048 = 524,288 tokens per step",
        block_size="the context length in tokens",
        seed="the seed of the initial weights, the data order and dropout",
    ),
    "model": dict(
        n_layer="transformer blocks",
        n_head="attention heads per block",
        n_embd="the width of the residual stream (a multiple of n_head)",
        vocab_size="rows of the embedding: GPT-2's 50257 padded to a multiple of 64",
        dropout="dropout probability (0: off, as for pre-training)",
        bias="biases in the Linear and LayerNorm layers (as GPT-2)",
        activation="the MLP's: exact 'gelu', GPT-2's 'gelu_tanh', 'relu2' (ReLU squared) or 'swiglu' (hidden 8C/3)",
        position="'learned' position embeddings (GPT-3) or 'rope' (rotary, Llama's layout; an even head size)",
        rope_theta="RoPE's base wavelength (10000, as Llama 2)",
        norm="'layernorm' (GPT-3) or 'rmsnorm' (Llama)",
        qk_norm="True: a parameter-free RMSNorm on each head's queries and keys before attention",
        tie_embeddings="True: the LM head is the token embedding (GPT-3); False: a V x n_embd matrix of its own",
        logit_softcap="> 0: logits become c*tanh(logits/c) (modded-nanogpt, Gemma 2); 0: off",
        activation_checkpointing="'none' keeps every activation; 'selective' recomputes the element-wise ops "
                                 "(~3% more time); 'full' each block's forward (~32%); 'auto' the cheapest that fits",
        recompute_blocks="the policy applies to blocks 0..k-1 only, the rest keep everything; -1 = all",
        memory_budget_gb="what 'auto' may fill, in 1e9 bytes; 0 = the GPU's memory (host RAM on the CPU)",
        ignore_memory_estimate="True: start even when cost.py's estimate says the setting cannot fit",
    ),
    "optimizer": dict(
        optimizer="'adamw' (fp32 moments, 8 B/param), torchao's 'adamw8bit' (~2 B) or 'adamw4bit' (~1 B), 'muon' (docs/optimizers.md)",
        muon_split_qkv="True: Muon orthogonalises attention's queries, keys and values apart, three (C, C) matrices, "
                       "not the fused (3C, C) c_attn as one (docs/optimizers.md); no effect on the other optimizers",
        master_weights="'float32', or 'bfloat16': 2 B/param weights, stochastically rounded steps, fp32 gradients",
        optimizer_offload="True: AdamW's fp32 state and step on the host (12 B/param of host memory), not the GPU",
        learning_rate="the peak learning rate, reached after warmup_iters",
        max_iters="optimizer steps in the whole run: 300B tokens at 524,288 per step",
        weight_decay="AdamW's decoupled weight decay, on 2-D weights only",
        beta1="AdamW's first-moment decay",
        beta2="AdamW's second-moment decay",
        grad_clip="clip the global gradient norm to this (0: off)",
        max_nonfinite_steps="consecutive steps with a non-finite loss or gradient that stop the run",
    ),
    "loss spikes": dict(
        spike_window="accepted steps whose loss and grad norm a new step is judged against (after warmup)",
        spike_loss_z="skip an update whose loss is more than this many sd above the window's mean (0: off)",
        spike_grad_z="skip an update whose grad norm is more than this many sd above the window's mean (0: off)",
        spike_rollback_after="this many skipped steps within spike_window roll the run back (0: never)",
        spike_rollback_margin="roll back to the newest checkpoint at least this many steps before the first spike",
        spike_skip_batches="after a rollback the data goes on this many global batches past the spike's",
        max_rollbacks="automatic rollbacks in a run before a burst stops it",
    ),
    "learning-rate schedule": dict(
        decay_lr="linear warmup then cosine decay to min_lr; False: a constant learning_rate",
        warmup_iters="steps of linear warmup (715: 375M tokens, as GPT-3)",
        lr_decay_iters="the step the decay (cosine or wsd) reaches min_lr",
        min_lr="the learning rate at and after lr_decay_iters",
        lr_schedule="'cosine' (GPT-3's) or 'wsd': warmup, constant learning_rate, decay over the last lr_decay_fraction",
        lr_decay_fraction="wsd: the share of lr_decay_iters spent decaying to min_lr, in (0, 1]",
        lr_decay_shape="wsd's and a cooldown's decay: 'sqrt' (Hagele et al.'s 1-sqrt) or 'linear'",
        cooldown_iters="> 0 with init_from=CKPT and a new out_dir: a cooldown fork, decaying to min_lr over this many steps",
    ),
    "system": dict(
        strategy="under torchrun: 'ddp' (each GPU holds everything), 'fsdp' (FSDP2 shards it all) or 'hsdp'",
        hsdp_shard_size="hsdp: shard within groups of this many GPUs, replicate across them (0: one node's)",
        collective_timeout_minutes="a rank waiting this long in a collective fails the job (saves wait apart)",
        checkpoint_async="write checkpoints in the background while training goes on (docs/checkpoints.md)",
        backend="torch.distributed backend: 'auto' is nccl on GPUs (RCCL answers to it on ROCm), gloo on CPU",
        device="'auto' (a GPU if there is one, else cpu), 'cpu', 'cuda', 'cuda:1', 'mps'",
        dtype="'bfloat16' autocast over fp32 weights, or 'float32'",
        fp8="the blocks' matmuls in FP8 (torchao; dtype='bfloat16'): '' (off), 'tensorwise' or 'rowwise'",
        compile="torch.compile the model's blocks (off by default: the safe choice on ROCm)",
        peak_tflops="the GPU's peak dense bf16 TFLOPS for MFU; 0 means look it up from the device",
    ),
}


def missing_help():
    """The keys of DEFAULTS without a line in HELP (a test keeps this empty)."""
    helped = {key for group in HELP.values() for key, text in group.items() if text}
    return [key for key in DEFAULTS if key not in helped]


class Config(types.SimpleNamespace):
    """The settings as attributes; `sources` (outside vars(), so never saved as a setting) says where each
    value came from: 'by default', 'in <config file>', 'on the command line', or 'from <checkpoint or weights>'.
    freeze() ends the changes: train.py resolves cfg once (the start point, the memory choice), then a value
    means the same wherever the run reads it."""
    __slots__ = ("sources", "frozen")

    def __setattr__(self, key, value):
        if getattr(self, "frozen", False):
            raise AttributeError(f"cfg.{key}: the config is frozen once train.py has resolved it; decide the value "
                                 f"before configurator.Config.freeze()")
        super().__setattr__(key, value)

    def freeze(self):
        object.__setattr__(self, "frozen", True)
        return self

    @property
    def tokens_per_step(self):
        """Tokens in one optimizer step across every process: what the schedule, the token count, the plan and
        the ladder all count by. (A config file cannot call it: it runs before the Config exists.)"""
        return self.batch_size * self.gradient_accumulation_steps * self.block_size


# the form of a key whose type is not obvious from a value, for its type error
EXAMPLES = {"data_mixture": "{'data/pile': 0.7, 'data/dclm': 0.3}"}


class ConfigError(RunError):
    """A config problem, described in one line the user can act on."""


def _check_type(key, value, source, current):
    """value as the key's type; current: the value before this source set it, named in the message."""
    expected = type(DEFAULTS[key])
    if expected is float and type(value) is int:
        return float(value)
    if type(value) is not expected:
        example = EXAMPLES.get(key)
        form = "" if example is None else f'; write it as --{key}="{example}" (quoted for the shell)' \
            if source == "command line" else f"; write it as {key} = {example}"
        raise ConfigError(
            f"{source}: {key} must be {expected.__name__} like its value so far ({current!r}), "
            f"got {type(value).__name__} {value!r}{form}"
        )
    return value


def misspelt_option(config_args, parser):
    """A tool's --flag that its argparse parser left over for the config (parse_known_args) but is no config key
    and near one of the tool's own options (plan.py --simulat): the line that says so, or None."""
    for arg in config_args:
        flag = arg.partition("=")[0]
        if not arg.startswith("--") or flag[2:] in DEFAULTS or difflib.get_close_matches(flag[2:], DEFAULTS, 1):
            continue  # a config key, or a misspelt one: load_config names it with the keys it is near
        if near := cli.near_option(flag, parser):
            return f"unknown option {flag}: did you mean {near}?"
    return None


def _unknown_key(key, source):
    close = difflib.get_close_matches(key, DEFAULTS.keys(), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else "; see configurator.py for the valid keys"
    return ConfigError(f"{source}: unknown config key '{key}'{hint}")


# CPython 3.11's ast is not safe across threads (gh-106905: "AST constructor recursion depth mismatch"), and
# scripts/ladder.py's recipes load their runs' configs side by side
_PARSING = threading.Lock()


def _parse_value(key, raw):
    """'3' → 3, 'False' → False, '1e-4' → 0.0001; for a str key, unquoted text is the string itself."""
    expected = type(DEFAULTS[key])
    try:
        with _PARSING:
            value = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return raw
    if expected is str and not isinstance(value, str):
        return raw
    return value


def _read_config_file(path, config):
    """The settings a config file makes. It runs with the config so far in scope, so it can
    compute from values it does not set itself (block_size in a token budget, say)."""
    if not Path(path).is_file():  # a near name in its folder, or in config/ (never train.py beside it)
        folder = Path(path).parent
        pool = folder if folder.is_dir() and folder.resolve() != Path(CONFIGS).parent else Path(CONFIGS)
        names = {p.name: p for p in pool.glob("*.py")}
        near = difflib.get_close_matches(Path(path).name, names, 1)
        raise ConfigError(f"config file not found: {path}" + (
            f"; did you mean {os.path.relpath(names[near[0]])}?" if near else
            f" (the configs: {os.path.relpath(CONFIGS)}/*.py)"))
    scope = dict(config, __file__=path)  # so that a config can read another beside it
    try:
        with _PARSING:
            tree = ast.parse(Path(path).read_text(), path)
            code = compile(tree, path, "exec")
        exec(code, scope)
    except Exception as e:  # a user's file: report where it broke, in one line
        raise ConfigError(f"{path}: {type(e).__name__}: {e}") from None
    assigned = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    values = {}
    for key, value in scope.items():
        if key.startswith("_") or isinstance(value, types.ModuleType) or (
                key in config and key not in assigned and value is config[key]):  # not this file's setting
            continue
        if key not in DEFAULTS:
            raise _unknown_key(key, path)
        values[key] = _check_type(key, value, path, config[key])
    return values


def load_config(argv):
    """Resolve argv (config files and --key=value overrides, in order) over DEFAULTS into a Config, with
    where each value came from in its .sources."""
    config, sources = dict(DEFAULTS), dict.fromkeys(DEFAULTS, "by default")
    for arg in argv:
        if arg.startswith("--"):
            key, sep, raw = arg[2:].partition("=")
            if key not in DEFAULTS:  # before the value: a mistyped flag (--simulat) is no override without one
                raise _unknown_key(key, "command line")
            if not sep:
                raise ConfigError(f"override '{arg}' needs a value: write --{key}=VALUE")
            config[key] = _check_type(key, _parse_value(key, raw), "command line", config[key])
            sources[key] = "on the command line"
        else:
            values = _read_config_file(arg, config)
            config.update(values)
            sources.update(dict.fromkeys(values, f"in {arg}"))
    if not config["data_dir"]:
        config["data_dir"] = str(Path("data") / config["dataset"])
    cfg = Config(**config)
    cfg.sources = sources
    return cfg


def usage():
    """How to call a script that takes a config, and every key with its default and help, in HELP's groups."""
    lines = [f"usage: python {os.path.basename(sys.argv[0])} [CONFIG.py ...] [--key=value ...]", "",
             "Config files are Python assignments, read in order; --key=value overrides come after them.",
             "Keys (default, and what each does):"]
    for group, keys in HELP.items():
        lines += ["", f"{group}:"] + [f"  {key} = {DEFAULTS[key]!r}  # {text}" for key, text in keys.items()]
    if missing := missing_help():
        lines += ["", "other:"] + [f"  {key} = {DEFAULTS[key]!r}" for key in missing]
    return "\n".join(lines)


def load_config_or_exit(argv):
    """load_config for scripts: --help / -h prints usage(); a bad config is one line on stderr and exit status 2."""
    if any(arg in ("-h", "--help") for arg in argv):
        try:
            print(usage(), flush=True)
        except BrokenPipeError:  # `| head` closed the pipe: end quietly, as a Unix tool does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
    try:
        return load_config(argv)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)


def save_json(cfg, path, **extra):
    """The settings a run resolved (and extra, e.g. its model_args) as JSON, for people and tools to read."""
    with open(path, "w") as f:
        json.dump(dict(vars(cfg), **extra), f, indent=2)


def check(cfg, world_size, distributed=None):
    """The first value train.py cannot run with, as one line, or None. (Types are checked on loading.)
    distributed: under torchrun, even with one process (default: world_size > 1)."""
    from model import CHECKPOINTING_POLICIES, architecture_problem
    from trainer.bins import weights_problem
    from trainer.optim import MASTER_WEIGHTS, OPTIMIZERS
    from trainer.precision import RECIPES
    from trainer.schedule import problem as schedule_problem
    if cfg.dtype not in ("bfloat16", "float32"):
        return f"dtype must be 'bfloat16' or 'float32', got {cfg.dtype!r}"
    if cfg.fp8 not in ("", *RECIPES):
        return f"fp8 must be '' (off), {' or '.join(map(repr, RECIPES))}, got {cfg.fp8!r}"
    if cfg.fp8 and cfg.dtype != "bfloat16":
        # torchao's recipes are bf16 training with fp8 matmuls: what fp8 leaves out (attention, the LM head)
        # runs under bf16 autocast, and its matmuls return bf16
        return f"fp8={cfg.fp8!r} needs dtype='bfloat16' (fp8 matmuls inside bf16 autocast), got dtype={cfg.dtype!r}"
    for key in ("batch_size", "gradient_accumulation_steps", "block_size", "n_layer", "n_head", "n_embd",
                "vocab_size", "log_interval", "eval_iters", "spike_window", "max_nonfinite_steps"):
        if getattr(cfg, key) < 1:
            return f"{key} must be at least 1, got {getattr(cfg, key)}"
    for key in ("spike_loss_z", "spike_grad_z", "spike_rollback_after", "spike_rollback_margin", "spike_skip_batches",
                "max_rollbacks", "hellaswag_interval", "hellaswag_limit", "eval_interval", "checkpoint_interval",
                "checkpoint_minutes"):
        if getattr(cfg, key) < 0:
            return f"{key} must be 0 or more, got {getattr(cfg, key)}"
    for key in ("dropout", "beta1", "beta2"):  # probabilities and decays: 1 would never forget, or drop everything
        if not 0 <= getattr(cfg, key) < 1:
            return f"{key} must be at least 0 and below 1, got {getattr(cfg, key)}"
    for key in ("weight_decay", "grad_clip"):
        if getattr(cfg, key) < 0:
            return f"{key} must be 0 (off) or more, got {getattr(cfg, key)}"
    if problem := weights_problem(cfg.data_mixture) or schedule_problem(cfg):
        return problem
    if problem := architecture_problem(cfg):
        return problem
    if cfg.optimizer not in OPTIMIZERS:
        return f"optimizer must be one of {', '.join(OPTIMIZERS)}, got {cfg.optimizer!r}"
    if cfg.master_weights not in MASTER_WEIGHTS:
        return f"master_weights must be one of {', '.join(MASTER_WEIGHTS)}, got {cfg.master_weights!r}"
    if cfg.master_weights == "bfloat16" and cfg.dtype != "bfloat16":
        return "master_weights='bfloat16' needs dtype='bfloat16'"
    if cfg.optimizer == "muon" and (cfg.master_weights == "bfloat16" or cfg.optimizer_offload):
        # torch's Muon rounds bf16 weights to nearest (small updates vanish); offload's host step is AdamW's alone
        return ("optimizer='muon' steps fp32 weights on the device: set master_weights='float32' and "
                "optimizer_offload=False (its momentum already takes half AdamW's memory on the matrices)")
    if cfg.optimizer_offload and cfg.optimizer != "adamw":
        return (f"optimizer_offload=True runs PyTorch's AdamW on the host, not {cfg.optimizer!r}: set optimizer='adamw' "
                f"(low-bit moments would only save host memory)")
    if cfg.strategy not in ("ddp", "fsdp", "hsdp"):
        return f"strategy must be 'ddp', 'fsdp' or 'hsdp', got {cfg.strategy!r}"
    if cfg.strategy == "hsdp" and (cfg.hsdp_shard_size < 0 or world_size % (cfg.hsdp_shard_size or world_size)):
        return (f"hsdp_shard_size={cfg.hsdp_shard_size} must divide the {world_size} processes into equal groups "
                f"(0: one node's GPUs, torchrun's LOCAL_WORLD_SIZE)")
    if cfg.collective_timeout_minutes <= 0:
        return f"collective_timeout_minutes must be more than 0, got {cfg.collective_timeout_minutes}"
    lean = "master_weights" if cfg.master_weights == "bfloat16" else "optimizer_offload" if cfg.optimizer_offload else None
    if lean and cfg.strategy in ("fsdp", "hsdp") and (world_size > 1 if distributed is None else distributed):
        # fully_shard's parameters drop grad_dtype (even in one process), and offload steps whole tensors
        return (f"{lean}={getattr(cfg, lean)!r} runs without FSDP (which shards the fp32 weights and AdamW state "
                f"across GPUs instead): use strategy='ddp', or leave {lean} at its default")
    if cfg.activation_checkpointing not in (*CHECKPOINTING_POLICIES, "auto"):
        return (f"activation_checkpointing must be one of {', '.join(CHECKPOINTING_POLICIES)} or auto, "
                f"got {cfg.activation_checkpointing!r}")
    if cfg.gradient_accumulation_steps % world_size:
        steps = cfg.gradient_accumulation_steps
        below, above = steps // world_size * world_size, -(-steps // world_size) * world_size
        return (f"gradient_accumulation_steps={steps} must divide among {world_size} processes (the global batch is "
                f"batch_size x gradient_accumulation_steps at any world size): set it to "
                f"{' or '.join(str(n) for n in (below, above) if n)}, or run a number of processes that divides "
                f"{steps}")
    if cfg.forecast_prior:
        from trainer import forecast  # here: numpy for a key few runs set
        return forecast.prior_problem(cfg)
    return None
