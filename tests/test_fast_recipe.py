"""config/train_gpt3_6b_fast.py keeps GPT-3 6.7B's architecture and plans beside the GPT-3 recipe (plan.py --beside)."""
import json

import configurator
from conftest import REPO, run_here

ARCHITECTURE = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias", "activation")


def test_the_fast_recipe_is_gpt3_6b_with_the_levers():
    fast, gpt3 = (configurator.load_config([str(REPO / f"config/{name}.py")]) for name in ("train_gpt3_6b_fast",
                                                                                           "train_gpt3_6b"))
    assert all(getattr(fast, k) == getattr(gpt3, k) for k in ARCHITECTURE)
    assert (fast.optimizer, fast.lr_schedule, fast.fp8) == ("muon", "wsd", "tensorwise")
    tokens = fast.max_iters * fast.batch_size * fast.gradient_accumulation_steps * fast.block_size
    assert abs(tokens - 20 * 6_657_150_976) < fast.batch_size * fast.gradient_accumulation_steps * fast.block_size
    assert set(fast.data_mixture) == {"data/dclm", "data/climbmix", "data/fineweb_edu", "data/pile"}


def test_plan_prints_days_and_dollars_beside_another_recipe():
    result = run_here(["scripts/plan.py", "config/train_gpt3_6b_fast.py", "--gpu", "h200", "--beside",
                       "config/train_gpt3_6b.py", "--json"])
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["beside"]["total_tokens"] > 2 * plan["total_tokens"] and plan["beside"]["days"] > plan["days"]


def test_plan_names_the_command_that_prepares_each_source_not_prepared_here(tmp_path):
    """The fast recipe's mixture on a machine without its bins: plan.py said "not prepared here" and no more."""
    mixture = f"--data_mixture={{'{tmp_path / 'dclm'}': 0.6, '{tmp_path / 'pile'}': 0.4}}"
    result = run_here(["scripts/plan.py", "config/train_gpt3_6b_fast.py", mixture])
    assert result.returncode == 0, result.stderr
    assert f"source dclm: weight 0.6, not prepared here: python data/dclm/prepare.py --data_dir {tmp_path / 'dclm'}" \
        in result.stdout
