"""
Training throughput of a config on this machine, measured by running train.py itself:

    python scripts/bench.py config/train_gpt3_6b.py [--key=value ...] [--steps 5] [--json]
    python scripts/bench.py config/train_gpt3_6b.py --sweep [--batch_sizes 2,4,8] [--recompute all,24,16,selective,none]
    python scripts/bench.py config/train_tiny.py --reference
    python scripts/bench.py config/train_gpt3_6b.py --save_resume

Each setting is one train.py subprocess on random tokens in a temp data dir, with eval,
checkpoints and wandb off, so what is timed is the training code path, not a copy of it.
train.py records every step in the run's metrics.jsonl; the first --warmup steps (kernel selection,
allocator growth, compilation) are left out and the figures are medians of the next --steps. A timed step is
--grad_accum micro-batches (default 2): the configs' 32-160 would make one step take minutes at
1.3B-6.7B. Its optimizer step is timed on its own (timed_train), so tokens/s, step time and MFU
are for one step of the config's global batch: its tokens at the timed micro-batches' time per
token, plus one optimizer step. The timed step's own figures are under "measured".

A setting fits when its measured peak fits cost.device_budget() by cost.fits(), the rule
train.py and auto use: the reserved peak where the GPU reports one, else the allocated peak.
--sweep tries micro-batch sizes x checkpointing policies and names the fastest setting that
fits, with the train.py overrides that select it.
--reference also runs a plain PyTorch loop (model.py's GPT, AdamW, no checkpointing) over the
same batches in this process, and prints train.py's throughput (as timed) as a ratio of it.
--save_resume times one checkpoint save and its load at the config's setting instead.
The config keys bench.py sets itself (max_iters, data_dir, out_dir, eval and checkpoint
intervals, batch_size and checkpointing in a sweep) override the ones given here.
"""
import concurrent.futures
import dataclasses
import functools
import json
import math
import multiprocessing
import os
import runpy
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext

import numpy as np
import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from trainer import bins, cli  # noqa: E402  (needs the repo root on sys.path first)
from trainer import checkpoint  # noqa: E402
import configurator  # noqa: E402
from trainer import machine  # noqa: E402
from trainer import cost  # noqa: E402
from trainer import precision  # noqa: E402
from trainer import metrics  # noqa: E402
from trainer import optim  # noqa: E402
from trainer import runlog  # noqa: E402
from model import GPT, GPTConfig, model_config  # noqa: E402

TRAIN = os.path.join(REPO, "train.py")
# Every run starts fresh, logs each step, and neither evaluates, saves nor reports to wandb.
FIXED_OVERRIDES = ["--init_from=scratch", "--log_interval=1", "--eval_interval=0", "--hellaswag_interval=0", "--checkpoint_interval=0",
                   "--wandb_log=False"]
MEMORY_FAILURES = ("oom", "over budget")  # a setting that fails so would fail with less recompute too


def parse_args(argv):
    """bench.py's own flags, and the rest (config files and --key=value) for the configurator."""
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                usage="%(prog)s CONFIG [--key=value ...] [options]")
    p.add_argument("--steps", type=int, default=5, help="timed steps per setting (default 5)")
    p.add_argument("--warmup", type=int, default=1, help="untimed steps before them (default 1, at least 1)")
    p.add_argument("--grad_accum", type=int, default=2,
                   help="micro-batches per step (default 2; 0 keeps the config's gradient_accumulation_steps)")
    p.add_argument("--sweep", action="store_true", help="try micro-batch sizes x checkpointing policies")
    p.add_argument("--batch_sizes", help="sweep: comma-separated (default: half, once and twice the config's)")
    p.add_argument("--recompute", help="sweep: comma-separated policies, 'none', 'selective', 'all' or k = recompute the "
                                       "first k blocks (default: none, selective, n_layer/4, /2, 3/4, all)")
    p.add_argument("--reference", action="store_true", help="compare with a plain PyTorch loop at the same config")
    p.add_argument("--save_resume", action="store_true",
                   help="time one checkpoint save and its load (seconds, GB/s) instead of the steps")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of all settings (and the reference), keeping the fastest of each: steadier "
                        "figures on a busy machine (default 1)")
    p.add_argument("--timeout", type=float, default=0, help="seconds before one setting is killed (default: none)")
    p.add_argument("--time_limit", type=float, default=0,
                   help="seconds for all settings; the ones left when it runs out are skipped (default: none)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout (the table goes to stderr)")
    p.add_argument("--simulate", action="store_true",
                   help="add cost.py's estimate and simulated peak (fake tensors, ~20 s at 6.7B on the CPU) to "
                        "each setting that names its policy, beside the measured peak")
    args, config_args = p.parse_known_args(argv)
    if problem := configurator.misspelt_option(config_args, p):
        p.error(problem)
    if not config_args or config_args[0].startswith("-"):  # nanoGPT habit: no config, show how
        p.print_help()
        sys.exit(2)
    # --warmup 1 at least: the first step includes the warm-up (and the compilation)
    if problem := cli.below_least(args, {"steps": 1, "warmup": 1, "repeat": 1, "grad_accum": 0}):
        p.error(problem)
    if args.sweep + args.reference + args.save_resume > 1:
        p.error("--sweep, --reference and --save_resume are separate measurements: choose one")
    if not args.sweep and (args.batch_sizes or args.recompute):
        p.error("--batch_sizes and --recompute choose the settings of a --sweep")
    return p, args, config_args


# -----------------------------------------------------------------------------
# settings: a micro-batch size and a checkpointing policy, (activation_checkpointing, recompute_blocks):
# ('none', -1), ('selective', -1), ('full', -1) for every block, ('full', k) for blocks 0..k-1

def parse_policy(text):
    """--recompute's words: 'none', 'selective', 'all' (or 'full'), or k = full on the first k blocks."""
    if text in ("none", "selective"):
        return text, -1
    if text in ("all", "full"):
        return "full", -1
    return "full", int(text)


def recomputed_blocks(policy, n_layer):
    """How many blocks a policy recomputes, as model.py counts them (None for 'auto': train.py decides)."""
    if policy[0] == "auto":
        return None
    return GPTConfig(n_layer=n_layer, activation_checkpointing=policy[0],
                     recompute_blocks=policy[1]).num_recomputed_blocks()


def setting_overrides(batch_size, policy):
    return [f"--batch_size={batch_size}", f"--activation_checkpointing={policy[0]}", f"--recompute_blocks={policy[1]}"]


def setting_label(batch_size, policy, n_layer):
    k = recomputed_blocks(policy, n_layer)
    name = policy[0] if k in (None, 0, n_layer) or policy[0] != "full" else f"{k}/{n_layer}"
    return f"batch {batch_size}, recompute {'all' if name == 'full' else name}"


def describe(batch_size, policy, n_layer):
    """The fields every result of a setting starts with."""
    return {"batch_size": batch_size, "policy": list(policy),
            "recomputed_blocks": recomputed_blocks(policy, n_layer),
            "label": setting_label(batch_size, policy, n_layer),
            "overrides": setting_overrides(batch_size, policy), "fits": False}


