"""
Encodings by name: 'gpt2' (tiktoken's), 'bytes' (UTF-8 bytes plus end-of-text, needs no download),
or a path to a .tiktoken rank file (GPT-2's split pattern, end-of-text id = the number of ranks).

Every encoding is a tiktoken.Encoding underneath, wrapped so that all three behave the same:
encode_ordinary never treats '<|endoftext|>' in the text as special, and decode never raises
on an id the vocabulary lacks (an untrained model samples ids up to the padded vocab, 50304).
"""
import base64
import functools
import glob
import hashlib
import os

import tiktoken
from tiktoken_ext.openai_public import r50k_pat_str as GPT2_PATTERN

EOT = "<|endoftext|>"


class Encoding:
    """A tokenizer with the few methods the trainer and the prepare scripts use."""

    def __init__(self, name, core):
        self.name = name
        self._core = core
        self.n_vocab = core.n_vocab  # includes end-of-text
        self.eot_token = core.eot_token

    def __reduce__(self):
        # worker processes rebuild the encoding by name instead of pickling 50k ranks
        return get_encoding, (self.name,)

    def encode_ordinary(self, text):
        return self._core.encode_ordinary(text)

    def encode_ordinary_batch(self, texts, num_threads=8):
        return self._core.encode_ordinary_batch(texts, num_threads=num_threads)

    def encode_ordinary_numpy(self, text):
        """encode_ordinary as a uint32 array, without building a Python list of ints on the way."""
        try:
            return self._core.encode_to_numpy(text, disallowed_special=())
        except UnicodeEncodeError:
            # lone surrogates (they do occur in scraped JSON): the same fix-up tiktoken's
            # encode_ordinary applies, so both methods always agree
            text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
            return self._core.encode_to_numpy(text, disallowed_special=())

    @property
    def pattern(self):
        return self._core._pat_str

    def write_ranks(self, path):
        """The BPE ranks as a .tiktoken file (base64 token, rank), as load_ranks reads them back."""
        with open(path, "wb") as f:
            for token, rank in sorted(self._core._mergeable_ranks.items(), key=lambda item: item[1]):
                f.write(base64.b64encode(token) + b" %d\n" % rank)

    def decode(self, ids):
        """Text for ids; an id outside the vocabulary shows as '<|?ID|>' rather than raising."""
        parts, run = [], []
        for i in map(int, ids):
            if 0 <= i < self.n_vocab:
                run.append(i)
            else:
                parts += [self._core.decode(run), f"<|?{i}|>"]
                run = []
        parts.append(self._core.decode(run))
        return "".join(parts)


REPO_CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache")  # fetched ranks


@functools.cache  # built once per process (each of prepare's spawned workers builds its own)
def get_encoding(name):
    """'gpt2', 'bytes', or the path of a .tiktoken rank file; ValueError names what is wrong."""
    if name == "bytes":
        # no merges, so every byte is its own token whatever the split pattern; splitting
        # into long runs rather than GPT-2's words makes it ~6x faster
        ranks = {bytes([b]): b for b in range(256)}
        return Encoding(name, tiktoken.Encoding("bytes", pat_str=r"[\s\S]{1,64}",
                                                mergeable_ranks=ranks, special_tokens={EOT: 256}))
    if name == "gpt2":
        try:
            return Encoding(name, tiktoken.get_encoding("gpt2"))
        except Exception as e:  # tiktoken downloads GPT-2's files on first use
            fetched = os.path.relpath(os.path.join(REPO_CACHE, "gpt2.tiktoken"))
            way = (f"pass --encoding {fetched} (GPT-2's ranks, fetched here already)" if os.path.isfile(fetched) else
                   f"run scripts/fetch_gpt2_ranks.sh and pass --encoding {fetched}")
            raise ValueError(f"could not load tiktoken's 'gpt2' encoding ({type(e).__name__}); offline, "
                             f"{way}") from None
    if name.endswith(".tiktoken") or os.path.exists(name):
        ranks = load_ranks(name)
        core = tiktoken.Encoding(os.path.basename(name), pat_str=GPT2_PATTERN,
                                 mergeable_ranks=ranks, special_tokens={EOT: len(ranks)})
        return Encoding(name, core)
    raise ValueError(f"unknown encoding {name!r}: use 'gpt2', 'bytes' or the path of a .tiktoken rank file")


