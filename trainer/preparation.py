"""
The resumable, parallel documents -> token bins job behind every data/<name>/prepare.py.

How a job runs: documents are read in a fixed order, in chunks of CHUNK_RECORDS or CHUNK_BYTES, whichever
fills first. Worker processes
parse each record, send the document to train or val by a hash of its text (so the split depends
on neither order nor process count), and encode it with encode_ordinary followed by end-of-text,
returning uint16-ready numpy arrays (far cheaper to pickle than lists). The main process reads
ahead and appends the results in order, so the bytes written never depend on --num_proc.

How it resumes: every --commit_seconds the bins are fsynced and THEN a progress manifest (where
reading stopped, the byte length of each bin, the counts, and the job's identity) is written
atomically. A re-run of the same command cuts the bins back to the manifest's lengths and reads on
from its position, so a job killed at any moment finishes byte-identical to an uninterrupted one.

Sources: local files and globs (.jsonl, .jsonl.zst, .parquet; anything else is plain UTF-8 text,
one document per file), or a Hugging Face dataset streamed with `datasets` ('owner/name', or
'owner/name@revision'), with one of its configurations where it has several (--subset).
"""
import argparse
import collections
import concurrent.futures
import contextlib
import glob
import hashlib
import itertools
import json
import multiprocessing
import os
import shlex
import shutil
import signal
import sys
import threading
import time

import numpy as np
from tqdm import tqdm

from trainer import RunError, cli, faults, interrupt, runlock
from trainer.bins import SPLITS, BinError, BinWriter, bin_path, check_vocab, write_json_atomic, write_meta
from trainer.tokenizer import describe as describe_encoding
from trainer.tokenizer import get_encoding

# A unit of work: at most this many records or about this much text; the output depends on neither.
# The byte cap keeps the cores busy to the end: a job's last chunk runs on one core while the
# others idle, and 1024 long documents (source files, books) can be tens of MB.
CHUNK_RECORDS = 1024
CHUNK_BYTES = 4_000_000
MANIFEST = "prepare.manifest.json"
BAD = -1  # token count the workers report for a record that could not be read
_NOTHING = object()


class PrepareError(RunError):
    """Bad input or arguments: reported as one line, no traceback."""


def warn(message):
    tqdm.write(f"warning: {message}", file=sys.stderr)


# -----------------------------------------------------------------------------
# sources: each yields chunks of records with the position just after them

def _format(path):
    name = path.lower()
    if name.endswith((".jsonl.zst", ".jsonl.zstd", ".json.zst")):
        return "jsonl.zst"
    if name.endswith(".jsonl"):
        return "jsonl"
    if name.endswith(".parquet"):
        return "parquet"
    return "text"


