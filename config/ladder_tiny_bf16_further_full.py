# config/ladder_tiny_bf16_beyond_full.py with one size more, w400 (about 4.0M parameters, 1.5x w320, 6.0x w160),
# trained once per seed at the rate the sizes below predict, as w320 is. Its held-out checks read w400 from the
# seven sizes below (1.5x out), from six (6.0x, past the 6.7B target's 5.1x beyond the GPU ladder's 1.3B) and from
# five (9.4x): whether Muon's curve, whose log-log slope eased from w160 to w320, eases on or bends back. Link a
# finished beyond_full ladder's runs in (mkdir -p NEW && cp -al OUT/runs NEW/) so that only w400 trains: about 70
# minutes on 2 cores in bf16 (docs/ladder_evidence.md, "w400: further"; its 15.9M tokens are 0.56 of a pass).
import os as _os

exec(open(_os.path.join(_os.path.dirname(__file__), "ladder_tiny_bf16_beyond_full.py")).read())
sizes['w400'] = dict(n_layer=2, n_head=25, n_embd=400)
sweep_points = (5, 3, 3, 3, 3, 3, 1, 1)  # w320 and w400 once per seed, at the rate the six below predict
