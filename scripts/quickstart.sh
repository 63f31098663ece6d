#!/usr/bin/env bash
# The README's quick start, offline on a CPU in a few minutes: prepare the quick-start corpus
# (the Python standard library's own source, byte-level), train config/train_tiny.py (300 steps,
# checkpoints every 100, the newest 2 kept), then sample from it. Re-running it is safe: each
# step sees what is already done (prepared data, finished training) and moves on.
set -euo pipefail
cd "$(dirname "$0")/.."
python data/quickstart/prepare.py
python train.py config/train_tiny.py
python sample.py --out_dir=out/tiny --device=cpu --start="def " --num_samples=2 --max_new_tokens=200