class LocalFiles:
    """Files read in the order given. A position is {'file': i, 'record': j}: j records of file i
    are done, so a resumed job opens file i and skips j lines (or parquet rows) without parsing."""

    def __init__(self, spec, files, text_field):
        self.spec, self.files, self.text_field = spec, files, text_field
        self.start = {"file": 0, "record": 0}
        for path in files:
            if _format(path) == "parquet":
                self._check_parquet(path)

    def _check_parquet(self, path):
        import pyarrow.parquet as pq
        try:
            columns = pq.read_schema(path).names
        except Exception as e:
            raise PrepareError(f"cannot read {path} as parquet: {e}") from None
        if self.text_field not in columns:
            raise PrepareError(f"{path} has no column {self.text_field!r} (it has {', '.join(columns)}): "
                               "pass --text_field")

    def fingerprint(self):
        """What identifies the input: a job refuses to resume over changed files."""
        return [[path, os.path.getsize(path)] for path in self.files]

    def text_bytes(self):
        """Rough size of the text, for the disk-space check: zstd and parquet compress text ~2x."""
        return sum(os.path.getsize(p) * (1 if _format(p) in ("jsonl", "text") else 2) for p in self.files)

    def chunks(self, position):
        batch, size = [], 0
        for record, after in self._records(position):
            batch.append(record)
            size += len(record or "")
            if chunk_is_full(batch, size):
                yield batch, {"file": after[0], "record": after[1]}
                batch, size = [], 0
        if batch:
            yield batch, {"file": after[0], "record": after[1]}

    def _records(self, position):
        """(record, position after it); a file's last record points at the next file, so a resumed
        job never re-opens (and, for .zst, re-decompresses) a finished file just to skip all of it."""
        for i in range(position["file"], len(self.files)):
            j = position["record"] if i == position["file"] else 0
            previous = _NOTHING
            for record in self._read(self.files[i], skip=j):
                if previous is not _NOTHING:
                    yield previous, (i, j)
                previous, j = record, j + 1
            if previous is not _NOTHING:
                yield previous, (i + 1, 0)

    def _read(self, path, skip):
        """The records of one file after the first `skip`: JSON lines as raw bytes (the workers
        parse them), texts as str, None for one that is unreadable. A file that breaks part way
        (corrupt zstd frame, truncated parquet) ends with one None and the rest of it is skipped."""
        fmt = _format(path)
        broken = _broken_file_errors(fmt)
        try:
            if fmt == "parquet":
                yield from _parquet_texts(path, self.text_field, skip)
            elif fmt == "text":
                if skip == 0:
                    with open(path, "rb") as f:
                        yield _utf8(f.read())
            else:
                with _open_lines(path, fmt == "jsonl.zst") as lines:
                    yield from itertools.islice(lines, skip, None)
        except (OSError, EOFError, *broken) as e:
            warn(f"{path}: {e}; skipping the rest of this file")
            yield None


def _broken_file_errors(fmt):
    """What a file of this format raises where it breaks part way, besides OSError and EOFError. Its library is
    imported only for that format: pyarrow takes ~0.16 s to import, a few percent of a 100 MB .jsonl job."""
    if fmt == "parquet":
        import pyarrow
        return (pyarrow.ArrowException,)
    if fmt == "jsonl.zst":
        import zstandard
        return (zstandard.ZstdError,)
    return ()


def chunk_is_full(batch, size):
    return len(batch) >= CHUNK_RECORDS or size >= CHUNK_BYTES


def _utf8(data):
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


@contextlib.contextmanager
def _open_lines(path, compressed):
    with open(path, "rb") as f:
        yield _zstd_lines(f) if compressed else f


def _zstd_lines(f):
    """The lines of a zstd file of one or more frames (the Pile's shards may hold several). Raises
    EOFError when the file is cut short, where zstandard's stream_reader would just end early and
    quietly drop the rest of a half-downloaded shard."""
    import zstandard
    dctx = zstandard.ZstdDecompressor(max_window_size=2**31)  # allow windows past the 128 MB default
    frame, fed, tail = dctx.decompressobj(), False, b""
    while compressed := f.read(1 << 20):
        while compressed:
            lines = (tail + frame.decompress(compressed)).split(b"\n")
            tail = lines.pop()
            yield from lines
            fed, compressed = True, b""
            if frame.eof:  # the frame ended inside this read: start the next one on what is left
                compressed, frame, fed = frame.unused_data, dctx.decompressobj(), False
    if fed:
        raise EOFError("the zstd stream is cut short")
    if tail:
        yield tail


def _parquet_texts(path, text_field, skip):
    import pyarrow.parquet as pq
    f = pq.ParquetFile(path)
    groups = []
    for g in range(f.num_row_groups):  # skip whole row groups by their metadata, without reading them
        rows = f.metadata.row_group(g).num_rows
        if not groups and skip >= rows:
            skip -= rows
            continue
        groups.append(g)
    for batch in f.iter_batches(batch_size=CHUNK_RECORDS, row_groups=groups, columns=[text_field]):
        if skip >= batch.num_rows:  # a row group longer than a batch: the skip spans its batches
            skip -= batch.num_rows
            continue
        texts = batch.column(0).to_pylist()[skip:]
        skip = 0
        yield from (t if isinstance(t, str) else None for t in texts)


