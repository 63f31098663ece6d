"""
The token-bin format: what every data/<name>/prepare.py writes and train.py reads, and how train.py samples it.

A prepared data dir holds
    train.bin, val.bin   flat little-endian uint16 token ids, each document followed by end-of-text
    meta.json            encoding, vocab_size, eot_token, dtype, tokens and documents per split,
                         sources, skipped_records, val_fraction, and whether preparation is complete
A data dir without meta.json (e.g. made by nanoGPT) is still readable: the per-batch id check guards it.

The sampler train.py draws from is at the end: one folder's windows, or a weighted mixture of several.
"""
import contextlib
import hashlib
import json
import math
import os
import reprlib
import shlex

import numpy as np

from trainer import RunError
from trainer.tokenizer import recorded as recorded_encoding
from trainer.tokenizer import identity as encoding_identity

DTYPE = np.dtype("<u2")  # uint16 holds every id of a vocab of at most 65536
SPLITS = ("train", "val")
META_FILE = "meta.json"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above this package
# The meta.json fields that train.py, sample.py and the scripts read, as prepare writes them; any may be absent
# (a hand-made or older file), but one that is there must have its type or a reader fails part way with a traceback.
META_FIELDS = {"encoding": str, "encoding_sha256": str, "vocab_size": int, "dtype": str, "complete": bool,
               "command": str, "splits": {split: {"tokens": int, "documents": int} for split in SPLITS}}
JSON_TYPES = {str: "a string", int: "a whole number", bool: "true or false", dict: "an object"}


class BinError(RunError):
    """A data dir that cannot be used, as one line telling the user what to do."""


# -----------------------------------------------------------------------------
# meta.json

def write_json_atomic(path, obj):
    """Write so that a reader, or a kill at any moment, sees the old file or the new one, never half."""
    _write_atomic(path, lambda f: json.dump(obj, f, indent=1))


def write_jsonl_atomic(path, records):
    """JSON lines, one record a line, written as write_json_atomic writes."""
    _write_atomic(path, lambda f: f.writelines(json.dumps(record) + "\n" for record in records))


def _write_atomic(path, write):
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, a read-only folder, Ctrl-C: the old file stands, and no temp file beside it
        with contextlib.suppress(OSError):  # never there, or the folder forbids it: the first error is the one to tell
            os.remove(tmp)
        raise
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_meta(data_dir, meta):
    write_json_atomic(os.path.join(data_dir, META_FILE), meta)


