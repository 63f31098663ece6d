# config/ladder_tiny_bf16.py on the whole standard library (python data/quickstart/prepare.py --max_bytes 40e6
# --data_dir data/quickstart_full: 28.4M train tokens, not 7.4M). Its validation set is a tenth of these files, so
# its losses are not comparable with the quick-start corpus's. The same ladder with w320 beyond it, on data it
# does not repeat: config/ladder_tiny_bf16_beyond_full.py (docs/ladder_evidence.md, "Unrepeated data").
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16.py")).read())
common += ' --dataset=quickstart_full'
