"""Every save path writes the live values: .pt and sharded, synchronous and asynchronous, with fp8 off,
tensorwise and rowwise, and each optimizer mode. Under FSDP2's fp8 all-gather the weights are DTensors
around torchao's WeightWithDynamicFloat8CastTensor (data_ptr() 0), which DCP's stager used to copy as
empty memory; the comparisons here are element by element, so garbage or a stale copy fails them.

FSDP2 and DCP run in this process on a one-rank gloo group; test_sharded_fp8_on_two_processes is the
multi-rank case, and a fresh interpreter checks that a sharded fp8 checkpoint loads without torchao."""
import os
import subprocess
import sys

import pytest
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import get_state_dict
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten_with_path

from model import GPT, GPTConfig
from trainer import checkpoint, optim, parallel, precision

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ADAMW, ADAMW8, ADAMW4 = ("adamw", "float32", False), ("adamw8bit", "float32", False), ("adamw4bit", "float32", False)
BF16, OFFLOAD = ("adamw", "bfloat16", False), ("adamw", "float32", True)  # neither runs under FSDP
# (sharded, asynchronous, fp8, memory mode): each path with fp8 off, tensorwise and rowwise, each mode at least once
CASES = [
    (False, False, "", ADAMW), (False, False, "tensorwise", ADAMW8), (False, False, "rowwise", BF16),
    (False, True, "", ADAMW8), (False, True, "tensorwise", ADAMW4), (False, True, "rowwise", OFFLOAD),
    (True, False, "", ADAMW4), (True, False, "tensorwise", ADAMW), (True, False, "rowwise", ADAMW8),
    (True, True, "", ADAMW), (True, True, "tensorwise", ADAMW), (True, True, "tensorwise", ADAMW8),
    (True, True, "rowwise", ADAMW4),
]


@pytest.fixture(scope="module", autouse=True)
def one_rank(tmp_path_factory):
    """A one-process gloo group, as torchrun would make with one rank: FSDP2 and DCP need one."""
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(autouse=True)
def eager(monkeypatch):
    """torchao's low-bit AdamW steps eagerly: compiling them on the CPU takes minutes, and what is saved is
    the same state either way."""
    monkeypatch.setattr(torch, "compile", lambda fn, **options: fn)


def build(fp8, mode, fsdp):
    """The model and optimizer as train.py builds them (bf16 weights, fp8, FSDP2, then the optimizer)."""
    name, master_weights, offload = mode
    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=64, bias=False))
    if master_weights == "bfloat16":
        optim.use_bf16_weights(model)
    if fp8:
        precision.convert(model, fp8, fsdp=fsdp)
    if fsdp:
        parallel.shard(model, "bfloat16")
    return model, optim.build(model, name, 0.1, 1e-2, (0.9, 0.95), "cpu", master_weights, offload)


def train_step(model, optimizer, seed):
    x = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(seed))
    with torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False):
        loss = model(x, x)[1]
    loss.backward()
    optim.step(optimizer, seed, "cpu")
    optimizer.zero_grad(set_to_none=True)
    precision.update_weight_scales(model)  # FSDP2's fp8 all-gather scales; elsewhere a no-op


def values(model, optimizer):
    """{name: [plain tensors]} of the live model and optimizer, copied: a DTensor's local shard (the whole
    tensor on one rank), a tensor subclass's own components (torchao's fp8 weight, low-bit moments)."""
    found = {}
    for path, leaf in tree_flatten_with_path(dict(zip(("model", "optimizer"), get_state_dict(model, optimizer))))[0]:
        path = "/".join(str(getattr(key, "key", getattr(key, "idx", key))) for key in path)  # model/lm_head.weight
        if isinstance(leaf, DTensor):
            leaf = leaf.to_local()
        if isinstance(leaf, torch.Tensor):
            parts = [leaf]
            while is_traceable_wrapper_subclass(parts[0]):
                parts = [getattr(parts[0], name) for name in parts[0].__tensor_flatten__()[0]]
            found[path] = [p.detach().clone() for p in parts]
        else:
            found[path] = leaf
    return found


def assert_equal(loaded, live):
    assert loaded.keys() == live.keys()
    for key in live:
        if isinstance(live[key], list):
            assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(loaded[key], live[key])), key
        else:
            assert loaded[key] == live[key], key


def save(saver, sharded, model, optimizer, out_dir, n):
    trainer_state = {"iter_num": n, "model_args": {}}
    if sharded:
        saver.save_sharded(model, optimizer, trainer_state, out_dir, n, 0)
    else:
        model_sd, optimizer_sd = checkpoint.full_state(model, optimizer)
        saver.save_checkpoint(dict(trainer_state, model=model_sd, optimizer=optimizer_sd), out_dir, n, 0)


@pytest.mark.parametrize("sharded, asynchronous, fp8, mode", CASES)
def test_every_save_path_loads_the_live_values(tmp_path, sharded, asynchronous, fp8, mode):
    model, optimizer = build(fp8, mode, sharded)
    train_step(model, optimizer, 1)
    live = values(model, optimizer)
    saver = checkpoint.Saver(asynchronous=asynchronous, log=lambda line: None)
    save(saver, sharded, model, optimizer, str(tmp_path), 1)
    train_step(model, optimizer, 2)  # training goes on while an asynchronous save writes: the file must not see it
    saver.wait()
    after = values(model, optimizer)

    state = checkpoint.load_checkpoint(checkpoint.list_checkpoints(str(tmp_path))[0][1], log=lambda line: None)
    if not sharded:  # the file itself holds plain tensors, the values of the live ones
        assert all(type(t) is torch.Tensor for t in state["model"].values())
        assert all(torch.equal(t, live[f"model/{k}"][0]) for k, t in state["model"].items())
    resumed, resumed_optimizer = build(fp8, mode, sharded)
    checkpoint.restore(state, resumed, resumed_optimizer)
    precision.update_weight_scales(resumed)
    assert_equal(values(resumed, resumed_optimizer), live)
    train_step(resumed, resumed_optimizer, 2)  # and it resumes bit-exactly
    assert_equal(values(resumed, resumed_optimizer), after)


def test_two_asynchronous_saves_in_a_row(tmp_path):
    """A stager per save (reusing one raises KeyError on torch 2.11, pytorch#183413); each file its own step's."""
    model, optimizer = build("", ADAMW, False)
    saver = checkpoint.Saver(asynchronous=True, log=lambda line: None)
    snapshots = []
    for n in (1, 2):
        train_step(model, optimizer, n)
        snapshots.append(values(model, optimizer))
        saver.wait()
        save(saver, False, model, optimizer, str(tmp_path), n)
    saver.wait()
    for n, live in zip((1, 2), snapshots):
        state = checkpoint.load_checkpoint(checkpoint.checkpoint_path(str(tmp_path), n), log=lambda line: None)
        assert all(torch.equal(t, live[f"model/{k}"][0]) for k, t in state["model"].items())


def test_stage_unwraps_fp8_weights_and_keeps_their_placement():
    """The issue's reproduction: DTensor.from_local(WeightWithDynamicFloat8CastTensor(arange))."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard
    from torchao.float8.float8_training_tensor import LinearMMConfig
    from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor
    mesh = init_device_mesh("cpu", (1,))
    weight = torch.arange(64, dtype=torch.float32).reshape(8, 8)
    wrapped = DTensor.from_local(WeightWithDynamicFloat8CastTensor(weight, LinearMMConfig(), torch.float8_e4m3fn),
                                 mesh, [Shard(0)])
    assert wrapped.to_local().data_ptr() == 0  # nothing for a stager to copy from
    for host_copy in (False, True):
        plain = checkpoint.stage({"w": wrapped}, host_copy=host_copy)["w"]
        assert type(plain.to_local()) is torch.Tensor and plain.placements == wrapped.placements
        assert plain.device_mesh == mesh and torch.equal(plain.to_local(), weight)


LOAD_WITHOUT_TORCHAO = """
import sys
sys.path.insert(0, sys.argv[2])
from model import GPT, GPTConfig
from trainer import checkpoint
state = checkpoint.load_checkpoint(sys.argv[1], log=lambda line: None)
model = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=64, bias=False))
checkpoint.restore(state, model)
assert 'torchao' not in sys.modules, 'torchao was imported'
import torch
torch.save(model.state_dict(), sys.argv[3])
"""


@pytest.mark.e2e  # a fresh interpreter, without torchao
def test_a_sharded_fp8_checkpoint_loads_where_torchao_is_not_imported(tmp_path):
    """sample.py, eval.py, export, convert_checkpoint.py and fp8='' resumes read it in a plain process."""
    model, optimizer = build("tensorwise", ADAMW, True)
    train_step(model, optimizer, 1)
    live = values(model, optimizer)
    checkpoint.Saver(log=lambda line: None).save_sharded(model, optimizer, {"iter_num": 1, "model_args": {}}, str(tmp_path), 1, 0)
    subprocess.run([sys.executable, "-c", LOAD_WITHOUT_TORCHAO, str(tmp_path / "ckpt_1"), REPO,
                    str(tmp_path / "plain.pt")], check=True, timeout=300)
    for name, tensor in torch.load(tmp_path / "plain.pt", weights_only=True).items():
        if name != "lm_head.weight":  # tied to the embedding, saved under its name
            assert torch.equal(tensor, live[f"model/{name}"][0]), name


def _two_rank_worker(rank, folder):
    """One of 2 gloo processes: fp8 tensorwise FSDP2, a step, a sharded save (sync, then async), a step more
    before the write completes, then the save reloaded into a fresh sharded model."""
    torch.set_num_threads(1)
    torch.compile = lambda fn, **options: fn  # as eager() does in this process
    dist.init_process_group("gloo", init_method=f"file://{folder}/init", rank=rank, world_size=2)
    for asynchronous in (False, True):  # both in one pair of processes: each start imports torch and torchao
        out = f"{folder}/{asynchronous}"
        model, optimizer = build("tensorwise", ADAMW8, True)
        train_step(model, optimizer, 1)
        live = values(model, optimizer)
        # the save's collectives on a gloo group of their own, as train.py's save_group: training's go on beside them
        saver = checkpoint.Saver(asynchronous=asynchronous, group=dist.new_group(backend="gloo"), log=lambda line: None)
        save(saver, True, model, optimizer, out, 1)
        train_step(model, optimizer, 2)
        saver.wait()
        state = checkpoint.load_checkpoint(f"{out}/ckpt_1", log=lambda line: None)
        resumed, resumed_optimizer = build("tensorwise", ADAMW8, True)
        checkpoint.restore(state, resumed, resumed_optimizer)
        assert_equal(values(resumed, resumed_optimizer), live)  # this rank's shards
        open(f"{folder}/ok{rank}-{asynchronous}", "w").close()
    dist.destroy_process_group()


@pytest.mark.e2e
def test_sharded_fp8_on_two_processes(tmp_path):
    torch.multiprocessing.start_processes(_two_rank_worker, args=(str(tmp_path),), nprocs=2, start_method="spawn")
    assert {p.name for p in tmp_path.glob("ok*")} == {f"ok{rank}-{a}" for rank in (0, 1) for a in (False, True)}
