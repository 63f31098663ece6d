# A faster CPU ladder, measured and not recommended (docs/ladder_evidence.md, "One depth at three tokens"):
# config/ladder_tiny.py's sizes and rules at 3 tokens per parameter instead of 4, still in about 400 steps (the
# batch three quarters). Its seed-11 ladder took 32 minutes on 2 cores and under-predicted Muon's held-out w160 by
# 4.7%, where the config at 4 tokens per parameter was within 3% on 13 of 14 checks (seven seeds).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
tokens_per_param = 3
warmup_fraction = 0.1  # as it was measured; the config warms up over a quarter of a run since 2026-12-06