def read_meta(data_dir):
    """meta.json as a dict, or None where there is none; BinError naming it where it is not a JSON object
    (cut short in a copy, or edited by hand) or a field readers use holds another type than prepare writes."""
    path = os.path.join(data_dir, META_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise BinError(f"{path} does not read as JSON ({e}): copy it again from where the data was prepared, "
                       "or prepare the data again") from None
    if not isinstance(meta, dict):
        raise BinError(f"{path} holds a {type(meta).__name__}, not prepare's record: prepare the data again")
    if wrong := _wrong_field(meta, META_FIELDS):
        name, value, kind = wrong
        raise BinError(f"{path}: {name} is {reprlib.repr(value)}, not {JSON_TYPES[kind]} as prepare writes it: "
                       "prepare the data again")
    return meta


def _wrong_field(record, fields, prefix=""):
    """(name, value, expected type) of the first of fields (a nested dict: an object of its own fields) whose value
    in record has another type, else None. Exact types: JSON's true is a bool, not the vocab_size 1."""
    for key, kind in fields.items():
        if key not in record:
            continue
        expected = dict if isinstance(kind, dict) else kind
        if type(record[key]) is not expected:
            return prefix + key, record[key], expected
        if isinstance(kind, dict) and (wrong := _wrong_field(record[key], kind, f"{prefix}{key}.")):
            return wrong
    return None


def bin_path(data_dir, split):
    return os.path.join(data_dir, f"{split}.bin")


def check_vocab(n_vocab):
    if n_vocab > 65536:
        raise ValueError(f"a vocab of {n_vocab} ids does not fit the uint16 bins (65536 at most)")


# -----------------------------------------------------------------------------
# writing

class BinWriter:
    """Appends token ids to train.bin and val.bin.

    lengths: the byte length of each bin as last committed; the files are cut back to it, dropping
    whatever a killed run appended after its last commit. None starts both files empty.
    """

    def __init__(self, data_dir, n_vocab, lengths=None):
        check_vocab(n_vocab)
        self.files = {}
        for split in SPLITS:
            path = bin_path(data_dir, split)
            f = open(path, "ab")  # append mode: every write lands at the end, even after truncate
            keep = lengths[split] if lengths else 0
            if os.fstat(f.fileno()).st_size < keep:
                f.close()
                raise BinError(f"{path} is shorter than its progress manifest records: "
                               f"delete {data_dir} and prepare it again")
            f.truncate(keep)
            self.files[split] = f

    def append(self, split, ids):
        self.files[split].write(np.ascontiguousarray(ids, dtype=DTYPE))

    def sync(self):
        """Flush and fsync both bins; returns their byte lengths, now safe to record as committed."""
        for f in self.files.values():
            f.flush()
            os.fsync(f.fileno())
        return {split: os.fstat(f.fileno()).st_size for split, f in self.files.items()}

    def close(self):
        for f in self.files.values():
            f.close()


# -----------------------------------------------------------------------------
# reading

def prepare_hint(data_dir, meta=None):
    """The command that prepares data_dir: the one recorded in its meta.json, writing to data_dir (the folder may
    have been copied or mounted elsewhere since), else a good guess (also where a hand edit left it unsplittable)."""
    words = _shell_words(meta.get("command") if meta else None)
    if words:
        at = next((i for i, w in enumerate(words) if w == "--data_dir" or w.startswith("--data_dir=")), None)
        if at is None:
            return shlex.join([*words, "--data_dir", str(data_dir)])
        cut = 2 if words[at] == "--data_dir" else 1
        return shlex.join([*words[:at], "--data_dir", str(data_dir), *words[at + cut:]])
    name = os.path.basename(os.path.normpath(data_dir))
    script = lambda data: os.path.relpath(os.path.join(REPO, "data", data, "prepare.py"))  # from where it is run
    if name != "pile" and os.path.isfile(script(name)):
        return f"python {script(name)} --data_dir {data_dir}"
    return (f"python {script('pile')} --data_dir {data_dir} "
            f"(or python {script('quickstart')} for the offline quick start)")


def _shell_words(command):
    """command split as a shell would, or None where it is missing or does not split (an unclosed quote)."""
    try:
        return shlex.split(command) if command else None
    except ValueError:
        return None


def data_folders():
    """The repository's data/<name> folders that hold bins or a prepare script, as 'data/pile (prepare.py)'.
    data/hellaswag and data/eval are left out: their prepare.py make evaluation files, not bins."""
    root = os.path.join(REPO, "data")
    found = []
    for name in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        has = [f for f in ("train.bin", "prepare.py") if os.path.isfile(os.path.join(root, name, f))]
        if has and name not in ("hellaswag", "eval"):
            found.append(f"data/{name} ({', '.join(has)})")
    return found


def missing_bins_advice(data_dir, meta, key=None):
    """What to do about a data_dir without bins: prepare it, or, where no data/<name>/prepare.py has its
    name (a typo is likelier than the Pile), the folders that could be meant. key: the setting that named
    the folder where not data_dir (a data_mixture's key)."""
    name = os.path.basename(os.path.normpath(data_dir))
    elsewhere = "" if os.path.isabs(data_dir) or os.path.samefile(os.getcwd(), REPO) else (
        f" (a relative data_dir is read from the folder you run in, {os.getcwd()}, not the repository's: run from "
        f"{REPO} as its docs do)")
    if (meta and meta.get("command")) or os.path.isfile(os.path.join(REPO, "data", name, "prepare.py")):
        return f"prepare the data first with: {prepare_hint(data_dir, meta)}{elsewhere}"
    return (f"there is no data/{name}/prepare.py to make it; data folders here: {', '.join(data_folders())}; "
            f"{key_advice(data_dir, key)} to one of them, or prepare into {data_dir} with one of their "
            f"prepare.py scripts and --data_dir {data_dir}")


def key_advice(data_dir, key):
    """How to point the run at another folder: data_dir's setting, or the data_mixture key that named it."""
    return f"change the data_mixture key {data_dir!r}" if key == "data_mixture" else "set data_dir (or dataset)"


def vocab_advice(vocab_from):
    """How to fix data with more ids than the model: the vocabulary is the config's to raise, unless it
    comes from the weights the run starts from (vocab_from: 'the checkpoint', 'gpt2', a path)."""
    if vocab_from is None:
        return "raise vocab_size or prepare with a smaller encoding"
    return (f"the model's vocabulary comes from {vocab_from} and cannot change: prepare the data with "
            f"the encoding {vocab_from} was trained with")


def open_split(data_dir, split, block_size, vocab_size, vocab_from=None, key=None):
    """The TokenBin of one split, checked without scanning it (bins reach 600 GB).

    Raises BinError when the data dir cannot be trained on with this block_size and vocab_size.
    vocab_from names where vocab_size comes from when not the config (a checkpoint, pretrained weights);
    key='data_mixture' where a data_mixture key named data_dir, for the advice.
    """
    path = bin_path(data_dir, split)
    meta = read_meta(data_dir) if os.path.isdir(data_dir) else None
    if not os.path.isfile(path):
        raise BinError(f"no {split}.bin in {data_dir}: {missing_bins_advice(data_dir, meta, key)}")
    if meta is not None:
        if not meta.get("complete"):
            raise BinError(f"preparation of {data_dir} is unfinished: re-run {prepare_hint(data_dir, meta)} "
                           "and it will continue where it stopped")
        if meta.get("dtype", "uint16") != "uint16":
            raise BinError(f"{data_dir} holds {meta['dtype']} tokens; only uint16 bins are supported")
        if meta.get("vocab_size", 0) > vocab_size:
            raise BinError(f"{data_dir} was encoded with {meta['encoding']!r} ({meta['vocab_size']} ids), more than "
                           f"the model's vocab_size {vocab_size}: {vocab_advice(vocab_from)}")
    size = os.path.getsize(path)
    if size % DTYPE.itemsize:
        raise BinError(f"{path} has an odd size ({size} bytes) so it is not whole uint16 tokens: "
                       f"it is cut short or not a token bin; prepare it again")
    recorded = ((meta or {}).get("splits") or {}).get(split, {}).get("tokens")
    if recorded is not None and size // DTYPE.itemsize != recorded:  # a copy cut short reads as fewer tokens
        raise BinError(f"{path} holds {size // DTYPE.itemsize:,} tokens but {META_FILE} records {recorded:,}: it "
                       "changed since it was prepared (a copy cut short?); copy it again, or prepare it again")
    tokens = TokenBin(path, vocab_size, vocab_from)
    if tokens.num_tokens < block_size + 1:
        raise BinError(f"{path} has {tokens.num_tokens} tokens but block_size {block_size} needs at least "
                       f"{block_size + 1}: lower block_size, or prepare with a larger --val_fraction "
                       "into a fresh --data_dir")
    return tokens


class TokenBin:
    """A token file read as non-overlapping windows of block_size+1 tokens (x and y of one sample)."""

    # Pages of a memmap that random reads touch stay in this process's RSS until it is unmapped,
    # so at 600 GB RSS would creep up to the file size; re-mapping every so many calls drops
    # them (the kernel's page cache keeps them, so nothing is re-read), yet avoids a per-batch open.
    REMAP_EVERY = 1000

    def __init__(self, path, vocab_size, vocab_from=None):
        self.path = path
        self.vocab_size = vocab_size
        self.vocab_from = vocab_from
        self.num_tokens = os.path.getsize(path) // DTYPE.itemsize
        self._map = None
        self._calls = 0

    def num_windows(self, block_size):
        return (self.num_tokens - 1) // block_size

    def windows(self, indices, block_size):
        """int64 array (len(indices), block_size+1): window i is tokens [i*block_size, (i+1)*block_size]."""
        indices = np.asarray(indices, dtype=np.int64)
        if indices.size and not 0 <= indices.min() <= indices.max() < self.num_windows(block_size):
            raise IndexError(f"window index out of range [0, {self.num_windows(block_size)}) in {self.path}")
        if self._calls % self.REMAP_EVERY == 0:
            self._map = np.memmap(self.path, dtype=DTYPE, mode="r")
        self._calls += 1
        starts = indices[:, None] * block_size
        x = self._map[starts + np.arange(block_size + 1)].astype(np.int64)
        if x.size and x.max() >= self.vocab_size:
            raise BinError(f"{self.path} holds token id {x.max()}, beyond the model's vocab_size {self.vocab_size}: "
                           f"it was made with another encoding; {vocab_advice(self.vocab_from)}")
        return x


# -----------------------------------------------------------------------------
# sampling

_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix(x):
    """splitmix64's finaliser: every input bit flips about half the output bits (uint64 arithmetic wraps)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class WindowSampler:
    """Window indices without replacement: each epoch is a seeded permutation of range(num_windows).

    The permutation is never materialised (146M windows at Pile scale): position p of an epoch maps
    to window feistel(p), a Feistel network keyed by (seed, epoch) over the next even power of two,
    which is a bijection; values past num_windows are mapped again (cycle walking) until they fall
    in range, which keeps it a bijection on [0, num_windows).
    """

    ROUNDS = 6

    def __init__(self, num_windows, seed):
        if num_windows < 1:
            raise ValueError(f"need at least one window to sample, got {num_windows}")
        self.num_windows = int(num_windows)
        self.seed = int(seed)
        self.half_bits = (max(1, (self.num_windows - 1).bit_length()) + 1) // 2
        self.load_state_dict({"epoch": 0, "position": 0})

    def state_dict(self):
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state):
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        if not 0 <= self.position < self.num_windows:
            raise ValueError(f"sampler position {self.position} is outside [0, {self.num_windows})")
        # round keys from a hash, not numpy's RNG, so they are the same on every machine and version
        digest = hashlib.blake2b(f"{self.seed}/{self.epoch}".encode(), digest_size=8 * self.ROUNDS).digest()
        self._keys = np.frombuffer(digest, dtype="<u8")

    def next_indices(self, n):
        """The next n window indices as int64, running on into the next epoch's permutation."""
        out = []
        while n > 0:
            take = min(n, self.num_windows - self.position)
            out.append(self._permute(np.arange(self.position, self.position + take, dtype=np.uint64)))
            self.position += take
            n -= take
            if self.position == self.num_windows:
                self.load_state_dict({"epoch": self.epoch + 1, "position": 0})
        return np.concatenate(out).astype(np.int64) if out else np.empty(0, dtype=np.int64)

    def _permute(self, x):
        y = self._feistel(x)
        outside = y >= self.num_windows
        while outside.any():
            y[outside] = self._feistel(y[outside])
            outside = y >= self.num_windows
        return y

    def _feistel(self, x):
        bits = np.uint64(self.half_bits)
        mask = np.uint64((1 << self.half_bits) - 1)
        left, right = x >> bits, x & mask
        for key in self._keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        return (left << bits) | right


# -----------------------------------------------------------------------------
# weighted mixtures of folders: the sampler train.py draws from
# The training data as a weighted mixture of prepared data folders: which folder each window comes
# from, where each folder's own sampler stands, and how that state goes into a checkpoint and back.
#
# A run reads one folder (data_dir) or several (data_mixture = {"data/pile": 0.5, "data/dclm": 0.5});
# train.py sees a Mixture either way. One folder is a mixture of one source with weight 1, which draws
# exactly what its WindowSampler alone draws.
#
# The schedule. After n windows, window n+1 goes to the source furthest behind its share: the largest
# (n + 1) * w_i - drawn_i, ties to the first name in sorted order. It is a weighted round robin with no
# random numbers, so the sequence depends on the weights and the position alone: every rank draws the
# whole global batch and takes its share, whatever the number of processes. Each source's count stays
# within one window of n * w_i at every n (tests/test_mixture.py checks it), so a small weight is not
# starved or flooded by chance. Inside a source, windows come from its own WindowSampler (bins.py):
# without replacement, in a per-epoch permutation seeded by the run's seed.
#
# Why not Megatron's BlendedDataset or litgpt's CombinedStreamingDataset: both index their own dataset
# classes, Megatron by a per-sample index built up front, litgpt by a random generator per dataloader
# worker. Neither reads these uint16 bins or their exact-resume WindowSampler, and fitting either to them
# would be more code than the rule here, which is a loop.
#
# A resume with other weights or sources restarts the schedule at the resume point with the new weights.
# Each source keeps its sampler position by name (the folder's name), so one that stays never repeats
# what it gave, a new one starts at its epoch 0, and a dropped one's position stays in the checkpoint
# should it come back.

MAX_REPEATS = 4  # epochs of one source past which plan.py and train.py warn (repeated data stops helping)

# The val windows' permutation key. Not the run's seed: a draw of 200 quick-start val windows moves a loss by
# 2-3.7%, more than two seeds' models differ (docs/ladder_evidence.md, "The val windows"). 1337, the default
# seed, keeps the windows every run at that seed measured before.
VAL_WINDOWS_KEY = 1337


class MixtureError(RunError):
    """A mixture, or a checkpoint's data position, that cannot be used, in one line."""


def source_name(path):
    return os.path.basename(os.path.normpath(path))


def weights_problem(data_mixture):
    """The first thing wrong with a data_mixture setting, as one line, or None. No files are read."""
    names = {}
    for path, weight in data_mixture.items():
        if not isinstance(path, str) or not path:
            return f"data_mixture: each key must be a data folder's path, got {path!r}"
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight < 0:
            return f"data_mixture: the weight of {path!r} must be a number >= 0, got {weight!r}"
        if source_name(path) in names:
            return (f"data_mixture: {names[source_name(path)]!r} and {path!r} have the same name "
                    f"{source_name(path)!r}, which names a source in logs and checkpoints: rename one folder")
        names[source_name(path)] = path
    if data_mixture and math.fsum(data_mixture.values()) <= 0:
        return f"data_mixture: the weights sum to zero ({data_mixture!r}): give at least one source a positive weight"
    return None


def folders(cfg):
    """{path: weight share} of the run's sources: data_mixture's, or data_dir with weight 1."""
    chosen = cfg.data_mixture or {cfg.data_dir: 1.0}
    total = math.fsum(chosen.values())  # exactly rounded: the shares do not depend on the order of the keys
    return {path: weight / total for path, weight in chosen.items()}


def planned_epochs(shares, total_tokens):
    """{name: epochs of its train.bin that total_tokens of training draw from it, None if not prepared here}."""
    found = {}
    for path, share in shares.items():
        path_bin = bin_path(path, "train")
        tokens = os.path.getsize(path_bin) // DTYPE.itemsize if os.path.isfile(path_bin) else 0
        found[source_name(path)] = share * total_tokens / tokens if tokens else None
    return found


def repeat_warning(name, epochs):
    if epochs is not None and epochs > MAX_REPEATS:
        return (f"warning: source {name} would repeat {epochs:.1f} times by max_iters (more than {MAX_REPEATS}): "
                "give it less weight, prepare more of it, or train for fewer steps")
    return None


class Source:
    """One prepared folder of a mixture: its bins, its share, and the sampler of its training windows."""

    def __init__(self, path, share, train, val, seed, block_size):
        self.path, self.name, self.share = path, source_name(path), share
        self.train, self.val = train, val
        self.meta = read_meta(path)
        self.sampler = WindowSampler(train.num_windows(block_size), seed)

    def windows_drawn(self):
        return self.sampler.epoch * self.sampler.num_windows + self.sampler.position


def open_mixture(shares, block_size, vocab_size, seed, vocab_from=None, mixed=False):
    """The Mixture of {path: share}, every folder checked as open_split checks one; raises BinError
    for a folder that cannot be trained on and MixtureError for folders made with different encodings.
    mixed: the folders are a data_mixture's (not data_dir), which the advice for a missing one names."""
    key = "data_mixture" if mixed else None
    sources = []
    for path in sorted(shares, key=source_name):
        train = open_split(path, "train", block_size, vocab_size, vocab_from, key)
        val = open_split(path, "val", block_size, vocab_size, vocab_from, key)
        sources.append(Source(path, shares[path], train, val, seed, block_size))
    described = [s for s in sources if s.meta]  # a folder without meta.json (nanoGPT's) is guarded per batch
    for s in described[1:]:
        if encoding_identity(s.meta) != encoding_identity(described[0].meta):
            raise MixtureError(f"data_mixture: {s.path} was encoded with {s.meta['encoding']!r} but "
                               f"{described[0].path} with {described[0].meta['encoding']!r}: prepare every source "
                               "with the same --encoding")
    return Mixture(sources, seed, block_size)


class Mixture:
    """The sources in name order, the schedule's counts, and what train.py asks of its data."""

    def __init__(self, sources, seed, block_size):
        self.sources, self.seed, self.block_size = sources, seed, block_size
        self.drawn = [0] * len(sources)  # windows per source since the schedule (re)started
        self.dormant = {}  # sampler states of sources a checkpoint had and this run dropped
        self.changes = []  # what the last load_state_dict changed, as its phrases

    def encoding(self, fallback=None):
        """The name to load the bins' encoding by (tokenizer.find: a rank file by path, else by its hash), saved
        in checkpoints so sample.py can decode; fallback for bins without meta.json. MixtureError if it is lost."""
        described = next((s for s in self.sources if s.meta), None)  # open_mixture checked they agree
        if described is None:
            return fallback
        try:
            return recorded_encoding(described.meta, [described.path])
        except ValueError as e:
            raise MixtureError(f"{described.path}/meta.json: {e}") from None

    def next_windows(self, n):
        """The next n windows as an int64 array (n, 2) of (source index, window index in its train.bin)."""
        # plain Python floats: numpy calls per window took 12 ms for the 640 windows of a 6.7B step, these 0.6 ms
        shares, drawn, order = [s.share for s in self.sources], self.drawn, range(len(self.sources))
        total, picks = sum(drawn), []
        for _ in range(n):
            total += 1
            i = max(order, key=lambda k: total * shares[k] - drawn[k])  # max keeps the first of equals: sorted names
            drawn[i] += 1
            picks.append(i)
        picks = np.array(picks, dtype=np.int64)
        draws = np.stack([picks, np.zeros(n, dtype=np.int64)], axis=1)
        for i, s in enumerate(self.sources):  # each source's windows in its own order, to the positions it got
            mine = picks == i
            draws[mine, 1] = s.sampler.next_indices(int(mine.sum()))
        return draws

    def read(self, draws, block_size):
        """The tokens of draws (from next_windows) as int64 (len(draws), block_size+1), like TokenBin.windows."""
        draws = np.asarray(draws).reshape(-1, 2)
        out = np.empty((len(draws), block_size + 1), dtype=np.int64)
        for i, s in enumerate(self.sources):
            mine = draws[:, 0] == i
            if mine.any():
                out[mine] = s.train.windows(draws[mine, 1], block_size)
        return out

    def val_windows(self, eval_iters, batch_size):
        """{name: (k, batch_size) val window indices}: eval_iters batches shared out evenly among the
        sources (not by weight: a small source's loss needs as many batches to mean anything), the
        first sources one more where it does not divide; at least one each. The same windows for every
        run of the data, whatever its seed, so that two runs' val losses compare (a larger eval set starts
        with a smaller one's windows)."""
        found = {}
        for i, s in enumerate(self.sources):
            k = max(1, eval_iters // len(self.sources) + (i < eval_iters % len(self.sources)))
            found[s.name] = WindowSampler(s.val.num_windows(self.block_size), VAL_WINDOWS_KEY).next_indices(
                k * batch_size).reshape(k, batch_size)
        return found

    def headline(self, losses):
        """The weighted mean of {name: val loss}: the run's val loss."""
        return sum(s.share * losses[s.name] for s in self.sources)

    def accounting(self, name):
        """(tokens seen, epochs) of one source so far."""
        s = next(s for s in self.sources if s.name == name)
        return s.windows_drawn() * self.block_size, s.windows_drawn() / s.sampler.num_windows

    def describe(self, tokens_per_iter, max_iters, iter_num=0):
        """train.py's data lines: per source its tokens, its own share of a step's and the epochs it reaches at
        max_iters (and a warning). Called after a resume at iter_num: what each source gave before counts as
        drawn, at whatever weights it was drawn (a resume may change them), and only the steps to come at its
        share now."""
        lines, windows_to_come = [], max(0, max_iters - iter_num) * tokens_per_iter / self.block_size
        for s in self.sources:
            share = f" (weight {s.share:.3g})" if len(self.sources) > 1 else ""
            epochs = (s.windows_drawn() + s.share * windows_to_come) / s.sampler.num_windows
            lines.append(f"data: {s.path}{share}: {s.train.num_tokens:,} train tokens ({s.share * tokens_per_iter:,.0f} "
                         f"per step, {epochs:.2f} epochs to max_iters), {s.val.num_tokens:,} val")
            if warning := repeat_warning(s.name, epochs):
                lines.append(warning)
        return lines

    # -------------------------------------------------------------------------
    # checkpoints

    def state_dict(self):
        """Plain ints, floats and strings, by source name; dropped sources' positions ride along."""
        live = {s.name: {"path": s.path, "windows": s.sampler.num_windows, **s.sampler.state_dict()}
                for s in self.sources}
        return {"seed": self.seed, "shares": {s.name: s.share for s in self.sources},
                "drawn": {s.name: d for s, d in zip(self.sources, self.drawn)},
                "sources": {**self.dormant, **live}}

    def load_state_dict(self, state):
        """Continue from a state_dict, of this mixture or of another. Returns the changes as phrases
        ('dclm added', 'weights ...'): none when it is this mixture's, and then the draws continue
        exactly. Raises MixtureError where a kept source's order changed (its train.bin or the seed)."""
        saved = state["sources"]
        kept = [s for s in self.sources if s.name in saved]
        if kept and state["seed"] != self.seed:
            raise _order_changed(f"seed {state['seed']} then, {self.seed} now")
        for s in kept:
            if saved[s.name]["windows"] != s.sampler.num_windows:
                raise _order_changed(f"{s.name}: {saved[s.name]['windows']:,} windows then, "
                                     f"{s.sampler.num_windows:,} now")
        for s in self.sources:
            s.sampler.load_state_dict(saved.get(s.name, {"epoch": 0, "position": 0}))
        live = {s.name for s in self.sources}
        self.dormant = {name: st for name, st in saved.items() if name not in live}
        gone = {saved[name]["windows"]: name for name in state["shares"] if name not in live}

        def added(s):  # a folder renamed (a volume mounted elsewhere) is another source, read from its start
            twin = gone.get(s.sampler.num_windows)
            return f"{s.name} added (weight {s.share:.3g})" + (
                f", as many windows as {twin}: if it is the folder {twin} renamed, its data starts over here; name it "
                f"{twin} again to go on from its position" if twin else "")
        changes = [added(s) for s in self.sources if s.name not in saved]
        changes += [f"{s.name} back (weight {s.share:.3g}) from its kept position" for s in kept
                    if s.name not in state["shares"]]
        changes += [f"{name} dropped (its position is kept)" for name in state["shares"] if name not in live]
        changes += [f"{s.name} weight {state['shares'][s.name]:.3g} -> {s.share:.3g}" for s in kept
                    if s.name in state["shares"] and state["shares"][s.name] != s.share]
        same = not changes and state["shares"] == {s.name: s.share for s in self.sources}
        self.drawn = [int(state["drawn"][s.name]) if same else 0 for s in self.sources]
        self.changes = changes
        return changes


def _order_changed(what):
    return MixtureError(f"the data order changed since the checkpoint ({what}): resuming would repeat or skip data. "
                        f"Use the train.bin and seed the run started with, or start a new out_dir "
                        f"(init_weights= to fine-tune)")
