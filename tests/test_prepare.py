"""The prepare job end to end, run as a user runs it: data/pile/prepare.py in a subprocess on small
generated jsonl / jsonl.zst / parquet / text files, with kills made deterministic by fault injection."""
import json
import os
import random
import signal
import subprocess
import sys
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from trainer import bins, preparation, runlock
from conftest import REPO, load_script, run_here
from trainer.tokenizer import get_encoding

WORDS = ["the", "of", "naïve", "café", "東京", "🚀", "<|endoftext|>", "\n", "\n\n", "  ", "x=1;", "Ünïcödé"]


def make_docs(n, seed=0):
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(1, 60))) for _ in range(n)]


def write_jsonl(path, docs, compress=False):
    data = "".join(json.dumps({"text": d, "meta": {"i": i}}) + "\n" for i, d in enumerate(docs)).encode()
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if compress else data)
    return str(path)


def write_source(folder, fmt, docs):
    """docs as files of one format; returns the --source arguments."""
    if fmt == "txt":
        for i, d in enumerate(docs):
            (folder / f"doc{i:05d}.txt").write_text(d, encoding="utf-8")
        return [str(folder / "*.txt")]
    if fmt == "parquet":
        half = len(docs) // 2  # two files, several row groups each
        for i, part in enumerate([docs[:half], docs[half:]]):
            pq.write_table(pa.table({"text": part}), folder / f"part{i}.parquet", row_group_size=400)
        return [str(folder / "*.parquet")]
    return [write_jsonl(folder / f"docs.{fmt}", docs, compress=fmt == "jsonl.zst")]


def prepare(source, data_dir, *flags, env=None):
    result = subprocess.run(
        [sys.executable, "data/pile/prepare.py", "--source", *source, "--data_dir", str(data_dir), *flags],
        cwd=REPO, capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=120)
    assert "Traceback" not in result.stderr, result.stderr
    return result


def read_docs(data_dir, split, encoding):
    """The documents in a bin: every one is followed by end-of-text."""
    ids = np.fromfile(os.path.join(data_dir, f"{split}.bin"), dtype="<u2")
    ends = np.flatnonzero(ids == encoding.eot_token)
    assert len(ids) == (ends[-1] + 1 if len(ends) else 0), "a bin must end with end-of-text"
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [encoding.decode(ids[s:e].tolist()) for s, e in zip(starts, ends)]


def split_of(docs, val_fraction):
    train = [d for d in docs if d and not preparation.is_val(d, val_fraction)]
    return train, [d for d in docs if d and preparation.is_val(d, val_fraction)]


def bin_bytes(data_dir):
    return [(data_dir / f"{s}.bin").read_bytes() for s in bins.SPLITS]


