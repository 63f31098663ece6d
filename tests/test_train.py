"""train.py end to end on a tiny model and tiny token bins: in this interpreter where the test is about what
the run decides, in a process of its own (the `e2e` ones) where a signal, a kill or a resume across
processes is the point.

The guarantees a weeks-long run relies on: resume is bit-exact, signals save and exit 0,
kills and full disks during a save lose nothing, rotation is numeric, poisoned steps never
reach a checkpoint, and bad input stops with one clear line.
"""
import ast
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import configurator
from trainer import cost, metrics
from conftest import REPO, VOCAB, python, run_here, sigint_heard, wait_for
from model import GPT, GPTConfig

TINY = [
    "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=16", f"--vocab_size={VOCAB}", "--batch_size=4",
    "--gradient_accumulation_steps=3", "--dropout=0.1", "--learning_rate=3e-3", "--min_lr=3e-4",
    "--warmup_iters=2", "--lr_decay_iters=40", "--eval_interval=5", "--eval_iters=2", "--log_interval=1",
    "--checkpoint_interval=4", "--keep_last_n=10", "--device=cpu", "--dtype=float32", "--wandb_log=False",
]


def train(out_dir, data_dir, *overrides, env=None, check=True, process=False):
    """train.py on the tiny model, here (run_here) or, with process=True, in a process of its own."""
    args = ["train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={out_dir}", *overrides]
    result = python(args, env=dict(os.environ, **(env or {}))) if process else run_here(args, env)
    if check and result.returncode != 0:
        raise AssertionError(f"train.py exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def ckpts(out_dir):
    return sorted(int(p.name[5:-3]) for p in out_dir.glob("ckpt_*.pt"))


def weights(path):
    return torch.load(path, weights_only=True)["model"]


def assert_same_weights(a, b):
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k


def losses(out_dir, first, last):
    """(loss, lr, grad_norm) of iterations first..last, from metrics.jsonl (a resume's steps replace earlier ones)."""
    found = {r["iter"]: (r["loss"], r["lr"], r["grad_norm"]) for r in metrics.read(out_dir, "step")}
    return [found[n] for n in range(first, last + 1)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory, data_dir):
    """One uninterrupted run to 12 steps that the interrupted ones must reproduce exactly."""
    out = tmp_path_factory.mktemp("reference")
    train(out, data_dir, "--max_iters=12")
    return out


def test_trains_logs_and_rotates_numerically(tmp_path, data_dir, reference):
    steps = metrics.read(reference, "step")
    assert [r["iter"] for r in steps] == list(range(1, 13)) and steps[-1]["loss"] < steps[0]["loss"]
    assert steps[-1]["mfu"] is None and steps[-1]["tokens_per_sec"] > 0  # no peak FLOPS known for a CPU
    assert [r["iter"] for r in metrics.read(reference, "eval")] == [0, 5, 10, 12]
    assert [r["kind"] for r in metrics.read(reference)][-1] == "done"
    assert metrics.read(reference, "start")[0]["load_seconds"] is None  # from scratch: nothing loaded
    assert all(r["seconds"] > 0 and not r["asynchronous"] for r in metrics.read(reference, "save"))
    log = (reference / "train.log").read_text()  # for people: the same run in words
    assert "mfu n/a" in log and "tok/s" in log and "eval iter 10: val loss" in log
    # keep_last_n=3 with saves every 3 steps up to 12: 6, 9 and 12 stay (lexical order would drop 12)
    out = tmp_path / "rot"
    train(out, data_dir, "--max_iters=12", "--checkpoint_interval=3", "--keep_last_n=3")
    assert ckpts(out) == [6, 9, 12]


@pytest.mark.e2e
def test_stop_and_resume_is_bit_exact(tmp_path, data_dir, reference):
    out = tmp_path / "run"
    train(out, data_dir, "--max_iters=5")
    assert ckpts(out) == [4, 5]
    result = train(out, data_dir, "--max_iters=12", process=True)  # a fresh process continues where this one stopped
    assert "resuming after 5 completed steps" in result.stdout
    assert metrics.read(out, "start")[-1]["load_seconds"] > 0
    assert_same_weights(out / "ckpt_12.pt", reference / "ckpt_12.pt")
    assert losses(out, 6, 12) == losses(reference, 6, 12)
    assert (out / "train.log").read_text().count("=== ") == 2  # appended across restarts


@pytest.mark.e2e
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_saves_and_resume_is_exact(tmp_path, data_dir, sig):
    out = tmp_path / "sig"
    proc = subprocess.Popen(
        [sys.executable, "train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}", f"--out_dir={out}",
         "--max_iters=100000", "--checkpoint_interval=100000", "--gradient_accumulation_steps=8"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"),
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))  # a suite run under nohup: the run still hears it
    wait_for(out, "step", proc, since=2)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert f"stopped by {sig.name} after" in stdout and "Traceback" not in stderr
    [k] = ckpts(out)
    assert torch.load(out / f"ckpt_{k}.pt", weights_only=True)["iter_num"] == k >= 2
    if sig == signal.SIGTERM:  # the stopped run, resumed, matches one that never stopped
        ref = tmp_path / "ref"
        common = ["--gradient_accumulation_steps=8", f"--max_iters={k + 2}"]
        train(out, data_dir, *common)
        train(ref, data_dir, *common)
        assert_same_weights(out / f"ckpt_{k + 2}.pt", ref / f"ckpt_{k + 2}.pt")


@pytest.mark.e2e
def test_kill_during_save_loses_nothing(tmp_path, data_dir, reference):
    out = tmp_path / "kill"
    train(out, data_dir, "--max_iters=4")
    result = train(out, data_dir, "--max_iters=12", env={"TRAINER_FAULTS": "kill_after_temp_write"}, check=False,
                   process=True)
    assert result.returncode == -signal.SIGKILL
    assert ckpts(out) == [4] and any(p.name.startswith(".ckpt_8") for p in out.iterdir())
    result = train(out, data_dir, "--max_iters=12")
    assert not any(p.name.startswith(".ckpt") for p in out.iterdir())  # the killed save's temp file is gone
    assert_same_weights(out / "ckpt_12.pt", reference / "ckpt_12.pt")


def test_truncated_newest_checkpoint_falls_back(tmp_path, data_dir, reference):
    out = tmp_path / "trunc"
    train(out, data_dir, "--max_iters=8")
    newest = out / "ckpt_8.pt"
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])
    result = train(out, data_dir, "--max_iters=12")
    assert "ckpt_8.pt" in result.stdout and "resuming after 4 completed steps" in result.stdout
    assert_same_weights(out / "ckpt_12.pt", reference / "ckpt_12.pt")


def test_disk_full_during_save_loses_nothing(tmp_path, data_dir):
    out = tmp_path / "full"
    train(out, data_dir, "--max_iters=4")
    before = (out / "ckpt_4.pt").read_bytes()
    result = train(out, data_dir, "--max_iters=8", env={"TRAINER_FAULTS": "disk_full"}, check=False)
    assert result.returncode == 1 and "error:" in result.stderr and "Traceback" not in result.stderr
    assert ckpts(out) == [4] and (out / "ckpt_4.pt").read_bytes() == before
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [".lock"]  # no temp file left


def test_nonfinite_step_is_skipped_and_never_saved(tmp_path, data_dir):
    out = tmp_path / "nan"
    result = train(out, data_dir, "--max_iters=8", env={"TRAINER_FAULTS": "nan@3"})
    assert "iter 3: non-finite loss nan" in result.stdout and "step skipped" in result.stdout
    [skipped] = metrics.read(out, "nonfinite")
    assert skipped["iter"] == 3 and skipped["loss"] is None and 3 not in [r["iter"] for r in metrics.read(out, "step")]
    for k in ckpts(out):
        assert all(torch.isfinite(t).all() for t in weights(out / f"ckpt_{k}.pt").values())
    out = tmp_path / "nan_forever"
    result = train(out, data_dir, "--max_iters=12", "--max_nonfinite_steps=3",
                   env={"TRAINER_FAULTS": "nan@5,6,7,8,9,10,11,12"}, check=False)
    assert result.returncode == 1 and "3 non-finite steps in a row" in result.stderr
    assert ckpts(out) == [4]  # nothing saved after the poison began
    assert [r["iter"] for r in metrics.read(out, "diverged")] == [7]
    out = tmp_path / "nan_across_a_stop"  # stopped amid a streak, the resumed run goes on counting it
    train(out, data_dir, "--max_iters=6", "--max_nonfinite_steps=3", env={"TRAINER_FAULTS": "nan@5,6"})
    result = train(out, data_dir, "--max_iters=8", "--max_nonfinite_steps=3", env={"TRAINER_FAULTS": "nan@7"},
                   check=False)
    assert result.returncode == 1 and "3 non-finite steps in a row" in result.stderr
    assert [r["iter"] for r in metrics.read(out, "diverged")] == [7]
    out = tmp_path / "nan_no_rollback_target"  # the third non-finite step also ends a burst, with nothing to go back to
    result = train(out, data_dir, "--max_iters=12", "--max_nonfinite_steps=3", "--spike_rollback_after=3",
                   env={"TRAINER_FAULTS": "nan@5,6,7,8,9,10,11,12"}, check=False)
    assert "no checkpoint 100 steps before it to roll back to" in result.stdout
    assert result.returncode == 1 and "3 non-finite steps in a row" in result.stderr


def test_roll_back_to_a_checkpoint(tmp_path, data_dir, reference):
    out = tmp_path / "roll"
    train(out, data_dir, "--max_iters=12")
    train(out, data_dir, "--max_iters=12", f"--init_from={out / 'ckpt_4.pt'}")
    assert ckpts(out) == [4, 8, 12]  # the old 8 and 12 were moved aside, then written again
    moved = [p.name for p in out.rglob("ckpt_*.pt") if p.parent != out]
    assert sorted(moved) == ["ckpt_12.pt", "ckpt_8.pt"]
    assert_same_weights(out / "ckpt_12.pt", reference / "ckpt_12.pt")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["--n_lyer=3"], "unknown config key 'n_lyer'; did you mean n_layer"),
        (["--batch_size=two"], "batch_size must be int"),
        (["--data_dir=/nonexistent/data"], "/nonexistent/data"),
        (["--init_from=resume"], "has no checkpoint"),
        (["--dtype=float16"], "dtype must be"),
        (["--n_head=3"], "n_embd=32 must be a multiple of n_head=3"),
        (["--log_interval=0"], "log_interval must be at least 1, got 0"),
        (["--activation_checkpointing=some"], "activation_checkpointing must be one of none, selective, full or auto"),
        (["--activation_checkpointing=auto", "--memory_budget_gb=0.0001"], "nothing fits the 0.1 MB budget"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, data_dir, overrides, message):
    result = train(tmp_path / "bad", data_dir, "--max_iters=2", *overrides, check=False)
    assert result.returncode != 0
    assert message in result.stdout + result.stderr
    assert "Traceback" not in result.stderr


def test_odd_sized_bin_is_refused(tmp_path):
    (tmp_path / "train.bin").write_bytes(b"\x01\x00" * 100 + b"\x01")
    (tmp_path / "val.bin").write_bytes(b"\x01\x00" * 100)
    result = train(tmp_path / "out", tmp_path, "--max_iters=2", check=False)
    assert result.returncode == 1 and "train.bin" in result.stderr and "Traceback" not in result.stderr


def test_existing_run_guards(tmp_path, data_dir):
    out = tmp_path / "guard"
    train(out, data_dir, "--max_iters=4")
    result = train(out, data_dir, "--max_iters=8", "--init_from=scratch", check=False)
    assert result.returncode == 1 and "holds 1 checkpoint" in result.stderr
    result = train(out, data_dir, "--max_iters=8", "--n_embd=64", check=False)
    assert result.returncode == 1
    assert "n_embd=64 (set on the command line) conflicts with the checkpoint's n_embd=32" in result.stderr
    result = train(out, data_dir, "--max_iters=8", "--seed=7", check=False)  # another order of the data
    assert result.returncode == 1 and "the data order changed since the checkpoint" in result.stderr


