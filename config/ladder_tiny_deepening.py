# The CPU ladder's family until 2026-12-06, a study now (docs/ladder_evidence.md, where seeds 1337 to 10 were
# measured on it): config/ladder_tiny.py's rules on six sizes that deepen as they widen (2 layers at w32 and w48,
# 3 at w64, 4 from w80), 35k to 639k parameters (18x). Its log-log slope bends where it deepens, and its held-out
# w112 was over-predicted by 3.0-4.8% (AdamW) on 4 of 10 seeds; the one-depth family was within 3% on 13 of 14.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
sizes = {
    'w32': dict(n_layer=2, n_head=2, n_embd=32),
    'w48': dict(n_layer=2, n_head=3, n_embd=48),
    'w64': dict(n_layer=3, n_head=4, n_embd=64),
    'w80': dict(n_layer=4, n_head=5, n_embd=80),
    'w96': dict(n_layer=4, n_head=6, n_embd=96),
    'w112': dict(n_layer=4, n_head=7, n_embd=112),
}
warmup_fraction = 0.1  # as it was measured; the config warms up over a quarter of a run since 2026-12-06
