"""The token-bin format: the writer, the checked reader train.py uses, and the window sampler."""
import json
import time

import numpy as np
import pytest

from conftest import REPO
from trainer import bins
from trainer.bins import BinError, BinWriter, WindowSampler, open_split

BLOCK = 8


def make_bins(folder, train, val, meta=None, n_vocab=257):
    writer = BinWriter(folder, n_vocab)
    writer.append("train", np.asarray(train))
    writer.append("val", np.asarray(val))
    writer.sync()
    writer.close()
    if meta is not None:
        meta = {"encoding": "bytes", "vocab_size": n_vocab, "dtype": "uint16", "complete": True, **meta}
        bins.write_meta(folder, meta)
    return folder


# -----------------------------------------------------------------------------
# writing

def test_writer_appends_little_endian_uint16_and_cuts_back_on_resume(tmp_path):
    writer = BinWriter(tmp_path, 50257)
    writer.append("train", np.array([1, 50256], dtype=np.uint32))
    assert writer.sync() == {"train": 4, "val": 0}
    writer.append("train", np.array([7, 8]))  # appended after the last commit, then "killed"
    writer.close()
    assert (tmp_path / "train.bin").read_bytes() == b"\x01\x00\x50\xc4\x07\x00\x08\x00"

    writer = BinWriter(tmp_path, 50257, {"train": 4, "val": 0})  # a resume cuts back to the commit
    writer.append("train", np.array([9]))
    assert writer.sync() == {"train": 6, "val": 0}
    writer.close()
    assert np.fromfile(tmp_path / "train.bin", dtype="<u2").tolist() == [1, 50256, 9]


def test_writer_refuses_big_vocab_and_bins_shorter_than_the_manifest(tmp_path):
    with pytest.raises(ValueError, match="does not fit"):
        BinWriter(tmp_path, 65537)
    BinWriter(tmp_path, 65536).close()
    with pytest.raises(BinError, match="shorter than its progress manifest"):
        BinWriter(tmp_path, 257, {"train": 10, "val": 0})


def test_write_json_atomic_leaves_no_temp_file(tmp_path):
    bins.write_meta(tmp_path, {"complete": False})
    bins.write_meta(tmp_path, {"complete": True})
    assert bins.read_meta(tmp_path) == {"complete": True}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]
    assert bins.read_meta(tmp_path / "nowhere") is None


