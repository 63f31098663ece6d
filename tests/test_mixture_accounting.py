"""A data_mixture's accounting across a change of weights at a resume (trainer/bins.py, checkpointer.py): the
start-up lines give each source's own share of a step, the epochs they predict by max_iters count what was
drawn at the old weights, and the best val loss (a mean weighted by the shares) starts again."""
import pytest
import torch

from trainer import metrics
from test_distributed import run
from test_mixture import BLOCK, MIX, folders, mix_arg, open_mix  # noqa: F401 (folders: a fixture)


def predicted_epochs(lines):
    return {line.split(": ")[1].split("/")[-1].split(" ")[0]: float(line.split(" per step, ")[1].split(" epochs")[0])
            for line in lines if line.startswith("data: ")}


def test_the_data_lines_give_each_sources_share_and_predict_the_epochs_measured_after_a_change(folders):
    """12 steps of 16 windows at MIX, then a resume at 9:1 web:books to step 40. The prediction made at the
    resume matches what the samplers have drawn at step 40, within the window a share can be off."""
    windows_per_step, max_iters = 16, 40
    before = open_mix({folders[name]: w for name, w in MIX.items()})
    for _ in range(12):
        before.next_windows(windows_per_step)
    after = open_mix({folders["web"]: 0.9, folders["books"]: 0.1})
    assert after.load_state_dict(before.state_dict()) == after.changes and after.changes
    lines = after.describe(windows_per_step * BLOCK, max_iters, iter_num=12)
    web = next(line for line in lines if line.startswith(f"data: {folders['web']} "))
    assert f"({0.9 * windows_per_step * BLOCK:,.0f} per step, " in web  # its share of the 256 tokens a step, not all
    predicted = predicted_epochs(lines)
    for _ in range(max_iters - 12):
        after.next_windows(windows_per_step)
    for s in after.sources:
        assert predicted[s.name] == pytest.approx(after.accounting(s.name)[1], abs=1.01 / s.sampler.num_windows + 0.005)
    # the old formula, share x max_iters x tokens per step, would have said 0.1 x 40 x 16 windows for books
    books = next(s for s in after.sources if s.name == "books")
    assert abs(0.1 * max_iters * windows_per_step / books.sampler.num_windows - predicted["books"]) > 0.5


def test_a_change_of_weights_resets_the_best_val_loss_and_is_recorded(tmp_path, folders):
    out = tmp_path / "run"
    run(out, folders["web"], "--max_iters=4", "--eval_interval=2", mix_arg(folders, MIX))
    state = torch.load(out / "ckpt_4.pt", weights_only=False)
    state["best_val_loss"] = 0.001  # far below any loss here: only a reset lets a later eval be the best
    torch.save(state, out / "ckpt_4.pt")
    log = run(out, folders["web"], "--max_iters=6", "--eval_interval=2", mix_arg(folders, {"web": 0.75, "books": 0.25})).stdout
    assert "note: best val loss 0.0010 was a mean under the old weights: reset, the next eval sets it" in log
    records = metrics.read(str(out))
    changed = metrics.read(str(out), kind="weights_changed")
    assert len(changed) == 1 and changed[0]["iter"] == 4 and changed[0]["weights"] == {"books": 0.25, "web": 0.75}
    assert "books weight 0.3 -> 0.25" in changed[0]["changes"]
    later = [r["val_loss"] for r in records if r["kind"] == "eval" and r["iter"] > 4]
    done = [r for r in records if r["kind"] == "done"][-1]  # the resumed run's
    assert later and done["best_val_loss"] == pytest.approx(min(later))
