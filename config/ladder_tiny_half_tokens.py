# A faster CPU ladder, measured and not recommended (docs/ladder_evidence.md, "Half the tokens"): the six sizes and
# rules of config/ladder_tiny_deepening.py at 2 tokens per parameter instead of 4, still in about 400 steps (the batch
# halves: 1 sequence of 128 at w32, 25 at w112), in 29-32 minutes on 2 cores. On seeds 7, 8 and 9 its held-out w112 was
# within 3% in 3 of 6 checks and once outside its interval, against 4 of 6 and none at 4 tokens per parameter.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_deepening.py")).read())
tokens_per_param = 2