class HubDataset:
    """A Hugging Face dataset's train split, streamed. A position is the stream's own state_dict,
    so a resumed job continues from its shard and offset instead of re-downloading what it read.
    subset: the dataset's configuration (FineWeb-Edu's 'sample-10BT'), None for its default."""

    def __init__(self, spec, text_field, subset=None):
        import datasets
        name, _, revision = spec.partition("@")
        self.spec, self.text_field, self.subset, self.start = spec, text_field, subset, None
        try:
            self.stream = datasets.load_dataset(name, subset, split="train", streaming=True,
                                                revision=revision or None)
        except Exception as e:
            hint = ""
            if "scripts are no longer supported" in str(e):
                hint = (f"; it still ships a loading script, which datasets>=4 refuses: try "
                        f"--source {name}@refs/convert/parquet or local files")
            first_line = (str(e).strip().splitlines() or [type(e).__name__])[0]
            of = f" (subset {subset!r})" if subset else ""
            raise PrepareError(f"cannot open Hugging Face dataset {spec!r}{of}: {first_line}{hint}") from None

    def fingerprint(self):
        return None

    def text_bytes(self):
        return None  # unknown up front

    def chunks(self, position):
        if position is not None:
            self.stream.load_state_dict(position)
        batch, size = [], 0
        try:
            for example in self.stream:
                text = example.get(self.text_field)
                batch.append(text if isinstance(text, str) else None)
                size += len(batch[-1] or "")
                if chunk_is_full(batch, size):
                    yield batch, self.stream.state_dict()
                    batch, size = [], 0
        except Exception as e:  # network trouble after datasets' own retries
            raise PrepareError(f"reading {self.spec!r} failed ({type(e).__name__}: {e}); "
                               "work up to the last commit is kept: re-run the same command to resume") from None
        if batch:
            yield batch, self.stream.state_dict()


def _expand(pattern):
    if glob.has_magic(pattern):
        files = sorted(p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p))
        if not files:
            raise PrepareError(f"no files match {pattern!r}")
        return files
    if os.path.isdir(pattern):
        files = sorted(p for p in glob.glob(os.path.join(pattern, "**", "*"), recursive=True)
                       if os.path.isfile(p) and _format(p) != "text")
        if not files:
            raise PrepareError(f"{pattern} holds no .jsonl, .jsonl.zst or .parquet files")
        return files
    if not os.path.isfile(pattern):
        raise PrepareError(f"source file {pattern} not found")
    return [pattern]


def _looks_local(spec):
    return (os.path.exists(spec) or glob.has_magic(spec) or spec.startswith((".", "/", "~"))
            or os.path.splitext(spec)[1].lower() in (".jsonl", ".zst", ".zstd", ".parquet", ".txt"))


def open_source(specs, text_field, subset=None):
    """Local files and globs, or a single Hugging Face dataset name (and its configuration subset)."""
    if len(specs) == 1 and not _looks_local(specs[0]):
        return HubDataset(specs[0], text_field, subset)
    files = [f for spec in specs for f in _expand(os.path.expanduser(spec))]
    return LocalFiles(list(specs), files, text_field)


# -----------------------------------------------------------------------------
# worker processes

_worker = {}


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _init_worker(parent, encoding_name, text_field, val_fraction):
    """parent: the main process's pid, from the main process: a worker first scheduled after its parent was
    killed would read its own getppid() as the reaper's and never exit."""
    for sig in STOP_SIGNALS:  # Ctrl-C, a shutdown, a hang-up: the main process's to handle (a worker left alone
        signal.signal(sig, signal.SIG_IGN)  # ends with it), or a dead worker would read as out of memory
    threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    encoding = get_encoding(encoding_name)
    _worker.update(encoding=encoding, eot=np.array([encoding.eot_token], dtype=np.uint32),
                   text_field=text_field, val_fraction=val_fraction)


