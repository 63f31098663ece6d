"""Weighted data mixtures (trainer/bins.py): the schedule keeps each source to its share, draws the same
global batches at any number of processes, resumes bit-exactly, survives a change of weights without
repeating data, and refuses bad input with one line."""
import json
import shlex
import sys
import shutil

import numpy as np
import pytest
import torch

import configurator
from trainer import bins, metrics
from conftest import REPO, VOCAB
from test_distributed import assert_close, final_weights, losses, run
from test_train import assert_same_weights, train

BLOCK = 16  # TINY's block_size


def make_folder(path, train_tokens, seed, meta=None):
    """A prepared folder of random ids (learnable enough for a few steps), with meta.json if given."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    sentences = [rng.integers(0, VOCAB, size=rng.integers(5, 12)) for _ in range(20)]
    for split, n in (("train", train_tokens), ("val", 400)):
        ids = np.concatenate([sentences[i] for i in rng.integers(0, 20, size=n // 8 + 1)])[:n]
        ids.astype(np.uint16).tofile(path / f"{split}.bin")
    if meta:
        bins.write_meta(str(path), {"complete": True, "dtype": "uint16", "vocab_size": VOCAB, **meta})
    return str(path)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """web: ~1,500 windows; books: 37 windows, so a dozen steps run through more than one of its epochs."""
    root = tmp_path_factory.mktemp("mix")
    return {"web": make_folder(root / "web", 24_000, 1), "books": make_folder(root / "books", 600, 2),
            "code": make_folder(root / "code", 8_000, 3)}


def open_mix(shares, seed=5):
    return bins.open_mixture(shares, BLOCK, VOCAB, seed)


def test_fractions_stay_within_one_window_of_the_weights(folders):
    shares = {folders["web"]: 0.5, folders["books"]: 0.3, folders["code"]: 0.2}
    mix = open_mix(shares)
    picks = np.concatenate([mix.next_windows(48)[:, 0] for _ in range(200)])  # 9,600 windows, 200 global batches
    counts = np.stack([np.cumsum(picks == i) for i in range(3)], axis=1)
    expected = np.arange(1, len(picks) + 1)[:, None] * np.array([s.share for s in mix.sources])[None, :]
    assert np.abs(counts - expected).max() < 1.0  # after every window, not only on average
    assert [s.name for s in mix.sources] == ["books", "code", "web"]  # sorted: the order is the config's no matter
    # each source without replacement: books' first 37 draws are a permutation of its 37 windows
    books = mix.sources[0]
    again = open_mix(shares)
    drawn = np.concatenate([again.next_windows(48) for _ in range(3)])
    first_epoch = drawn[drawn[:, 0] == 0, 1][:books.sampler.num_windows]
    assert sorted(first_epoch) == list(range(books.sampler.num_windows))


def test_one_folder_draws_what_its_sampler_alone_draws(folders):
    mix = open_mix({folders["web"]: 1.0})
    alone = bins.WindowSampler(mix.sources[0].sampler.num_windows, 5)
    draws = mix.next_windows(100)
    assert (draws[:, 0] == 0).all() and np.array_equal(draws[:, 1], alone.next_indices(100))
    assert np.array_equal(mix.read(draws[:4], BLOCK), mix.sources[0].train.windows(draws[:4, 1], BLOCK))
    assert mix.headline({"web": 2.5}) == 2.5 and len(mix.val_windows(7, 3)["web"]) == 7


def test_val_windows_do_not_depend_on_the_seed(folders):
    # two seeds of one config are measured on the same windows, or their val losses differ by the windows'
    # own spread (several percent on the quick-start corpus) and not by what the models learned
    shares = {folders["web"]: 0.5, folders["books"]: 0.5}
    one, other = open_mix(shares, seed=1).val_windows(4, 3), open_mix(shares, seed=2).val_windows(4, 3)
    assert all(np.array_equal(one[name], other[name]) for name in one)
    assert not np.array_equal(open_mix(shares, seed=1).next_windows(12), open_mix(shares, seed=2).next_windows(12))
    # a larger eval set starts with the smaller one's windows: the ladder's sizes, at other batches, share them
    more = open_mix(shares, seed=1).val_windows(8, 3)
    assert all(np.array_equal(more[name].ravel()[:one[name].size], one[name].ravel()) for name in one)


def test_a_folder_renamed_since_the_checkpoint_is_a_new_source_and_the_note_says_so(folders, tmp_path):
    """Sources are known by their folder's name (a volume mounted elsewhere keeps it): a renamed one is read from
    its start, which the note says where the new folder has the windows of the dropped one, and how to go on."""
    mix = open_mix({folders["books"]: 1.0})
    mix.next_windows(20)
    renamed = tmp_path / "library"
    shutil.copytree(folders["books"], renamed)
    notes = open_mix({str(renamed): 1.0}).load_state_dict(json.loads(json.dumps(mix.state_dict())))
    assert notes == ["library added (weight 1), as many windows as books: if it is the folder books renamed, its "
                     "data starts over here; name it books again to go on from its position",
                     "books dropped (its position is kept)"]


def test_state_round_trip_and_a_change_of_weights_repeats_nothing(folders):
    shares = {folders["web"]: 0.5, folders["books"]: 0.5}
    mix = open_mix(shares)
    before = np.concatenate([mix.next_windows(24) for _ in range(3)])
    state = json.loads(json.dumps(mix.state_dict()))  # plain values survive any checkpoint format
    resumed = open_mix(shares)
    assert resumed.load_state_dict(state) == []
    assert np.array_equal(resumed.next_windows(50), mix.next_windows(50))  # exact
    # other weights and a new source: noted, the schedule restarts, the kept sources go on from their positions
    changed = open_mix({folders["web"]: 0.9, folders["code"]: 0.1})
    notes = changed.load_state_dict(state)
    assert notes == ["code added (weight 0.1)", "books dropped (its position is kept)", "web weight 0.5 -> 0.9"]
    after = changed.next_windows(500)
    web_before, web_after = before[before[:, 0] == 1, 1], after[after[:, 0] == 1, 1]
    assert not set(web_before) & set(web_after) and len(web_after) == 450  # 0.9 of 500: the new schedule from here
    assert changed.state_dict()["sources"]["books"] == state["sources"]["books"]  # dropped, not forgotten
    back = open_mix(shares)  # books back: from where it stopped, not from its start
    assert back.load_state_dict(changed.state_dict())[0] == "books back (weight 0.5) from its kept position"
    assert back.sources[0].sampler.state_dict() == {k: state["sources"]["books"][k] for k in ("epoch", "position")}


def saved_state(folder, windows, position, seed=1337):
    """A one-source checkpoint's data state, as Mixture.state_dict() writes it."""
    name = bins.source_name(folder)
    return {"seed": seed, "shares": {name: 1.0}, "drawn": {name: 0},
            "sources": {name: {"path": folder, "windows": windows, "epoch": 0, "position": position}}}


