# GPT-3 6.7B's quality for a fraction of its 300B tokens: the exact architecture of train_gpt3_6b.py (its
# shapes, the HF export and the paper comparison stay valid), trained with the fast recipe's levers
# (config/recipe_fast.py: Muon, a warmup-stable-decay schedule, better data, fp8; docs/time_to_quality.md).
# Token budget: Chinchilla's compute-optimal ~20 tokens a parameter (Hoffmann et al. 2022, arXiv 2203.15556):
# 20 x 6.66B = 133B tokens, 44% of GPT-3's 300B. DCLM's "7B-1x" scale is the same rule (138B tokens for 7B,
# Li et al. 2024, arXiv 2406.11794). Every time and quality figure for this recipe is an estimate until a GPU
# run measures it. Days and dollars beside the GPT-3 recipe's:
#   python scripts/plan.py config/train_gpt3_6b_fast.py --gpu h200 --beside config/train_gpt3_6b.py
# What it will reach, from a ladder of small runs of the same recipe: config/ladder_gpt3_fast.py and
# docs/scaling_ladder.md.
import os

exec(open(os.path.join(os.path.dirname(__file__), "train_gpt3_6b.py")).read())
exec(open(os.path.join(os.path.dirname(__file__), "recipe_fast.py")).read())
out_dir = 'out/gpt3_6b_fast'
wandb_run_name = 'gpt3-6.7b-fast'

# learning_rate stays the GPT-3 recipe's: match_rms_adamw is meant to make it mean what it means for AdamW
# (Moonshot, arXiv 2502.16982), but on the tiny CPU model Muon's best was 8x AdamW's (docs/time_to_quality.md).
# At 6.7B it is unmeasured: the ladder above recommends one (plan.py --ladder), or sweep it at 125M-1.3B with
# scripts/ab.py before a long run.

_params = 6_657_150_976  # train_gpt3_6b.py's count
_tokens = 20 * _params  # 133.1B (Chinchilla)
max_iters = lr_decay_iters = round(_tokens / _tokens_per_iter)
# warmup over as many tokens as parameters (6.7B, 5% of the run; OLMo's ladder rule), not GPT-3's 375M (0.3%): the
# schedule of config/ladder_gpt3_fast.py's runs in fractions of their length, whose curves the in-run forecast's
# ladder prior reads (on the CPU ladder a prior of another warmup share missed by 5% at half-way)
warmup_iters = round(_params / _tokens_per_iter)
