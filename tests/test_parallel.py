"""parallel.py in one process group of one: each mode's wrapping and the loop's collectives."""
import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import configurator
from model import GPT, model_config
from trainer import checkpoint, parallel

quiet = lambda line: None  # noqa: E731
TINY = ["config/train_tiny.py", "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=16"]


@pytest.fixture
def one_process_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_wrap_per_mode(one_process_group):
    cfg = configurator.load_config(TINY)
    assert parallel.mode(cfg, False) == "single" and parallel.mode(cfg, True) == "ddp"
    cfg.master_weights = "bfloat16"
    assert parallel.mode(cfg, True) == "by_hand"
    cfg.master_weights, cfg.strategy = "float32", "hsdp"
    assert parallel.mode(cfg, True) == "fsdp"
    cfg.strategy = "ddp"
    model = GPT(model_config(cfg))
    assert parallel.wrap(model, cfg, "single", 1, "cpu", 0, quiet) is model
    wrapped = parallel.wrap(model, cfg, "ddp", 1, "cpu", 0, quiet)
    assert isinstance(wrapped, DDP) and all(p.grad is not None and not p.grad.any() for p in model.parameters())
    parallel.sync_gradients(wrapped, False)
    assert wrapped.require_backward_grad_sync is False
    assert parallel.agree(True, "cpu") and not parallel.agree(False, "cpu")
    assert parallel.same_on_every_rank(torch.tensor(2.5), torch.tensor(1.0)) == [2.5, 1.0]
    assert checkpoint.nonfinite_on_any_rank(dict(model.named_parameters()), "cpu") is None
    with torch.no_grad():
        model.lm_head.weight[0, 0] = float("inf")
    assert checkpoint.nonfinite_on_any_rank(dict(model.named_parameters()), "cpu") == "transformer.wte.weight"