def test_a_saved_position_goes_on_and_a_changed_order_is_refused(folders):
    mix = open_mix({folders["web"]: 1.0}, seed=1337)
    windows = mix.sources[0].sampler.num_windows
    legacy = saved_state(folders["web"], windows, 72)
    assert mix.load_state_dict(legacy) == []
    alone = bins.WindowSampler(windows, 1337)
    alone.load_state_dict({"epoch": 0, "position": 72})
    assert np.array_equal(mix.next_windows(30)[:, 1], alone.next_indices(30))
    with pytest.raises(bins.MixtureError, match=r"data order changed .*seed 1337 then, 9 now"):
        open_mix({folders["web"]: 1.0}, seed=9).load_state_dict(legacy)
    moved = saved_state(folders["web"], windows + 1, 0)
    with pytest.raises(bins.MixtureError, match=rf"web: {windows + 1:,} windows then, {windows:,} now"):
        mix.load_state_dict(moved)


def test_set_in_a_config_file_or_on_the_command_line(tmp_path):
    (tmp_path / "mix.py").write_text("data_mixture = {'data/dclm': 3, 'data/pile': 1}\n")
    cfg = configurator.load_config(["config/train_tiny.py", str(tmp_path / "mix.py")])
    assert bins.folders(cfg) == {"data/dclm": 0.75, "data/pile": 0.25}  # data_dir is not among them
    cfg = configurator.load_config(["config/train_tiny.py", "--data_mixture={'data/pile': 1}"])
    assert bins.folders(cfg) == {"data/pile": 1.0}
    assert bins.folders(configurator.load_config(["config/train_tiny.py"])) == {"data/quickstart": 1.0}
    with pytest.raises(configurator.ConfigError, match="data_mixture must be dict"):
        configurator.load_config(["--data_mixture=data/pile"])