@pytest.mark.parametrize("fails", ["fsync", "replace"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path, monkeypatch, fails):
    """A full disk (or a read-only folder) raises its OSError to the caller, with the last good meta.json in place
    and no empty meta.json.tmp-PID beside it."""
    bins.write_meta(tmp_path, {"complete": True})

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(bins.os, fails, full)
    with pytest.raises(OSError, match="No space left"):
        bins.write_meta(tmp_path, {"complete": False})
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["meta.json"]
    assert bins.read_meta(tmp_path) == {"complete": True}


# -----------------------------------------------------------------------------
# reading

def test_windows_are_the_expected_slices_with_or_without_meta(tmp_path):
    tokens = np.arange(100) % 257
    for meta in (None, {}):
        folder = tmp_path / str(meta)
        folder.mkdir()
        tb = open_split(make_bins(folder, tokens, tokens[:20], meta), "train", BLOCK, 257)
        assert tb.num_tokens == 100 and tb.num_windows(BLOCK) == 12  # (100 - 1) // 8
        x = tb.windows(np.array([0, 11, 3]), BLOCK)
        assert x.dtype == np.int64 and x.shape == (3, BLOCK + 1)
        for row, i in zip(x, [0, 11, 3]):
            assert row.tolist() == tokens[i * BLOCK:(i + 1) * BLOCK + 1].tolist()
        with pytest.raises(IndexError):
            tb.windows(np.array([12]), BLOCK)


def test_windows_stay_right_across_remaps(tmp_path):
    tokens = np.arange(1000) % 257
    tb = open_split(make_bins(tmp_path, tokens, tokens), "train", BLOCK, 257)
    tb.REMAP_EVERY = 3
    for i in range(10):
        assert tb.windows(np.array([i]), BLOCK)[0].tolist() == tokens[i * BLOCK:(i + 1) * BLOCK + 1].tolist()


def test_a_bad_id_in_a_batch_names_the_file(tmp_path):
    tokens = np.arange(100)
    tokens[50] = 300
    tb = open_split(make_bins(tmp_path, tokens, tokens), "train", BLOCK, 257)
    tb.windows(np.array([0]), BLOCK)
    with pytest.raises(BinError, match=r"train.bin holds token id 300, beyond the model's vocab_size 257"):
        tb.windows(np.array([0, 6]), BLOCK)


def test_missing_data_names_the_prepare_command(tmp_path):
    with pytest.raises(BinError, match=r"python data/pile/prepare.py --data_dir .*pile.*data/quickstart/prepare.py"):
        open_split(str(tmp_path / "pile"), "train", BLOCK, 257)
    with pytest.raises(BinError, match=r"python data/quickstart/prepare.py --data_dir .*quickstart"):
        open_split(str(tmp_path / "quickstart"), "train", BLOCK, 257)


def test_missing_data_run_from_another_folder_says_so_and_its_command_works_from_there(tmp_path, monkeypatch):
    """A reviewer ran `cd scripts && python ../train.py ...`: the advice named data/quickstart/prepare.py, which
    is not there from scripts/. The script's path is now relative to where the user is, and a relative
    data_dir is said to be read from there."""
    monkeypatch.chdir(REPO / "scripts")
    with pytest.raises(BinError) as e:
        open_split("data/quickstart", "train", BLOCK, 257)
    assert str(e.value) == (
        "no train.bin in data/quickstart: prepare the data first with: python ../data/quickstart/prepare.py "
        f"--data_dir data/quickstart (a relative data_dir is read from the folder you run in, {REPO / 'scripts'}, "
        f"not the repository's: run from {REPO} as its docs do)")


def test_a_mistyped_data_folder_lists_the_real_ones(tmp_path):
    with pytest.raises(BinError) as e:
        open_split(str(tmp_path / "pilee"), "train", BLOCK, 257)
    message = str(e.value)
    assert message.startswith(f"no train.bin in {tmp_path / 'pilee'}: there is no data/pilee/prepare.py")
    assert "data/pile (prepare.py)" in message and "data/quickstart (" in message
    assert "hellaswag" not in message and "data/eval" not in message  # their prepare.py make evaluation files
    assert "\n" not in message


def test_too_many_ids_for_weights_the_run_starts_from(tmp_path):
    big_vocab = make_bins(tmp_path, np.arange(100), np.arange(100), {"vocab_size": 50257}, n_vocab=50257)
    with pytest.raises(BinError, match="vocab_size 320: raise vocab_size"):
        open_split(big_vocab, "train", BLOCK, 320)
    with pytest.raises(BinError) as e:  # a fine-tuning run: the vocabulary is the weights', not the config's
        open_split(big_vocab, "train", BLOCK, 320, vocab_from="gpt2")
    assert "raise vocab_size" not in str(e.value)
    assert "the model's vocabulary comes from gpt2 and cannot change: prepare the data with the encoding" in str(e.value)
    tokens = np.arange(100)
    tokens[50] = 300  # no meta.json: the per-batch check says the same
    (tmp_path / "bare").mkdir()
    tb = open_split(make_bins(tmp_path / "bare", tokens, tokens), "train", BLOCK, 257, vocab_from="the checkpoint")
    with pytest.raises(BinError, match="vocabulary comes from the checkpoint and cannot change"):
        tb.windows(np.array([6]), BLOCK)


def test_reader_refuses_what_cannot_be_trained_on(tmp_path):
    def folder(name):
        path = tmp_path / name
        path.mkdir()
        return path

    odd = make_bins(folder("odd"), np.arange(100), np.arange(100))
    with open(odd / "val.bin", "ab") as f:
        f.write(b"\x00")
    with pytest.raises(BinError, match="odd size"):
        open_split(odd, "val", BLOCK, 257)

    unfinished = make_bins(folder("unfinished"), np.arange(100), np.arange(100),
                           {"complete": False, "command": "python data/pile/prepare.py --max_tokens 5"})
    with pytest.raises(BinError, match=rf"unfinished: re-run python data/pile/prepare.py --max_tokens 5 --data_dir "
                                       rf"{unfinished}"):
        open_split(unfinished, "train", BLOCK, 257)
    # copied or mounted elsewhere since: the command's own --data_dir would resume another folder
    moved = make_bins(folder("moved"), np.arange(100), np.arange(100),
                      {"complete": False, "command": "python data/pile/prepare.py --data_dir /old/pile --max_tokens 5"})
    with pytest.raises(BinError, match=rf"re-run python data/pile/prepare.py --data_dir {moved} --max_tokens 5"):
        open_split(moved, "train", BLOCK, 257)

    big_vocab = make_bins(folder("big"), np.arange(100), np.arange(100), {"vocab_size": 50257}, n_vocab=50257)
    with pytest.raises(BinError, match="50257 ids.*vocab_size 320"):
        open_split(big_vocab, "train", BLOCK, 320)

    short = make_bins(folder("short"), np.arange(100), np.arange(8), {})
    with pytest.raises(BinError, match=r"val.bin has 8 tokens but block_size 8 needs at least 9"):
        open_split(short, "val", BLOCK, 257)
    assert open_split(short, "val", BLOCK - 1, 257).num_windows(BLOCK - 1) == 1

    recorded = {"splits": {"train": {"tokens": 100}, "val": {"tokens": 100}}}
    cut = make_bins(folder("cut"), np.arange(100), np.arange(100), recorded)
    assert open_split(cut, "train", BLOCK, 257).num_tokens == 100
    (cut / "train.bin").write_bytes((cut / "train.bin").read_bytes()[:120])  # a copy cut short, at an even length
    with pytest.raises(BinError, match=r"train.bin holds 60 tokens but meta.json records 100: .*copy it again"):
        open_split(cut, "train", BLOCK, 257)

    mangled = make_bins(folder("mangled"), np.arange(100), np.arange(100), {})
    (mangled / "meta.json").write_text('{"encoding": "gp')
    with pytest.raises(BinError, match=r"mangled/meta.json does not read as JSON"):
        open_split(mangled, "train", BLOCK, 257)
    (mangled / "meta.json").write_text("[1, 2]")
    with pytest.raises(BinError, match=r"meta.json holds a list, not prepare's record"):
        bins.read_meta(mangled)


@pytest.mark.parametrize("field, value, named", [
    ("vocab_size", "abc", "vocab_size is 'abc', not a whole number"),
    ("vocab_size", True, "vocab_size is True, not a whole number"),
    ("splits", "x", "splits is 'x', not an object"),
    ("splits", {"train": {"tokens": "100"}}, "splits.train.tokens is '100', not a whole number"),
    ("complete", "yes", "complete is 'yes', not true or false"),
    ("encoding", ["bytes"], "encoding is ['bytes'], not a string"),
])
def test_a_meta_field_readers_use_of_another_type_is_one_line(tmp_path, field, value, named):
    """A meta.json edited by hand: where train.py, check_env.py or sample.py would stop on a TypeError part way, the
    file and the field are named."""
    make_bins(tmp_path, np.arange(100), np.arange(100), {field: value})
    with pytest.raises(BinError) as e:
        open_split(tmp_path, "train", BLOCK, 257)
    message = str(e.value)
    assert message.startswith(f"{tmp_path / 'meta.json'}: {named}") and message.endswith(": prepare the data again")


def test_a_command_edited_past_splitting_blocks_nothing_and_the_hint_falls_back_to_a_guess(tmp_path):
    """Only the hint reads meta.json's command: training reads complete bins without it, and an unfinished
    folder's advice is the guess for its name, not a shlex traceback."""
    (tmp_path / "done").mkdir(), (tmp_path / "pile").mkdir()
    done = make_bins(tmp_path / "done", np.arange(100), np.arange(100), {"command": "python 'prepare.py"})
    assert open_split(done, "train", BLOCK, 257).num_tokens == 100
    pile = make_bins(tmp_path / "pile", np.arange(100), np.arange(100),
                     {"command": "python 'prepare.py", "complete": False})
    with pytest.raises(BinError, match=rf"unfinished: re-run python \S*data/pile/prepare.py --data_dir {pile} "):
        open_split(pile, "train", BLOCK, 257)


# -----------------------------------------------------------------------------
# sampling

@pytest.mark.parametrize("n", [1, 2, 3, 5, 64, 1000, 4097])
def test_each_epoch_is_a_permutation_and_epochs_differ(n):
    sampler = WindowSampler(n, seed=1)
    first, second = sampler.next_indices(n), sampler.next_indices(n)
    assert sorted(first.tolist()) == sorted(second.tolist()) == list(range(n))
    assert first.dtype == np.int64
    if n >= 64:
        assert first.tolist() != second.tolist()
        assert first.tolist() != list(range(n))
        assert first.tolist() != WindowSampler(n, seed=2).next_indices(n).tolist()
    assert sampler.state_dict() == {"epoch": 2, "position": 0}


def test_the_sequence_is_pinned():
    # the same on every machine and version: a resumed run depends on it
    assert WindowSampler(10, seed=0).next_indices(10).tolist() == PINNED


PINNED = [2, 5, 7, 9, 4, 3, 6, 1, 8, 0]


def test_resume_from_state_dict_matches_an_uninterrupted_run():
    n = 1000
    reference = WindowSampler(n, seed=7).next_indices(3 * n)
    sampler, got = WindowSampler(n, seed=7), []
    for size in [1, 299, 700, 500, 1, 999, 500]:  # crossing epoch ends, resuming after each call
        got.append(sampler.next_indices(size))
        state = json.loads(json.dumps(sampler.state_dict()))  # plain ints survive any checkpoint format
        assert all(type(v) is int for v in state.values())
        sampler = WindowSampler(n, seed=7)
        sampler.load_state_dict(state)
    assert np.concatenate(got).tolist() == reference.tolist()


def test_huge_window_counts_are_never_materialised():
    start = time.time()
    sampler = WindowSampler(10**11, seed=3)
    sampler.load_state_dict({"epoch": 5, "position": 10**11 - 50_000})
    x = sampler.next_indices(100_000)  # runs across the end of an epoch
    assert time.time() - start < 2
    assert x.min() >= 0 and x.max() < 10**11
    assert len(np.unique(x[:50_000])) == 50_000 and len(np.unique(x[50_000:])) == 50_000
    assert sampler.state_dict() == {"epoch": 6, "position": 50_000}


def test_writer_to_sampler_round_trip(tmp_path):
    """What train.py consumes: bins the writer made, read back as windows in sampler order."""
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 257, size=10_000)
    tb = open_split(make_bins(tmp_path, tokens, tokens[:500], {}), "train", 64, 320)
    sampler = WindowSampler(tb.num_windows(64), seed=0)
    seen = set()
    for _ in range(tb.num_windows(64) // 16):
        indices = sampler.next_indices(16)
        x = tb.windows(indices, 64)
        for row, i in zip(x, indices):
            assert row.tolist() == tokens[i * 64:i * 64 + 65].tolist()
        seen.update(indices.tolist())
    assert len(seen) == tb.num_windows(64) // 16 * 16  # without replacement within the epoch
