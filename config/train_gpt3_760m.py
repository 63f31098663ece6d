# GPT-3 760M (GPT-3 paper, Table 2.1) on The Pile, 300B tokens; the rest as in configurator.py's
# GPT-3 defaults. Check memory and time first: python scripts/plan.py config/train_gpt3_760m.py
out_dir = 'out/gpt3_760m'
wandb_log = True
wandb_run_name = 'gpt3-760m'

n_layer = 24
n_head = 16
n_embd = 1536
learning_rate = 0.00025
min_lr = 2.5e-05

# 0.5M-token steps as in the paper: 16 x 16 x 2048 = 524,288 tokens
batch_size = 16
gradient_accumulation_steps = 16
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = lr_decay_iters = round(300e9 / _tokens_per_iter)  # the token budget sets the run length
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens
