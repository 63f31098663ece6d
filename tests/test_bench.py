"""scripts/bench.py on the CPU with a tiny model: a plain run against the reference loop, a small
sweep, the sweep's order and skipping (with a stand-in for train.py), how the run's metrics.jsonl step
records and train.py's failures are read, the step of the config's real size, --save_resume's times (its runs'
save and start records), and the memory rule. Every train.py launch costs seconds, so there are few of them
(tests/test_gpu_check.py runs gpu_check.sh)."""
import json
import sys
from types import SimpleNamespace

import pytest

from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import bench  # noqa: E402
import configurator  # noqa: E402
from trainer import checkpoint, cost, metrics  # noqa: E402

TINY = ["config/train_tiny.py", "--n_layer=2", "--n_head=2", "--n_embd=32", "--block_size=32", "--vocab_size=64",
        "--device=cpu", "--dtype=float32"]
QUICK = ["--steps=2", "--warmup=1"]


@pytest.fixture(autouse=True)
def one_thread_in_the_repo(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the train.py subprocesses inherit it
    monkeypatch.chdir(REPO)  # config paths are relative to the repo


@pytest.mark.e2e
def test_plain_run_against_the_reference_as_json(capsys):
    bench.main([*TINY, *QUICK, "--json", "--reference"])
    out = capsys.readouterr()
    report = json.loads(out.out)  # stdout holds the JSON only
    [setting] = report["settings"]
    assert setting["status"] == "ok" and setting["fits"] and setting["steps"] == 2
    assert setting["tokens_per_s"] > 0 and setting["step_ms"] > 0 and setting["peak_memory_gb"] > 0
    assert setting["mfu"] is None and setting["memory_kind"] == "host RSS"  # no peak FLOPS for a CPU
    assert setting["fits"] and setting["compared"] == "allocated"  # no reserved peak on a CPU
    assert setting["measured"]["optimizer_step_ms"] > 0 and report["config_tokens_per_step"] == 8 * 2 * 32
    assert report["best"] == setting and report["budget"]["source"] == "the machine's memory"
    assert report["grad_accum"] == 2 and "optimizer step" in report["throughput"]
    assert report["reference"]["tokens_per_s"] > 0 and report["reference"]["ratio"] > 0
    assert "train.py / plain loop:" in out.err and "batch 8, recompute none" in out.err


@pytest.mark.e2e
def test_sweep_names_the_fastest_setting_and_its_command(capsys):
    bench.main([*TINY, *QUICK, "--sweep", "--batch_sizes=2", "--recompute=none,all"])  # each setting a train.py
    out = capsys.readouterr().out
    rows = [line.split("  ")[0] for line in out.splitlines() if line.startswith("batch ")]
    assert rows == ["batch 2, recompute all", "batch 2, recompute none"]  # the sweep's order: most recompute first
    assert "budget (the machine's memory)" in out
    assert out.count("full checkpointing: ") == 1 and "x the step time of none at batch 2" in out
    assert "fastest that fits: batch " in out
    command = [line.strip() for line in out.splitlines() if line.strip().startswith("python train.py ")]
    # the config's global batch (8 x 2 sequences) kept with the new micro-batch
    assert command and " ".join(TINY) in command[0] and "--gradient_accumulation_steps=" in command[0]


def fake_runs(memory_limit, failing=()):
    """A stand-in for train.py on a 4-block model: memory grows with the batch and the blocks not
    recomputed; `failing` settings time out. Returns the runner and the list of settings it ran."""
    ran = []

    def run(batch_size, policy):
        ran.append((batch_size, policy[1] if policy[0] == "full" else policy[0]))
        memory = batch_size * (1 + 4 - bench.recomputed_blocks(policy, 4))
        status = "timeout" if ran[-1] in failing else "ok" if memory <= memory_limit else "oom"
        return dict(bench.describe(batch_size, policy, 4), status=status, fits=status == "ok", message=status)

    return run, ran


FOUR_BLOCKS = configurator.load_config([str(REPO / TINY[0]), *TINY[1:], "--n_layer=4"])
NONE, HALF, ALL = ("none", -1), ("full", 2), ("full", -1)


def test_sweep_order_skips_what_cannot_fit():
    run, ran = fake_runs(memory_limit=10)
    results = list(bench.sweep(run, [1, 2, 4, 8], [NONE, HALF, ALL], FOUR_BLOCKS))
    # most recompute first; past an OOM, its larger batches and the same batch with less recompute are skipped
    assert ran == [(1, -1), (2, -1), (4, -1), (8, -1), (1, 2), (2, 2), (4, 2), (1, "none"), (2, "none")]
    assert [r["status"] for r in results] == ["ok"] * 6 + ["oom", "skipped", "ok", "ok", "skipped", "skipped"]
    assert results[10]["message"] == "batch 4 did not fit with more recompute"
    # a timeout ends its own policy only: memory says nothing about the others
    run, ran = fake_runs(memory_limit=100, failing=[(2, -1)])
    list(bench.sweep(run, [1, 2, 4], [NONE, ALL], FOUR_BLOCKS))
    assert ran == [(1, -1), (2, -1), (1, "none"), (2, "none"), (4, "none")]


def test_selective_sorts_between_full_and_none():
    order = sorted([NONE, ("selective", -1), ALL], key=lambda p: bench.kept_memory(FOUR_BLOCKS, p))
    assert order == [ALL, ("selective", -1), NONE]


def test_step_records_are_read_past_the_warmup(tmp_path):
    record = metrics.Metrics(tmp_path)
    gpu = {"allocated": 130.2e9, "reserved": 131.0e9, "host_rss": 20e9}
    record("start", 0, batch_size=8, activation_checkpointing="none")
    record("step", 1, tokens_per_sec=10_000.0, mfu=0.01, hfu=0.013, optimizer_step_time=0.9, peak_memory=gpu)
    record("step", 2, tokens_per_sec=16_384.0, mfu=0.45, hfu=0.60, optimizer_step_time=0.1,
           peak_memory=dict(gpu, allocated=131.0e9))
    record("nonfinite", 3, loss=None)  # a skipped step has no step record
    record("step", 4, tokens_per_sec=32_768.0, mfu=0.50, hfu=0.66, optimizer_step_time=0.3,
           peak_memory=dict(gpu, allocated=131.5e9, reserved=133.0e9))
    steps = bench.timed_steps(tmp_path, warmup=1)
    assert [s["iter"] for s in steps] == [2, 4]
    summary = bench.summarize(steps, tokens_per_step=32768, config_tokens_per_step=32768)
    assert summary["step_ms"] == pytest.approx(1500) and summary["tokens_per_s"] == pytest.approx(32768 / 1.5)
    assert summary["mfu"] == pytest.approx(0.475) and summary["hfu"] == pytest.approx(0.63)
    assert summary["measured"]["optimizer_step_ms"] == pytest.approx(200)
    assert summary["peak_memory_gb"] == 131.5 and summary["memory_kind"] == "GPU allocated"
    assert summary["peak_reserved_gb"] == 133.0 and summary["peak_host_gb"] == 20.0


def test_the_step_of_the_configs_size_amortises_the_optimizer_step():
    """4 micro-batches of 8,192 tokens timed at 4.2 s a step, 0.2 s of it the optimizer step: a micro-batch
    takes 1 s, so a real step of 160 micro-batches takes 160 s + 0.2 s."""
    steps = [{"tokens_per_sec": 4 * 8192 / 4.2, "optimizer_step_time": 0.2, "mfu": 0.40, "hfu": None,
              "peak_memory": {"allocated": 100e9, "reserved": 110e9, "host_rss": 5e9}}]
    summary = bench.summarize(steps, tokens_per_step=4 * 8192, config_tokens_per_step=160 * 8192)
    assert summary["step_ms"] == pytest.approx(160_200) and summary["tokens_per_s"] == pytest.approx(160 * 8192 / 160.2)
    assert summary["mfu"] == pytest.approx(0.40 * (160 / 160.2) / (4 / 4.2)) and summary["hfu"] is None
    assert summary["measured"]["tokens_per_s"] == pytest.approx(4 * 8192 / 4.2)


def test_save_resume_times_are_the_runs_own_records(tmp_path):
    """--save_resume's save_s and load_s are the first run's save record's seconds and the resumed run's start
    record's load_seconds, not the launches' wall time (a stand-in for train.py writes the records and a
    1 MB checkpoint; takes 5 s and 7 s of wall time)."""
    cfg = configurator.load_config(TINY)
    runs = bench.Bench(SimpleNamespace(grad_accum=2, time_limit=None, timeout=None, warmup=1, steps=2), TINY, cfg,
                       str(tmp_path), None)
    launched = []

    def train(train_args):
        out_dir = [a.split("=", 1)[1] for a in train_args if a.startswith("--out_dir=")][-1]
        record = metrics.Metrics(out_dir)
        if "--init_from=resume" in train_args:
            record("start", 1, load_seconds=0.25)
        else:
            record("start", 0, load_seconds=None)
            with open(checkpoint.checkpoint_path(out_dir, 1), "wb") as f:
                f.write(b"\0" * 1_000_000)
            record("save", 1, seconds=0.5, asynchronous=False)
        launched.append(train_args)
        return "ok", None, 5.0 + 2 * len(launched[1:])

    runs.launch = train
    result = runs.save_resume()
    assert "--checkpoint_async=False" in launched[0] and "--init_from=resume" in launched[1]
    assert (result["save_s"], result["load_s"], result["save_wall_s"], result["load_wall_s"]) == (0.5, 0.25, 5.0, 7.0)
    assert result["checkpoint_gb"] == 0.001 and result["save_gb_per_s"] == 0.002 and result["load_gb_per_s"] == 0.004


@pytest.mark.parametrize("reserved, compared, fits", [(95.0, "reserved", True), (None, "allocated", False)])
def test_measured_peaks_are_judged_by_the_memory_rule(reserved, compared, fits):
    """cost.fits on a 96 GB budget: a 95 GB reserved peak as is; a 95 GB allocated one with the margin."""
    judge = bench.Bench.judge(SimpleNamespace(budget=cost.Budget(96e9, 0.0, 100e9, "free after start-up")),
                              {"peak_memory_gb": 95.0, "peak_reserved_gb": reserved})
    assert judge["fits"] == fits and judge["compared"] == compared
    if not fits:
        assert judge["status"] == "over budget" and judge["message"].startswith("allocated peak 95.0 GB needs ")
        assert judge["message"].endswith("96.0 GB budget (free after start-up)")


@pytest.mark.parametrize("stderr, expected", [
    ("Traceback (most recent call last):\ntorch.OutOfMemoryError: HIP out of memory. Tried to allocate 2 GiB",
     ("oom", "out of memory")),
    ("W1207 a library's warning\nerror: weights are not finite after step 1; not saving",
     ("error", "weights are not finite after step 1; not saving")),
    ("error: the estimated peak is 95 GB, over the 80 GB budget: set ignore_memory_estimate=True to try anyway",
     ("oom", "the estimated peak is 95 GB, over the 80 GB budget: set ignore_memory_estimate=True to try anyway")),
    ("config error: command line: unknown config key 'n_lyer'\n",
     ("error", "config error: command line: unknown config key 'n_lyer'")),
    ("", ("oom", "out of memory: killed by SIGKILL (status -9), most likely the kernel's out-of-memory killer")),
])
def test_failures_read_as_one_line(stderr, expected):
    assert bench.failure(-9 if not stderr else 1, stderr) == expected
    assert bench.failure(3, "") == ("error", "exit status 3, with no error line (its train.log may say more)")


def test_bad_config_is_one_line_before_any_run(capsys):
    with pytest.raises(SystemExit) as e:
        bench.main([*TINY, "--n_lyer=3"])
    assert e.value.code == 2 and "unknown config key 'n_lyer'" in capsys.readouterr().err


def test_the_gpu_budget_probe_runs_in_a_process_of_its_own():
    """The child a GPU run asks for its budget (bench.BUDGET_PROBE) is code in a string: run it, here on the CPU,
    so a renamed module cannot break it unseen."""
    import torch
    from conftest import python
    result = python(["-c", bench.BUDGET_PROBE, REPO, "cpu", "0"])
    assert result.returncode == 0, result.stderr
    probed, here = json.loads(result.stdout), cost.device_budget(torch.device("cpu"), 0.0)
    assert probed["source"] == here.source and probed["bytes"] > 0
