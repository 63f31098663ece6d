"""A scaling ladder: a recipe trained at a family of small sizes, its learning rate swept at each, and fitted,
to forecast the final val loss, best learning rate and zero-shot scores of a size nobody has trained yet.

    python data/quickstart/prepare.py
    nice -n 10 python scripts/ladder.py config/ladder_tiny.py --jobs 2 --out out/ladder_tiny \\
        --recipe "adamw: --optimizer=adamw --learning_rate=1e-2" --recipe "muon: --optimizer=muon --learning_rate=3e-2"
    python scripts/ladder.py config/ladder_gpt3_fast.py --recipe "fast:" --recipe "adamw: --optimizer=adamw" \
        --nproc 8 --out out/ladder --eval_tasks hellaswag,lambada_openai,piqa,winogrande

The ladder's config (config/ladder_tiny.py, config/ladder_gpt3_fast.py) names the train.py configs every run
starts from, the sizes (the architecture keys it varies), the tokens rule (tokens_per_param: a fixed number
of training tokens per parameter; a second ratio adds one run per size at its best learning rate, which
lets Chinchilla's L(N, D) be fitted; with `steps`, the batch grows with size so that every size takes
about that many steps) and the sweep: at the first size `sweep_points[0]` learning rates
`sweep_factors[0]` apart around the recipe's learning_rate, then at each larger size a sweep centred on
the optimum the sizes below predict (the last size's best, then from 3 sizes on their best learning rates'
power law), narrowing as it climbs; a best rate at a sweep's edge adds a point beyond it; with `seeds`, the
rates of each size's `seeded_rates` lowest swept runs are trained again at other seeds (a later one only
while its run is below the means before it) and the fits take the rate of lowest mean. Every run is train.py
(under torchrun with --nproc) in OUT/runs/RECIPE/SIZE_rRATIO_lrLR, read back from its metrics.jsonl; a run with a `done` (or `diverged`: a NaN that ranks last) record is not
repeated, so a stopped ladder reruns where it stopped and a larger size added to the config runs alone (a run
whose config.json holds other settings than the ladder would give it, a recipe's flags or an edited base or
common, is refused). --jobs runs share the slots, each with its own --nproc GPUs on a GPU box.
Zero-shot scores: with --eval_tasks each run's last checkpoint is scored by scripts/eval.py once it is
trained, its tasks looked up before anything trains (or score them apart and rerun), and not again unless
its ckpt_N.eval.json says it was scored with another --limit or other data (or does not say: an older file);
ckpt_N.eval.json beside each run feeds a fit of each task's score against the final val loss (Bhagia et al.'s
second step) for plan.py. On the CPU the tasks are data/quickstart/next_line.py's.
It writes OUT/ladder.json (the runs; per recipe the fits with their parameters, uncertainty and the
held-out check: fitted without the largest size, the prediction for it beside what it measured; each
recipe's compute multiplier against the first; the data and vocabulary it was measured on) and
OUT/ladder.png (val loss against training compute, the fits extrapolated with their bands).
"""
import concurrent.futures
import contextlib
import json
import math
import os
import queue
import runpy
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from trainer import interrupt  # noqa: E402

if __name__ == "__main__":  # until the climbs take the signals over (Ladder.stopping_on_signals)
    interrupt.stop_at_once("ladder.py", "before any run began: the same command starts the ladder")

import numpy as np  # noqa: E402
import psutil  # noqa: E402
import torch  # noqa: E402
from torch.distributed.run import get_args_parser as run_parser  # noqa: E402

import configurator  # noqa: E402
from trainer import RunError, bins, checkpoint, cli, cost, ladder, ladder_analysis, metrics, runlog  # noqa: E402

VARIED = ("n_layer", "n_head", "n_embd", "max_iters", "lr_decay_iters", "warmup_iters", "eval_interval",
          "learning_rate", "min_lr", "out_dir", "init_from")  # set by the ladder for each run (learning_rate:
# a recipe's own is the first sweep's centre)
VARIED_BY_STEPS = ("batch_size", "gradient_accumulation_steps", "eval_iters")  # set per run too where steps is
# torchrun SIGKILLs its workers 30 s after passing on a signal, by default: mid-save at a GPU size (launch.sh's 900 s)
SHUTDOWN_TIMEOUT = ["--shutdown-timeout=900"] * ("--shutdown-timeout" in run_parser()._option_string_actions)
RUN_SETTINGS = ("steps", "warmup_fraction", "evaluations", "min_lr_ratio")  # what a run is, beyond its folder's
# size, ratio and lr: a ladder.json trained with others cannot lend its runs (an edited base or common is read
# off each run's config.json: reuse_problem)
SETTINGS = dict(base=[], common="", sizes={}, tokens_per_param=(20.0,), steps=0, sweep_points=(5, 3),
                sweep_factors=(2.0, 2.0, 1.41), warmup_fraction=0.1, evaluations=20, min_lr_ratio=0.1,
                seeds=1, seeded_rates=1, target="")  # seeds: each size's seeded_rates lowest swept rates trained
# at this many seeds, the fits on the rate of lowest mean; target: a train.py config whose size ladder.png
# extrapolates to


