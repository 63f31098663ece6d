# Measured and not recommended (docs/ladder_evidence.md, "Seeds 23, 25 and 27"): config/ladder_tiny_bf16.py at
# three seeds, as config/ladder_tiny.py has. Rerun on seeds 23 and 25's finished ladders it trained their third
# seeds (and a second seed where those moved a size's lowest rate), and AdamW's held-out errors went from +6.4% and
# +9.7% to +6.1% and +5.7%: not within 3%.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16.py")).read())
seeds = 3
warmup_fraction = 0.1  # as it was measured; the config warms up over a quarter of a run since 2026-12-06