@pytest.mark.e2e
def test_wandb_without_credentials_goes_offline_and_keeps_its_id(tmp_path, data_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    env.update(HOME=str(tmp_path), WANDB_DIR=str(tmp_path), OMP_NUM_THREADS="1")  # no ~/.netrc, no key
    result = python(["train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}",
                     f"--out_dir={tmp_path / 'out'}", "--wandb_log=True", "--max_iters=2"], env=env)
    assert result.returncode == 0, result.stderr
    assert "no wandb credentials" in result.stdout and "logging offline" in result.stdout
    run_id = torch.load(tmp_path / "out" / "ckpt_2.pt", weights_only=True)["wandb_run_id"]
    assert run_id and list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    resumed = python(["train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}",  # the same run goes on
                      f"--out_dir={tmp_path / 'out'}", "--wandb_log=True", "--max_iters=6"], env=env)
    assert resumed.returncode == 0, resumed.stderr
    state = torch.load(tmp_path / "out" / "ckpt_6.pt", weights_only=True)
    assert state["wandb_run_id"] == run_id  # its charts continue


def test_the_config_is_frozen_once_the_start_point_and_the_memory_choice_are_made():
    cfg = configurator.load_config(TINY).freeze()
    with pytest.raises(AttributeError, match="cfg.batch_size: the config is frozen"):
        cfg.batch_size = 2
    assert vars(cfg)["batch_size"] == 4 and "frozen" not in vars(cfg)  # what config.json and checkpoints save
    source = (REPO / "train.py").read_text()
    lines = source.splitlines()
    frozen_at = next(i for i, line in enumerate(lines, 1) if line.startswith("cfg.freeze()"))
    before = "\n".join(lines[:frozen_at])
    assert "checkpointer.start_point(cfg" in before and "cost.settle_run(" in before  # both decided before it
    assigned = [node.lineno for node in ast.walk(ast.parse(source)) if isinstance(node, (ast.Assign, ast.AugAssign))
                for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                for t in ast.walk(target) if isinstance(t, ast.Attribute) and getattr(t.value, "id", None) == "cfg"]
    assert assigned and max(assigned) < frozen_at  # the resolving assignments, all before the freeze


def test_auto_picks_what_fits_the_budget_and_trains_the_same(tmp_path, data_dir, reference):
    """A budget between what 'selective' and 'none' need at the config's micro-batch: auto takes
    selective, logs why, and the run's losses are those of the run without checkpointing."""
    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=VOCAB)
    with torch.device("meta"):
        model = GPT(config)
    peak = {p: cost.estimate(model, 4, cost.Setup("float32"), (p, -1))["total"] for p in ("none", "selective")}
    assert peak["selective"] < peak["none"]
    budget_gb = (peak["selective"] + peak["none"]) / 2 / 1e9
    out = tmp_path / "auto"
    train(out, data_dir, "--max_iters=12", "--activation_checkpointing=auto", f"--memory_budget_gb={budget_gb!r}")
    log = (out / "train.log").read_text()
    assert "auto: selective, micro-batch 4 x 3\n" in log
    assert f"memory: estimated peak {cost.size_text(peak['selective'])} of {cost.size_text(budget_gb * 1e9)}" in log
    assert losses(out, 1, 12) == losses(reference, 1, 12)


@pytest.mark.e2e
def test_a_resume_on_another_cpu_thread_count_says_it_is_not_bit_exact(tmp_path, data_dir):
    """A CPU's sums split over its threads, so their order is in the result: the resume says so (and how to
    make it exact) rather than promise a bit-exact continuation it cannot give."""
    out = tmp_path / "out"
    train(out, data_dir, "--max_iters=2", env={"OMP_NUM_THREADS": "1"}, process=True)
    resumed = train(out, data_dir, "--max_iters=4", env={"OMP_NUM_THREADS": "2"}, process=True).stdout
    assert "note: 1 CPU thread(s) saved this checkpoint and 2 continue it" in resumed
    assert "OMP_NUM_THREADS=1 makes it exact" in resumed
    again = train(out, data_dir, "--max_iters=6", env={"OMP_NUM_THREADS": "2"}, process=True).stdout
    assert "CPU thread(s) saved this checkpoint" not in again


def test_extending_a_run_whose_decay_had_begun_warns_that_it_heats_it_again(tmp_path, data_dir):
    """A WSD run resumed past its end with a later decay goes back to the peak rate: a re-heated annealed model,
    which the log says, with the way to extend a run that keeps it (a cooldown fork from before the decay)."""
    out, wsd = tmp_path / "out", ("--lr_schedule=wsd", "--lr_decay_fraction=0.5", "--eval_interval=0")
    train(out, data_dir, *wsd, "--max_iters=8", "--lr_decay_iters=8")
    resumed = train(out, data_dir, *wsd, "--max_iters=12", "--lr_decay_iters=12").stdout
    assert "note: the schedule changed since the checkpoint" in resumed
    assert "warning: at iter 8 the learning rate goes back up from 3.000e-04 to 1.441e-03" in resumed
    longer = tmp_path / "longer"  # extended while still at its peak: no warning
    train(longer, data_dir, *wsd, "--max_iters=2", "--lr_decay_iters=8")
    assert "warning: at iter" not in train(longer, data_dir, *wsd, "--max_iters=4", "--lr_decay_iters=12").stdout


