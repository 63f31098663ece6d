# A faster CPU ladder, measured and not recommended (docs/scaling_ladder.md, "A 22-minute ladder"): the rules of
# config/ladder_tiny.py on five smaller sizes, 11k to 334k parameters (29x), in about 22 minutes on 2 cores.
# Its small sizes sit on the byte-level plateau, so the held-out w80 was over-predicted by 6% (AdamW) and 16% (Muon).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
sizes = {
    'w16': dict(n_layer=2, n_head=1, n_embd=16),
    'w32': dict(n_layer=2, n_head=2, n_embd=32),
    'w48': dict(n_layer=2, n_head=3, n_embd=48),
    'w64': dict(n_layer=3, n_head=4, n_embd=64),
    'w80': dict(n_layer=4, n_head=5, n_embd=80),
}
