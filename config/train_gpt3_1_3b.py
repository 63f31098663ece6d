# GPT-3 1.3B (GPT-3 paper, Table 2.1) on The Pile, 300B tokens; the rest as in configurator.py's
# GPT-3 defaults. Check memory and time first: python scripts/plan.py config/train_gpt3_1_3b.py
# The paper's table lists 24 heads, which do not divide d_model 2048; it also lists
# d_head = 128, and 2048 / 128 = 16 heads, so 16 it is.
out_dir = 'out/gpt3_1_3b'
wandb_log = True
wandb_run_name = 'gpt3-1.3b'

n_layer = 24
n_head = 16
n_embd = 2048
learning_rate = 0.0002
min_lr = 2e-05

# 1M-token steps as in the paper: 16 x 32 x 2048 = 1,048,576 tokens
batch_size = 16
gradient_accumulation_steps = 32
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = lr_decay_iters = round(300e9 / _tokens_per_iter)  # the token budget sets the run length
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens
