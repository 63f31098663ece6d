# A faster CPU ladder, measured and not recommended (docs/ladder_evidence.md, "One depth at half the tokens"):
# config/ladder_tiny.py's sizes and rules at 2 tokens per parameter instead of 4, still in about 400 steps (the
# batch halves). Its seed-11 ladder took 26 minutes on 2 cores and over-predicted AdamW's held-out w160 by 7.1%,
# outside its interval, where the config at 4 tokens per parameter was within 3% on 13 of 14 checks (seven seeds).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
tokens_per_param = 2
warmup_fraction = 0.1  # as it was measured; the config warms up over a quarter of a run since 2026-12-06
