# config/ladder_tiny_bf16_beyond.py on the whole standard library (python data/quickstart/prepare.py --max_bytes 40e6
# --data_dir data/quickstart_full: 28.4M train tokens, not 7.4M), so that w320's 10.2M tokens are 0.36 of a pass, not
# 1.38: whether the sizes below mispredict w320 with or without repeated data (docs/ladder_evidence.md, "Unrepeated
# data"). Its six sizes are config/ladder_tiny_bf16_full.py's, so either can lend its runs to the other
# (mkdir -p NEW && cp -al OUT/runs NEW/); with none to link in, the whole climb trains: 49 minutes on 2 cores in bf16.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16_beyond.py")).read())
common += ' --dataset=quickstart_full'