FLAGS = ["--encoding", "bytes", "--val_fraction", "0.2", "--num_proc", "2"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """3000 documents (three chunks) as jsonl, and the bins of an uninterrupted run over them."""
    folder = tmp_path_factory.mktemp("corpus")
    docs = make_docs(3000)
    source = [write_jsonl(folder / "docs.jsonl", docs)]
    reference = folder / "reference"
    assert prepare(source, reference, *FLAGS).returncode == 0
    return docs, source, bin_bytes(reference)


# -----------------------------------------------------------------------------
# what is written

@pytest.mark.e2e
@pytest.mark.parametrize("fmt", ["jsonl", "jsonl.zst", "parquet", "txt"])
def test_bins_decode_to_the_input_documents(tmp_path, fmt):
    docs = make_docs(1200 if fmt != "txt" else 300, seed=1) + [""]  # an empty document is skipped
    source = write_source(tmp_path, fmt, docs)
    result = prepare(source, tmp_path / "out", *FLAGS)
    assert result.returncode == 0, result.stderr
    train, val = split_of(docs, 0.2)
    encoding = get_encoding("bytes")
    assert read_docs(tmp_path / "out", "train", encoding) == train
    assert read_docs(tmp_path / "out", "val", encoding) == val
    meta = bins.read_meta(tmp_path / "out")
    assert meta["complete"] is True and meta["encoding"] == "bytes" and meta["vocab_size"] == 257
    assert meta["eot_token"] == 256 and meta["dtype"] == "uint16" and meta["val_fraction"] == 0.2
    assert meta["splits"]["train"] == {"documents": len(train), "tokens": sum(len(d.encode()) + 1 for d in train)}
    assert meta["splits"]["val"]["documents"] == len(val) > 0
    assert meta["skipped_records"] == 0 and meta["empty_documents"] == 1
    assert len(meta["sources"]) >= 1 and "prepared" in result.stdout


@pytest.mark.e2e
def test_gpt2_rank_file_gives_the_known_ids(tmp_path, gpt2_rank_file):
    source = [write_jsonl(tmp_path / "docs.jsonl", ["hello world", "a <|endoftext|> b"])]
    result = prepare(source, tmp_path / "out", "--encoding", gpt2_rank_file, "--val_fraction", "0")
    assert result.returncode == 0, result.stderr
    assert "val.bin holds no tokens (--val_fraction 0, or too small a source): train.py" in result.stderr  # now
    ids = np.fromfile(tmp_path / "out" / "train.bin", dtype="<u2").tolist()
    assert ids[:3] == [31373, 995, 50256]
    assert ids.count(50256) == 2  # the literal '<|endoftext|>' in a document is ordinary text
    assert bins.read_meta(tmp_path / "out")["vocab_size"] == 50257


@pytest.mark.e2e
def test_output_does_not_depend_on_num_proc(tmp_path, corpus):
    docs, source, reference = corpus
    assert prepare(source, tmp_path / "one", *FLAGS, "--num_proc", "1").returncode == 0
    assert bin_bytes(tmp_path / "one") == reference


@pytest.mark.e2e
def test_output_does_not_depend_on_chunk_size(tmp_path, corpus, monkeypatch):
    """Chunks also end at a byte cap (long documents would leave cores idle at a job's end);
    where they end changes nothing written."""
    docs, source, reference = corpus
    monkeypatch.setattr(preparation, "CHUNK_BYTES", 5_000)
    files = preparation.open_source(source, "text")
    assert len(list(files.chunks(files.start))) > 3 * 10
    args = preparation.parser("", source=None, data_dir=None).parse_args(
        ["--source", *source, "--data_dir", str(tmp_path / "out"), *FLAGS])
    assert preparation.run(args) == 0
    assert bin_bytes(tmp_path / "out") == reference


@pytest.mark.e2e
def test_max_tokens_stops_at_the_first_document_boundary_at_or_past_the_cap(tmp_path, corpus):
    docs, source, _ = corpus
    cap = 40_000
    result = prepare(source, tmp_path / "out", *FLAGS, "--max_tokens", str(cap))
    assert result.returncode == 0, result.stderr
    lengths = np.cumsum([len(d.encode()) + 1 for d in docs])
    n = int(np.searchsorted(lengths, cap)) + 1  # the documents it should have taken, in input order
    assert lengths[n - 1] >= cap > lengths[n - 2]
    train, val = split_of(docs[:n], 0.2)
    encoding = get_encoding("bytes")
    assert read_docs(tmp_path / "out", "train", encoding) == train
    assert read_docs(tmp_path / "out", "val", encoding) == val
    meta = bins.read_meta(tmp_path / "out")
    assert meta["splits"]["train"]["tokens"] + meta["splits"]["val"]["tokens"] == lengths[n - 1]
    assert meta["complete"] and meta["max_tokens"] == cap


# -----------------------------------------------------------------------------
# kills, resumes, re-runs

@pytest.mark.e2e
@pytest.mark.parametrize("stage", ["appended", "synced", "committed"])
def test_sigkill_then_rerun_is_byte_identical(tmp_path, corpus, stage):
    docs, source, reference = corpus
    out = tmp_path / "out"
    kill = {"TRAINER_FAULTS": f"kill_{stage}@2"}
    killed = prepare(source, out, *FLAGS, "--commit_seconds", "0", env=kill)
    assert killed.returncode == -9
    with runlock.hold(str(out), "test"):  # free at once: forked workers held it until they saw their parent gone
        pass
    assert bins.read_meta(out)["complete"] is False
    with pytest.raises(bins.BinError, match="unfinished: re-run python data/pile/prepare.py"):
        bins.open_split(str(out), "train", 8, 257)
    # the re-run continues with another process count
    resumed = prepare(source, out, *FLAGS[:-1], "1", "--commit_seconds", "0")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout
    assert bin_bytes(out) == reference
    assert bins.read_meta(out)["complete"] is True


@pytest.mark.e2e
def test_a_killed_job_resumes_on_a_volume_mounted_elsewhere(tmp_path, corpus):
    """The raw files and the bins on one volume, killed mid-job, the volume then mounted at another path (a new
    instance): the same command with the new paths resumes and writes the bins an uninterrupted run writes; its
    rank file is known by name, its inputs by their paths under the folder they share."""
    docs, _, reference = corpus
    rank_file = REPO / ".cache" / "gpt2.tiktoken"
    first, second = tmp_path / "volA", tmp_path / "volB"
    (first / "raw").mkdir(parents=True)
    source = [write_jsonl(first / "raw" / "docs.jsonl", docs)]
    killed = prepare(source, first / "data", *FLAGS, "--commit_seconds", "0",
                     env={"TRAINER_FAULTS": "kill_committed@2"})
    assert killed.returncode == -9
    first.rename(second)
    resumed = prepare([str(second / "raw" / "docs.jsonl")], second / "data", *FLAGS, "--commit_seconds", "0")
    assert resumed.returncode == 0 and "resuming" in resumed.stdout, resumed.stderr
    assert bin_bytes(second / "data") == reference
    assert str(first) not in (second / "data" / "meta.json").read_text()  # the manifest and meta.json followed it
    assert preparation._location_free({"encoding": str(rank_file)})["encoding"] == "gpt2.tiktoken"


def test_a_parquet_row_group_longer_than_a_batch_resumes_at_the_right_row(tmp_path):
    """A reviewer's kill -9 inside a 6,491-row group (pyarrow's default groups hold up to ~1M rows) resumed with
    rows 1024.. of the skip read again: the skip was taken off the group's first 1,024-row batch only."""
    rows = [f"document {i}" for i in range(3000)]
    pq.write_table(pa.table({"text": rows}), tmp_path / "one_group.parquet", row_group_size=3000)
    for skip in (0, 1023, 1024, 1500, 2048, 2999, 3000):
        assert list(preparation._parquet_texts(str(tmp_path / "one_group.parquet"), "text", skip)) == rows[skip:]


@pytest.mark.e2e
def test_rerun_of_a_complete_job_is_a_no_op(tmp_path, corpus):
    docs, source, reference = corpus
    out = tmp_path / "out"
    assert prepare(source, out, *FLAGS).returncode == 0
    mtimes = [os.stat(out / f"{s}.bin").st_mtime_ns for s in bins.SPLITS]
    again = prepare(source, out, *FLAGS, "--num_proc", "1")  # num_proc is not part of the job
    assert again.returncode == 0 and "already prepared, nothing to do" in again.stdout
    assert [os.stat(out / f"{s}.bin").st_mtime_ns for s in bins.SPLITS] == mtimes


def test_a_sigterm_stops_the_job_as_ctrl_c_does_saying_so_and_it_resumes(tmp_path, corpus, monkeypatch, capsys):
    """A machine shutting down sends SIGTERM: the job ended with no word (status -15). Now it says what was kept,
    exits 143, and the same command resumes to the bins of a job never stopped."""
    docs, source, reference = corpus
    out = tmp_path / "out"
    args = preparation.parser("", source=None, data_dir=None).parse_args(
        ["--source", *source, "--data_dir", str(out), *FLAGS, "--commit_seconds", "0"])
    appended, append = [], preparation._append
    def append_then_shut_down(*a):
        appended.append(1)
        if len(appended) == 2:  # the second chunk: the first is committed
            os.kill(os.getpid(), signal.SIGTERM)
        return append(*a)
    monkeypatch.setattr(preparation, "_append", append_then_shut_down)
    assert preparation.run(args) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "stopped by SIGTERM: work up to the last commit is kept; re-run the same command to resume")
    monkeypatch.setattr(preparation, "_append", append)
    assert preparation.run(args) == 0 and "resuming" in capsys.readouterr().out
    assert bin_bytes(out) == reference


