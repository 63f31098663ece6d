"""train.py under torchrun with 2 CPU processes (gloo): DDP and FSDP2 match one process,
sharded checkpoints resume exactly, convert between world sizes, and survive SIGTERM.

Each launch costs seconds on 2 cores, so the runs are few and shared between tests, and the one-process
runs they compare against (and convert_checkpoint.py) run in this interpreter."""
import os
import shutil
import signal
import subprocess

import pytest
import torch

from trainer import metrics
from conftest import REPO, run_here, torchrun, torchrun_command, wait_for
from test_train import TINY, ckpts

pytestmark = pytest.mark.e2e  # torchrun and its processes are the point

# no dropout: masks differ between one process and two, and these tests compare across them
ARGS = [a for a in TINY if not a.startswith(("--dropout", "--gradient_accumulation_steps"))] + [
    "--dropout=0.0", "--gradient_accumulation_steps=4", "--checkpoint_interval=4"]
ENV = dict(os.environ, OMP_NUM_THREADS="1")


def run(out_dir, data_dir, *overrides, nproc=1, check=True, env=ENV, restarts=0):
    """train.py here in this interpreter (one process, 1 thread as a worker has), or under torchrun
    with nproc workers."""
    script = ["train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}", f"--out_dir={out_dir}", *overrides]
    if nproc > 1:
        launcher = ["--standalone", f"--nproc_per_node={nproc}", f"--max-restarts={restarts}"]
        result = torchrun(launcher, script, env=env)
    else:
        result = run_here(script, env={k: v for k, v in env.items() if os.environ.get(k) != v})
    if check and result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}:\n{result.stdout}\n{result.stderr[-3000:]}")
    return result


def losses(out_dir):
    """The train losses in iteration order, from metrics.jsonl (a resume's steps replace earlier ones)."""
    return [r["loss"] for r in metrics.latest_per_iter(metrics.read(out_dir, "step"))]


def final_weights(out_dir, n):
    """The model of checkpoint n, whichever form it has, loaded as sample.py would."""
    from trainer import checkpoint
    from model import GPT, GPTConfig

    state = checkpoint.load_checkpoint(str(out_dir / (f"ckpt_{n}" if (out_dir / f"ckpt_{n}").is_dir()
                                                      else f"ckpt_{n}.pt")), log=lambda m: None)
    model = GPT(GPTConfig(**state["model_args"]))
    checkpoint.restore(state, model)
    return model.state_dict()


def assert_close(a, b, exact=False):
    assert a.keys() == b.keys()
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), k
        else:
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5, msg=k)


@pytest.fixture(scope="module")
def single(tmp_path_factory, data_dir):
    out = tmp_path_factory.mktemp("single")
    run(out, data_dir, "--max_iters=8")
    return out


@pytest.fixture(scope="module")
def fsdp(tmp_path_factory, data_dir):
    """A 2-process FSDP2 run to 8 that resumed from ckpt_4/ once: under torchrun --max-restarts=1, rank 1
    crashes in step 6 of the first attempt, after the asynchronous save of step 4, and the restart resumes
    (one launch, two generations of workers). torchrun's output is in stdout.txt next to the run's folder."""
    out = tmp_path_factory.mktemp("fsdp") / "run"
    result = run(out, data_dir, "--max_iters=8", "--strategy=fsdp", "--checkpoint_async=True", nproc=2, restarts=1,
                 env=dict(ENV, TRAINER_FAULTS="crash@6", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"))
    (out.parent / "stdout.txt").write_text(result.stdout)
    return out


def test_ddp_matches_one_process(tmp_path, data_dir, single):
    out = tmp_path / "ddp"
    result = run(out, data_dir, "--max_iters=8", nproc=2)
    assert "per GPU" in result.stdout
    assert losses(out) == pytest.approx(losses(single), abs=2e-4)
    assert_close(final_weights(out, 8), final_weights(single, 8))


def test_ddp_with_bf16_weights_matches_one_process(tmp_path, data_dir):
    """DDP cannot reduce fp32 gradients of bf16 weights, so train.py averages them itself, and every rank
    rounds its replica alike; one process and two then follow the same path, to bf16's precision."""
    bf16 = ["--dtype=bfloat16", "--master_weights=bfloat16", "--n_embd=64", "--block_size=64", "--max_iters=6"]
    run(tmp_path / "one", data_dir, *bf16)
    run(tmp_path / "two", data_dir, *bf16, nproc=2)
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), abs=2e-2)
    one, two = final_weights(tmp_path / "one", 6), final_weights(tmp_path / "two", 6)
    for k in one:
        torch.testing.assert_close(two[k], one[k], rtol=0.05, atol=0.02, msg=k)


