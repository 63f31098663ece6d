# GPT-3 350M (GPT-3 paper, Table 2.1), context 2048, 300B tokens.
# Check memory and time first: python scripts/plan.py config/train_gpt3_350m.py
out_dir = 'out/gpt3_350m'
dataset = 'pile'
data_dir = 'data/pile'

n_layer = 24
n_head = 16
n_embd = 1024
block_size = 2048
bias = False
dropout = 0.0
gradient_checkpointing = False

# 0.5M-token batches as in the paper: 16 x 16 x 2048 = 524,288 tokens per step
batch_size = 16
gradient_accumulation_steps = 16

_tokens = 300e9
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = round(_tokens / _tokens_per_iter)
lr_decay_iters = max_iters
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens

learning_rate = 0.0003
min_lr = 3e-05
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
wandb_run_name = 'gpt3-350m'
