# GPT-3 2.7B (GPT-3 paper, Table 2.1), context 2048, 300B tokens.
# Check memory and time first: python scripts/plan.py config/train_gpt3_2_7b.py
out_dir = 'out/gpt3_2_7b'
dataset = 'pile'
data_dir = 'data/pile'

n_layer = 32
n_head = 32
n_embd = 2560
block_size = 2048
bias = False
dropout = 0.0
gradient_checkpointing = False

# 1M-token batches as in the paper: 8 x 64 x 2048 = 1,048,576 tokens per step
batch_size = 8
gradient_accumulation_steps = 64

_tokens = 300e9
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = round(_tokens / _tokens_per_iter)
lr_decay_iters = max_iters
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens

learning_rate = 0.00016
min_lr = 1.6e-05
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
wandb_run_name = 'gpt3-2.7b'
