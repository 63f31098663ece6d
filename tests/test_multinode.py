"""Past one node, on the CPU with gloo: HSDP over 2 "nodes" of 2 processes (two torchrun invocations
meeting at a c10d rendezvous on 127.0.0.1) matches one process and resumes as FSDP on 2 (test_hsdp.py's
end-to-end test too); a hung rank ends the job within the collective timeout, named in train.log; and the
pieces (the memory estimate, the config's rules, the restart notes) in-process."""
import datetime
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch.distributed as dist

import configurator
from conftest import REPO, torchrun_command
from test_distributed import ARGS, ENV, assert_close, final_weights, losses, run
from test_memory import meta_model
from trainer import cost, elastic, metrics


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_nodes(out_dir, data_dir, *overrides):
    """4 processes as 2 nodes x 2, each node its own torchrun, as the docs' multi-node line runs them."""
    endpoint = f"127.0.0.1:{free_port()}"
    command = torchrun_command(
        ["--nnodes=2", "--nproc_per_node=2", "--rdzv-backend=c10d", f"--rdzv-endpoint={endpoint}", "--rdzv-id=test"],
        ["train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}", f"--out_dir={out_dir}", *overrides])
    logs = [Path(f"{out_dir}.node{k}.txt") for k in range(2)]  # files, not pipes: an undrained pipe can block a node
    files = [log.open("w") for log in logs]
    nodes = [subprocess.Popen(command, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=ENV) for f in files]
    try:
        for node in nodes:
            node.wait(timeout=300)
    finally:
        for node, f in zip(nodes, files):
            node.kill()  # a node left running (the other timed out) would hold the test's port and files
            f.close()
    outputs = [log.read_text() for log in logs]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]


@pytest.mark.e2e
def test_hsdp_on_two_nodes_matches_one_process_and_resumes_as_fsdp_on_two(tmp_path, data_dir):
    """2 micro-batches per rank, so the all-reduce skipped on the first counts (parallel.sync_gradients);
    the shard size is the node's, 2. Then FSDP over 2 ranks takes the 2-D checkpoint over (DCP reshards
    onto one 1-D mesh) and goes on as one process does."""
    steps = ["--gradient_accumulation_steps=8", "--checkpoint_interval=2", "--eval_interval=0"]
    run(tmp_path / "one", data_dir, *steps, "--max_iters=4")
    one = losses(tmp_path / "one")
    two_nodes(tmp_path / "hsdp", data_dir, *steps, "--max_iters=2", "--strategy=hsdp")
    log = (tmp_path / "hsdp" / "train.log").read_text()
    assert "(4 processes, hsdp)" in log and "sharded over 2 processes, replicated 2 times" in log
    assert losses(tmp_path / "hsdp") == pytest.approx(one[:2], abs=2e-4)
    assert_close(final_weights(tmp_path / "hsdp", 2), final_weights(tmp_path / "one", 2))
    resumed = run(tmp_path / "hsdp", data_dir, *steps, "--max_iters=4", "--strategy=fsdp", nproc=2)
    assert "resuming after 2 completed steps" in resumed.stdout
    assert losses(tmp_path / "hsdp") == pytest.approx(one, abs=2e-4)
    assert_close(final_weights(tmp_path / "hsdp", 4), final_weights(tmp_path / "one", 4))


@pytest.mark.e2e
def test_a_hung_rank_stops_the_job_within_the_collective_timeout_and_is_named(tmp_path, data_dir):
    """Rank 1 hangs before step 3's all-reduce: rank 0 waits the 6 s timeout, holds the roll call (at most
    6 s more here), names rank 1 and exits; torchrun then ends rank 1. (6 s, not less: the timeout also bounds
    the process group's start-up, where one rank may reach it seconds after the other on a loaded CPU.)"""
    out = tmp_path / "hang"
    t0 = time.time()
    result = run(out, data_dir, "--max_iters=8", "--collective_timeout_minutes=0.1", nproc=2, check=False,
                 env=dict(ENV, TRAINER_FAULTS="hang@3"))
    log = (out / "train.log").read_text()  # what the person reads
    assert result.returncode != 0 and time.time() - t0 < 90
    assert [r["iter"] for r in metrics.read(out, "step")] == [1, 2]  # step 3 never finished
    assert "collective_timeout_minutes (0:00:06); rank 1 did not answer" in log
    assert "injected" not in log  # nothing else ended it


