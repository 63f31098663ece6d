# Fine-tune OpenAI's GPT-2 XL (1.5B) on Tiny Shakespeare, as nanoGPT's example does:
#   python data/shakespeare/prepare.py && python train.py config/finetune_shakespeare.py
#   python sample.py --out_dir=out/shakespeare --start="ROMEO:"
# The architecture (48 layers, 1600 wide, 1024 context, GELU tanh, biases) comes from the weights.
# 'gpt2' (124M) runs anywhere, even the CPU: --init_from=gpt2 --device=cpu --dtype=float32
out_dir = 'out/shakespeare'
init_from = 'gpt2-xl'  # through the Hugging Face cache: download it once where there is a network
dataset = 'shakespeare'
batch_size = 1
gradient_accumulation_steps = 32  # 32 x 1024 = 32,768 tokens a step: ~9 steps an epoch
max_iters = 20
learning_rate = 3e-5  # constant: a few steps on a small corpus
decay_lr = False
eval_interval = 5
eval_iters = 20
checkpoint_interval = 20
keep_last_n = 1
wandb_run_name = 'finetune-shakespeare'