def _exit_with_parent(parent):
    """A worker waits for work forever, so without this it would outlive a killed main process."""
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)


def _text_of(record):
    """The document text of a record, or None when it is malformed."""
    if isinstance(record, bytes):  # a JSON line
        if not record.strip():
            return ""
        try:
            obj = json.loads(record)
        except (ValueError, RecursionError):  # bad JSON or bad UTF-8
            return None
        record = obj.get(_worker["text_field"]) if isinstance(obj, dict) else None
    return record if isinstance(record, str) else None


def is_val(text, val_fraction):
    """The split by a stable hash of the text (hashlib, unlike hash(), is not salted per process);
    a document repeated in the corpus always lands in the same split."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < val_fraction * 2**64


def _encode_chunk(records):
    """Per record: its token count incl. end-of-text (0 empty, BAD unreadable) and whether it went
    to val; plus the train and val tokens of the chunk, each document followed by end-of-text."""
    lengths = np.zeros(len(records), dtype=np.int64)
    val = np.zeros(len(records), dtype=bool)
    parts = {False: [], True: []}
    for i, record in enumerate(records):
        text = _text_of(record)
        if not text:
            lengths[i] = 0 if text == "" else BAD
            continue
        ids = _worker["encoding"].encode_ordinary_numpy(text)
        val[i] = is_val(text, _worker["val_fraction"])
        parts[bool(val[i])] += [ids, _worker["eot"]]
        lengths[i] = len(ids) + 1
    joined = [np.concatenate(p).astype(np.uint16) if p else np.empty(0, np.uint16) for p in (parts[False], parts[True])]
    return lengths, val, joined[0], joined[1]


def _encode_in_order(pool, chunks, depth):
    """(position, encoded chunk) in source order, reading at most `depth` chunks ahead of the
    writer (Pool.imap would read the whole source into memory as fast as it could)."""
    pending = collections.deque()
    for records, position in chunks:
        pending.append((position, pool.submit(_encode_chunk, records)))
        if len(pending) >= depth:
            position, future = pending.popleft()
            yield position, future.result()
    while pending:
        position, future = pending.popleft()
        yield position, future.result()


# -----------------------------------------------------------------------------
# the job

def _new_state(job, start):
    return {"job": job, "command": "python " + shlex.join(sys.argv), "position": start,
            "bin_bytes": {s: 0 for s in SPLITS}, "tokens": {s: 0 for s in SPLITS},
            "documents": {s: 0 for s in SPLITS}, "records": 0, "skipped_records": 0,
            "empty_documents": 0, "complete": False}


def _meta(state):
    """meta.json: what train.py and people need to know about the bins, derived from the manifest."""
    job = state["job"]
    # the rank file's hash as the job took it (older jobs': hashed now), not the file's as it may be now
    recorded = {k: job[k] for k in ("encoding_sha256",) if k in job}
    return {**describe_encoding(job["encoding"]), **recorded, "vocab_size": job["vocab_size"],
            "eot_token": job["eot_token"],
            "dtype": "uint16",
            "splits": {s: {"tokens": state["tokens"][s], "documents": state["documents"][s]} for s in SPLITS},
            "sources": [p for p, _ in job["inputs"]] if job["inputs"] else
            job["source"] + (f" (subset {job['subset']})" if job.get("subset") else ""),
            "skipped_records": state["skipped_records"], "empty_documents": state["empty_documents"],
            "val_fraction": state["val_fraction"], "max_tokens": job["max_tokens"], "text_field": job["text_field"],
            "complete": state["complete"], "command": state["command"]}


def _commit(data_dir, state, writer, chunk):
    state["bin_bytes"] = writer.sync()  # the data is on disk before the manifest says it is
    faults.active.kill("kill_synced", chunk)  # fault injection for tests (faults.py)
    write_json_atomic(os.path.join(data_dir, MANIFEST), state)
    write_meta(data_dir, _meta(state))
    faults.active.kill("kill_committed", chunk)


def _append(state, writer, result, max_tokens):
    """Append one encoded chunk, cut after the first document that brings the total to max_tokens;
    returns whether it was cut."""
    lengths, val, train_ids, val_ids = result
    capped = False
    if max_tokens:
        totals = _total(state) + np.cumsum(np.maximum(lengths, 0))
        if len(totals) and totals[-1] >= max_tokens:
            keep = int(np.searchsorted(totals, max_tokens)) + 1
            lengths, val = lengths[:keep], val[:keep]
            train_ids = train_ids[:lengths[~val & (lengths > 0)].sum()]
            val_ids = val_ids[:lengths[val & (lengths > 0)].sum()]
            capped = True
    writer.append("train", train_ids)
    writer.append("val", val_ids)
    documents = lengths > 0
    for split, mask in (("train", documents & ~val), ("val", documents & val)):
        state["documents"][split] += int(mask.sum())
        state["tokens"][split] += int(lengths[mask].sum())
    state["records"] += len(lengths)
    state["skipped_records"] += int((lengths == BAD).sum())
    state["empty_documents"] += int((lengths == 0).sum())
    return capped


def _load_state(data_dir, job, start):
    """The manifest of this data_dir's job, checked against this one; a new state if there is none."""
    path = os.path.join(data_dir, MANIFEST)
    if not os.path.exists(path):
        # empty bins without a manifest: a job killed between creating them and its first commit, which starts over
        if any(os.path.exists(p := bin_path(data_dir, s)) and os.path.getsize(p) for s in SPLITS):
            raise PrepareError(f"{data_dir} already holds token bins that no prepare job recorded: "
                               "delete them or choose another --data_dir")
        return _new_state(job, start)
    try:
        with open(path) as f:
            state = json.load(f)
        old = state["job"]
    except (OSError, ValueError, KeyError) as e:
        raise PrepareError(f"cannot read {path} ({e}): delete {data_dir} to start over") from None
    was, now = _location_free(old), _location_free(job)
    if "encoding_sha256" not in old:  # a manifest older than the key: the rank file's name is all it recorded
        now.pop("encoding_sha256", None)
    if was != now:
        key = next((k for k in now if was.get(k) != now[k]), "format")
        change = "the input files changed" if key == "inputs" else f"{key} was {old.get(key)!r}, now {job[key]!r}"
        what = ("was prepared" if state["complete"] else "holds an unfinished job") + " with other arguments"
        raise PrepareError(f"{data_dir} {what} ({change}): re-run {state['command']} "
                           f"or choose another --data_dir (or delete {data_dir} to start over)")
    # this mount's paths and command: the manifest, meta.json and the advice to re-run follow the volume
    state["job"], state["command"] = job, "python " + shlex.join(sys.argv)
    return state


def _location_free(job):
    """A job as it compares with another: its input files by their paths under the folder they share, local
    sources and a rank file by name. So a job resumes on a volume mounted elsewhere, from a moved clone or on
    a machine whose Python (the quick-start's stdlib) lives elsewhere; the files' sizes still have to match."""
    named = lambda path: os.path.basename(os.path.normpath(path))
    inputs = job.get("inputs")
    if inputs:
        root = os.path.commonpath([p for p, _ in inputs]) if len(inputs) > 1 else os.path.dirname(inputs[0][0])
        inputs = [[os.path.relpath(p, root), size] for p, size in inputs]
    source = job.get("source")  # local files' specs as typed, or a hub dataset's name
    if isinstance(source, list):
        source = [named(spec) if _looks_local(spec) else spec for spec in source]
    encoding = job.get("encoding", "")
    return {**job, "inputs": inputs, "source": source,
            "encoding": named(encoding) if encoding.endswith(".tiktoken") or os.sep in encoding else encoding}


def _projected_tokens(source, encoding, max_tokens):
    """Roughly how many tokens the job writes: the source's text (the byte encoding makes a token of
    every byte, GPT-2's BPE one of ~3 bytes), at most --max_tokens; None if neither is known."""
    text = source.text_bytes()
    sizes = ([text * (1.0 if encoding.n_vocab <= 257 else 0.35)] if text else []) + ([max_tokens] if max_tokens else [])
    return min(sizes) if sizes else None


def _check_disk(data_dir, projected_tokens, state):
    if projected_tokens is None:
        return
    needed = int(2 * projected_tokens) - sum(state["bin_bytes"].values())  # 2 bytes a token written
    free = shutil.disk_usage(data_dir).free
    if needed > free:
        warn(f"{data_dir} has {tqdm.format_sizeof(free, 'B')} free but the bins are projected to need about "
             f"{tqdm.format_sizeof(needed, 'B')} more; the job will stop when the disk is full (and can resume)")


def _summary(state):
    t, d = state["tokens"], state["documents"]
    return (f"train {t['train']:,} tokens ({d['train']:,} documents), "
            f"val {t['val']:,} tokens ({d['val']:,} documents), "
            f"{state['skipped_records']:,} malformed records skipped, {state['empty_documents']:,} empty documents")


def _total(state):
    return sum(state["tokens"].values())


def _encode_all(args, source, state, writer, encoding):
    """The main loop: read ahead, encode in the pool, append in order, commit now and then.
    Returns the number of tokens this run wrote."""
    at_start, chunk = _total(state), 0
    bar = tqdm(total=args.max_tokens, initial=at_start, unit="tok", unit_scale=True, desc="tokens",
               mininterval=1 if sys.stderr.isatty() else 60)  # a log file gets a line a minute
    last_commit = time.monotonic()
    # a process pool that raises, rather than hangs, when a worker dies (say, out of memory)
    # spawned, not forked: a forked worker would share the data_dir's lock and hold it for up to a second after
    # the main process is killed, refusing the rerun
    pool = concurrent.futures.ProcessPoolExecutor(args.num_proc, mp_context=multiprocessing.get_context("spawn"),
                                                  initializer=_init_worker,
                                                  initargs=(os.getpid(), encoding.name, args.text_field,
                                                            state["val_fraction"]))
    try:
        chunks = source.chunks(state["position"])
        for chunk, (position, result) in enumerate(_encode_in_order(pool, chunks, 2 * args.num_proc + 2), 1):
            before = _total(state)
            capped = _append(state, writer, result, args.max_tokens)
            state["position"] = position
            faults.active.kill("kill_appended", chunk)
            bar.update(_total(state) - before)
            bar.set_postfix_str(f"{sum(state['documents'].values()):,} docs, "
                                f"{tqdm.format_sizeof(2 * _total(state), 'B')} written", refresh=False)
            if capped:
                break
            if time.monotonic() - last_commit >= args.commit_seconds:
                _commit(args.data_dir, state, writer, chunk)
                last_commit = time.monotonic()
    except concurrent.futures.process.BrokenProcessPool:
        raise PrepareError("a worker process died (out of memory?): work up to the last commit is kept; "
                           "re-run the same command to resume") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        bar.close()  # before an error's line: a bar drawn after it would hide it on a terminal
    if not _total(state):  # not "prepared": a training run on it would only fail later, further from the cause
        source = " ".join(args.source) if args.source else "the source"
        raise PrepareError(f"no tokens from {source}: {state['records']:,} records read, {state['skipped_records']:,} "
                           f"malformed, {state['empty_documents']:,} empty documents; is --text_field "
                           f"{args.text_field!r} the field that holds the text? (delete {args.data_dir}, which holds "
                           "only this job's record, before running it with other arguments)")
    state["complete"] = True
    _commit(args.data_dir, state, writer, chunk)
    return _total(state) - at_start


