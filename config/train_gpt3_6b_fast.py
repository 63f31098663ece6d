# GPT-3 6.7B's quality for a fraction of its 300B tokens: the exact architecture of train_gpt3_6b.py (its
# shapes, the HF export and the paper comparison stay valid), trained with the levers of docs/time_to_quality.md:
#   - Muon on the blocks' matrices, AdamW on the rest (optimizer='muon');
#   - a warmup-stable-decay schedule with a 1-sqrt cooldown over the last 20% (trainer/schedule.py), which
#     also gives annealed models at 25% and 50% of the budget through cooldown forks (docs/training.md);
#   - better data: DCLM-baseline, ClimbMix and FineWeb-Edu, with the Pile for code and books;
#   - fp8 matmuls (tensorwise) on a GPU with FP8 units (H100/H200, MI300 series; precision.py refuses
#     one without them in one line: add --fp8='' there).
# Token budget: Chinchilla's compute-optimal ~20 tokens a parameter (Hoffmann et al. 2022, arXiv 2203.15556):
# 20 x 6.66B = 133B tokens, 44% of GPT-3's 300B. DCLM's "7B-1x" scale is the same rule (138B tokens for 7B,
# Li et al. 2024, arXiv 2406.11794). Every time and quality figure for this recipe is an estimate until a GPU
# run measures it. Days and dollars beside the GPT-3 recipe's:
#   python scripts/plan.py config/train_gpt3_6b_fast.py --gpu h200 --beside config/train_gpt3_6b.py
import os

exec(open(os.path.join(os.path.dirname(__file__), "train_gpt3_6b.py")).read())
out_dir = 'out/gpt3_6b_fast'
wandb_run_name = 'gpt3-6.7b-fast'

optimizer = 'muon'  # torch.optim.Muon on the 2-D block weights, AdamW elsewhere (docs/optimizers.md)
# learning_rate stays the GPT-3 recipe's: match_rms_adamw is meant to make it mean what it means for AdamW
# (Moonshot, arXiv 2502.16982), but on the tiny CPU model Muon's best was 8x AdamW's (docs/time_to_quality.md).
# At 6.7B it is unmeasured: sweep it at 125M-1.3B with scripts/ab.py before a long run.

_params = 6_657_150_976  # train_gpt3_6b.py's count
_tokens = 20 * _params  # 133.1B (Chinchilla)
max_iters = lr_decay_iters = round(_tokens / _tokens_per_iter)
lr_schedule = 'wsd'
lr_decay_fraction = 0.2  # Hägele et al. 2024: a 20% 1-sqrt cooldown matches cosine at equal tokens
lr_decay_shape = 'sqrt'

# DCLM for breadth (CORE/MMLU at 7B: arXiv 2406.11794), ClimbMix (nanochat's largest single gain, CLIMB arXiv
# 2504.13161), FineWeb-Edu for knowledge benchmarks, the Pile for the code, books and papers the web sets lack.
# The weights are a reasoned choice, not a measured optimum: ab.py can compare mixtures at small scale.
data_mixture = {'data/dclm': 0.4, 'data/climbmix': 0.3, 'data/fineweb_edu': 0.2, 'data/pile': 0.1}

fp8 = 'tensorwise'
