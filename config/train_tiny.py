# A tiny model for the CPU quick start and the tests: the quick-start corpus
# (python data/quickstart/prepare.py, byte-level encoding, 257 symbols) in a few minutes.
out_dir = 'out/tiny'
dataset = 'quickstart'

n_layer = 4
n_head = 4
n_embd = 128
block_size = 128
vocab_size = 320  # 256 bytes + end-of-text, padded to a multiple of 64
dropout = 0.0
bias = False
activation_checkpointing = 'none'  # the CPU needs none, and auto would change the micro-batch

batch_size = 8
gradient_accumulation_steps = 2
max_iters = 300
lr_decay_iters = 300
warmup_iters = 20
learning_rate = 2e-3
min_lr = 2e-4

log_interval = 10
eval_interval = 100
eval_iters = 20
checkpoint_interval = 100
keep_last_n = 2

device = 'cpu'
dtype = 'float32'
compile = False
wandb_log = False

spike_loss_z = spike_grad_z = 0.0  # spike handling off: a tiny run's loss is noisy, and its steps cheap
spike_rollback_after = 0
hellaswag_interval = 0