@pytest.mark.e2e
def test_empty_bins_without_a_manifest_start_over_and_bins_with_tokens_are_refused(tmp_path, corpus):
    """A kill between the bins' creation and the first commit left them empty and unrecorded: the same command
    starts the job, where it used to refuse the folder as holding bins no job recorded."""
    docs, source, reference = corpus
    out = tmp_path / "out"
    out.mkdir()
    for split in bins.SPLITS:
        (out / f"{split}.bin").touch()
    started = prepare(source, out, *FLAGS)
    assert started.returncode == 0 and bin_bytes(out) == reference, started.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "train.bin").write_bytes(b"\x01\x00")
    refused = prepare(source, other, *FLAGS)
    assert refused.returncode == 1 and "already holds token bins that no prepare job recorded" in refused.stderr


@pytest.mark.e2e
def test_a_rank_file_of_the_same_name_and_other_contents_is_another_job(tmp_path, gpt2_rank_file):
    """Resumed on another copy of "gpt2.tiktoken" whose ids differ, a job wrote two tokenizations into one bin, and
    a finished folder's meta.json took the other file's hash: both refused, by the rank file's sha256."""
    source = [write_jsonl(tmp_path / "docs.jsonl", make_docs(3000))]
    edited = tmp_path / "elsewhere" / "gpt2.tiktoken"
    edited.parent.mkdir()
    lines = open(gpt2_rank_file, "rb").read().splitlines(keepends=True)
    edited.write_bytes(b"".join([lines[1], lines[0], *lines[2:]]))  # two tokens' ids swapped
    flags = ["--val_fraction", "0.2", "--num_proc", "1", "--commit_seconds", "0"]
    out = tmp_path / "out"
    prepare(source, out, "--encoding", gpt2_rank_file, *flags, env={"TRAINER_FAULTS": "kill_committed@1"})
    refused = prepare(source, out, "--encoding", str(edited), *flags)
    assert refused.returncode == 1 and "holds an unfinished job with other arguments (encoding_sha256 was" in \
        refused.stderr
    assert prepare(source, out, "--encoding", gpt2_rank_file, *flags).returncode == 0
    meta = (out / "meta.json").read_text()
    refused = prepare(source, out, "--encoding", str(edited), *flags)
    assert refused.returncode == 1 and "was prepared with other arguments (encoding_sha256" in refused.stderr
    assert (out / "meta.json").read_text() == meta


