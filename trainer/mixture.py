"""
The training data as a weighted mixture of prepared data folders: which folder each window comes
from, where each folder's own sampler stands, and how that state goes into a checkpoint and back.

A run reads one folder (data_dir) or several (data_mixture = {"data/pile": 0.5, "data/dclm": 0.5});
train.py sees a Mixture either way. One folder is a mixture of one source with weight 1, which draws
exactly what its WindowSampler alone draws.

The schedule. After n windows, window n+1 goes to the source furthest behind its share: the largest
(n + 1) * w_i - drawn_i, ties to the first name in sorted order. It is a weighted round robin with no
random numbers, so the sequence depends on the weights and the position alone: every rank draws the
whole global batch and takes its share, whatever the number of processes. Each source's count stays
within one window of n * w_i at every n (tests/test_mixture.py checks it), so a small weight is not
starved or flooded by chance. Inside a source, windows come from its own WindowSampler (bins.py):
without replacement, in a per-epoch permutation seeded by the run's seed.

Why not Megatron's BlendedDataset or litgpt's CombinedStreamingDataset: both index their own dataset
classes, Megatron by a per-sample index built up front, litgpt by a random generator per dataloader
worker. Neither reads these uint16 bins or their exact-resume WindowSampler, and fitting either to them
would be more code than the rule here, which is a loop.

A resume with other weights or sources restarts the schedule at the resume point with the new weights.
Each source keeps its sampler position by name (the folder's name), so one that stays never repeats
what it gave, a new one starts at its epoch 0, and a dropped one's position stays in the checkpoint
should it come back.
"""
import math
import os

import numpy as np

from trainer import RunError, bins
from trainer.tokenizer import find as find_encoding
from trainer.tokenizer import identity as encoding_identity

MAX_REPEATS = 4  # epochs of one source past which plan.py and train.py warn (repeated data stops helping)


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
        path_bin = bins.bin_path(path, "train")
        tokens = os.path.getsize(path_bin) // bins.DTYPE.itemsize if os.path.isfile(path_bin) else 0
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
        self.meta = bins.read_meta(path)
        self.sampler = bins.WindowSampler(train.num_windows(block_size), seed)

    def windows_drawn(self):
        return self.sampler.epoch * self.sampler.num_windows + self.sampler.position


def open_mixture(shares, block_size, vocab_size, seed, vocab_from=None, mixed=False):
    """The Mixture of {path: share}, every folder checked as open_split checks one; raises bins.BinError
    for a folder that cannot be trained on and MixtureError for folders made with different encodings.
    mixed: the folders are a data_mixture's (not data_dir), which the advice for a missing one names."""
    key = "data_mixture" if mixed else None
    sources = []
    for path in sorted(shares, key=source_name):
        train = bins.open_split(path, "train", block_size, vocab_size, vocab_from, key)
        val = bins.open_split(path, "val", block_size, vocab_size, vocab_from, key)
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
            return find_encoding(described.meta["encoding"], described.meta.get("encoding_sha256"), [described.path])
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
        first sources one more where it does not divide; at least one each. Fixed for the run."""
        found = {}
        for i, s in enumerate(self.sources):
            k = max(1, eval_iters // len(self.sources) + (i < eval_iters % len(self.sources)))
            found[s.name] = bins.WindowSampler(s.val.num_windows(self.block_size), self.seed).next_indices(
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
        changes = [f"{s.name} added (weight {s.share:.3g})" for s in self.sources if s.name not in saved]
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
