# GPT-3 6.7B on one 80 GB GPU (H100, A100 80GB): train_gpt3_6b.py in the leanest memory mode, torchao's
# 4-bit AdamW moments (~1 B/param instead of 8) over bf16 weights (2 B instead of 4) with stochastically
# rounded steps; gradients and their accumulation stay fp32. That leaves 'auto' room for selective
# checkpointing at micro-batch 4 (73.4 GB simulated on fake tensors, 78.1 GB with the margin), where fp32
# weights would need full recompute of 28 of 32 blocks (28% more FLOPs a step). The budget leaves 5%
# of the card free. With 128 GB or more of host RAM, --optimizer=adamw --optimizer_offload=True keeps fp32
# AdamW's arithmetic (state and step on the host; 70.9 GB estimated on the card) at the cost of ~40 GB of
# PCIe copies and a host step each optimizer step. See every mode: python scripts/plan.py THIS --gpu h100
import os

exec(open(os.path.join(os.path.dirname(__file__), "train_gpt3_6b.py")).read())
out_dir = 'out/gpt3_6b_80gb'
wandb_run_name = 'gpt3-6.7b-80gb'
optimizer = 'adamw4bit'
master_weights = 'bfloat16'
memory_budget_gb = 0.95 * 85.5  # 95% of an 80 GB card's 85.5e9 bytes