class FolderEncoding:
    """A Hugging Face folder's own tokenizer (tokenizer.json), read by transformers, behind the Encoding methods
    eval.py uses: a folder export_hf.py wrote carries its run's tokenizer, whatever its vocabulary, so that it is
    scored without naming the encoding again. Special tokens in the text are text, as in encode_ordinary."""

    def __init__(self, folder):
        from transformers import AutoTokenizer
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"{folder}/tokenizer.json does not load ({type(e).__name__}: {e}); pass --encoding "
                             "(bytes, gpt2 or the run's .tiktoken file)") from None
        if self._tokenizer.eos_token_id is None:
            raise ValueError(f"{folder}'s tokenizer names no end-of-text token (eos_token); pass --encoding "
                             "(bytes, gpt2 or the run's .tiktoken file)")
        self.name = os.path.join(folder, "tokenizer.json")
        self.n_vocab = len(self._tokenizer)
        self.eot_token = self._tokenizer.eos_token_id

    def encode_ordinary(self, text):
        return self._tokenizer(text, add_special_tokens=False, split_special_tokens=True)["input_ids"]

    def decode(self, ids):
        return self._tokenizer.decode(list(map(int, ids)))


def file_sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def describe(name):
    """How meta.json and checkpoints record an encoding: a rank file by absolute path and content hash, so that
    it is found from any directory, and found again by its hash if it moved (recorded)."""
    if name in (None, "gpt2", "bytes"):
        return {"encoding": name}
    return {"encoding": os.path.abspath(name), "encoding_sha256": file_sha256(name)}


GPT2_RANKS_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"  # fetch_gpt2_ranks.sh's file


def identity(recorded):
    """What makes two encodings the same, from describe()'s record: a built-in one's name, a rank file's hash (GPT-2's
    own rank file, fetched for offline use, is 'gpt2': the same ids)."""
    found = recorded.get("encoding_sha256") or recorded["encoding"]
    return "gpt2" if found == GPT2_RANKS_SHA256 else found


def find(name, sha256=None, near=()):
    """The name to load a recorded encoding by: itself if built in or where its file is (with the recorded
    hash: a rank file edited since would tokenize differently); else, with the recorded hash, the same file
    under the working folder (a volume mounted elsewhere: /old/mount/tok/my.tiktoken is tok/my.tiktoken, run
    from the project's folder) or a .tiktoken file in a folder of `near` (say, beside the bins) or in .cache/."""
    if name in ("gpt2", "bytes") or not sha256 or (os.path.isfile(name) and file_sha256(name) == sha256):
        return name
    parts = os.path.normpath(name).split(os.sep)
    for i in range(1, len(parts)):  # the shortest tail last: a folder of its own before a bare file name
        tail = os.path.join(*parts[i:])
        if os.path.isfile(tail) and file_sha256(tail) == sha256:
            return tail
    folders = [*near, REPO_CACHE, ".cache"]
    for folder in folders:
        for candidate in sorted(glob.glob(os.path.join(folder, "*.tiktoken"))):
            if file_sha256(candidate) == sha256:
                return candidate
    problem = "has changed since (another hash)" if os.path.exists(name) else "is not there"
    raise ValueError(f"the rank file {name} (sha256 {sha256[:16]}...) {problem}, and there is no file with its hash "
                     f"in {', '.join(folders)}: copy it to one of them (scripts/fetch_gpt2_ranks.sh writes "
                     "GPT-2's to .cache/gpt2.tiktoken)")


def recorded(record, near=()):
    """The name to load the encoding that describe()'s record (meta.json, a checkpoint) holds by, or None where it
    holds none: find() with its hash, so a rank file that moved with a volume is found in `near` or .cache/."""
    if not record.get("encoding"):
        return None
    return find(record["encoding"], record.get("encoding_sha256"), near)


def load_ranks(path):
    """A .tiktoken file: one 'base64-token rank' pair a line. Read directly rather than through
    tiktoken.load, which caches local files by path and would miss an edited file."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
        return {base64.b64decode(token): int(rank) for token, rank in (line.split() for line in lines if line)}
    except FileNotFoundError:
        raise ValueError(f"encoding rank file {path} not found (scripts/fetch_gpt2_ranks.sh fetches GPT-2's)") from None
    except (OSError, ValueError) as e:
        raise ValueError(f"{path} is not a .tiktoken rank file ({e})") from None
