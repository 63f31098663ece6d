# GPT-3 125M (GPT-3 paper, Table 2.1) on The Pile, 300B tokens; the rest as in configurator.py's
# GPT-3 defaults. Check memory and time first: python scripts/plan.py config/train_gpt3_125m.py
out_dir = 'out/gpt3_125m'
wandb_log = True
wandb_run_name = 'gpt3-125m'

n_layer = 12
n_head = 12
n_embd = 768
learning_rate = 0.0006
min_lr = 6e-05

# 0.5M-token steps as in the paper: 32 x 8 x 2048 = 524,288 tokens
batch_size = 32
gradient_accumulation_steps = 8
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = lr_decay_iters = round(300e9 / _tokens_per_iter)  # the token budget sets the run length
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens
