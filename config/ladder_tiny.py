# The scaling ladder on the CPU (python scripts/ladder.py config/ladder_tiny.py ...; docs/scaling_ladder.md):
# six sizes of the tiny model on the quick-start corpus (python data/quickstart/prepare.py), all 2 layers deep and
# widened at head size 16, 35k to 666k parameters (19x), each trained on 4 tokens per parameter in about 400 steps.
# One depth because a family that deepened as it widened (config/ladder_tiny_deepening.py) bent where it deepened
# and over-predicted its held-out size by 3-5% on 4 of 10 seeds (docs/ladder_evidence.md, "The config: one depth").
# On a CPU with bf16 instructions, config/ladder_tiny_bf16.py is this in bf16 at two seeds: about half an hour.
# A ladder config is read by scripts/ladder.py, not by train.py: these names are its settings.
base = ['config/train_tiny.py']
# one checkpoint per run, at its end, for scripts/eval.py's scores (data/quickstart/next_line.py's task)
common = ('--batch_size=8 --gradient_accumulation_steps=1 --eval_iters=20 --checkpoint_interval=1000000 '
          '--checkpoint_minutes=0')
# the architecture keys the ladder varies; params = model.get_num_params(), as train.py counts them
sizes = {f'w{width}': dict(n_layer=2, n_head=width // 16, n_embd=width) for width in (32, 48, 64, 96, 128, 160)}
tokens_per_param = 4  # far below Chinchilla's 20: what 2 CPU cores afford; the same rule at every size
# The batch grows with size (3 sequences of 128 tokens at w32, 52 at w160) so that every size takes about 400
# steps: at a fixed batch the small sizes take a few dozen steps and stop on the byte-level plateau
# (docs/ladder_evidence.md, "Why this batch").
steps = 400
sweep_points = (5, 3)  # learning rates at the first size, then at each larger one
sweep_factors = (2.0, 2.0, 1.41)  # between neighbouring rates: at the first size, the second, then onwards
# warmup over as many tokens as the model has parameters, as OLMo's ladders do (a quarter of a run at 4 tokens per
# parameter): at a tenth, AdamW's w128 ended 1.78-2.09 over eight seeds at one rate, at a quarter 1.745-1.766
# (docs/ladder_evidence.md, "Warmup and the AdamW seeds")
warmup_fraction = 0.25
evaluations = 20  # per run: the curve the in-run forecast is measured on
# each size's two lowest swept runs' rates trained again at 2 more seeds, the fits on the rate of lower mean: the
# lowest run was picked for being low, and another seed at its rate ended up to 2.5-4.5% away, 11-23% at an unstable
# rate, at a tenth's warmup (under 1% at most sizes at a quarter's); a second rate lets the seeds, not one lucky
# run, choose, and is seeded only where its run is below the first's mean (docs/scaling_ladder.md). One seed
# (config/ladder_tiny_one_seed.py) took 31 minutes and missed AdamW's held-out size by 7.4% on its first ladder
# (docs/ladder_evidence.md, "Fewer seeds, for the half hour?")
seeds = 3
seeded_rates = 2
