# A faster CPU ladder, measured and not recommended (docs/ladder_evidence.md, "A 22-minute ladder"): the rules of
# config/ladder_tiny_deepening.py on five smaller sizes, 11k to 334k parameters (29x), in about 22 minutes on 2 cores.
# Its small sizes sit on the byte-level plateau, so the held-out w80 was over-predicted by 6% (AdamW) and 16% (Muon).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_deepening.py")).read())
# the deepening family with w16 added below and w96 and w112 dropped
sizes = {'w16': dict(n_layer=2, n_head=1, n_embd=16), **{k: v for k, v in sizes.items() if k not in ('w96', 'w112')}}
