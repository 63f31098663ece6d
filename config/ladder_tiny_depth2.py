# A CPU ladder of one depth, a study (docs/scaling_ladder.md, "One depth"): config/ladder_tiny.py's rules on six
# sizes that are all 2 layers deep, 35k to 665k parameters (19x), widened at head size 16. The standard family
# deepens from 2 to 4 layers as it widens, and AdamW's log-log slope is shallow across those steps and steep
# between the three 4-layer sizes at its top: this family asks whether a ladder of one shape follows one law.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
sizes = {f'w{width}': dict(n_layer=2, n_head=width // 16, n_embd=width) for width in (32, 48, 64, 96, 128, 160)}
