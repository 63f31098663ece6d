"""runlog.py's step line and clock (its crash hook: test_guardrails.py)."""
from trainer import runlog


def test_the_step_line_and_its_clock():
    said = []
    clock = runlog.StepClock(compiling=True, log=said.append)
    clock.lap(3.0)
    assert said == ["first step took 3.0s (includes warm-up and compilation)"] and clock.eta(10) is None
    clock.lap(1.0)
    assert len(said) == 1 and clock.eta(7200) == 7200.0
    figures = dict(loss=2.0, step_time=0.1, tokens_per_sec=97038, lr=1e-4, grad_norm=0.5, mfu=0.4, hfu=0.5)
    line = runlog.step_line(5, figures, "1.0GB RSS", 8, clock.eta(7200))
    assert line == ("iter 5: loss 2.0000, time 100ms, mfu 40.0%, tok/s 97,038 (12,130 per GPU), lr 1.000e-04, "
                    "grad norm 0.500, mem 1.0GB RSS, eta 2.0h")
    assert runlog.step_line(1, dict(figures, mfu=None), "m", show_hfu=True).endswith("mem m, hfu 50.0%")
