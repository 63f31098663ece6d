# GPT-3 1.3B (GPT-3 paper, Table 2.1), context 2048, 300B tokens.
# Check memory and time first: python scripts/plan.py config/train_gpt3_1_3b.py
# The paper's table lists 24 heads, which do not divide d_model 2048; it also lists
# d_head = 128, and 2048 / 128 = 16 heads, so 16 it is.
out_dir = 'out/gpt3_1_3b'
dataset = 'pile'
data_dir = 'data/pile'

n_layer = 24
n_head = 16
n_embd = 2048
block_size = 2048
bias = False
dropout = 0.0
gradient_checkpointing = False

# 1M-token batches as in the paper: 16 x 32 x 2048 = 1,048,576 tokens per step
batch_size = 16
gradient_accumulation_steps = 32

_tokens = 300e9
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = round(_tokens / _tokens_per_iter)
lr_decay_iters = max_iters
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens

learning_rate = 0.0002
min_lr = 2e-05
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
grad_clip = 1.0

log_interval = 10
eval_interval = 1000
eval_iters = 100
checkpoint_interval = 1000
checkpoint_minutes = 60.0
keep_last_n = 3

dtype = 'bfloat16'
compile = False
wandb_log = True
wandb_project = 'gpt3'
wandb_run_name = 'gpt3-1.3b'