def load_settings(path):
    """The ladder config's settings over SETTINGS; an unknown name is an error."""
    if not Path(path).is_file():
        raise SystemExit(f"error: ladder config not found: {path}")
    try:
        ran = runpy.run_path(path)
    except Exception as e:  # a user's file: where it broke, in one line, as configurator.py reports a config file
        # a train.py config reads the settings before it (block_size, say), which a ladder config does not have
        hint = "" if "sizes" in Path(path).read_text() else " (is it a ladder config? those set sizes, base and " \
                                                             "common: config/ladder_tiny.py)"
        raise SystemExit(f"error: {path}: {type(e).__name__}: {e}{hint}") from None
    scope = {k: v for k, v in ran.items() if not k.startswith("_")}
    if unknown := set(scope) - set(SETTINGS):
        raise SystemExit(f"error: {path}: unknown ladder setting(s) {sorted(unknown)}; known: {sorted(SETTINGS)}"
                         + ("" if "sizes" in scope else "; a train.py config is no ladder config"))
    settings = {**SETTINGS, **scope}
    ratios = settings["tokens_per_param"]
    settings["tokens_per_param"] = tuple(ratios) if isinstance(ratios, (tuple, list)) else (ratios,)
    if problem := settings_problem(settings):
        raise SystemExit(f"error: {path}: {problem}")
    settings["tokens_per_param"] = tuple(map(float, settings["tokens_per_param"]))
    for key, valid, what in (("sweep_points", lambda v: isinstance(v, int) and v >= 1, "whole numbers of at least 1"),
                             ("sweep_factors", lambda v: isinstance(v, (int, float)) and v > 1, "numbers above 1")):
        value = settings[key] if isinstance(settings[key], (tuple, list)) else (settings[key],)  # one for every size
        if not value or not all(map(valid, value)):
            raise SystemExit(f"error: {path}: {key} = {settings[key]!r}: give {what}, one per size (the last holds "
                             "for the sizes after it)")
        settings[key] = tuple(value)
    if not isinstance(settings["sizes"], dict) or not all(isinstance(v, dict) for v in settings["sizes"].values()):
        raise SystemExit(f"error: {path}: sizes = {settings['sizes']!r}: give {{name: dict(n_layer=..., n_head=..., "
                         "n_embd=...)}")
    if len(settings["sizes"]) < ladder.MIN_SIZES:  # ladder.py and plan.py --ladder_plan alike
        raise SystemExit(f"error: {path} has {len(settings['sizes'])} sizes, a fit needs at least {ladder.MIN_SIZES}: "
                         "add sizes")
    return settings


def settings_problem(s):
    """One line naming the first setting of a ladder config that no ladder can run with, else None (the
    sweep's and the sizes' are checked, and made tuples, in load_settings)."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    ratios = s["tokens_per_param"]
    distinct = len(set(ratios)) == len(ratios)
    checks = (("base", isinstance(s["base"], (list, tuple)) and all(isinstance(b, str) for b in s["base"]),
               "a list of train.py configs, e.g. ['config/train_tiny.py']"),
              ("common", isinstance(s["common"], str), "one string of --key=value overrides"),
              ("tokens_per_param", ratios and all(number(r) and r > 0 for r in ratios) and distinct,
               "a positive number, or several different ones (the first is the rule, the others one run a size)"),
              ("steps", isinstance(s["steps"], int) and s["steps"] >= 0,
               "a whole number of steps (0: the base's batch)"),
              ("seeds", isinstance(s["seeds"], int) and s["seeds"] >= 1,
               "a whole number of at least 1 (1: each size's best swept run alone)"),
              ("seeded_rates", isinstance(s["seeded_rates"], int) and s["seeded_rates"] >= 1,
               "a whole number of at least 1 (1: the lowest swept run's rate)"),
              ("evaluations", isinstance(s["evaluations"], int) and s["evaluations"] >= 1,
               "a whole number of at least 1: val losses per run"),
              ("warmup_fraction", number(s["warmup_fraction"]) and 0 <= s["warmup_fraction"] < 1,
               "a share of the run in [0, 1)"),
              ("min_lr_ratio", number(s["min_lr_ratio"]) and 0 <= s["min_lr_ratio"] <= 1,
               "a share of the peak rate in [0, 1]"))
    return next((f"{key} = {s[key]!r}: give {what}" for key, fine, what in checks if not fine), None)


def parse_recipe(text, varied=VARIED):
    """'name: --key=value ...' -> (name, [overrides]); a recipe may not set what the ladder varies."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not sep or not name or not name.replace("_", "").replace("-", "").isalnum():
        raise SystemExit(f"error: --recipe {text!r}: write it as 'NAME: --key=value ...' (NAME: letters, digits, _ -)")
    try:
        overrides = shlex.split(rest)
    except ValueError as e:  # an unbalanced quote
        raise SystemExit(f"error: --recipe {text!r}: {e}")
    for arg in overrides:
        key = arg[2:].partition("=")[0]
        if key in varied and key != "learning_rate":
            why = "the batch and eval_iters follow steps" if key in VARIED_BY_STEPS else \
                "sizes are the ladder config's, tokens follow tokens_per_param"
            raise SystemExit(f"error: recipe {name!r} sets {key}, which the ladder varies per run; drop it ({why})")
    return name, overrides


class Stopped(Exception):
    """A climb stopped because another recipe's failed: that failure is the one to report."""


def device_slots(jobs, nproc, device, environ=os.environ, count=None, rocm=bool(torch.version.hip)):
    """What each of `jobs` runs at once is told of the GPUs: nproc of its own, none shared, through the variable
    the user narrowed the GPUs with (HIP_VISIBLE_DEVICES on a ROCm build, else CUDA_VISIBLE_DEVICES, which both
    honour). A run told nothing takes the first GPU, so two at once would train on one. Runs on the CPU (device,
    the runs' config's) or no GPU: nothing to tell, the runs share the cores. count: the GPUs visible (torch's);
    rocm: whether torch is a ROCm build."""
    count = 0 if device == "cpu" else torch.cuda.device_count() if count is None else count
    if count == 0:
        return [{}] * jobs
    if jobs * nproc > count:
        raise SystemExit(f"error: --jobs {jobs} x --nproc {nproc} needs {jobs * nproc} GPUs and {count} are "
                         "visible: lower --jobs or --nproc")
    # by the build, not the environment: a CUDA build ignores a stray HIP_VISIBLE_DEVICES, and every run would
    # then train on the first GPU
    name = "HIP_VISIBLE_DEVICES" if rocm and environ.get("HIP_VISIBLE_DEVICES") else "CUDA_VISIBLE_DEVICES"
    visible = environ[name].split(",") if environ.get(name) else [str(i) for i in range(count)]
    return [{name: ",".join(visible[k * nproc:(k + 1) * nproc])} for k in range(jobs)]