@pytest.mark.e2e
def test_changed_arguments_are_refused(tmp_path, corpus):
    docs, source, _ = corpus
    out = tmp_path / "out"
    prepare(source, out, *FLAGS, "--commit_seconds", "0", env={"TRAINER_FAULTS": "kill_committed@1"})
    refused = prepare(source, out, *FLAGS, "--val_fraction", "0.3")
    assert refused.returncode == 1
    assert refused.stderr.strip().count("\n") == 0  # one line
    assert "unfinished job with other arguments (val_fraction was 0.2, now 0.3)" in refused.stderr
    assert prepare(source, out, *FLAGS).returncode == 0
    refused = prepare(source, out, *FLAGS, "--max_tokens", "1000")
    assert refused.returncode == 1 and "was prepared with other arguments (max_tokens" in refused.stderr


# -----------------------------------------------------------------------------
# bad input

@pytest.mark.e2e
def test_bad_records_are_skipped_and_counted(tmp_path):
    docs = make_docs(50, seed=2)
    good = write_jsonl(tmp_path / "a.jsonl", docs[:25]).encode()
    with open(good, "ab") as f:
        f.write(b'{"text": "cut off\n')                   # malformed JSON
        f.write(b'{"title": "no text field"}\n')           # no text field
        f.write(b'{"text": 42}\n')                         # text is not a string
        f.write(b'[1, 2]\n')                               # not an object
        f.write(b'{"text": "bad \xff\xfe utf-8"}\n')       # undecodable
        f.write(b'\n')                                     # blank line: an empty document
    truncated = zstandard.ZstdCompressor().compress(json.dumps({"text": "lost"}).encode() * 200)
    (tmp_path / "b.jsonl.zst").write_bytes(truncated[: len(truncated) // 2])  # corrupt zstd: rest skipped
    write_jsonl(tmp_path / "c.jsonl.zst", docs[25:], compress=True)
    result = prepare([str(tmp_path / "*.jsonl*")], tmp_path / "out", *FLAGS)
    assert result.returncode == 0, result.stderr
    assert "6 malformed records skipped" in result.stdout
    meta = bins.read_meta(tmp_path / "out")
    assert meta["skipped_records"] == 6 and meta["empty_documents"] == 1
    train, val = split_of(docs, 0.2)
    assert read_docs(tmp_path / "out", "train", get_encoding("bytes")) == train


def bad_input(tmp_path, case):
    """(--source, --data_dir, flags, what the error line says) for one kind of bad input."""
    good, out = [write_jsonl(tmp_path / "a.jsonl", ["hi"])], tmp_path / "out"
    if case == "foreign bins":
        out.mkdir()
        (out / "train.bin").write_bytes(b"\x00\x00")
    if case == "parquet without the field":
        (tmp_path / "pq").mkdir()
        good = write_source(tmp_path / "pq", "parquet", ["a", "b"])
    return {
        "missing source": ([str(tmp_path / "nope.jsonl.zst")], out, FLAGS, "source file"),
        "empty glob": ([str(tmp_path / "*.parquet")], out, FLAGS, "no files match"),
        "unwritable data_dir": (good, tmp_path / "a.jsonl" / "sub", FLAGS, "cannot write to"),  # below a file
        "unknown encoding": (good, out, ["--encoding", "gpt9"], "unknown encoding 'gpt9'"),
        "foreign bins": (good, out, FLAGS, "no prepare job recorded"),
        "parquet without the field": (good, out, [*FLAGS, "--text_field", "body"], "has no column 'body'"),
        "jsonl without the field": (good, out, [*FLAGS, "--text_field", "body"], "no tokens from "),
    }[case]


@pytest.mark.parametrize("case", ["missing source", "empty glob", "unwritable data_dir", "unknown encoding",
                                  "foreign bins", "parquet without the field", "jsonl without the field"])
@pytest.mark.e2e
def test_bad_input_fails_at_once_with_one_line(tmp_path, case):
    source, data_dir, flags, expected = bad_input(tmp_path, case)
    result = prepare(source, data_dir, *flags)
    assert result.returncode == 1
    error = [line for line in result.stderr.splitlines() if line and not line.startswith("tokens: ")]  # progress
    assert len(error) == 1 and error[0].startswith("error: ") and expected in error[0], result.stderr


@pytest.mark.parametrize("flags, message", [
    (["--num_proc", "0"], "error: --num_proc must be at least 1, got 0"),
    (["--max_tokens", "0"], "error: --max_tokens must be at least 1, got 0"),
    (["--max_tokens", "inf"], "error: argument --max_tokens: expected a count such as 10e9, got 'inf'"),
    (["--val_fraction", "1"], "error: --val_fraction must be in [0, 1), got 1.0"),
    (["--val_fraction", "nan"], "error: --val_fraction must be in [0, 1), got nan"),
    (["--min_val_tokens", "-1"], "error: --min_val_tokens must be 0 (off) or more, got -1"),
    (["--commit_seconds", "nan"], "error: --commit_seconds must be 0 or more, got nan"),
])
def test_a_number_out_of_range_is_one_line_before_anything_is_written(tmp_path, flags, message):
    source, out = [write_jsonl(tmp_path / "a.jsonl", ["hi"])], tmp_path / "out"
    result = run_here(["data/pile/prepare.py", "--source", *source, "--data_dir", out, *FLAGS, *flags])
    assert result.returncode in (1, 2) and message in result.stderr.splitlines()[-1], result.stderr  # 2: argparse's
    assert "Traceback" not in result.stderr and not out.exists()


@pytest.mark.parametrize("max_bytes, message", [
    ("0", "prepare.py: error: --max_bytes must be at least 1, got 0"),
    ("-5", "prepare.py: error: --max_bytes must be at least 1, got -5"),
    ("100", "prepare.py: error: --max_bytes 100 selects no file of the standard library: raise it"),
])
def test_quickstart_max_bytes_that_selects_nothing_is_one_line(tmp_path, max_bytes, message):
    """--max_bytes 0 made an empty file list, which failed as a TypeError in writing meta.json. The quick start's
    parser refuses it, in one line (trainer/cli.py)."""
    out = tmp_path / "out"
    result = run_here(["data/quickstart/prepare.py", "--max_bytes", max_bytes, "--data_dir", out])
    assert result.returncode == 2 and result.stderr == f"{message} (--help lists the options)\n" and not out.exists()


def test_low_disk_space_is_warned_about_up_front(tmp_path, monkeypatch, capsys):
    source = [write_jsonl(tmp_path / "a.jsonl", make_docs(10))]
    monkeypatch.setattr(preparation.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=10))
    args = preparation.parser("", source=None, data_dir=None).parse_args(
        ["--source", *source, "--data_dir", str(tmp_path / "out"), "--encoding", "bytes", "--num_proc", "1"])
    assert preparation.run(args) == 0  # a warning, not an error: the estimate is rough
    assert "warning: " in capsys.readouterr().err


# -----------------------------------------------------------------------------
# the Hugging Face stream and the consumers of the bins

def test_hub_stream_resumes_from_its_state(tmp_path, monkeypatch):
    """A local folder loads through the same `datasets` streaming path as a hub name."""
    monkeypatch.setattr(preparation, "CHUNK_RECORDS", 300)
    docs = make_docs(2500, seed=3)
    for i in range(3):
        write_jsonl(tmp_path / f"part{i}.jsonl", docs[i::3])
    source = preparation.HubDataset(str(tmp_path), "text")
    chunks = list(source.chunks(None))
    everything = [r for records, _ in chunks for r in records]
    assert sorted(everything) == sorted(docs)
    position = json.loads(json.dumps(chunks[4][1]))  # as the manifest stores it
    rest = preparation.HubDataset(str(tmp_path), "text").chunks(position)
    assert [r for records, _ in rest for r in records] == everything[5 * 300:]


def test_quickstart_max_bytes_reads_a_longer_prefix_of_the_stdlib():
    """--max_bytes takes more of the same sorted walk: the default corpus's files come first, so the larger one's
    validation documents (chosen by a hash of their text) include the default's."""
    quickstart = load_script("quickstart_prepare", "data/quickstart/prepare.py")
    default, more = quickstart.stdlib_files(), quickstart.stdlib_files(2 * quickstart.MAX_BYTES)
    assert len(more) > len(default) and more[:len(default)] == default
    assert sum(map(os.path.getsize, default)) <= quickstart.MAX_BYTES


@pytest.mark.e2e
def test_quickstart_feeds_train_py(tmp_path):
    """data/quickstart/prepare.py builds bins that open_split and train.py read."""
    out = tmp_path / "quickstart"
    result = subprocess.run([sys.executable, "data/quickstart/prepare.py", "--data_dir", str(out)],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    meta = bins.read_meta(out)
    assert meta["encoding"] == "bytes" and meta["complete"] and meta["splits"]["train"]["tokens"] > 1_000_000
    val = bins.open_split(str(out), "val", 256, 320)
    assert val.num_windows(256) >= 100
    x = val.windows(bins.WindowSampler(val.num_windows(256), 0).next_indices(4), 256)
    assert x.shape == (4, 257) and x.max() <= 256
    train = subprocess.run(
        [sys.executable, "train.py", "config/train_tiny.py", f"--data_dir={out}", f"--out_dir={tmp_path / 'run'}",
         "--max_iters=1", "--eval_interval=1", "--checkpoint_interval=0", "--eval_iters=1", "--batch_size=2",
         "--n_layer=1", "--n_head=2", "--n_embd=32",
         "--block_size=64", "--wandb_log=False"],
        cwd=REPO, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert train.returncode == 0, train.stdout + train.stderr


@pytest.mark.e2e
def test_shakespeare_speeches_become_documents(tmp_path, gpt2_rank_file):
    """data/shakespeare/prepare.py --input: each block between blank lines is one document."""
    (tmp_path / "input.txt").write_text("ROMEO:\nBut soft!\n\nJULIET:\nAy me!\n\n\nNURSE:\nMadam!\n")
    result = subprocess.run([sys.executable, "data/shakespeare/prepare.py", "--input", str(tmp_path / "input.txt"),
                             "--data_dir", str(tmp_path / "out"), "--encoding", gpt2_rank_file, "--val_fraction", "0"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    docs = read_docs(tmp_path / "out", "train", get_encoding(gpt2_rank_file))
    assert docs == ["ROMEO:\nBut soft!", "JULIET:\nAy me!", "NURSE:\nMadam!"]
    missing = subprocess.run([sys.executable, "data/shakespeare/prepare.py", "--input", str(tmp_path / "no.txt"),
                              "--data_dir", str(tmp_path / "out2")], cwd=REPO, capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.startswith(f"error: --input {tmp_path / 'no.txt'} is not a file")
    assert not (tmp_path / "no.txt").exists()  # nothing downloaded into the path named


@pytest.mark.e2e
@pytest.mark.parametrize("script", ["data/fineweb_edu/prepare.py", "data/dclm/prepare.py"])
def test_web_corpus_scripts_on_local_parquet(tmp_path, script):
    """FineWeb-Edu's and DCLM's scripts are the Pile's job with their own defaults: their parquet layout
    (the text in 'text' beside other columns) read locally, capped by --max_tokens."""
    docs = make_docs(900, seed=4)
    pq.write_table(pa.table({"id": [f"doc{i}" for i in range(len(docs))], "text": docs, "score": [3.5] * len(docs)}),
                   tmp_path / "shard.parquet", row_group_size=300)
    subset = ["--subset", "sample-10BT"] if "fineweb" in script else []  # a hub setting: local files ignore it
    result = subprocess.run([sys.executable, script, "--source", str(tmp_path / "shard.parquet"), "--data_dir",
                             str(tmp_path / "out"), *FLAGS, "--max_tokens", "20000", *subset],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    encoding = get_encoding("bytes")
    written = read_docs(tmp_path / "out", "train", encoding) + read_docs(tmp_path / "out", "val", encoding)
    kept = [d for d in docs if d][:len(written)]
    assert sorted(written) == sorted(kept) and 0 < len(written) < len(docs)  # a prefix of the source, cut at the cap
    meta = bins.read_meta(tmp_path / "out")
    assert meta["complete"] and meta["max_tokens"] == 20000 and meta["sources"] == [str(tmp_path / "shard.parquet")]
    assert script in meta["command"]


def test_a_hub_subset_reaches_datasets_and_the_job(tmp_path, monkeypatch):
    """--subset is the dataset's configuration name for `datasets`, and part of the job a resume must match
    (the hub itself cannot be reached from the tests)."""
    import datasets
    calls = []
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: calls.append((a, k)) or iter(()))
    source = preparation.open_source(["HuggingFaceFW/fineweb-edu"], "text", "sample-10BT")
    assert calls == [(("HuggingFaceFW/fineweb-edu", "sample-10BT"), {"split": "train", "streaming": True,
                                                                     "revision": None})]
    args = preparation.parser("", source="HuggingFaceFW/fineweb-edu", data_dir=str(tmp_path / "out"),
                              subset="sample-10BT").parse_args(["--encoding", "bytes"])
    assert args.subset == "sample-10BT"
    monkeypatch.setattr(preparation, "_run_job", lambda args, source, encoding, job: job)
    assert preparation._prepare(args, source)["subset"] == "sample-10BT"
