# config/ladder_tiny_bf16.py with one size beyond it, w320 (about 2.5M parameters, 3.8x w160), trained once per
# seed at the rate the sizes below predict, as the GPU ladder's 1.3B is. Its held-out checks then read w320 from
# the six sizes below (3.8x out) and from five (5.9x, about the 6.7B target's 5.1x beyond the GPU ladder's 1.3B):
# the distance at which plan.py reads 6.7B, with a fit its backtest judged. Link a finished ladder's runs in
# (mkdir -p NEW && cp -al OUT/runs NEW/) so that only w320 trains: 35 minutes on 2 cores in bf16
# (docs/ladder_evidence.md, "w320: beyond the config"; its 10.2M tokens are 1.38 passes over the corpus's 7.4M).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16.py")).read())
sizes['w320'] = dict(n_layer=2, n_head=20, n_embd=320)
sweep_points = (5, 3, 3, 3, 3, 3, 1)  # w320 once per seed, at the rate the lr fit through the six below gives