class Ladder:
    """One ladder: its settings, where its runs go, and how each is trained. slots: one environment per run that
    may train at once (device_slots), shared by every recipe's climb, so a slot one leaves idle another takes."""

    def __init__(self, settings, out, slots=({},), nproc=1, eval_tasks=None, eval_args=()):
        self.s, self.out, self.jobs, self.nproc = settings, out and Path(out), len(slots), nproc  # out None: argv only
        # scripts/eval.py on each run's end: {task: how it scores it (its scored_with)}, and its other arguments
        self.eval_tasks, self.eval_args = dict(eval_tasks or {}), list(eval_args)
        self.stopped, self.lock, self.failure = threading.Event(), threading.Lock(), None  # stopped: start no new run
        self.heard = None  # the signal that stopped the ladder (stop_on_signals), or None
        self.slots = queue.Queue()
        for slot in slots:
            self.slots.put(slot)

    def argv(self, recipe, shape, lr, ratio):
        """The configurator's arguments for one run (and so train.py's)."""
        head = [*self.s["base"], *shlex.split(self.s["common"]), *recipe, *(f"--{k}={v}" for k, v in shape.items())]
        probe = configurator.load_config(head)
        tokens = ratio * self.params(probe)
        if self.s["steps"]:  # the batch grows with size, so that every size takes about as many steps
            accumulation = self.nproc  # one micro-batch per process: the global batch is batch x accumulation
            batch = max(1, round(tokens / (self.s["steps"] * probe.block_size * accumulation)))
            evals = math.ceil(probe.eval_iters * probe.batch_size / batch)  # the base's validation set at every size
            head += [f"--batch_size={batch}", f"--gradient_accumulation_steps={accumulation}", f"--eval_iters={evals}"]
            probe = configurator.load_config(head)
        iters = max(10, round(tokens / probe.tokens_per_step))
        return [*head, f"--max_iters={iters}", f"--lr_decay_iters={iters}",
                f"--warmup_iters={max(1, round(self.s['warmup_fraction'] * iters))}",
                f"--eval_interval={max(1, iters // self.s['evaluations'])}",
                f"--learning_rate={lr:.3g}", f"--min_lr={lr * self.s['min_lr_ratio']:.3g}"]

    @staticmethod
    def params(cfg):
        return cost.meta_model(cfg, "none").get_num_params()

    def run(self, name, recipe, size, shape, lr, ratio, seed=None):
        """Train one run unless it is done, and score it on eval_tasks unless it was; its record for ladder.json.
        A seed: the run again at that seed, a replica of the sweep's (None: the recipe's seed, a sweep point)."""
        out_dir = self.out / "runs" / name / f"{size}_r{ratio:g}_lr{lr:.3g}{'' if seed is None else f'_s{seed}'}"
        argv = [*self.argv(recipe, shape, lr, ratio), *([] if seed is None else [f"--seed={seed}"])]
        train = [*argv, f"--out_dir={out_dir}", "--init_from=auto"]
        cfg = configurator.load_config(train)
        if problem := reuse_problem(out_dir, cfg):  # begun or done with other settings
            starts = metrics.read(out_dir, "start") if (out_dir / metrics.FILE).is_file() else []
            if self.s["steps"] and starts and starts[-1].get("world_size", self.nproc) != self.nproc:
                problem += f" (with steps, a run's batch follows --nproc: it trained with --nproc " \
                           f"{starts[-1]['world_size']})"
            raise self.fail(SystemExit(f"error: {problem}"))
        if ending(out_dir) is None:  # not trained, or stopped part-way: train it (init_from=auto resumes)
            out_dir.mkdir(parents=True, exist_ok=True)
            self.launch("train.py", train, accept=lambda: ending(out_dir) == "diverged")
        if (ended := ending(out_dir)) is None:  # a signal saved it and it exited 0
            raise Stopped() if self.stopped.is_set() else self.fail(SystemExit(
                f"error: {out_dir} stopped before its end (its train.py was signalled): rerun to resume it"))
        lost = ended == "diverged"
        # scored once as asked: not again (eval.py merges the tasks it scores into what the run holds)
        if not lost and self.eval_tasks and (missing := eval_script().unscored(eval_record(out_dir), self.eval_tasks)):
            self.launch("scripts/eval.py", [str(out_dir), "--tasks", ",".join(missing), *self.eval_args])
        start = metrics.read(out_dir, "start")[-1]
        evals = metrics.latest_per_iter(metrics.read(out_dir, "eval"))
        final = math.nan if lost or evals[-1].get("val_loss") is None else evals[-1]["val_loss"]  # None: not finite
        results = eval_results(out_dir)
        return {"recipe": name, "size": size, **shape, "params": start["params"], "lr": float(f"{lr:.3g}"),
                "seed": cfg.seed, "replica": seed is not None, "tokens_per_param": ratio,
                "tokens": start["max_iters"] * start["tokens_per_iter"],
                "flops": 6 * start["params"] * start["max_iters"] * start["tokens_per_iter"],
                "final_val_loss": final, "out_dir": str(out_dir),
                "scores": scores(results), "chance": chances(results),
                "curve": [[r["iter"] / start["max_iters"], r["val_loss"]] for r in evals  # for forecast.Prior
                          if r.get("val_loss") is not None]}

    def launch(self, script, args, accept=lambda: False):
        """One of the repository's scripts, under torchrun with nproc, in a free slot; one line when it fails,
        unless accept() says the failure is an outcome (a run that diverged). None starts once another recipe's
        climb has failed, and the first failure is kept in self.failure: the one to report."""
        slot = self.slots.get()  # waits for a run to end
        try:
            if self.stopped.is_set():
                raise Stopped()
            # from the user's folder, as they would type it: its paths (--out, the configs) read as the ladder read them
            # torchrun as this interpreter's module, not whichever torchrun is first on PATH (another env's, or none)
            launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={self.nproc}",
                        *SHUTDOWN_TIMEOUT]
            command = [sys.executable, *(launcher if self.nproc > 1 else []), os.path.relpath(REPO / script), *args]
            shown = " ".join(["torchrun", *command[3:]] if self.nproc > 1 else command[1:])  # as a user types it
            print(f"+ {shown}", flush=True)
            env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), **slot)
            # train.log keeps what stdout says; stderr holds why a run failed. A session of its own: Ctrl-C reaches
            # the ladder alone, which passes it on once (stopping_on_signals), not twice to torchrun
            result = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                    start_new_session=True)
        finally:
            self.slots.put(slot)
        if result.returncode != 0 and self.heard:  # torchrun exits 1 after a signal, whatever its workers did
            raise Stopped()
        if result.returncode != 0 and not accept():
            why = runlog.why_it_failed(result.returncode, result.stderr)
            raise self.fail(SystemExit(f"error: {shown} failed: {why}"))

    @contextlib.contextmanager
    def stopping_on_signals(self):
        """Meanwhile SIGINT, SIGTERM or SIGHUP (unless ignored: nohup) to the ladder reaches the runs in
        flight as SIGTERM: they save and stop as train.py does at any signal, and no new run starts. Without it a
        `kill` of the ladder left its train.py training on alone, to meet a rerun in its folder; Ctrl-C ended in a
        traceback."""
        told = set()  # once each: a second SIGTERM to torchrun would cut short the grace it gives its workers

        def stop_children():
            for child in psutil.Process().children():  # train.py, torchrun or eval.py
                try:
                    if child.pid not in told:
                        child.send_signal(signal.SIGTERM)
                        told.add(child.pid)
                except psutil.Error:  # it ended meanwhile
                    pass

        def stop(signum, frame):
            if self.heard is None:
                print(f"{signal.Signals(signum).name}: the runs in flight save and stop; no new run starts",
                      flush=True)
                again = threading.Timer(2.0, stop_children)  # a run whose launch had passed its check of `stopped`
                again.daemon = True  # was not yet a child
                again.start()
            self.heard = self.heard or signum
            self.stopped.set()
            stop_children()
        before = {sig: signal.signal(sig, stop) for sig in interrupt.stop_signals()}
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def fail(self, error):
        """The ladder's first failure (the one main reports), from now on every climb's: no new run starts, and
        the runs in flight finish first (on a GPU, hours: Ctrl-C stops them, a rerun resumes them)."""
        with self.lock:
            if self.failure is None:
                self.failure = error
                if psutil.Process().children():  # else the error itself, once, is all there is to say
                    print(f"stopping: {error}; waiting for the runs in flight (Ctrl-C stops them; a rerun resumes "
                          "them)", flush=True)
        self.stopped.set()
        return self.failure

    def watched(self, name, future):
        """A future of runs beside a climb, whose error, should it be other than a run's failure (which went
        through fail already), stops every climb at once, not when the climb reads it at its end."""
        def check(done):
            error = done.exception()
            if error is not None and not isinstance(error, (Stopped, SystemExit)):
                self.fail(SystemExit(f"error: recipe {name}: {error}") if isinstance(error, RunError) else error)
        future.add_done_callback(check)
        return future

    def sweep(self, i):
        """(learning rates, the factor between neighbours) of the i-th size's sweep: the settings' last entry
        holds for every size past their length."""
        return (self.s["sweep_points"][min(i, len(self.s["sweep_points"]) - 1)],
                self.s["sweep_factors"][min(i, len(self.s["sweep_factors"]) - 1)])

    def planned_runs(self, i):
        """How many runs the i-th size trains at the first ratio, at most (a sweep's edge may add points, and a
        seeded rate that cannot win is not trained again): its sweep, and its seeded_rates lowest rates at the
        other seeds."""
        return self.sweep(i)[0] + min(self.s["seeded_rates"], self.sweep(i)[0]) * (self.s["seeds"] - 1)

    def run_many(self, name, recipe, size, shape, lrs, ratio, seeds=None):
        jobs = list(zip(lrs, seeds or [None] * len(lrs)))
        with concurrent.futures.ThreadPoolExecutor(max(1, min(self.jobs, len(jobs)))) as pool:  # the slots bound them all
            return list(pool.map(lambda job: self.run(name, recipe, size, shape, job[0], ratio, job[1]), jobs))

    def seed_rates(self, name, recipe, size, shape, sweep, ratio, seeds):
        """The sweep's seeded_rates lowest rates again at the other seeds, one rate after another, and a later
        rate only while its one run could still beat the means before it (ladder.challenges): ladder.best_runs
        takes the rate of lowest mean."""
        runs = []
        for lr in ladder.seeded_rates(sweep, self.s["seeded_rates"]):
            if not ladder.challenges(sweep + runs, size, ratio, lr):
                break
            runs += self.run_many(name, recipe, size, shape, [lr] * len(seeds), ratio, seeds)
        return runs

    def climb(self, name, recipe):
        """Every size of one recipe, its sweep centred on what the sizes below predict; all its runs. A size's
        replicas and other ratios train beside the next size's sweep, which depends only on the sweeps below:
        on a GPU box with --jobs they keep slots busy that a three-point sweep would leave idle."""
        with concurrent.futures.ThreadPoolExecutor(self.jobs) as beside:
            try:
                sizes = list(self._climb(name, recipe, beside))
            except BaseException:
                self.stopped.set()  # the climb has failed: what waits beside it starts no run
                raise
        runs = []
        for sweep, best, edge, replicas, others in sizes:  # in the order a climb one run at a time lists them
            sweep += replicas.result()
            for r in sweep:
                r["sweep_best_lr"], r["sweep_edge"] = best, edge
            runs += sweep + [r for other in others for r in other.result()]
        return runs

    def _climb(self, name, recipe, beside):
        """Each size in turn: (its sweep, best rate, edge, and the futures of its replicas and other ratios)."""
        rungs = []  # (params, best lr) of each size so far
        ratio, extra = self.s["tokens_per_param"][0], self.s["tokens_per_param"][1:]
        start = configurator.load_config([*self.s["base"], *shlex.split(self.s["common"]), *recipe])
        for i, (size, shape) in enumerate(self.s["sizes"].items()):
            points, factor = self.sweep(i)
            # the law once it rests on MIN_SIZES sizes; before, the last size's best: the slope between two
            # noisy optima is too noisy to extrapolate
            if len(rungs) < ladder.MIN_SIZES:
                centre = rungs[-1][1] if rungs else start.learning_rate
            else:
                n = self.params(configurator.load_config(self.argv(recipe, shape, start.learning_rate, ratio)))
                centre = float(ladder.fit_lr(*zip(*rungs))(n))
            lrs = [float(f"{centre * factor ** (j - (points - 1) / 2):.3g}") for j in range(points)]
            sweep = self.run_many(name, recipe, size, shape, lrs, ratio)
            for _ in range(3 if points > 1 else 0):  # a best rate at the sweep's edge: a point beyond it, 3 at most
                best, edge = ladder.best_lr([r["lr"] for r in sweep], [r["final_val_loss"] for r in sweep])
                if not edge:
                    break
                beyond = min(r["lr"] for r in sweep) / factor if edge == "low" else max(r["lr"] for r in sweep) * factor
                sweep += self.run_many(name, recipe, size, shape, [beyond], ratio)
            best, edge = ladder.best_lr([r["lr"] for r in sweep], [r["final_val_loss"] for r in sweep])
            rungs.append((sweep[0]["params"], best))
            seeds = [start.seed + k for k in range(1, self.s["seeds"])]
            replicas = self.watched(name, beside.submit(self.seed_rates, name, recipe, size, shape, sweep, ratio, seeds))
            others = [self.watched(name, beside.submit(self.run_many, name, recipe, size, shape, [best], other))
                      for other in extra]  # one run at its best
            yield sweep, best, edge, replicas, others


NOT_COMPARED = ("out_dir", "init_from", "batch_size", "gradient_accumulation_steps", "activation_checkpointing",
                "recompute_blocks", "hsdp_shard_size",  # train.py may settle these itself
                "log_interval", "checkpoint_interval", "checkpoint_minutes", "checkpoint_async", "keep_last_n",
                "wandb_log", "wandb_project", "wandb_run_name", "memory_budget_gb", "ignore_memory_estimate",
                "collective_timeout_minutes", "compile", "peak_tflops")  # and these change no loss


def reuse_problem(out_dir, cfg, asker="this ladder"):
    """Why a run begun or finished there cannot stand for the run the asker (this ladder, or scripts/ab.py) would
    train (cfg), as one line, or None: a setting its config.json holds otherwise (a recipe's flags, the base or
    common edited since), which the run's folder name (size, ratio, rate, seed) does not show."""
    if not (out_dir / "config.json").is_file():  # nothing to compare
        return None
    # a key newer than the run's config.json: the run had its default (muon_split_qkv, say, trained fused)
    saved = {**configurator.DEFAULTS, **json.loads((out_dir / "config.json").read_text())}
    differs = {k: (saved[k], v) for k, v in vars(cfg).items() if k in saved and k not in NOT_COMPARED
               and ladder.by_folder_name(k, saved[k]) != ladder.by_folder_name(k, json.loads(json.dumps(v)))}
    if {"batch_size", "gradient_accumulation_steps"} <= set(saved):  # train.py may split the batch, not change it
        was, now = saved["batch_size"] * saved["gradient_accumulation_steps"], cfg.batch_size * cfg.gradient_accumulation_steps
        if was != now:
            differs["batch_size x gradient_accumulation_steps"] = (was, now)
    starts = metrics.read(out_dir, "start") if (out_dir / metrics.FILE).is_file() else []
    if starts and "eval_batch_size" in starts[-1] and "eval_iters" in saved:  # the config's batch, before the split
        was, now = saved["eval_iters"] * starts[-1]["eval_batch_size"], cfg.eval_iters * cfg.batch_size
        if was != now:  # its val loss was measured on other windows
            differs["validation windows (eval_iters x batch_size)"] = (was, now)
    if differs:
        return (f"{out_dir} was trained with " + ", ".join(f"{k}={a!r}" for k, (a, _) in differs.items())
                + f" where {asker} sets " + ", ".join(f"{k}={b!r}" for k, (_, b) in differs.items())
                + ": use another --out, or delete the run to train it again")
    return None