def sweep_settings(parser, args, cfg):
    """The batch sizes and policies a sweep tries, from the flags or around the config."""
    try:
        batch_sizes = sorted({int(b) for b in args.batch_sizes.split(",")}) if args.batch_sizes else \
            sorted({max(1, cfg.batch_size // 2), cfg.batch_size, 2 * cfg.batch_size})
        if args.recompute:
            policies = [parse_policy(r) for r in args.recompute.split(",")]
        else:
            policies = [("none", -1), ("selective", -1), *sorted(
                {("full", k) for k in (cfg.n_layer // 4, cfg.n_layer // 2, 3 * cfg.n_layer // 4) if 0 < k < cfg.n_layer}),
                ("full", -1)]
    except ValueError:
        parser.error("--batch_sizes takes integers and --recompute 'none', 'selective', 'all' or integers, "
                     "comma-separated")
    if min(batch_sizes) < 1 or any(not (k == -1 or 1 <= k <= cfg.n_layer) for _, k in policies):
        parser.error(f"batch sizes must be >= 1 and --recompute k between 1 and n_layer={cfg.n_layer}")
    return batch_sizes, policies


# -----------------------------------------------------------------------------
# one setting: train.py as a subprocess, and what its log says

def make_data(folder, vocab_size, block_size, windows):
    """Random token ids: `windows` training windows, so no timed step repeats one, and a val split
    that train.py checks at start-up but never reads (eval is off)."""
    rng = np.random.default_rng(0)
    for split, n in (("train", windows * block_size + 1), ("val", block_size + 1)):
        rng.integers(0, vocab_size, n).astype(bins.DTYPE).tofile(bins.bin_path(folder, split))


def timed_train():
    """Run train.py, its arguments in sys.argv[1:], with each optimizer step timed on its own and the time
    added to that step's metrics.jsonl record as optimizer_step_time (seconds). train.py has waited for the
    GPU just before the step (it reads the loss and grad norm) and the wait after it is here, so the time
    is the step's alone; gradient clipping, before that wait, counts with the micro-batches."""
    step, write, pending = optim.step, metrics.Metrics.__call__, []

    def timed(optimizer, seed, device_type):
        t0 = time.perf_counter()
        step(optimizer, seed, device_type)
        machine.synchronize(device_type)
        pending[:] = [time.perf_counter() - t0]

    def recorded(self, kind, iteration, **figures):
        if kind in ("step", "nonfinite", "spike"):  # each takes the step timed before it, or none
            seconds = pending.pop() if pending else None
            if kind == "step":
                figures["optimizer_step_time"] = seconds
        return write(self, kind, iteration, **figures)

    optim.step, metrics.Metrics.__call__ = timed, recorded  # train.py calls both through their modules
    sys.argv = [TRAIN, *sys.argv[1:]]
    runpy.run_path(TRAIN, run_name="__main__")


# `python -c TIMED_TRAIN ARGS` runs train.py ARGS through timed_train (this file, imported as bench)
TIMED_TRAIN = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); " \
              "import bench; bench.timed_train()"


def timed_steps(out_dir, warmup):
    """The 'step' records of a run past the warm-up (docs/metrics.md): skipped non-finite steps have none."""
    return [r for r in metrics.latest_per_iter(metrics.read(out_dir, "step")) if r["iter"] > warmup]


def failure(returncode, stderr):
    """(status, one line) for a train.py that exited non-zero, from its stderr."""
    if "out of memory" in stderr.lower():  # torch.OutOfMemoryError: CUDA (or HIP) out of memory
        return "oom", "out of memory"
    if returncode in (-9, 137):  # SIGKILL, itself or through a shell: on a CPU run, the kernel's OOM killer
        return "oom", "out of memory: killed by SIGKILL (status -9), most likely the kernel's out-of-memory killer"
    line = runlog.why_it_failed(returncode, stderr).removeprefix("error: ")
    # train.py refused a setting its estimate says cannot fit
    return ("oom" if "ignore_memory_estimate" in line else "error"), line


def median_of(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(steps, tokens_per_step, config_tokens_per_step):
    """What the timed step records of tokens_per_step say ("measured": median step time, optimizer step,
    MFU, HFU), and tokens/s, step time, MFU and HFU for one step of the config's config_tokens_per_step:
    that many tokens at the timed micro-batches' time per token, plus one optimizer step. Peak memory:
    allocated and reserved (what runs out first) on a GPU, the host's resident memory always (the figure
    that counts on a CPU, and with optimizer_offload)."""
    step_s = statistics.median(tokens_per_step / s["tokens_per_sec"] for s in steps)
    optimizer_s = statistics.median(s["optimizer_step_time"] for s in steps)
    config_step_s = config_tokens_per_step * (step_s - optimizer_s) / tokens_per_step + optimizer_s
    mfu, hfu = median_of(s["mfu"] for s in steps), median_of(s["hfu"] for s in steps)
    speedup = (config_tokens_per_step / config_step_s) / (tokens_per_step / step_s)  # MFU and HFU scale with it
    peaks = [s["peak_memory"] for s in steps]
    on_gpu = "allocated" in peaks[0]
    return {"tokens_per_s": config_tokens_per_step / config_step_s, "step_ms": 1000 * config_step_s,
            "mfu": mfu and mfu * speedup, "hfu": hfu and hfu * speedup,
            "measured": {"tokens_per_step": tokens_per_step, "step_ms": 1000 * step_s,
                         "tokens_per_s": tokens_per_step / step_s, "optimizer_step_ms": 1000 * optimizer_s,
                         "mfu": mfu, "hfu": hfu},
            "peak_memory_gb": max(p["allocated" if on_gpu else "host_rss"] for p in peaks) / 1e9,
            "peak_reserved_gb": max(p["reserved"] for p in peaks) / 1e9 if on_gpu else None,
            "peak_host_gb": max(p["host_rss"] for p in peaks) / 1e9 if on_gpu else None,
            "memory_kind": "GPU allocated" if on_gpu else "host RSS"}


def run_train(train_args, timeout):
    """(status, message) of train.py (through timed_train) with these arguments, killed past timeout seconds."""
    with tempfile.TemporaryFile("w+") as stderr:  # why it failed; its train.log keeps what stdout says
        proc = subprocess.Popen([sys.executable, "-c", TIMED_TRAIN, *train_args], stdout=subprocess.DEVNULL,
                                stderr=stderr, text=True)
        try:
            proc.wait(timeout=None if timeout == math.inf else timeout)  # a hang must not eat the others' time
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            return "timeout", f"killed after {timeout:.1f}s"
        stderr.seek(0)
        if proc.returncode:
            return failure(proc.returncode, stderr.read())
    return "ok", None


class Bench:
    """Runs settings of one config on one synthetic data dir, each in a fresh out_dir, within a time limit,
    and judges their peaks against the device's memory budget."""

    def __init__(self, args, config_args, cfg, work, budget):
        self.args, self.config_args, self.cfg, self.work, self.budget = args, config_args, cfg, work, budget
        self.micro_steps = args.grad_accum or cfg.gradient_accumulation_steps
        self.config_tokens = cfg.tokens_per_step  # a real step's
        self.deadline = time.time() + args.time_limit if args.time_limit else math.inf
        self.data_dir = os.path.join(work, "data")
        self.gpu = machine.local_gpu(0)[0]  # what train.py runs on: this machine's GPU, or None

    def prepare(self, largest_batch):
        os.makedirs(self.data_dir)
        make_data(self.data_dir, self.cfg.vocab_size, self.cfg.block_size,
                  largest_batch * self.micro_steps * (self.args.warmup + self.args.steps))

    def train_args(self, batch_size, policy, out_dir):
        return [*self.config_args, *FIXED_OVERRIDES, f"--max_iters={self.args.warmup + self.args.steps}",
                f"--gradient_accumulation_steps={self.micro_steps}", f"--data_dir={self.data_dir}",
                f"--out_dir={out_dir}", *setting_overrides(batch_size, policy)]

    def launch(self, train_args):
        """(status, message, wall seconds) of one train.py, its timeout cut to the time left."""
        left = self.deadline - time.time()
        if left <= 0:
            return "skipped", "out of time", 0.0
        t0 = time.time()
        status, message = run_train(train_args, min(self.args.timeout or math.inf, left))
        return status, message, round(time.time() - t0, 1)

    def run(self, batch_size, policy):
        result = describe(batch_size, policy, self.cfg.n_layer)
        out_dir = tempfile.mkdtemp(prefix="out_", dir=self.work)
        status, message, wall_s = self.launch(self.train_args(batch_size, policy, out_dir))
        result.update(status=status, message=message, wall_s=wall_s, gpu=self.gpu)
        steps = timed_steps(out_dir, self.args.warmup) if status == "ok" else []
        if status == "ok" and not steps:
            result.update(status="error", message="train.py recorded no timed step (non-finite losses?)")
        elif status == "ok" and any(s["optimizer_step_time"] is None for s in steps):
            result.update(status="error", message="a timed step came without its optimizer step time")
        if result["status"] != "ok":
            return result
        result.update(summarize(steps, batch_size * self.micro_steps * self.cfg.block_size, self.config_tokens),
                      steps=len(steps))
        if policy[0] == "auto":  # what auto chose, from the run's start record
            [start] = metrics.read(out_dir, "start")
            result["auto"] = {k: start[k] for k in ("activation_checkpointing", "recompute_blocks", "batch_size",
                                                    "gradient_accumulation_steps")}
        if self.args.simulate and policy[0] != "auto":
            config = model_config(self.cfg, activation_checkpointing=policy[0], recompute_blocks=policy[1])
            setup = cost.Setup.of(self.cfg)
            with torch.device("meta"):
                estimate = cost.estimate(GPT(config), batch_size, setup)
            result.update(estimated_gb=estimate["total"] / 1e9,
                          simulated_gb=cost.simulate(config, batch_size, setup)["total"] / 1e9)
        return dict(result, **self.judge(result))

    def judge(self, result):
        """cost.fits on the measured peak: the reserved one where the GPU reports it (what the allocator
        holds, compared as is), else the allocated one (with the fragmentation margin)."""
        kind = "reserved" if result["peak_reserved_gb"] is not None else "allocated"
        peak = 1e9 * result["peak_reserved_gb" if kind == "reserved" else "peak_memory_gb"]
        if cost.fits(peak, self.budget.bytes, kind):
            return {"fits": True, "compared": kind}
        return {"fits": False, "compared": kind, "status": "over budget",
                "message": f"{kind} peak {cost.size_text(peak)} needs "
                           f"{cost.size_text(cost.needed_bytes(peak, kind))}; {self.budget.text()}"}

    def save_resume(self):
        """One checkpoint save and its load at the config's setting: a train.py saves after its first step
        (synchronously, so the time is the write's), then a second one resumes from it. The times are what
        their metrics.jsonl records say: the save record's `seconds`, the resumed start record's
        `load_seconds` (the read and the copy into the model and optimizer)."""
        out_dir = tempfile.mkdtemp(prefix="out_", dir=self.work)
        common = self.train_args(self.cfg.batch_size, (self.cfg.activation_checkpointing, self.cfg.recompute_blocks),
                                 out_dir)
        result = {"label": "save and resume", "status": "ok", "message": None}
        runs = (("save", ["--max_iters=1", "--checkpoint_interval=1", "--checkpoint_async=False"], "save", "seconds"),
                ("load", ["--init_from=resume", "--max_iters=2"], "start", "load_seconds"))
        for name, extra, kind, figure in runs:
            status, message, result[f"{name}_wall_s"] = self.launch([*common, *extra])
            if status != "ok":
                return dict(result, status=status, message=f"{name}: {message}")
            result[f"{name}_s"] = round(metrics.read(out_dir, kind)[-1][figure], 3)
        result["checkpoint_gb"] = os.path.getsize(checkpoint.checkpoint_path(out_dir, 1)) / 1e9
        for name in ("save", "load"):  # a time rounded to 0 s is too small to say
            result[f"{name}_gb_per_s"] = result["checkpoint_gb"] / result[f"{name}_s"] if result[f"{name}_s"] else None
        return result


def kept_memory(cfg, policy):
    """cost.py's estimate of a policy at micro-batch 1: orders policies by what they keep."""
    setup = cost.Setup.of(cfg)
    return cost.estimate(cost.meta_model(cfg, *policy), 1, setup)["total"]


def sweep(run, batch_sizes, policies, cfg):
    """Run settings from the policy that keeps least to the one that keeps most, batch sizes
    ascending, and skip what cannot fit: past a batch size that fails, the larger ones of its policy;
    past one that runs out of memory, that size and larger for the policies after (they keep more)."""
    too_big = math.inf
    for policy in sorted(policies, key=lambda p: kept_memory(cfg, p) if p[0] != "auto" else 0):
        failed = None
        for batch_size in batch_sizes:
            if failed or batch_size >= too_big:
                reason = failed or f"batch {too_big} did not fit with more recompute"
                yield dict(describe(batch_size, policy, cfg.n_layer), status="skipped", message=reason)
                continue
            result = run(batch_size, policy)
            yield result
            if not result["fits"]:
                failed = f"after batch {batch_size}: {result['message']}"
                if result["status"] in MEMORY_FAILURES:
                    too_big = batch_size


# -----------------------------------------------------------------------------
# the yardstick: a plain loop in this process

def reference_in_child(*args):
    """reference_run(*args) in a process that ends with it: in this one, its model and AdamW state (~107 GB at 6.7B)
    would stay reserved by the caching allocator, with a CUDA context, while the next round's runs measure the GPU's
    free memory. Spawned: a fork would copy this process's state into the child."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(reference_run, *args).result()


def reference_run(cfg, data_dir, batch_size, micro_steps, warmup, steps):
    """Median step time of a straightforward loop at cfg's shapes and dtype: model.py's GPT without
    checkpointing, torch's default AdamW, plain copies to the device, a host sync per step."""
    device, device_type = machine.resolve_device(cfg.device)
    autocast = torch.autocast(device_type, dtype=torch.bfloat16) if cfg.dtype == "bfloat16" else nullcontext()
    torch.manual_seed(cfg.seed)
    with torch.device(device):  # the GPTConfig train.py builds for cfg
        model = GPT(model_config(cfg, activation_checkpointing="none"))
    precision.fp32_attention_on_cpu(model, device_type, cfg.dtype)  # as train.py: the loops differ only in overhead
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.learning_rate, betas=(cfg.beta1, cfg.beta2),
                                  weight_decay=cfg.weight_decay)
    tokens = bins.TokenBin(bins.bin_path(data_dir, "train"), cfg.vocab_size)
    order = np.random.default_rng(cfg.seed).permutation(tokens.num_windows(cfg.block_size))
    times = []
    for step in range(warmup + steps):
        t0 = time.perf_counter()
        for micro_step in range(micro_steps):
            first = (step * micro_steps + micro_step) * batch_size
            batch = torch.from_numpy(tokens.windows(order[first:first + batch_size], cfg.block_size)).to(device)
            with autocast:
                _, loss = model(batch[:, :-1], batch[:, 1:])
            (loss / micro_steps).backward()
        if cfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss.item()  # waits for the GPU, as any loop that logs its loss does
        times.append(time.perf_counter() - t0)
    step_s = statistics.median(times[warmup:])
    return {"tokens_per_s": batch_size * micro_steps * cfg.block_size / step_s, "step_ms": 1000 * step_s}


# -----------------------------------------------------------------------------
# output

# how the JSON's tokens/s, step_ms, mfu and hfu are computed, said in the JSON itself
THROUGHPUT = ("one optimizer step of the config's global batch (config_tokens_per_step): its tokens x (timed step - "
              "optimizer step) / timed tokens + one optimizer step, from the medians of the timed steps of grad_accum "
              "micro-batches, the optimizer step timed on its own between GPU syncs; MFU and HFU scaled alike. "
              "What the timed steps did is under each setting's 'measured'")
BUDGET_PROBE = ("import dataclasses, json, sys; sys.path.insert(0, sys.argv[1]); from trainer import cost, machine; "
                "budget = cost.device_budget(machine.resolve_device(sys.argv[2])[0], float(sys.argv[3])); "
                "print(json.dumps(dataclasses.asdict(budget)))")


def device_budget(cfg):
    """cost.device_budget() of the device train.py will run on. A GPU's is asked in a child process: a CUDA
    context in this one would hold ~0.5 GB of the GPU the runs measure. The CPU's is read here."""
    device, device_type = machine.resolve_device(cfg.device)
    if device_type == "cpu":
        return cost.device_budget(device, cfg.memory_budget_gb)
    probe = subprocess.run([sys.executable, "-c", BUDGET_PROBE, REPO, cfg.device, str(cfg.memory_budget_gb)],
                           capture_output=True, text=True)
    if probe.returncode:
        fail(f"cannot read the device's memory budget: {(probe.stderr.strip().splitlines() or ['no message'])[-1]}")
    return cost.Budget(**json.loads(probe.stdout))


def fail(message):
    print(f"bench: error: {message}", file=sys.stderr)
    sys.exit(1)


COLUMNS = f"{'setting':<28} {'tok/s':>10} {'step ms':>9} {'opt ms':>7} {'MFU':>6} {'HFU':>6}  peak memory"


def row(result):
    text = f"{result['label']:<28}"
    if "tokens_per_s" in result:
        text += (f" {result['tokens_per_s']:>10,.0f} {result['step_ms']:>9.1f} "
                 f"{result['measured']['optimizer_step_ms']:>7.1f} {machine.percent(result['mfu']):>6} "
                 f"{machine.percent(result['hfu']):>6}  {result['peak_memory_gb']:.1f} GB {result['memory_kind']}")
    if result.get("peak_reserved_gb") is not None:
        text += f", reserved {result['peak_reserved_gb']:.1f} GB"
    if result.get("peak_host_gb"):
        text += f", host {result['peak_host_gb']:.1f} GB"
    if "simulated_gb" in result:
        text += f" (estimated {result['estimated_gb']:.1f} GB, simulated {result['simulated_gb']:.1f} GB)"
    if result["status"] != "ok":
        text += f"  {result['status']}: {result['message']}"
    return text


def checkpointing_overheads(results):
    """Step time under 'selective' and 'full' (every block) over step time with none, at each batch size
    that ran them."""
    ran = {(r["batch_size"], tuple(r["policy"])): r["step_ms"] for r in results if "step_ms" in r}
    return [{"batch_size": b, "policy": p, "ratio": ran[b, (p, -1)] / ran[b, ("none", -1)]}
            for b in sorted({b for b, _ in ran}) for p in ("selective", "full")
            if (b, ("none", -1)) in ran and (b, (p, -1)) in ran]


def train_command(config_args, cfg, best):
    """train.py with the best setting, and the config's global batch kept where the new micro-batch divides it."""
    sequences = cfg.batch_size * cfg.gradient_accumulation_steps
    keep_batch = [f"--gradient_accumulation_steps={sequences // best['batch_size']}"] \
        if best["batch_size"] != cfg.batch_size and sequences % best["batch_size"] == 0 else []
    chosen = [*best["overrides"], *keep_batch]
    keys = {override.split("=")[0] for override in chosen}
    given = [arg for arg in config_args if arg.split("=")[0] not in keys]  # the chosen values replace these
    return shlex.join(["python", "train.py", *given, *chosen])


def measure(args, config_args, cfg, batch_sizes, policies, budget, say):
    """Every setting, --repeat rounds of them (with the reference after each round when asked):
    the fastest result of each setting, the fastest reference, and the micro-batches per step."""
    fastest, references = {}, []
    with tempfile.TemporaryDirectory(prefix="bench_") as work:
        bench = Bench(args, config_args, cfg, work, budget)
        bench.prepare(max(batch_sizes))
        say(f"bench {shlex.join(config_args)}: {args.warmup} warm-up + {args.steps} timed steps of "
            f"{bench.micro_steps} micro-batches x {cfg.block_size} tokens; tokens/s, step and MFU for a step of the "
            f"config's {bench.config_tokens:,} tokens; the measured peak (reserved where the GPU reports it, else "
            f"allocated) against the {budget.text()}")
        say(COLUMNS)
        for _ in range(args.repeat):  # rounds alternate the settings, so load from elsewhere hits them alike
            for result in sweep(bench.run, batch_sizes, policies, cfg):
                say(row(result))
                key = result["batch_size"], tuple(result["policy"])
                if result.get("tokens_per_s", 0) >= fastest.get(key, {}).get("tokens_per_s", 0):
                    fastest[key] = result
            if args.reference and "tokens_per_s" in fastest[key]:  # plain mode: key is its one setting
                references.append(reference_in_child(cfg, bench.data_dir, cfg.batch_size, bench.micro_steps,
                                                args.warmup, args.steps))
                say(f"reference (plain loop): {references[-1]['tokens_per_s']:,.0f} tokens/s in timed steps of "
                    f"{references[-1]['step_ms']:.1f} ms")
    return list(fastest.values()), max(references, key=lambda r: r["tokens_per_s"], default=None), bench


def save_resume(args, config_args, cfg, budget, say):
    """--save_resume: one checkpoint saved and loaded, said as a line (and as JSON with --json)."""
    with tempfile.TemporaryDirectory(prefix="bench_") as work:
        bench = Bench(args, config_args, cfg, work, budget)
        bench.prepare(cfg.batch_size)
        result = bench.save_resume()
    if result["status"] == "ok":
        rate = {name: "" if result[f"{name}_gb_per_s"] is None else f", {result[f'{name}_gb_per_s']:.2f} GB/s"
                for name in ("save", "load")}
        say(f"checkpoint of {result['checkpoint_gb']:.2f} GB: saved in {result['save_s']:.1f}s{rate['save']}, "
            f"loaded in {result['load_s']:.1f}s{rate['load']}")
    if args.json:
        print(json.dumps({"config_args": config_args, "device": cfg.device, "save_resume": result}, indent=1))
    if result["status"] != "ok":
        fail(f"save and resume: {result['status']}: {result['message']}")


def main(argv=None):
    parser, args, config_args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = configurator.load_config_or_exit(config_args)
    if args.sweep:
        batch_sizes, policies = sweep_settings(parser, args, cfg)
    else:
        batch_sizes, policies = [cfg.batch_size], [(cfg.activation_checkpointing, cfg.recompute_blocks)]
    budget = device_budget(cfg)
    say = functools.partial(print, file=sys.stderr if args.json else sys.stdout, flush=True)
    if args.save_resume:
        return save_resume(args, config_args, cfg, budget, say)
    results, reference, bench = measure(args, config_args, cfg, batch_sizes, policies, budget, say)

    if reference:
        reference["ratio"] = results[0]["measured"]["tokens_per_s"] / reference["tokens_per_s"]
        say(f"train.py / plain loop: {reference['ratio']:.2f}x the tokens/s in the same timed steps"
            + (f" (fastest of {args.repeat} rounds each)" if args.repeat > 1 else ""))
    overheads = checkpointing_overheads(results)
    for o in overheads:
        say(f"{o['policy']} checkpointing: {o['ratio']:.2f}x the step time of none at batch {o['batch_size']}")
    best = max((r for r in results if r["fits"]), key=lambda r: r["tokens_per_s"], default=None)
    command = train_command(config_args, cfg, best) if best else None
    if best and args.sweep:
        say(f"fastest that fits: {best['label']}, {best['tokens_per_s']:,.0f} tokens/s, MFU {machine.percent(best['mfu'])}")
        say(f"  {command}")
    if args.json:
        print(json.dumps({"config_args": config_args, "steps": args.steps, "warmup": args.warmup,
                          "grad_accum": bench.micro_steps, "block_size": cfg.block_size, "device": cfg.device,
                          "config_tokens_per_step": bench.config_tokens, "throughput": THROUGHPUT,
                          "budget": dataclasses.asdict(budget), "settings": results, "best": best,
                          "train_command": command, "checkpointing_overhead": overheads, "reference": reference},
                         indent=1))
    if best is None:
        fail("no setting fits (the table says why)" if args.sweep else f"the setting did not run: {results[0]['message']}")


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly, as a Unix tool
    main()