def test_ddp_with_offload_matches_one_process_without(tmp_path, data_dir, single):
    """Each rank steps its own host copy of AdamW on the all-reduced gradients: the replicas stay equal."""
    out = tmp_path / "offload"
    run(out, data_dir, "--max_iters=8", "--optimizer_offload=True", nproc=2)
    assert losses(out) == pytest.approx(losses(single), abs=2e-4)
    assert_close(final_weights(out, 8), final_weights(single, 8))


def test_low_bit_adamw_shards_under_fsdp_and_resumes_exactly(tmp_path, data_dir):
    """One launch: rank 1 crashes in step 6, after the save of step 4, and the restart's 2 FSDP ranks resume
    the sharded 8-bit state (torchrun --max-restarts=1, as the fsdp fixture; no second torchrun to start).
    It ends bit-exact with an uninterrupted FSDP run, and steps as one process's 8-bit AdamW does. torchao
    quantizes a moment by its shard's size (4096 values or more): 128 wide, every tensor it quantizes whole
    keeps 4096 a shard, so both quantize the same tensors (docs/optimizers.md)."""
    low_bit = ["--n_embd=128", "--max_iters=8", "--optimizer=adamw8bit"]
    resumed = run(tmp_path / "run", data_dir, *low_bit, "--strategy=fsdp", nproc=2, restarts=1,
                  env=dict(ENV, TRAINER_FAULTS="crash@6", TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"))
    assert "resuming after 4" in resumed.stdout and sorted(p.name for p in (tmp_path / "run").glob("ckpt_*")) == \
        ["ckpt_4", "ckpt_8"]
    two = final_weights(tmp_path / "run", 8)
    run(tmp_path / "uninterrupted", data_dir, *low_bit, "--strategy=fsdp", nproc=2)
    assert_close(two, final_weights(tmp_path / "uninterrupted", 8), exact=True)
    run(tmp_path / "one", data_dir, *low_bit)
    run(tmp_path / "fp32", data_dir, *low_bit, "--optimizer=adamw")
    one, full = final_weights(tmp_path / "one", 8), final_weights(tmp_path / "fp32", 8)
    # a moment a reduction order's last bit rounds to the next code moves its weight by up to ~lr/5, so not
    # close everywhere: on average 200x nearer one process's 8-bit AdamW than 8-bit is to fp32 AdamW (2026-12-07)
    mean_difference = lambda a, b: sum(float((a[k] - b[k]).abs().sum()) for k in a) / sum(a[k].numel() for k in a)
    assert mean_difference(two, one) < mean_difference(one, full) / 50
    assert losses(tmp_path / "run") == pytest.approx(losses(tmp_path / "one"), abs=1e-3)


def test_fsdp_matches_one_process_and_resumes_exactly(tmp_path, data_dir, single, fsdp):
    """The fixture's run, resumed from ckpt_4/ after a crash, ends bit-exact with an uninterrupted one."""
    assert ckpts(fsdp) == [] and sorted(p.name for p in fsdp.glob("ckpt_*")) == ["ckpt_4", "ckpt_8"]
    assert losses(fsdp) == pytest.approx(losses(single), abs=2e-4)
    assert_close(final_weights(fsdp, 8), final_weights(single, 8))
    uninterrupted = tmp_path / "fsdp_uninterrupted"
    run(uninterrupted, data_dir, "--max_iters=8", "--strategy=fsdp", nproc=2)
    assert_close(final_weights(fsdp, 8), final_weights(uninterrupted, 8), exact=True)


def test_ddp_with_dropout_resumes_each_ranks_masks_exactly(tmp_path, data_dir):
    """Each rank's RNG comes back as its own: with dropout on, 2 DDP processes stopped at 4 and resumed end
    bit-exact with 2 that never stopped (with dropout off, ranks restored with each other's RNGs would pass)."""
    uninterrupted, resumed = tmp_path / "uninterrupted", tmp_path / "resumed"
    run(uninterrupted, data_dir, "--max_iters=8", "--dropout=0.1", nproc=2)
    run(resumed, data_dir, "--max_iters=4", "--dropout=0.1", nproc=2)
    run(resumed, data_dir, "--max_iters=8", "--dropout=0.1", nproc=2)
    assert losses(resumed) == losses(uninterrupted)
    assert_close(final_weights(resumed, 8), final_weights(uninterrupted, 8), exact=True)


def test_world_size_changes_both_ways_and_a_cut_short_checkpoint_is_skipped(tmp_path, data_dir, single, fsdp):
    # sharded by 2 processes with max_iters=8, resumed by 1 to 10 (lr_decay_iters is fixed, so step 8 is the same)
    out = tmp_path / "two_to_one"
    shutil.copytree(fsdp / "ckpt_4", out / "ckpt_4")
    result = run(out, data_dir, "--max_iters=10")
    assert "resuming after 4 completed steps" in result.stdout and "not bit-exact" in result.stdout
    assert_close(final_weights(out, 8), final_weights(single, 8))
    assert ckpts(out) == [8, 10]
    # one process's .pt, resumed by 2 FSDP processes past a newer sharded checkpoint cut short, which is skipped
    out = tmp_path / "one_to_two"
    out.mkdir()
    shutil.copy(single / "ckpt_4.pt", out)
    shutil.copytree(fsdp / "ckpt_8", out / "ckpt_8")
    shard = next((out / "ckpt_8").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    result = run(out, data_dir, "--max_iters=8", "--strategy=fsdp", nproc=2)
    assert "cut short" in result.stdout and "resuming after 4 completed steps" in result.stdout
    assert_close(final_weights(out, 8), final_weights(single, 8))


def test_sigterm_to_torchrun_leaves_a_complete_checkpoint_that_resumes_to_a_new_max_iters(tmp_path, data_dir):
    out = tmp_path / "sigterm"
    command = torchrun_command(["--standalone", "--nproc_per_node=2"], [
        "train.py", "config/train_tiny.py", *ARGS, f"--data_dir={data_dir}", f"--out_dir={out}", "--strategy=fsdp",
        "--max_iters=100000", "--checkpoint_interval=100000"])
    proc = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    wait_for(out, "step", proc, since=2)
    proc.send_signal(signal.SIGTERM)
    stdout, _ = proc.communicate(timeout=120)
    assert "stopped by SIGTERM after" in stdout
    [folder] = out.glob("ckpt_*")
    n = int(folder.name[5:])
    assert n >= 2 and final_weights(out, n)
    # the stopped run, given an end it can reach, continues under FSDP and saves there
    result = run(out, data_dir, "--strategy=fsdp", f"--max_iters={n + 2}", "--checkpoint_interval=100000", nproc=2)
    assert f"resuming after {n} completed steps" in result.stdout
    assert final_weights(out, n + 2)


def test_convert_between_sharded_and_single_file(tmp_path, fsdp):
    def convert(source, dest):
        result = run_here(["scripts/convert_checkpoint.py", source, dest])
        assert result.returncode == 0, result.stderr

    convert(fsdp / "ckpt_8", tmp_path / "single")
    assert ckpts(tmp_path / "single") == [8]
    convert(tmp_path / "single" / "ckpt_8.pt", tmp_path / "sharded")
    assert (tmp_path / "sharded" / "ckpt_8" / ".metadata").is_file()
    for out in (tmp_path / "single", tmp_path / "sharded"):
        assert_close(final_weights(out, 8), final_weights(fsdp, 8), exact=True)
    from trainer import checkpoint

    state = checkpoint.load_checkpoint(str(tmp_path / "single" / "ckpt_8.pt"), log=lambda m: None)
    assert state["iter_num"] == 8 and len(state["rng"]) == 2 and "exp_avg" in next(iter(state["optimizer"]["state"].values()))
    from trainer import runlock
    (tmp_path / "a_file").write_text("")
    live = runlock.hold(str(tmp_path / "live"))  # a run training there
    for dest, says in ((tmp_path / "single", "holds checkpoints already (ckpt_8.pt): convert into a new folder"),
                       (tmp_path / "a_file", "a_file is a file, not a folder: give the folder it lies in"),
                       (tmp_path / "live", "is in use by another")):
        result = run_here(["scripts/convert_checkpoint.py", fsdp / "ckpt_8", dest])
        [line] = result.stderr.strip().splitlines()
        assert result.returncode == 1 and line.startswith("error: ") and says in line, line
    live.close()


def test_fsdp_in_bf16_keeps_one_gpus_numerics(tmp_path, data_dir):
    """Under bf16, FSDP2 blocks gather bf16 matmul weights but keep LayerNorms, embeddings and the
    residual stream in fp32, as bf16 autocast does on one GPU (trainer/parallel.py), and reduce-scatter
    fp32 gradients into fp32 shards: the losses track one process's bf16 run to float reduction order
    (FSDP's default policy, a bf16 residual stream, needed 2% here), the saved weights stay fp32.
    Selective checkpointing runs under it."""
    bf16 = ["--dtype=bfloat16", "--max_iters=4", "--activation_checkpointing=selective"]
    one = run(tmp_path / "one", data_dir, *bf16)
    two = run(tmp_path / "two", data_dir, *bf16, "--strategy=fsdp", nproc=2)
    assert one.returncode == two.returncode == 0
    assert losses(tmp_path / "two") == pytest.approx(losses(tmp_path / "one"), rel=5e-4)
    weights = final_weights(tmp_path / "two", 4)
    assert all(w.dtype == torch.float32 for w in weights.values())


def test_export_of_an_fsdp_folder_loads_in_transformers(tmp_path, fsdp):
    from trainer import hf
    from model import GPT, GPTConfig
    from transformers import AutoModelForCausalLM

    hf.export(str(fsdp / "ckpt_8"), str(tmp_path / "hf"), torch.float32, log=lambda m: None)
    state = torch.load(fsdp / "ckpt_8" / "trainer_state.pt", weights_only=True)
    model = GPT(GPTConfig(**state["model_args"])).eval()
    model.load_state_dict(final_weights(fsdp, 8))
    reference = AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    x = torch.randint(0, state["model_args"]["vocab_size"], (2, 16))
    with torch.no_grad():
        assert (model(x, every_position=True)[0] - reference(x).logits).abs().max() <= 1e-4


def test_a_crashed_rank_restarts_the_job_which_ends_as_an_uninterrupted_resume(fsdp):
    """The fsdp fixture's crash and restart, as torchrun's output tells them; that the run ends bit-exact
    with an uninterrupted one is test_fsdp_matches_one_process_and_resumes_exactly's check."""
    stdout = (fsdp.parent / "stdout.txt").read_text()
    assert "elastic: restart 1 of 1; the attempt before ended with: rank 1: train.py crashed: RuntimeError: " \
           "injected crash on the last rank" in stdout
    assert "resuming after 4 completed steps" in stdout and "writing them in the background" in stdout
