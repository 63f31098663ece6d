# config/ladder_tiny.py in bf16 autocast over fp32 weights, as the GPU recipes train, for a CPU with bf16
# instructions (AVX512-BF16 or AMX; lscpu lists avx512_bf16 or amx_bf16): there a w160 step takes 0.70x the fp32
# step's time (docs/performance.md, "bf16 on the CPU") and the ladder about 34 minutes, not 39-50. On a CPU without
# them bf16 is slower: use config/ladder_tiny.py. Its ladders are in docs/scaling_ladder.md, "bf16".
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
common += ' --dtype=bfloat16'