def test_hsdp_memory_is_fsdp_over_one_shard_group():
    model = meta_model(n_layer=4, n_head=4, n_embd=256, block_size=128, vocab_size=512)
    hsdp = cost.estimate(model, 4, cost.Setup(gpus=16, strategy="hsdp", hsdp_shard_size=8))
    assert hsdp == cost.estimate(model, 4, cost.Setup(gpus=8, strategy="fsdp"))
    assert hsdp["weights"] < cost.estimate(model, 4, cost.Setup(gpus=16))["weights"] / 4


def test_config_refuses_a_shard_size_that_does_not_divide_the_processes():
    cfg = configurator.load_config(["--strategy=hsdp", "--hsdp_shard_size=3", "--gradient_accumulation_steps=8"])
    assert "hsdp_shard_size=3 must divide the 4 processes" in configurator.check(cfg, 4, True)
    cfg.hsdp_shard_size = 2
    assert configurator.check(cfg, 4, True) is None


def test_a_restart_says_what_ended_the_attempt_before(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "1")
    monkeypatch.setenv("TORCHELASTIC_MAX_RESTARTS", "3")
    assert "restart 1 of 3; the attempt before ended with: no rank left a message: one was killed (kill -9" in \
        elastic.restart_line(str(tmp_path))
    monkeypatch.setenv("WORLD_SIZE", "2")
    elastic.leave_note(str(tmp_path), 1, "out of memory")
    assert elastic.restart_line(str(tmp_path)).endswith("ended with: rank 0 left no line: killed (kill -9, the OOM "
        "killer, or torchrun stopping it after another rank failed) or its node went away, torchrun's output names "
        "its exit code; then rank 1: out of memory")
    assert not (tmp_path / elastic.FAILURES).exists()  # each note is told once
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "0")
    assert elastic.restart_line(str(tmp_path)) is None
    monkeypatch.setenv("TORCHELASTIC_USE_AGENT_STORE", "True")
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1" in elastic.restart_problem()


def test_nccl_settings_fill_in_only_what_the_user_left_unset(tmp_path, monkeypatch):
    for key in elastic.NCCL_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "900")
    line = elastic.nccl_settings(str(tmp_path))
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in line and "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=900" in line
    assert os.environ["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == str(tmp_path / "nccl_trace_rank_")
    assert elastic.timed_out(RuntimeError("Timed out waiting 3000ms for recv operation to complete"))
    assert elastic.explain_timeout(RuntimeError("CUDA out of memory"), None, datetime.timedelta(minutes=1)) is None
    assert not dist.is_initialized()  # the roll call is for train.py's process group, never started here


def test_plan_for_a_cluster_prices_each_strategys_traffic(capsys):
    """6.7B on 4 nodes x 8: DDP all-reduces fp32 gradients once per step, 2(n-1)/n x 4P per GPU between
    nodes; HSDP sends 1/8 of that once per step between nodes (its shards' gradients), the rest inside."""
    sys.path.insert(0, str(REPO / "scripts"))
    import plan
    plan.main([str(REPO / "config" / "train_gpt3_6b.py"), "--gpu", "mi300x", "--nodes", "4", "--interconnect", "50",
               "--strategy=hsdp", "--json"])
    cluster = json.loads(capsys.readouterr().out)["cluster"]
    rows, p, micro = {r["strategy"]: r for r in cluster["strategies"]}, 6_657_150_976, cluster["micro_batches_per_gpu"]
    assert micro == 160 // 32 and list(rows) == ["ddp", "fsdp", "hsdp"]
    assert rows["ddp"]["internode_gb"] == pytest.approx(2 * 31 / 32 * 4 * p / 1e9)
    assert rows["ddp"]["comm_seconds"] == pytest.approx(rows["ddp"]["internode_gb"] / (50 * 0.8))
    assert rows["hsdp"]["internode_gb"] == pytest.approx(2 * 3 / 4 * 4 * p / 8 / 1e9)
    assert rows["fsdp"]["internode_gb"] > 5 * rows["hsdp"]["internode_gb"] and rows["fsdp"]["intranode_gb"] == 0
    assert rows["hsdp"]["memory_gb"] > rows["fsdp"]["memory_gb"]  # shards over 8 GPUs, not 32
    assert all(r["days"] * 24 * 2 * 32 == pytest.approx(r["cost_usd"]) for r in rows.values())
    assert rows["hsdp"]["hidden"] == (rows["hsdp"]["comm_seconds"] <= rows["hsdp"]["compute_seconds"])
