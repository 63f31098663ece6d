# The deepening CPU ladder (config/ladder_tiny_deepening.py) with a second tokens ratio: one run per size at 2 tokens
# per parameter, at its best rate, so that Chinchilla's L(N, D) can be fitted and held out on the CPU as the GPU
# ladder's is (config/ladder_gpt3.py has 20 and 10). With --out holding that ladder's runs it trains only these.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_deepening.py")).read())
tokens_per_param = (4, 2)
