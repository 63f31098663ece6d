# A faster CPU ladder, measured and not recommended (docs/ladder_evidence.md, "Fewer seeds, for the half hour?"):
# config/ladder_tiny.py with one seed a size, so each size's loss is its sweep's lowest run and the forecast's
# prior takes single runs' curves. Its seed-17 ladder took 31 minutes on 2 cores and under-predicted AdamW's
# held-out w160 by 7.4%, where the config was within 3% on 13 of 14 checks (seven seeds).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
seeds = 1
seeded_rates = 1
warmup_fraction = 0.1  # as it was measured; the config warms up over a quarter of a run since 2026-12-06