def ending(out_dir):
    """How train.py ended this run, by its records: "done"; "diverged", its loss would not stay finite or down
    (an outcome of its learning rate, a NaN final loss that ranks last, not a failure to stop the ladder for, and
    not one to train again on a rerun); or None: not trained, or stopped part-way."""
    if not (out_dir / metrics.FILE).is_file():
        return None
    if metrics.read(out_dir, "done"):
        return "done"
    return "diverged" if metrics.read(out_dir, "diverged") else None


def scores(results):
    """The zero-shot scores of eval_results (the newest checkpoint's: an older one's, scored mid-run, are not the
    final val loss's): {task/metric: value}. Scores only: a perplexity or bits per byte is a loss, which Bhagia et
    al.'s sigmoid in the loss does not describe."""
    return {f"{task}/{metric}": value for task, figures in results.items() for metric, value in figures.items()
            if metric not in ("n", "chance") and not metric.endswith(("_stderr", "perplexity", "bits_per_byte"))
            and isinstance(value, (int, float))}


def chances(results):
    """{task: the accuracy of a guess} for the multiple-choice tasks of eval_results, where eval.py says it."""
    return {task: figures["chance"] for task, figures in results.items() if "chance" in figures}


def eval_results(out_dir):
    """{task: {metric: value}} of the newest checkpoint's ckpt_N.eval.json, {} where it has none."""
    return eval_record(out_dir).get("results", {})


def eval_record(out_dir):
    """The newest checkpoint's ckpt_N.eval.json as scripts/eval.py wrote it, {} where it has none."""
    path = eval_json(out_dir)
    return json.loads(path.read_text()) if path and path.is_file() else {}


def eval_json(out_dir):
    """Where scripts/eval.py puts the newest checkpoint's scores (None: no checkpoint)."""
    newest = checkpoint.list_checkpoints(out_dir)[:1]
    return Path(checkpoint.scores_path(out_dir, newest[0][0])) if newest else None