def test_the_tokens_count_carries_on_across_a_resume_with_another_batch(tmp_path, data_dir):
    """metrics.jsonl's tokens are those trained so far: a resume on twice the accumulation adds twice a step.
    Another micro-batch size is said, and so is the val set it changes."""
    out = tmp_path / "out"
    train(out, data_dir, "--max_iters=4", "--eval_interval=0")
    resumed = train(out, data_dir, "--max_iters=6", "--eval_interval=0", "--gradient_accumulation_steps=6").stdout
    assert "note: micro-batch 4 x 3 -> 4 x 6 since the checkpoint: 24 sequences a step, not 12, from here on" in resumed
    per_step = 4 * 16  # TINY's batch_size x block_size, each accumulation step
    tokens = {r["iter"]: r["tokens"] for r in metrics.read(out, "step")}
    assert [tokens[n] for n in (4, 5, 6)] == [4 * 3 * per_step, (4 * 3 + 6) * per_step, (4 * 3 + 12) * per_step]
    # the same global batch split otherwise (as auto may on another device): said not to be bit-exact
    split = train(out, data_dir, "--max_iters=7", "--eval_interval=0", "--batch_size=8",
                  "--gradient_accumulation_steps=3").stdout
    assert "note: micro-batch 4 x 6 -> 8 x 3 since the checkpoint: the same batches summed in another order" in split
    # the val windows are eval_iters batches of batch_size: other ones, so the best and the forecast start again
    assert "note: the val set changed since the checkpoint (2 x 4 -> 2 x 8 windows" in split
    assert [(r["iter"], r["was"], r["now"]) for r in metrics.read(out, "val_set_changed")] == [(6, [2, 4], [2, 8])]
    same = train(out, data_dir, "--max_iters=8", "--eval_interval=0", "--batch_size=8",
                 "--gradient_accumulation_steps=3").stdout
    assert "note: micro-batch" not in same and "note: the val set" not in same
    # what the steps compute with, changed: said, as the run is then not the one that never stopped
    numerics = train(out, data_dir, "--max_iters=9", "--eval_interval=0", "--batch_size=8",
                     "--gradient_accumulation_steps=3", "--dropout=0.0", "--weight_decay=0.0").stdout
    assert ("note: dropout 0.1 -> 0.0, weight_decay 0.1 -> 0.0 since the checkpoint: the run goes on, no longer as "
            "one that never stopped would") in numerics


@pytest.mark.e2e  # a signal to a real process
def test_a_stop_with_checkpoint_interval_0_says_that_nothing_was_saved(tmp_path, data_dir):
    """checkpoint_interval=0 (ab.py's runs, benchmarks) saves nothing, even at a stop: the last line must not tell
    the user to "continue", since the same command starts the run again from its first step."""
    out = tmp_path / "out"
    job = subprocess.Popen([sys.executable, "train.py", "config/train_tiny.py", *TINY, f"--data_dir={data_dir}",
                            f"--out_dir={out}", "--checkpoint_interval=0", "--max_iters=100000",
                            "--lr_decay_iters=100000"], cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True)
    try:
        wait_for(out, "step", job, since=2)
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=60) == 0
        assert (out / "train.log").read_text().strip().splitlines()[-1].endswith(
            "completed steps; checkpoint_interval=0 saves nothing: the same command starts again from step 0")
        assert not list(out.glob("ckpt_*"))
    finally:
        job.kill()


@pytest.mark.e2e  # a signal during a real process's imports
@pytest.mark.parametrize("tool, sig", [("train.py", signal.SIGINT), ("scripts/ladder.py", signal.SIGINT),
                                       ("train.py", signal.SIGTERM)])
def test_a_sigint_while_torch_imports_is_one_line_even_where_it_started_ignored(tmp_path, tool, sig):
    """`python train.py ... &` in a script starts with SIGINT ignored, which Python keeps, so a kill -INT in the
    seconds torch takes to import was lost; in a terminal, Ctrl-C there was a KeyboardInterrupt traceback. Now
    both are one line and exit status 130, and nothing is written; the ladder's too, and a SIGTERM's (143), which
    ended the process without a word. (sample.py's: test_sample.py.)"""
    out = tmp_path / "out"
    argv, says = {"train.py": (["config/train_tiny.py", f"--out_dir={out}"],
                               "train.py: stopped by {} before training began, with nothing to save"),
                  "scripts/ladder.py": (["config/ladder_tiny.py", "--recipe", "a: --optimizer=adamw", "--out", out],
                                        "ladder.py: stopped by {} before any run began")}[tool]
    job = subprocess.Popen([sys.executable, tool, *argv], cwd=REPO,
                           stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    try:
        deadline = time.time() + 60
        while not sigint_heard(job.pid):  # the tool's first lines ran: torch is still importing, for seconds
            assert time.time() < deadline and job.poll() is None, job.communicate()
            time.sleep(0.01)
        job.send_signal(sig)
        stdout, stderr = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 128 + sig and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(says.format(sig.name)), stderr
    assert not out.exists()
