# GPT-3 2.7B (GPT-3 paper, Table 2.1) on The Pile, 300B tokens; the rest as in configurator.py's
# GPT-3 defaults. Check memory and time first: python scripts/plan.py config/train_gpt3_2_7b.py
out_dir = 'out/gpt3_2_7b'
wandb_log = True
wandb_run_name = 'gpt3-2.7b'

n_layer = 32
n_head = 32
n_embd = 2560
learning_rate = 0.00016
min_lr = 1.6e-05

# 1M-token steps as in the paper: 8 x 64 x 2048 = 1,048,576 tokens
batch_size = 8
gradient_accumulation_steps = 64
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = lr_decay_iters = round(300e9 / _tokens_per_iter)  # the token budget sets the run length
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens
