"""HSDP (strategy='hsdp'): the shards' gradients are all-reduced across replicas once per optimizer step,
not once per micro-batch (parallel.sync_gradients), here in one process. That 4 CPU processes as 2 x 2
train as one process does and their checkpoint resumes as FSDP on 2 is test_multinode.py's two-node test."""
import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
from torch.distributed.fsdp._fully_shard import _fsdp_collectives

from model import GPT, GPTConfig
from trainer import RunError, parallel


@pytest.fixture
def one_rank_group(tmp_path):
    """A 1-process gloo group in this process (a file rendezvous: no port to collide on): an HSDP mesh of
    1 replica x 1 shard still all-reduces."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


MODERN = dict(position="rope", norm="rmsnorm", qk_norm=True, activation="swiglu", tie_embeddings=False,
              logit_softcap=15.0)  # every new internal at once: SwiGLU's gate and the untied head are sharded too


@pytest.mark.parametrize("internals", [{}, MODERN], ids=["gpt3", "modern"])
def test_all_reduce_only_on_the_last_micro_batch(one_rank_group, monkeypatch, internals):
    config = GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64, **internals)
    torch.manual_seed(0)
    plain = GPT(config)
    hsdp = GPT(config)
    hsdp.load_state_dict(plain.state_dict())
    parallel.shard(hsdp, "float32", parallel.mesh("hsdp", "cpu", 1, 1))
    groups = [g for m in hsdp.modules() if isinstance(m, FSDPModule) for g in m._get_fsdp_state()._fsdp_param_groups]
    all_reduces, real = [], _fsdp_collectives.dist.all_reduce
    monkeypatch.setattr(_fsdp_collectives.dist, "all_reduce", lambda *a, **k: all_reduces.append(1) or real(*a, **k))
    micro_batches = [torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(i)) for i in range(3)]
    per_micro_batch = []
    for i, x in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        parallel.sync_gradients(hsdp, last)
        assert all(g.all_reduce_grads == last for g in groups) and all(g.reduce_grads for g in groups)
        before = len(all_reduces)
        (hsdp(x, x)[1] / 3).backward()
        per_micro_batch.append(len(all_reduces) - before)
        (plain(x, x)[1] / 3).backward()
    assert per_micro_batch == [0, 0, len(groups)]  # one per parameter group (each block, the root), on the last
    for (name, p), q in zip(plain.named_parameters(), hsdp.parameters()):  # the accumulated sum, nothing lost
        torch.testing.assert_close(q.grad.full_tensor(), p.grad, msg=name)


def test_hsdp_outside_torchrun_is_refused_not_plain_fsdp():
    assert parallel.node_size({"LOCAL_WORLD_SIZE": "8"}) == 8
    with pytest.raises(RunError, match="set hsdp_shard_size to the GPUs per node"):
        parallel.node_size({})
