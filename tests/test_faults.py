"""faults.py: the one fault-injection scheme, parsed once, firing where and when it is asked to."""
import pytest
import torch

from trainer import RunError, faults


def test_spec_is_parsed_into_points_and_bad_ones_are_refused():
    f = faults.Faults("nan@3,4 kill_before_rotate kill_synced@2")
    assert f.fires("nan", 3) and f.fires("nan", 4) and not f.fires("nan", 5)
    assert f.fires("kill_before_rotate") and not f.fires("disk_full")
    assert f.fires("kill_synced", 2) and not f.fires("kill_synced", 1) and f.training
    assert not faults.Faults("disk_full").training and not faults.Faults("").points
    for bad in ("nan", "disk_full@3", "typo@1"):
        with pytest.raises(ValueError, match="TRAINER_FAULTS: unknown fault"):
            faults.Faults(bad)


def test_step_faults_poison_the_loss_scale_gradients_and_stop_the_last_rank():
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    loss = torch.tensor(2.0)
    never = lambda step: False  # noqa: E731
    spiky = faults.Faults("spike@5 nan@6")
    assert spiky.step(5, loss, [p], False, never).item() == 2000.0 and p.grad.tolist() == [1000.0, 1000.0]
    assert spiky.step(5, loss, [p], False, lambda step: True).item() == 2.0  # a replayed step: no spike
    assert torch.isnan(spiky.step(6, loss, [p], False, never))
    with pytest.raises(RunError, match="injected error on the last rank"):
        faults.Faults("rank_error@3").step(3, loss, [p], True, never)
    assert faults.Faults("rank_error@3").step(3, loss, [p], False, never) is loss  # not the last rank
    settled = []  # a crash first waits, on every rank, for the background save in flight
    with pytest.raises(RuntimeError, match="injected crash"):
        faults.Faults("crash@2").step(2, loss, [p], True, never, lambda: settled.append("last"))
    assert faults.Faults("crash@2").step(2, loss, [p], False, never, lambda: settled.append("other")) is loss
    assert settled == ["last", "other"]
    assert faults.Faults("crash@2", restarted=True).step(2, loss, [p], True, never) is loss


def test_a_run_without_training_faults_keeps_its_own_step_loss_and_one_with_them_gets_it_wrapped():
    step_loss = lambda iteration, loss: loss  # noqa: E731
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    assert faults.Faults("disk_full").wrap(step_loss, lambda: [p], True, lambda step: False, lambda: None) is step_loss
    wrapped = faults.Faults("nan@2").wrap(step_loss, lambda: [p], True, lambda step: False, lambda: None)
    assert wrapped(1, torch.tensor(2.0)).item() == 2.0 and torch.isnan(wrapped(2, torch.tensor(2.0)))
