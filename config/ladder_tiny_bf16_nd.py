# The CPU ladder's config (config/ladder_tiny_bf16.py) with a second tokens ratio: one run per size at 2 tokens per
# parameter at its best rate, so that Chinchilla's L(N, D), the fit plan.py reads first at the 6.7B recipe, is fitted
# and held out on the config's family as the GPU ladder's is (config/ladder_gpt3.py has 20 and 10). With --out
# holding that ladder's runs it trains only these (docs/ladder_evidence.md, "Chinchilla on the config").
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16.py")).read())
tokens_per_param = (4, 2)
