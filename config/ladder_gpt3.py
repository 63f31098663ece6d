# The scaling ladder on a GPU (python scripts/ladder.py config/ladder_gpt3.py ...; docs/scaling_ladder.md):
# GPT-3's four smallest sizes (Brown et al., table 2.1) and one below them on the Pile, each at 20 tokens per
# parameter (Chinchilla's ratio, and about the fast 6.7B recipe's) with a learning-rate sweep (5 points at 52M,
# 3 at 125M, 350M and 760M; 1.3B runs once, at the rate the sizes below predict), plus one run per size at 10
# tokens per parameter at its best rate, so that Chinchilla's L(N, D) can be fitted and read at a target's own
# ratio. The fifth size costs 1.6 GPU-hours and lets the fit along the ratio be a three-parameter form judged by
# its backtest, and the ladder check itself two steps out (1.3B from 52M-350M, 3.7x), nearer the 6.7B target's
# 5.1x than one step's 1.7x.
# What it costs against the 6.7B run: python scripts/plan.py config/train_gpt3_6b_fast.py --ladder_plan config/ladder_gpt3.py
# A ladder config is read by scripts/ladder.py, not by train.py: these names are its settings.
base = ['config/train_gpt3_125m.py']
common = '--checkpoint_interval=1000'  # checkpoints let a stopped run resume (init_from=auto)
sizes = {
    '52m': dict(n_layer=8, n_head=8, n_embd=512),  # not one of GPT-3's: its head size, 64
    '125m': dict(n_layer=12, n_head=12, n_embd=768),
    '350m': dict(n_layer=24, n_head=16, n_embd=1024),
    '760m': dict(n_layer=24, n_head=16, n_embd=1536),
    '1.3b': dict(n_layer=24, n_head=16, n_embd=2048),
}
tokens_per_param = (20, 10)
sweep_points = (5, 3, 3, 3, 1)
sweep_factors = (2.0, 1.41)
# warmup over as many tokens as the model has parameters at 20 tokens per parameter (OLMo's ladder rule; half as
# many at 10), not 0.01's fifth of that: on the CPU ladder a short warmup left AdamW's seeds 17% apart at one
# rate (docs/ladder_evidence.md, "Warmup and the AdamW seeds"); untried on a GPU
warmup_fraction = 0.05
evaluations = 20
target = 'config/train_gpt3_6b.py'  # ladder.png extrapolates each fit to its size