def rate_check(h):
    """A held-out check's recommended rate against its size's sweep: the sweep's best and what the sweep's
    runs lost at the recommended rate, or that a size trained once (the GPU ladder's largest) was not swept,
    so its rate is the sizes' prediction and checks nothing."""
    if len(h["sweep_lrs"]) < 2:
        return "its one run's rate, not swept: no check of the rate"
    cost = h["lr_cost"]
    cost = "outside the sweep" if cost is None else "where its sweep diverged" if math.isinf(cost) else \
        f"its sweep lost {100 * cost:.1f}% there"
    return f"its sweep's best {h['sweep_best_lr']:.3g} ({h['lr_ratio']:.2f}x; {cost})"


def plot(result, path, target_params=None):
    """ladder.png: loss against compute per recipe, each fit extrapolated to target_params (else 4x the largest)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ratio = result["tokens_per_param"][0]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    largest = max(r["params"] for rec in result["recipes"].values() for r in rec["runs"])
    grid = np.geomspace(min(r["params"] for rec in result["recipes"].values() for r in rec["runs"]),
                        target_params or 4 * largest, 60)
    for (name, rec), color in zip(result["recipes"].items(), plt.rcParams["axes.prop_cycle"].by_key()["color"]):
        runs = [r for r in rec["runs"] if r["tokens_per_param"] == ratio]
        ax.scatter([r["flops"] for r in runs], [r["final_val_loss"] for r in runs], s=8, color=color, alpha=0.3)
        best = ladder.best_runs(rec["runs"], ratio)
        ax.scatter([r["flops"] for r in best], [r["final_val_loss"] for r in best], s=24, color=color,
                   label=f"{name}: best of each sweep")
        fit = ladder.Fit.from_json(rec["fits"]["loss"])
        bands = np.array([fit.predict(n) for n in grid])
        bands[~np.isfinite(bands)] = np.nan  # no band where the fit has no interval (ladder.UNJUDGED)
        ax.plot(6 * ratio * grid ** 2, bands[:, 0], color=color, label=f"{name}: {fit.form} fit")
        ax.fill_between(6 * ratio * grid ** 2, bands[:, 1], bands[:, 2], color=color, alpha=0.15)
        if "predicted_val_loss" in (held := rec["held_out"]):  # fitted without the largest size: its prediction
            value, interval = held["predicted_val_loss"], held["interval"] or [held["predicted_val_loss"]] * 2
            ax.errorbar([best[-1]["flops"]], [value], fmt="x", color=color, capsize=4,  # no bar where no interval
                        yerr=[[value - interval[0]], [interval[1] - value]],
                        label=f"{name}: {held['size']} predicted without it")
    ax.set_xscale("log")
    ax.set_xlabel(f"training compute, FLOPs (6 N D, D = {ratio:g} N)")
    ax.set_ylabel("final val loss")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)  # a ladder rerun in one process (the tests) would keep every figure open


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("config", help="the ladder's config, e.g. config/ladder_tiny.py")
    p.add_argument("--recipe", action="append", required=True, help="'NAME: --key=value ...' (repeatable)")
    p.add_argument("--out", required=True, help="folder for the runs, ladder.json and ladder.png")
    p.add_argument("--jobs", type=int, default=1, help="runs trained at once (CPU: one per core; GPUs: each run "
                   "on its own --nproc of them), shared by the recipes, which climb side by side")
    p.add_argument("--nproc", type=int, default=1, help="GPUs per run: train.py under torchrun")
    p.add_argument("--eval_tasks", default="", help="score each run's last checkpoint on these tasks with "
                   "scripts/eval.py once it is trained (comma-separated; a run scored on them with the same --limit "
                   "and data is not scored again)")
    p.add_argument("--eval_args", default="", help="more arguments for scripts/eval.py, e.g. "
                   "'--include_path data/quickstart/next_line --device cpu --limit 1000'")
    args = p.parse_args(argv)
    if problem := out_problem(Path(args.out)):
        raise SystemExit(f"error: {problem}")
    settings = load_settings(args.config)
    parsed = [parse_recipe(r, VARIED + VARIED_BY_STEPS if settings["steps"] else VARIED) for r in args.recipe]
    names = [name for name, _ in parsed]
    if twice := next((n for n in names if names.count(n) > 1), None):
        raise SystemExit(f"error: --recipe {twice!r} is given twice: name each recipe once")
    recipes = dict(parsed)
    if problem := cli.below_least(args, {"jobs": 1, "nproc": 1}):
        raise SystemExit(f"error: {problem}")
    eval_tasks, eval_args = eval_options(args)
    out = Path(args.out)
    head = [*settings["base"], *shlex.split(settings["common"])]
    configs = {}
    for name, recipe in {args.config: [], **{f"recipe {k}": v for k, v in recipes.items()}}.items():
        try:  # a bad key: one line now, not a traceback hours into a climb
            configs[name] = configurator.load_config(head + recipe)
        except configurator.ConfigError as e:
            raise SystemExit(f"error: {name}: {e}")
    base = configs.pop(args.config)
    try:  # meta.json is read here first: one cut short is one line
        data = ladder.identity(base)
        for name, cfg in configs.items():  # one validation set: losses on other data are not compared
            if problem := ladder.identity_problem(
                    ladder.identity(cfg), data, f"{name} trains",
                    "a ladder compares its recipes' val losses on one validation set: set the data in its config"):
                raise SystemExit(f"error: {problem}")
    except bins.BinError as e:
        raise SystemExit(f"error: {e}")
    if (out / "ladder.json").is_file():
        try:
            before = ladder.load(out / "ladder.json", expected=data)[0].get("settings", {})
        except ladder.FitError as e:  # its runs are checked one by one (reuse_problem): the file alone is lost
            raise SystemExit(f"error: {e}; move it aside, and the same command reuses the runs in {out} that fit "
                             "this ladder, or use another --out")
        if changed := [k for k in RUN_SETTINGS if json.loads(json.dumps(settings[k])) != before.get(k, SETTINGS[k])]:
            raise SystemExit(f"error: {out / 'ladder.json'} trained its runs with other {', '.join(changed)}: its runs "
                             "would be reused as if trained by these; use another --out")
    if eval_tasks and base.checkpoint_interval <= 0:
        raise SystemExit(f"error: --eval_tasks: {args.config}'s runs keep no checkpoint to score "
                         "(checkpoint_interval=0): set one in its common")
    # the recipes climb side by side, the jobs shared among them: a recipe's sizes follow one another (each
    # sweep is centred on the sizes below), so a second recipe is what keeps a second core busy, and a sweep
    # takes the slots a finished climb leaves
    slots = device_slots(args.jobs, args.nproc, base.device)
    lad = Ladder(settings, out, slots, args.nproc, eval_tasks, eval_args)
    check_sizes(lad, recipes, args.config)
    try:  # the size ladder.png extrapolates to: read now, not after the runs
        target = settings["target"] and Ladder.params(configurator.load_config([settings["target"]]))
    except (configurator.ConfigError, ValueError) as e:
        raise SystemExit(f"error: {args.config}: target {settings['target']!r}: {e}")
    ratio = settings["tokens_per_param"][0]
    result = {"config": args.config, "settings": settings, "data": data, "tokens_per_param":
              list(settings["tokens_per_param"]), "recipes": {}}
    with lad.stopping_on_signals(), concurrent.futures.ThreadPoolExecutor(min(args.jobs, len(recipes))) as pool:
        climbs = {name: pool.submit(lad.climb, name, recipe) for name, recipe in recipes.items()}
        try:
            concurrent.futures.wait(climbs.values(), return_when=concurrent.futures.FIRST_EXCEPTION)
        finally:  # a failure (or Ctrl-C): the other climbs start no new run (after none, none is left)
            lad.stopped.set()
    if lad.failure:  # the failure itself, not the climbs (or the recipe's own other runs) it stopped
        raise lad.failure
    for name, climb in climbs.items():
        if isinstance(error := climb.exception(), SystemExit):
            raise error
        if isinstance(error, RunError):
            raise SystemExit(f"error: recipe {name}: {error}")
        if error is not None and not isinstance(error, Stopped):
            raise error
    if lad.heard and any(isinstance(climb.exception(), Stopped) for climb in climbs.values()):
        raise SystemExit(f"stopped by {signal.Signals(lad.heard).name} before the ladder's end: rerun the same "
                         "command to resume its runs")
    if __name__ == "__main__":  # the fits and the plot: nothing of the runs is at stake, ladder.json is written whole
        interrupt.stop_at_once("ladder.py", "while fitting: every run is kept, and the same command fits them again "
                                            "without training")
    runs = {name: climb.result() for name, climb in climbs.items()}
    try:
        analysis = ladder_analysis.analyse(runs, ratio)
    except ladder.FitError as e:
        raise SystemExit(f"error: {e}")
    for name, recipe in recipes.items():
        trained = configs[f"recipe {name}"]  # base, common and the recipe's overrides
        result["recipes"][name] = {"overrides": recipe, "schedule": ladder.schedule(trained),
                                   "recipe_settings": {k: getattr(trained, k) for k in ladder.RECIPE_KEYS},
                                   "runs": runs[name], **analysis[name]}
    out.mkdir(parents=True, exist_ok=True)
    bins.write_json_atomic(out / "ladder.json", result)
    plot(result, out / "ladder.png", target)
    print(summary(result))
    print(f"wrote {out / 'ladder.json'} and {out / 'ladder.png'}")


def out_problem(out):
    """One line where --out cannot be a folder (it, or a folder above it, is a file), else None: said before
    anything trains, not as a traceback when the first run makes its folder."""
    existing = next(p for p in (out, *out.parents) if p.exists())  # '.' or '/' at the latest
    if not existing.is_dir():
        under = "" if existing == out else f" lies under {existing}, which"
        return f"--out {out}{under} is a file, not a folder: pass a folder for the runs and ladder.json"
    return None


def check_sizes(lad, recipes, path):
    """Every size's runs as train.py would check them (configurator.check), for every recipe and ratio, before
    anything trains: a size that cannot be built is one line now, not a traceback when the climb reaches it."""
    head = [*lad.s["base"], *shlex.split(lad.s["common"])]

    def problem(argv):  # argv(): the run's arguments, built only once the checks before it have passed
        try:
            return configurator.check(configurator.load_config(argv()), lad.nproc)
        except (configurator.ConfigError, ValueError) as e:
            return str(e)
    # with steps, each run's accumulation is its process count (lad.argv), whatever the base's
    split = [f"--gradient_accumulation_steps={lad.nproc}"] if lad.s["steps"] else []
    for name, recipe in recipes.items():
        lr = configurator.load_config(head + recipe).learning_rate
        sizes = {}  # parameters: sizes
        for size, shape in lad.s["sizes"].items():  # the shape first: argv builds the model to count its parameters
            built = [*head, *recipe, *(f"--{k}={v}" for k, v in shape.items()), *split]
            # min_lr 0 here: the runs set it from their own rate (lad.argv), which the next probe checks
            found = problem(lambda: [*built, "--min_lr=0"])
            for ratio in lad.s["tokens_per_param"]:
                found = found or problem(lambda: lad.argv(recipe, shape, lr, ratio))
            if found:
                raise SystemExit(f"error: {path}: size {size!r} (recipe {name}): {found}")
            sizes.setdefault(lad.params(configurator.load_config(built)), []).append(size)
        if alike := next((names for names in sizes.values() if len(names) > 1), None):
            raise SystemExit(f"error: {path}: sizes {' and '.join(map(repr, alike))} have the same number of "
                             f"parameters (recipe {name}): a fit needs sizes that differ; change or drop one")


def eval_options(args):
    """({task: how eval.py will score it (its scored_with)}, eval.py's other arguments) of --eval_tasks and
    --eval_args, or a one-line error."""
    tasks = [t.strip() for t in args.eval_tasks.split(",") if t.strip()]
    try:
        rest = shlex.split(args.eval_args)
    except ValueError as e:
        raise SystemExit(f"error: --eval_args {args.eval_args!r}: {e}")
    if rest and not tasks:
        raise SystemExit("error: --eval_args without --eval_tasks: name the tasks to score")
    if clash := [a for a in rest if a.split("=")[0] in ("--tasks", "--watch")]:
        raise SystemExit(f"error: --eval_args sets {clash[0]}: name the tasks with --eval_tasks (each run is "
                         "scored once on them)")
    if not tasks:
        return {}, rest
    script = eval_script()  # read as eval.py will read them, its tasks looked up now: not after the first run
    options = script.parse_args(["OUT_DIR", "--tasks", ",".join(tasks), *rest])
    try:
        script.lm_eval_adapter.check_tasks(tasks, options.data_dir, options.include_path)
    except script.lm_eval_adapter.HarnessError as e:
        raise SystemExit(f"error: --eval_tasks: {e}")
    return script.scored_with(tasks, options.data_dir, options.include_path, options.limit), rest


def eval_script():
    """scripts/eval.py, imported where first needed: it imports lm-eval, seconds a ladder without scores skips."""
    import eval
    return eval


def nd_lines(h):
    """The held-out check of Chinchilla's fit under a held-out line, where the ladder has several ratios."""
    if "chinchilla" not in h:
        return []
    nd = h["chinchilla"]
    if "problem" in nd:
        return [f"    chinchilla: no check, {nd['problem']}"]
    return ["    chinchilla, fitted on the same sizes' runs at every ratio, predicted " + ", ".join(
        f"{c['predicted_val_loss']:.4f} at {c['tokens_per_param']:g} tokens per parameter (measured "
        f"{c['measured_val_loss']:.4f}, {c['relative_error']:+.1%}{against_interval(c)})" for c in nd)]


def against_interval(check):
    """Whether a check's measurement fell inside its interval; nothing where it had none."""
    return "" if check["inside"] is None else ", inside the interval" if check["inside"] else ", OUTSIDE the interval"


def held_out_line(h):
    """One held-out check: the prediction for the largest size from the sizes below, beside what it measured."""
    what = f"{h['size']} ({h['params']:,} params, " if h["held_out_sizes"] == 1 else \
        f"the {h['held_out_sizes']} largest sizes ({h['size']} predicted, "
    return (f"  held out {what}{h['extrapolation']:.1f}x beyond the fitted sizes): {h['form']} predicted "
            f"{h['predicted_val_loss']:.4f} {ladder.interval_text(h['interval'], '.4f')}, measured "
            f"{h['measured_val_loss']:.4f} ({h['relative_error']:+.1%}{against_interval(h)}; "
            f"the last step's slope carried on: {h['last_step']['predicted_val_loss']:.4f}, "
            f"{h['last_step']['relative_error']:+.1%}); recommended lr {h['recommended_lr']:.3g}, {rate_check(h)}")


def summary(result):
    lines = []
    ratio = result["tokens_per_param"][0]
    for name, rec in result["recipes"].items():
        lines.append(f"{name} ({' '.join(rec['overrides'])}), {ratio:g} tokens per parameter:")
        for r in ladder.best_runs(rec["runs"], ratio):
            lrs = [lr for lr, _ in ladder_analysis.swept(rec["runs"], r["size"], ratio)]
            seeds = f" (mean of {r['seeds_in_mean']} seeds at lr {r['lr']:.3g}: " + ", ".join(
                f"{v:.4f}" for v in r["seed_losses"].values()) + ")" if "seed_losses" in r else ""
            lines.append(f"  {r['size']:<8} {r['params']:>12,} params  final val loss {r['final_val_loss']:.4f}"
                         f"{seeds}  "
                         f"best lr {r['sweep_best_lr']:.3g} (swept {', '.join(f'{x:.3g}' for x in lrs)})")
        for size in ladder.no_best_run(rec["runs"], ratio):
            lines.append(f"  {size:<8} every run diverged: left out of the fits (a lower rate, at another --out)")
        f = rec["fits"]
        lr, loss = f["lr"]["named"], f["loss"]["named"]
        lines.append(f"  best lr = {lr['c']:.3g} * N^{lr['b']:.3f} (±{f['lr']['stderr']['b']:.3f} on the exponent)")
        lines.append(f"  final val loss: {f['loss']['form']}, " + ", ".join(f"{k} {v:.4g}" for k, v in loss.items()))
        for task, fit in f.get("tasks", {}).items():
            named = fit["named"]
            lines.append(f"  {task} against the final val loss ({fit['n']} runs): sigmoid, "
                         + (f"from chance {fit['chance']:.3g} to 1, k {named['k']:.4g}, L0 {named['L0']:.4g}"
                            if "chance" in fit else ", ".join(f"{k} {v:.4g}" for k, v in named.items())))
        for task, problem in f.get("task_problems", {}).items():
            lines.append(f"  {task}: no fit, {problem}")
        h = rec["held_out"]
        if "problem" in h:
            lines.append(f"  held out: none, {h['problem']}")
        for h in [h for h in [h, *rec.get("held_out_further", [])] if "problem" not in h]:
            lines.append(held_out_line(h))
            lines += nd_lines(h)
            for task, score in h["scores"].items():
                lines.append(f"    {task}: " + (f"no prediction, {score['problem']}" if "problem" in score else
                                               f"predicted {score['predicted']:.3f} from the predicted loss, "
                                               f"measured {score['measured']:.3f}"))
        for key, value in rec.items():
            if key.startswith("compute_multiplier_vs_"):
                lines.append(f"  compute multiplier against {key[22:]} (its compute to reach this loss, "
                             "over this one's): " + ", ".join(
                                 f"{k} {v['multiplier']}" if isinstance(v["multiplier"], str) else
                                 f"{k} {v['multiplier']:.2f}x ({v['by']})" for k, v in value.items()))
    return "\n".join(lines)


if __name__ == "__main__":
    main()
