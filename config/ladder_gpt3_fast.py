# config/ladder_gpt3.py with the fast recipe (config/recipe_fast.py: Muon, the warmup-stable-decay schedule, the
# data mixture, fp8) on every size: the ladder whose fits plan.py --ladder and train.py --forecast_prior read for
# config/train_gpt3_6b_fast.py. They refuse a ladder measured on other data (config/ladder_gpt3.py's Pile alone),
# whose val losses are not the mixture's. Recipes set only what they change; AdamW beside it gives Muon's
# compute multiplier at 6.7B, and --eval_tasks the paper's tasks (data/eval/prepare.py) the scores:
#   python scripts/ladder.py config/ladder_gpt3_fast.py --recipe "fast:" --recipe "adamw: --optimizer=adamw" \
#       --nproc 8 --out out/ladder --eval_tasks hellaswag,lambada_openai,piqa,winogrande
# What it costs: python scripts/plan.py config/train_gpt3_6b_fast.py --gpu h200 --ladder_plan config/ladder_gpt3_fast.py
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_gpt3.py")).read())
base = base + ['config/recipe_fast.py']
target = 'config/train_gpt3_6b_fast.py'
