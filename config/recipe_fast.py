# The fast recipe's levers on any size (docs/time_to_quality.md), without a size or a token budget of its own:
# config/train_gpt3_6b_fast.py applies it to GPT-3 6.7B, config/ladder_gpt3_fast.py to every size of the ladder
# that predicts that run, so both train on the same data and schedule and the ladder's fits apply to the run.
#   - Muon on the blocks' matrices, AdamW on the rest (optimizer='muon'), with q, k and v orthogonalised apart;
#   - a warmup-stable-decay schedule with a 1-sqrt cooldown over the last 20% (trainer/schedule.py), which
#     also gives annealed models at 25% and 50% of the budget through cooldown forks (docs/training.md);
#   - better data: DCLM-baseline, ClimbMix and FineWeb-Edu, with the Pile for code and books;
#   - fp8 matmuls (tensorwise) on a GPU with FP8 units (H100/H200, MI300 series; precision.py refuses
#     one without them in one line: add --fp8='' there).
optimizer = 'muon'  # torch.optim.Muon on the 2-D block weights, AdamW elsewhere (docs/optimizers.md)
muon_split_qkv = True  # 1.10-1.34x compute at each size of the CPU ladder, and others' experience (optimizers.md)
lr_schedule = 'wsd'
lr_decay_fraction = 0.2  # Hägele et al. 2024: a 20% 1-sqrt cooldown matches cosine at equal tokens
lr_decay_shape = 'sqrt'

# DCLM for breadth (CORE/MMLU at 7B: arXiv 2406.11794), ClimbMix (nanochat's largest single gain, CLIMB arXiv
# 2504.13161), FineWeb-Edu for knowledge benchmarks, the Pile for the code, books and papers the web sets lack.
# The weights are a reasoned choice, not a measured optimum: ab.py can compare mixtures at small scale.
data_mixture = {'data/dclm': 0.4, 'data/climbmix': 0.3, 'data/fineweb_edu': 0.2, 'data/pile': 0.1}

fp8 = 'tensorwise'
