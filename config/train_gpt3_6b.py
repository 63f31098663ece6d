# GPT-3 6.7B (GPT-3 paper, Table 2.1) on one 192 GB MI300X or 141 GB H200:
# 6,657,150,976 parameters; fp32 weights + grads + AdamW moments = 16 B/param = 106.5 GB.
# What is left decides how much to recompute: activation_checkpointing='auto' (the default)
# picks at start-up, from cost.py's estimate: no recompute on an MI300X, 'selective' on an
# H200. See it with: python scripts/plan.py config/train_gpt3_6b.py --gpu h200
out_dir = 'out/gpt3_6b'
dataset = 'pile'
data_dir = 'data/pile'

n_layer = 32
n_head = 32
n_embd = 4096
block_size = 2048
bias = False
dropout = 0.0

# 4 x 160 x 2048 = 1,310,720 tokens per optimizer step (GPT-3 6.7B used ~2M)
batch_size = 4
gradient_accumulation_steps = 160

# The token budget decides the run length: 300e9 / 1,310,720 = 228,882 steps.
_tokens_per_iter = batch_size * gradient_accumulation_steps * block_size
max_iters = lr_decay_iters = round(300e9 / _tokens_per_iter)
warmup_iters = round(375e6 / _tokens_per_iter)  # GPT-3 warmed up over 375M tokens

learning_rate = 1e-4
min_lr = 1e-5
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
grad_clip = 1.0

# One step takes ~100 s on one GPU: log every step, evaluate every ~3 hours
# (100 batches, well under a minute), save every ~14 hours or every 2 hours of
# wall-clock time, whichever comes first. A save is ~80 GB; 3 kept = ~240 GB of disk.
log_interval = 1
eval_interval = 100
eval_iters = 100
hellaswag_interval = eval_interval  # ~3 min on one GPU: 10,042 examples, 8 a forward
checkpoint_interval = 500
checkpoint_minutes = 120.0
keep_last_n = 3

dtype = 'bfloat16'
# each block compiled (train.py): fused elementwise kernels around the matmuls, faster steps on CUDA.
# ROCm's inductor can fail where CUDA's works: scripts/check_env.py compiles a block on the GPU and
# says 'rerun with --compile=False' if it does not run there
compile = True
wandb_log = True
wandb_project = 'gpt3'
wandb_run_name = 'gpt3-6.7b'
