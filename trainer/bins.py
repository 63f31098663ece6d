"""
The token-bin format: what every data/<name>/prepare.py writes and train.py reads.

A prepared data dir holds
    train.bin, val.bin   flat little-endian uint16 token ids, each document followed by end-of-text
    meta.json            encoding, vocab_size, eot_token, dtype, tokens and documents per split,
                         sources, skipped_records, val_fraction, and whether preparation is complete
A data dir without meta.json (e.g. made by nanoGPT) is still readable: the per-batch id check guards it.
"""
import hashlib
import json
import os

import numpy as np

from trainer import RunError

DTYPE = np.dtype("<u2")  # uint16 holds every id of a vocab of at most 65536
SPLITS = ("train", "val")
META_FILE = "meta.json"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository, above this package


class BinError(RunError):
    """A data dir that cannot be used, as one line telling the user what to do."""


# -----------------------------------------------------------------------------
# meta.json

def write_json_atomic(path, obj):
    """Write so that a reader, or a kill at any moment, sees the old file or the new one, never half."""
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_meta(data_dir, meta):
    write_json_atomic(os.path.join(data_dir, META_FILE), meta)


def read_meta(data_dir):
    """meta.json as a dict, or None where there is none."""
    path = os.path.join(data_dir, META_FILE)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


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
    """The command that prepares data_dir: the one recorded in its meta.json, else a good guess."""
    if meta and meta.get("command"):
        return meta["command"]
    name = os.path.basename(os.path.normpath(data_dir))
    script = os.path.join("data", name, "prepare.py")
    if name != "pile" and os.path.isfile(os.path.join(REPO, script)):
        return f"python {script} --data_dir {data_dir}"
    return (f"python data/pile/prepare.py --data_dir {data_dir} "
            "(or python data/quickstart/prepare.py for the offline quick start)")


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
    if (meta and meta.get("command")) or os.path.isfile(os.path.join(REPO, "data", name, "prepare.py")):
        return f"prepare the data first with: {prepare_hint(data_dir, meta)}"
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
