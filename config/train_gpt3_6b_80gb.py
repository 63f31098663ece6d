# GPT-3 6.7B on one 80 GB GPU (H100, A100 80GB): train_gpt3_6b.py with torchao's 4-bit AdamW moments
# (~1 B/param instead of 8: 6.7 GB instead of 53.3), weights and gradients still fp32. 'auto' then
# fits the activations: full recompute of most blocks at micro-batch 4 (74.5 GB with every block
# recomputed). The budget leaves 5% of the card free. See it: python scripts/plan.py THIS --gpu h100
import os

exec(open(os.path.join(os.path.dirname(__file__), "train_gpt3_6b.py")).read())
out_dir = 'out/gpt3_6b_80gb'
wandb_run_name = 'gpt3-6.7b-80gb'
optimizer = 'adamw4bit'
memory_budget_gb = 0.95 * 85.5  # 95% of an 80 GB card's 85.5e9 bytes