def test_bad_input_is_one_line(tmp_path, folders):
    def problem(value):
        cfg = configurator.load_config(["config/train_tiny.py", f"--data_mixture={value}"])
        return configurator.check(cfg, 1)
    assert problem({folders["web"]: -0.5}) == f"data_mixture: the weight of {folders['web']!r} must be a number >= 0, got -0.5"
    assert problem({folders["web"]: 0, folders["code"]: 0.0}).startswith("data_mixture: the weights sum to zero")
    assert "have the same name 'web'" in problem({folders["web"]: 1, str(tmp_path / "web"): 1})
    assert problem({folders["web"]: 1, folders["code"]: 0}) is None  # weight 0: evaluated, never drawn
    with pytest.raises(bins.BinError, match="no train.bin in .*nowhere"):
        open_mix({folders["web"]: 1, str(tmp_path / "nowhere"): 1})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(bins.BinError, match="no train.bin in .*empty"):
        open_mix({str(empty): 1})
    a = make_folder(tmp_path / "a", 2000, 4, meta={"encoding": "gpt2"})
    b = make_folder(tmp_path / "b", 2000, 4, meta={"encoding": "bytes"})
    with pytest.raises(bins.MixtureError, match=r"b was encoded with 'bytes' but .*a with 'gpt2'"):
        open_mix({a: 1, b: 1})
    # train.py: the same line, exit 1, before any model is built
    result = train(tmp_path / "out", folders["web"], "--max_iters=2", f"--data_mixture={{'{a}': 1, '{b}': 1}}",
                   check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("error: data_mixture: ")
    assert "building the model" not in result.stdout


MIX = {"web": 0.5, "books": 0.3, "code": 0.2}


def mix_arg(folders, weights):
    return "--data_mixture=" + repr({folders[name]: w for name, w in weights.items()})


@pytest.fixture(scope="module")
def reference(tmp_path_factory, folders):
    """One process (this one), 12 steps of 16 windows, saved every 4, no dropout so that 2 processes can match it."""
    out = tmp_path_factory.mktemp("mix_reference")
    run(out, folders["web"], "--max_iters=12", mix_arg(folders, MIX))
    return out


def source_position(out_dir, n, name):
    return torch.load(out_dir / f"ckpt_{n}.pt", weights_only=True)["sampler"]["sources"][name]


def test_stop_and_resume_is_bit_exact_mid_epoch_and_across_one(tmp_path, folders, reference):
    log = (reference / "train.log").read_text()
    assert "source books: " in log and "tokens seen (" in log and "data: " in log and "(weight 0.3)" in log
    # at 4 steps books (37 windows) is in its first epoch; the resumed run goes through its end
    assert source_position(reference, 4, "books")["epoch"] == 0 < source_position(reference, 4, "books")["position"]
    assert source_position(reference, 12, "books")["epoch"] >= 1
    split = tmp_path / "split"
    split.mkdir()
    shutil.copy(reference / "ckpt_4.pt", split)  # as if the run had stopped there
    run(split, folders["web"], "--max_iters=12", mix_arg(folders, MIX))
    assert_same_weights(reference / "ckpt_12.pt", split / "ckpt_12.pt")
    state = torch.load(split / "ckpt_12.pt", weights_only=True)
    assert state["sampler"] == torch.load(reference / "ckpt_12.pt", weights_only=True)["sampler"]
    [last] = [r for r in metrics.read(reference, "eval") if r["iter"] == 12]
    assert sorted(last["sources"]) == sorted(MIX)
    assert abs(last["val_loss"] - sum(MIX[name] * loss for name, loss in last["sources"].items())) < 1e-6  # the weighted mean


def test_a_change_of_weights_at_a_resume(tmp_path, folders, reference):
    out = tmp_path / "changed"
    out.mkdir()
    shutil.copy(reference / "ckpt_8.pt", out)
    log = run(out, folders["web"], "--max_iters=10", mix_arg(folders, {"web": 0.75, "books": 0.25})).stdout
    assert ("note: the data mixture changed since the checkpoint (code dropped (its position is kept), "
            "books weight 0.3 -> 0.25, web weight 0.5 -> 0.75)") in log
    at_8, at_10 = (torch.load(out / f"ckpt_{n}.pt", weights_only=True)["sampler"] for n in (8, 10))
    drawn = {name: at_10["drawn"][name] for name in ("web", "books")}
    assert drawn == {"web": 24, "books": 8}  # 2 steps of 16 windows, 3:1 from the resume point on
    web = at_8["sources"]["web"]["position"]
    assert at_10["sources"]["web"]["position"] == web + 24 and at_10["sources"]["code"] == at_8["sources"]["code"]


@pytest.mark.e2e
def test_two_processes_draw_the_same_global_batches(tmp_path, folders, reference):
    two = tmp_path / "two"
    run(two, folders["web"], "--max_iters=4", mix_arg(folders, MIX), nproc=2)
    # another batch would move the loss by ~1e-2; the same one only by float reduction order
    np.testing.assert_allclose(losses(two), losses(reference)[:4], rtol=1e-5)
    assert_close(final_weights(two, 4), final_weights(reference, 4))
    states = [torch.load(out / "ckpt_4.pt", weights_only=True)["sampler"] for out in (reference, two)]
    assert states[0] == states[1]


def test_plan_and_plot_log_show_each_source(folders, reference, capsys):
    sys.path.insert(0, str(REPO / "scripts"))
    import plan
    import plot_log
    # 1,000 steps of 12 x 16 tokens: books (600 tokens) at weight 0.3 runs through 96 epochs, code 4.8, web 4
    plan.main(["config/train_tiny.py", "--block_size=16", "--batch_size=4", "--gradient_accumulation_steps=3",
               "--max_iters=1000", mix_arg(folders, MIX)])
    out = capsys.readouterr().out
    assert "source web: weight 0.5, 4.00 epochs at max_iters" in out
    assert "warning: source books would repeat 96.0 times by max_iters (more than 4)" in out
    assert "warning: source code would repeat 4.8 times" in out and "warning: source web" not in out  # 4 is not past 4
    curves = plot_log.curves(metrics.read(reference))["sources"]
    assert sorted(curves) == sorted(MIX) and sorted(curves["books"]) == [0, 5, 10, 12]


def advice_after(marker, message):
    """The command or setting a message advises, from `marker` to the end (or the next ' (')."""
    return message.split(marker, 1)[1].split(" (")[0]


def test_a_missing_mixture_folder_names_the_mixture_key(tmp_path, data_dir):
    """A data_mixture with a typo in one folder: the advice is the data_mixture key to change, not data_dir."""
    typo = str(tmp_path / "pilee")
    with pytest.raises(bins.BinError) as e:
        bins.open_mixture({data_dir: 0.5, typo: 0.5}, 16, 64, 0, mixed=True)
    message = str(e.value)
    assert f"change the data_mixture key {typo!r} to one of them" in message and "set data_dir" not in message
    with pytest.raises(bins.BinError, match=r"set data_dir \(or dataset\) to one of them"):
        bins.open_mixture({typo: 1.0}, 16, 64, 0)  # a run on data_dir alone keeps the data_dir advice


def test_a_broken_data_mixture_shows_the_expected_form_which_works(tmp_path):
    for broken in ("{data/pile:0.7}", "data/pile"):
        with pytest.raises(configurator.ConfigError) as e:
            configurator.load_config([f"--data_mixture={broken}"])
        # the shell strips the quotes around what the message suggests; load_config gets the rest
        suggested = shlex.split(advice_after("write it as ", str(e.value)))
        assert configurator.load_config(suggested).data_mixture == {"data/pile": 0.7, "data/dclm": 0.3}
    config = tmp_path / "mix.py"
    config.write_text('data_mixture = "data/pile"\n')
    with pytest.raises(configurator.ConfigError) as e:
        configurator.load_config([str(config)])
    config.write_text(advice_after("write it as ", str(e.value)) + "\n")
    assert configurator.load_config([str(config)]).data_mixture == {"data/pile": 0.7, "data/dclm": 0.3}
