"""One model_config(cfg, saved) for train.py, plan.py and bench.py (their meta model, cost.meta_model): the same
GPTConfig from the same settings."""
import configurator
from model import model_config
from trainer import cost

TINY = ["config/train_tiny.py", "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=16"]


def test_one_model_config_for_train_plan_and_bench():
    cfg = configurator.load_config([*TINY, "--activation=gelu_tanh", "--activation_checkpointing=auto"])
    config = model_config(cfg)
    assert config.activation == "gelu_tanh" and config.activation_checkpointing == "none"  # auto: none until settled
    assert cost.meta_model(cfg).config == config  # plan.py once built one without `activation`
    assert cost.meta_model(cfg, "full", 1).config == model_config(cfg, activation_checkpointing="full",
                                                                        recompute_blocks=1)
    saved = dict(n_layer=3, n_head=2, n_embd=32, block_size=8, vocab_size=64, bias=True, activation="gelu", n_tokens=50)
    from_checkpoint = model_config(cfg, saved)
    assert (from_checkpoint.n_layer, from_checkpoint.bias, from_checkpoint.n_tokens) == (3, True, 50)
    assert model_config(saved_args=saved, dropout=0.1).dropout == 0.1
