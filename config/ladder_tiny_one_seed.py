# The half-hour CPU ladder (docs/scaling_ladder.md, "Fewer seeds, for the half hour?"): config/ladder_tiny.py
# with one seed a size, so each size's loss is its sweep's lowest run and the forecast's prior takes single runs'
# curves. Read off the config's seven ladders it is about half their time and misses the 3% checks about as often.
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny.py")).read())
seeds = 1
seeded_rates = 1