def _validate(args):
    if not 0 <= args.val_fraction < 1:
        raise PrepareError(f"--val_fraction must be in [0, 1), got {args.val_fraction}")
    if problem := cli.below_least(args, {"num_proc": 1, "max_tokens": 1}):
        raise PrepareError(problem)
    if args.min_val_tokens < 0:
        raise PrepareError(f"--min_val_tokens must be 0 (off) or more, got {args.min_val_tokens}")
    if not args.commit_seconds >= 0:  # nan too: a job that never commits could not resume
        raise PrepareError(f"--commit_seconds must be 0 or more, got {args.commit_seconds}")
    try:
        encoding = get_encoding(args.encoding)
        check_vocab(encoding.n_vocab)
    except ValueError as e:
        raise PrepareError(str(e)) from None
    return encoding


def _val_fraction(args, projected_tokens):
    """--val_fraction, raised for a small corpus (the source, or --max_tokens of it) so that val.bin gets
    about --min_val_tokens, but never past a tenth of the corpus: 0.0005 of a 3.6M-token corpus would
    be two documents, and noise."""
    tokens = projected_tokens
    if not tokens or not args.min_val_tokens or not args.val_fraction:  # val_fraction 0: no val.bin wanted
        return args.val_fraction
    fraction = max(args.val_fraction, min(args.min_val_tokens / tokens, 0.1))
    if fraction > args.val_fraction:
        print(f"val_fraction {args.val_fraction:g} raised to {fraction:.4g}: about {tokens / 1e6:,.1f}M tokens in all, "
              f"and val.bin should hold --min_val_tokens {args.min_val_tokens:,} (at most a tenth of them)")
    return fraction


def _prepare(args, source):
    encoding = _validate(args)
    source = source or open_source(args.source, args.text_field, getattr(args, "subset", None))
    job = {"source": source.spec, "inputs": source.fingerprint(), "encoding": encoding.name,
           "vocab_size": encoding.n_vocab, "eot_token": encoding.eot_token, "val_fraction": args.val_fraction,
           "min_val_tokens": args.min_val_tokens, "max_tokens": args.max_tokens,
           "text_field": args.text_field}  # --num_proc is not part of it
    # a rank file's contents, which its name does not fix: a job resumed on another file would mix two tokenizations
    job.update({k: v for k, v in describe_encoding(encoding.name).items() if k != "encoding"})
    if getattr(source, "subset", None):  # only then: the manifests of jobs without one still match
        job["subset"] = source.subset
    try:
        lock = runlock.hold(args.data_dir, "prepare job")  # one job per data_dir, until this one ends
    except runlock.Unavailable as e:
        raise PrepareError(str(e)) from None
    with lock:  # closing the file releases the lock, however the job ends
        return _run_job(args, source, encoding, job)


def _run_job(args, source, encoding, job):
    projected_tokens = _projected_tokens(source, encoding, args.max_tokens)
    try:
        state = _load_state(args.data_dir, job, source.start)
        if state["records"] == 0:  # decided once, before the first document is split: resumes keep it
            state["val_fraction"] = _val_fraction(args, projected_tokens)
        if state["complete"]:
            write_meta(args.data_dir, _meta(state))  # in case a kill fell between manifest and meta
            print(f"{args.data_dir} is already prepared, nothing to do: {_summary(state)}")
            return 0
        writer = BinWriter(args.data_dir, encoding.n_vocab, state["bin_bytes"])
        if state["records"] == 0:
            _commit(args.data_dir, state, writer, 0)  # meta.json says 'incomplete' from the start
    except OSError as e:
        raise PrepareError(f"cannot write to {args.data_dir}: {e.strerror or e}") from None
    if state["records"]:
        print(f"resuming {args.data_dir} after {state['records']:,} records: {_summary(state)}")
    _check_disk(args.data_dir, projected_tokens, state)
    started = time.time()
    try:
        with contextlib.closing(writer):
            tokens = _encode_all(args, source, state, writer, encoding)
    except OSError as e:  # the disk filled up, most likely
        raise PrepareError(f"writing to {args.data_dir} failed ({e.strerror or e}): work up to the last commit "
                           "is kept; fix that and re-run the same command to resume") from None
    seconds = time.time() - started
    if not state["tokens"]["val"]:  # a run of this folder would be refused only now, after hours of encoding
        warn("val.bin holds no tokens (--val_fraction 0, or too small a source): train.py evaluates on it and refuses "
             "a folder with fewer than block_size + 1 val tokens; prepare with --val_fraction above 0 to train on it")
    elif state["val_fraction"] and state["tokens"]["val"] < args.min_val_tokens:
        warn(f"val.bin holds only {state['tokens']['val']:,} tokens ({state['documents']['val']:,} documents), fewer "
             f"than --min_val_tokens {args.min_val_tokens:,}: the source is small, and validation loss on so little is noisy")
    print(f"prepared {args.data_dir}: {_summary(state)}; this run {tokens:,} tokens in {seconds:.1f}s "
          f"({tokens / max(seconds, 1e-9) / 1e6:.2f}M tokens/s)")
    return 0


def _stop(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run(args, source=None):
    """Run, resume, or confirm one prepare job; returns the exit status. source: a LocalFiles or
    HubDataset to use instead of opening args.source. A SIGTERM (a machine shutting down) or SIGHUP (a closed
    terminal; interrupt.stop_signals) stops it as Ctrl-C does, saying so, where it used to end without a word."""
    previous = {sig: signal.signal(sig, _stop) for sig in interrupt.stop_signals() if sig != signal.SIGINT}
    try:
        return _prepare(args, source)
    except (PrepareError, BinError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        name = str(e) or "SIGINT"
        print(f"\nstopped by {name}: work up to the last commit is kept; re-run the same command to resume",
              file=sys.stderr)
        return 128 + signal.Signals[name]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# -----------------------------------------------------------------------------
# command line

def available_cores():
    """The cores this process may run on (a container or taskset may allow fewer than the machine has)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def count(text):
    """A count written 10e9 or 10_000_000_000. argparse reports a ValueError as one line, not inf's OverflowError."""
    try:
        return int(float(text))
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"expected a count such as 10e9, got {text!r}") from None


def parser(description, source, data_dir, encoding="gpt2", val_fraction=0.0005, min_val_tokens=1_000_000,
           subset=None):
    """The flags every prepare script shares, with that script's defaults; --subset where a script's
    dataset has several configurations (subset: its default)."""
    p = cli.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", nargs="+", default=[source],
                   help="Hugging Face dataset name[@revision], or local files/globs of .jsonl, .jsonl.zst, "
                        ".parquet or text (default: %(default)s)")
    p.add_argument("--data_dir", default=data_dir,
                   help="where train.bin, val.bin and meta.json go (default: %(default)s)")
    p.add_argument("--encoding", default=encoding,
                   help="'gpt2', 'bytes', or the path of a .tiktoken rank file (default: %(default)s)")
    p.add_argument("--num_proc", type=int, default=available_cores(),
                   help="worker processes (default: all cores, %(default)s); may change between resumes")
    p.add_argument("--max_tokens", type=count, default=None,
                   help="stop at the first document boundary at or past this many tokens, train plus val")
    p.add_argument("--val_fraction", type=float, default=val_fraction,
                   help="share of documents (chosen by a hash of their text) that go to val.bin (default: %(default)s)")
    p.add_argument("--min_val_tokens", type=count, default=min_val_tokens,
                   help="raise --val_fraction for a small source so that val.bin gets about this many tokens, "
                        "up to a tenth of the corpus (default: %(default)s; 0: off)")
    p.add_argument("--text_field", default="text", help="the field that holds the text (default: %(default)s)")
    if subset:
        p.add_argument("--subset", default=subset,
                       help="the Hugging Face dataset's configuration to stream (default: %(default)s); "
                            "local files are read as given")
    p.add_argument("--commit_seconds", type=float, default=10.0,
                   help="how often progress is made durable: the most work a kill can lose (default: %(default)s)")
    return p


def main(description, **defaults):
    """Entry point of a prepare script: the shared flags with its defaults, then the job."""
    sys.exit(run(parser(description, **defaults).parse_args()))
