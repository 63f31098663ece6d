"""metrics.jsonl: whole lines, a torn one skipped on read and never joined to the next, non-finite as null."""
import json

from trainer import metrics


def test_records_are_read_back_in_order_and_by_kind(tmp_path):
    record = metrics.Metrics(tmp_path)
    record("step", 1, loss=3.5, lr=1e-3)
    record("eval", 1, val_loss=3.4)
    record("step", 2, loss=float("nan"), lr=1e-3)
    steps = metrics.read(tmp_path, "step")
    assert [r["iter"] for r in steps] == [1, 2] and steps[0]["loss"] == 3.5 and steps[1]["loss"] is None
    assert [r["kind"] for r in metrics.read(tmp_path / metrics.FILE)] == ["step", "eval", "step"]
    assert all(isinstance(r["time"], float) for r in metrics.read(tmp_path))


def test_a_torn_last_line_is_skipped_and_the_next_run_starts_a_fresh_line(tmp_path):
    metrics.Metrics(tmp_path)("step", 1, loss=3.0)
    with open(tmp_path / metrics.FILE, "a") as f:
        f.write('{"kind": "step", "iter": 2, "lo')  # killed mid-write
    assert [r["iter"] for r in metrics.read(tmp_path)] == [1]
    metrics.Metrics(tmp_path)("step", 2, loss=2.9)  # the resumed run
    assert [(r["iter"], r["loss"]) for r in metrics.read(tmp_path)] == [(1, 3.0), (2, 2.9)]
    for line in (tmp_path / metrics.FILE).read_text().splitlines()[2:]:
        json.loads(line)


def test_other_ranks_write_nothing_and_repeats_keep_the_latest(tmp_path):
    metrics.Metrics(tmp_path, enabled=False)("step", 1, loss=3.0)
    assert not (tmp_path / metrics.FILE).exists()
    record = metrics.Metrics(tmp_path)
    for it, loss in ((1, 3.0), (2, 2.0), (1, 2.5)):  # a rollback repeats iteration 1
        record("eval", it, val_loss=loss)
    assert [(r["iter"], r["val_loss"]) for r in metrics.latest_per_iter(metrics.read(tmp_path))] == [(1, 2.5), (2, 2.0)]
