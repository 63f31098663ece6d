"""The cluster launchers, as far as a CPU machine can run them: scripts/slurm/train.sbatch under stand-ins
for srun and scontrol, and scripts/skypilot/train.yaml parsed and its run section executed under a
stand-in python; both must build the torchrun line docs/distributed.md gives, with train.py keys that load."""
import os
import shlex
import subprocess

import pytest
import yaml

import configurator
from conftest import REPO

pytestmark = pytest.mark.e2e  # the launchers' shell, with stand-ins for sbatch and torchrun

ECHO = '#!/bin/sh\necho "$(basename "$0") $*"\n'


def stand_ins(tmp_path, **scripts):
    folder = tmp_path / "bin"
    folder.mkdir()
    for name, text in scripts.items():
        (folder / name).write_text(text)
        (folder / name).chmod(0o755)
    return f"{folder}{os.pathsep}{os.environ['PATH']}"


def train_args(line):
    """The --key=value arguments after train.py, which configurator.py must accept."""
    words = shlex.split(line)
    return words[words.index("train.py") + 1:]


def test_sbatch_runs_one_torchrun_per_node_at_a_c10d_rendezvous(tmp_path):
    script = str(REPO / "scripts" / "slurm" / "train.sbatch")
    assert subprocess.run(["bash", "-n", script]).returncode == 0
    env = dict(os.environ, PATH=stand_ins(tmp_path, srun=ECHO, scontrol="#!/bin/sh\nprintf 'gpu-a\\ngpu-b\\n'\n"),
               SLURM_JOB_NODELIST="gpu-[a-b]", SLURM_NNODES="2", SLURM_JOB_ID="42", SLURM_JOB_NAME="gpt3_6b",
               SLURM_SUBMIT_DIR=str(REPO), VOLUME="/shared/gpt")
    result = subprocess.run(["bash", script, "config/train_gpt3_6b.py", "--strategy=hsdp"], env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=0 python -m torch.distributed.run ")
    for flag in ("--nnodes=2", "--nproc_per_node=8", "--rdzv-backend=c10d", "--rdzv-endpoint=gpu-a:29500",
                 "--rdzv-id=42", "--max-restarts=3"):
        assert f" {flag} " in line
    cfg = configurator.load_config(train_args(line))
    assert (cfg.strategy, cfg.data_dir, cfg.out_dir) == ("hsdp", "/shared/gpt/data/pile", "/shared/gpt/out/gpt3_6b")
    missing = subprocess.run(["bash", script, "config/train_gpt3_6b.py"], env=dict(env, VOLUME=""),
                             capture_output=True, text=True)
    assert missing.returncode != 0 and "set VOLUME to storage every node mounts" in missing.stderr


def test_skypilot_task_parses_and_its_run_section_builds_the_torchrun_line(tmp_path):
    task = yaml.safe_load((REPO / "scripts" / "skypilot" / "train.yaml").read_text())
    assert set(task["resources"]["accelerators"]) == {"H200:8", "H100:8", "MI300X:8"} and task["num_nodes"] == 1
    assert "BUCKET" in task["envs"] and task["envs"]["BUCKET"] is None  # SkyPilot refuses to launch without it
    mounts = task["file_mounts"]
    assert mounts["/data"] == {"source": "${BUCKET}/data", "mode": "MOUNT"}
    assert mounts["/checkpoints"]["mode"] == "MOUNT_CACHED" and task["envs"]["OUT_DIR"].startswith("/checkpoints/")
    assert "pip install -r requirements.txt" in task["setup"]
    env = dict(os.environ, **{k: str(v) for k, v in task["envs"].items() if v is not None})
    env.update(PATH=stand_ins(tmp_path, python=ECHO), SKYPILOT_NODE_IPS="10.0.0.5\n10.0.0.6", SKYPILOT_NUM_NODES="2",
               SKYPILOT_NUM_GPUS_PER_NODE="8", SKYPILOT_TASK_ID="sky-1", BUCKET="s3://b", TRAIN_ARGS="--strategy=hsdp")
    assert subprocess.run(["bash", "-n", "-c", task["run"]]).returncode == 0
    result = subprocess.run(["bash", "-c", task["run"]], env=env, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    for flag in ("--nnodes=2", "--nproc_per_node=8", "--rdzv-endpoint=10.0.0.5:29500", "--max-restarts=3"):
        assert f" {flag} " in line
    cfg = configurator.load_config(train_args(line))
    assert (cfg.strategy, cfg.data_dir, cfg.out_dir) == ("hsdp", "/data/pile", "/checkpoints/gpt3_6b")
