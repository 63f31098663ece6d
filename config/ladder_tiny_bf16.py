# The CPU ladder in about half an hour, for a CPU with bf16 instructions (AVX512-BF16 or AMX; lscpu lists
# avx512_bf16 or amx_bf16): config/ladder_tiny.py in bf16 autocast over fp32 weights, as the GPU recipes train,
# where a w160 step takes 0.51-0.70x fp32's (docs/performance.md, "bf16 on the CPU"), and the two best rates of
# each size at two seeds, not three. On a CPU without bf16 instructions bf16 is no faster: use
# config/ladder_tiny.py. Its ladders and the seed rules read off them: docs/ladder_evidence.md, "bf16, and the half
# hour" and "Seeds 23, 25 and 27" (at a tenth's warmup), and "Warmup and the AdamW seeds" (at the config's quarter).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
common += ' --dtype=bfloat16'
seeds = 2
