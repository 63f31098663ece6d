"""
Checkpoints that survive kills, full disks and weeks of resumes: the files on disk, and the .pt format.

A checkpoint is out_dir/ckpt_<N>.pt, N = completed optimizer steps, no zero padding.
- A save writes a temp file (.ckpt_<N>.pt.tmp-<pid>, a name discovery never matches), fsyncs it
  and renames it, so a file named ckpt_<N>.pt is always complete.
- Rotation orders checkpoints by N, never by name, and deletes old ones only after the new one is
  complete.
- Loading falls back past unreadable checkpoints, and raises CheckpointError instead of returning
  "nothing" when checkpoints exist but none loads (the trainer would restart from scratch).
- Loading uses weights_only=True: a checkpoint is data, and loading it must not run code from the
  file. So a checkpoint may hold only tensors and plain Python values (dicts, lists, tuples, ints,
  floats, strs, bools, None): store RNG state as torch.get_rng_state() or plain values, never as
  np.random.get_state(). save_checkpoint checks this before it publishes a file.
- Every save writes what stage() makes of the live state: plain tensors, whatever wraps them in
  training (torchao's fp8 weights under FSDP2), so the file holds the values and loads without torchao.
- A .pt file holds a checksum of every tensor's bytes ("checksums"), which every load checks: bytes damaged on
  disk in the middle of a file load without an error from torch, and would be trained on.
Only the process that saves (rank 0) should call the functions that change out_dir.

Under FSDP a checkpoint is a folder out_dir/ckpt_<N>/ instead (save_sharded): model and optimizer
shards from torch.distributed.checkpoint, resharded on load, plus trainer_state.pt (everything else, as
in a .pt file). Discovery, loading, rotation, fallback and roll back treat both forms alike, ordered by N.
The Saver runs either format's save synchronously or in the background, by the same steps.

This file is the formats and the files; checkpointer.py's Checkpointer decides when a run saves and what a
checkpoint holds beyond weights and optimizer, and is what train.py calls.
"""


import datetime
import errno
import glob
import json
import operator
import os
import pickle
import re
import shutil
import tempfile
import threading
import time
import warnings

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_state_dict,
                                                     set_model_state_dict, set_state_dict)
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.utils.serialization import config as serialization_config

from trainer import RunError, bins, faults, runlock

# dcp says so each time one process (sample.py, eval.py, a conversion) reads or writes a sharded checkpoint
warnings.filterwarnings("ignore", "torch.distributed is disabled, unavailable or uninitialized", UserWarning)

# no sign and no zero padding, so each step has exactly one name (ckpt_010.pt is not step 10)
_CKPT_RE = re.compile(r'ckpt_(0|[1-9][0-9]*)\.pt')
_SHARDED_RE = re.compile(r'ckpt_(0|[1-9][0-9]*)')
_TEMP_RE = re.compile(r'\.ckpt_([0-9]+)(\.pt\.tmp-[0-9]+|\.tmp-sharded(-replaced)?)')  # a .pt's, a sharded folder's
TRAINER_STATE = 'trainer_state.pt'  # in a sharded checkpoint: all but the model and optimizer
ROLLED_BACK_DIR = 'rolled_back'  # roll_back_to moves checkpoints here; discovery never looks inside
SCORES_LOG = 'eval.jsonl'  # scripts/eval.py --watch's scores, one line per checkpoint (by its iter)
REQUIRED_KEYS = ('model', 'model_args', 'iter_num')  # what every tool needs of a checkpoint: train.py, sample.py, eval.py


class CheckpointError(RunError):
    """A checkpoint could not be written or read; str() says which file, why, and what to do."""


def checkpoint_path(out_dir, iter_num):
    # a negative or float step would give a name discovery ignores: a save that is never resumed
    n = operator.index(iter_num)
    if n < 0:
        raise ValueError(f"iter_num must be >= 0, got {n}")
    return os.path.join(out_dir, f'ckpt_{n}.pt')


def _scan(out_dir, pattern):
    """(match, entry) for each file or folder directly in out_dir whose whole name matches pattern."""
    if not os.path.isdir(out_dir):
        return
    for entry in os.scandir(out_dir):
        m = pattern.fullmatch(entry.name)
        if m:
            yield m, entry


def list_checkpoints(out_dir):
    """[(N, path)] of the checkpoints in out_dir, newest (largest N) first; [] if there is no out_dir.

    The one place that knows what a checkpoint looks like on disk: files ckpt_<N>.pt and sharded
    folders ckpt_<N>/. Temp files, other names (ckpt_best.pt, ckpt_010.pt, ckpt_-1.pt) and
    subfolders such as rolled_back/ are not checkpoints.
    """
    found = [(int(m.group(1)), entry.path) for m, entry in _scan(out_dir, _CKPT_RE) if entry.is_file()]
    found += [(int(m.group(1)), entry.path) for m, entry in _scan(out_dir, _SHARDED_RE) if entry.is_dir()]
    return sorted(found, reverse=True)


def iteration_of(path):
    """N of a checkpoint's path (ckpt_<N>.pt or ckpt_<N>/), or None where the name is no checkpoint's."""
    name = os.path.basename(os.path.normpath(path))
    found = _CKPT_RE.fullmatch(name) or _SHARDED_RE.fullmatch(name)
    return int(found.group(1)) if found else None


def _gb(nbytes):
    return f"{nbytes / 1e9:.2f} GB"


def _size(path):
    if os.path.isdir(path):
        return sum(entry.stat().st_size for entry in os.scandir(path))
    return os.path.getsize(path)


def _fsync_dir(path):
    # a rename, create or delete is durable only once the folder's own entry list is on disk
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path):
    """Remove a checkpoint or temp file, or a sharded one's folder; nothing if it is not there."""
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)


# --- fault injection for tests (faults.py): kill_after_temp_write, kill_before_rotate, disk_full ---
def _fault(point):
    faults.active.kill(point)


class _DiskFullAfterFirstWrite:
    """The disk_full fault: a file whose disk fills up once some bytes are on it."""

    def __init__(self, f):
        self.f = f

    def write(self, data):
        if self.f.tell() > 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return self.f.write(data)

    def flush(self):
        self.f.flush()
# --- end of fault injection ---


def _tensor_bytes(obj):
    if isinstance(obj, torch.Tensor):
        return obj.nbytes
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple)):
        return sum(_tensor_bytes(v) for v in obj)
    return 0


def _os_error_in(e):
    # torch.save reports a failed write to our file as a RuntimeError raised while handling the OSError
    while e is not None and not isinstance(e, OSError):
        e = e.__context__
    return e


def _write_and_sync(state, tmp, path):
    """torch.save state into tmp and force it onto the disk; CheckpointError if the disk refuses."""
    try:
        # no CRC32 per record: mmap loads never check it, and computing it costs ~0.5 s/GB of CPU
        # (minutes of stalled training per 80 GB save); torch.load reads such files either way.
        # GPU tensors come to the host through pinned memory, one storage at a time: a pageable copy
        # runs at a fraction of the link's speed (no effect on tensors already on the CPU)
        options = {'save.compute_crc32': False, 'save.use_pinned_memory_for_d2h': True}
        with open(tmp, 'wb') as f, serialization_config.patch(options):
            disk_full = faults.active.fires('disk_full')  # fault injection, see above
            torch.save(state, _DiskFullAfterFirstWrite(f) if disk_full else f)
            f.flush()
            os.fsync(f.fileno())  # the bytes must be on disk before a ckpt_<N>.pt name points at them
    except Exception as e:
        os_error = _os_error_in(e)
        if os_error is None:
            raise
        out_dir = os.path.dirname(path) or '.'
        raise CheckpointError(
            f"could not write {path}: {os_error}. It needs about {_gb(_tensor_bytes(state))}, "
            f"{_gb(shutil.disk_usage(out_dir).free)} is free there; older checkpoints are untouched. "
            f"Free space (or move out_dir to a larger disk) and rerun the same command to resume.") from e


CHECKSUMS = 'checksums'  # a .pt file's key: {tensor's path in the state: its checksum}


def _checksum(t):
    """t's bytes summed as 32-bit words (16 or 8 where the view needs it), in an int64 that wraps: any damage but
    one whose change sums to zero shows. Computed where t lives (a GPU: in milliseconds), a chunk of 4 MB at a
    time, which bounds the int64 copy and stays in the CPU's cache. torch has no tensor hash, and zlib's crc32
    runs no faster here and on the CPU only."""
    words = t.detach().contiguous().reshape(-1)
    if words.numel() and words.stride(0) != 1:  # a one-element view keeps its stride, which .view() refuses
        words = words.clone(memory_format=torch.contiguous_format)
    words = words.view(torch.uint8)
    for wide in (torch.int32, torch.int16):
        try:  # a view into a larger storage may start at an offset the wider type cannot view
            words = words.view(wide)
            break
        except RuntimeError:
            continue
    chunk, total = 1 << 20, torch.zeros((), dtype=torch.int64, device=words.device)
    for i in range(0, words.numel(), chunk):
        total += torch.sum(words[i:i + chunk], dtype=torch.int64)
    return int(total) & ((1 << 63) - 1)


def _checksums(obj, prefix=""):
    """{path: checksum} of every tensor obj holds (a wrapper's by its plain component tensors, _parts)."""
    if isinstance(obj, dict):
        return {k: v for key, value in obj.items() for k, v in _checksums(value, f"{prefix}{key}/").items()}
    if isinstance(obj, (list, tuple)):
        return {k: v for i, value in enumerate(obj) for k, v in _checksums(value, f"{prefix}{i}/").items()}
    if isinstance(obj, torch.Tensor):
        return {f"{prefix}{i}": _checksum(t) for i, t in enumerate(_parts(obj)[0])}
    return {}


def _damaged_tensor(state):
    """The path of the first tensor of a loaded .pt state whose bytes do not match the checksum its save wrote
    (popped from state), or None; a file older than the checksums is not judged."""
    saved = state.pop(CHECKSUMS, None)
    if saved is None:
        return None
    found = _checksums(state)
    return next((k for k in sorted(set(saved) | set(found)) if saved.get(k) != found.get(k)), None)


def _one_line(e):
    """torch's load errors run to many lines; keep the clause that says what is wrong."""
    lines = [line.strip() for line in str(e).splitlines() if line.strip()] or ['']
    why = next((line for line in lines if 'WeightsUnpickler error' in line), lines[0])
    return f"{type(e).__name__}: {why.split('. ')[0]}"


def _check_zip_frame(path):
    # torch.save writes a zip archive, which starts with a file header and ends with an end record.
    # Checking both names the common faults; torch itself blames mmap or says "Invalid argument".
    with open(path, 'rb') as f:
        head = f.read(4)
        f.seek(max(0, os.fstat(f.fileno()).st_size - 22))
        tail = f.read(4)
    if head != b'PK\x03\x04':
        raise ValueError("not a zip archive written by torch.save (empty or other data)")
    if tail != b'PK\x05\x06':
        raise ValueError("incomplete: the zip archive has no end record (truncated?)")


def _torch_load(path):
    _check_zip_frame(path)
    # weights_only: a checkpoint is data, and loading it must not run code from the file.
    # mmap: tensors stay in the file's pages until used, so an 80 GB checkpoint needs neither 80 GB
    # of RAM up front nor a second copy on the GPU.
    try:
        return torch.load(path, map_location='cpu', weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        if 'torchao.optim' not in str(e):
            raise
        import torchao.optim  # noqa: F401  (allow-lists the low-bit AdamW state of optim.py, then again)
        return torch.load(path, map_location='cpu', weights_only=True, mmap=True)


def _check_loads(tmp, path):
    # a file weights_only refuses is worthless at resume: fail at the first save, not weeks later
    try:
        _torch_load(tmp)
    except Exception as e:
        raise CheckpointError(
            f"not saving {path}: it would not load back ({_one_line(e)}). A checkpoint may hold only "
            f"tensors and plain Python values: store RNG state as torch.get_rng_state(), "
            f"not np.random.get_state().") from e


def _rotate(out_dir, iter_num, keep_last_n, log):
    if keep_last_n <= 0:
        return
    # only up to the one just written: never delete it in favour of a newer, maybe unreadable one
    older = [(n, path) for n, path in list_checkpoints(out_dir) if n <= iter_num]
    for _, path in older[keep_last_n:]:
        _remove(path)
        log(f"removed {path} (keep_last_n={keep_last_n})")

def _parts(x):
    """(plain tensors, rebuild): the plain tensors x holds and how to make x again from (copies of) them.
    A wrapper holding one tensor of its own shape and dtype is that tensor's value (torchao's fp8 weights:
    Float8Linear casts them on the fly); other wrappers (torchao's low-bit optimizer state) are rebuilt
    around their component tensors, by the subclass's own __tensor_flatten__ / __tensor_unflatten__."""
    if isinstance(x, DTensor):  # the same mesh and placements around a plain local shard
        tensors, rebuild = _parts(x._local_tensor)
        return tensors, lambda ts: DTensor(rebuild(ts), x._spec, requires_grad=False)
    if not isinstance(x, torch.Tensor):
        return [], lambda ts: x
    if not is_traceable_wrapper_subclass(x):
        return [x], lambda ts: ts[0]
    names, context = x.__tensor_flatten__()
    inner = [getattr(x, name) for name in names]
    if len(inner) == 1 and inner[0].shape == x.shape and inner[0].dtype == x.dtype:
        return _parts(inner[0])
    return inner, lambda ts: type(x).__tensor_unflatten__(dict(zip(names, ts)), context, x.shape, x.stride())


def stage(state, host_copy=False):
    """What every save writes, .pt or sharded, synchronous or not: state with plain tensors. Under FSDP2's
    fp8 all-gather the weights are DTensors around torchao's WeightWithDynamicFloat8CastTensor, whose
    data_ptr() is 0: DCP's stager would copy no bytes (garbage on disk) and pickling would store a torchao
    type that loads only where torchao is imported. They become the tensor they wrap, in a DTensor of the
    same mesh and placements.

    host_copy: a copy in host memory (pinned where CUDA is), for a save written while training goes on
    changing the live tensors. A stager of its own per save (torch's DefaultStager cannot be reused on
    some torch versions, pytorch#183413), so its pinned memory is freed with the copy once written. It
    copies plain tensors only: low-bit optimizer state goes through as its component tensors."""
    leaves, spec = tree_flatten(state)
    parts = [_parts(x) for x in leaves]
    tensors = [ts for ts, _ in parts]
    if host_copy:
        stager = DefaultStager(StagingOptions(use_pinned_memory=torch.cuda.is_available(), use_shared_memory=False,
                                              use_async_staging=False, use_non_blocking_copy=False))
        try:  # one call: tensors that share storage (the tied embedding) share their copy
            tensors = stager.stage({"tensors": tensors})["tensors"]
        finally:
            stager.close()
    return tree_unflatten([rebuild(ts) for ts, (_, rebuild) in zip(tensors, parts)], spec)


def start_save(state, out_dir, iter_num, keep_last_n, log=print, host_copy=False):
    """Rank 0, a .pt save's first half: the state to write, staged (host_copy: copied to host memory).
    Returns the second half, finish(), which writes ckpt_<iter_num>.pt as save_checkpoint says (on a
    thread of its own for an asynchronous save, the Saver)."""
    t0 = time.time()
    staged = stage(state, host_copy)
    if host_copy:
        log(f"copied the state for ckpt_{iter_num}.pt to host memory in {time.time() - t0:.2f}s; writing it "
            f"in the background")
    return lambda: write_checkpoint(staged, out_dir, iter_num, keep_last_n, log)


def save_checkpoint(state, out_dir, iter_num, keep_last_n, log=print):
    """Write state to out_dir/ckpt_<iter_num>.pt atomically, then keep only the newest keep_last_n.

    keep_last_n <= 0 keeps every checkpoint. Checkpoints numbered above iter_num are never deleted
    (they exist only if the newest was unreadable at resume, or were put back by hand).
    Raises CheckpointError when the file cannot be written; older checkpoints are then untouched.
    Returns the path written.
    """
    return start_save(state, out_dir, iter_num, keep_last_n, log)()


def write_checkpoint(state, out_dir, iter_num, keep_last_n, log=print):
    """save_checkpoint's write of a staged state: temp file, fsync, check it loads, rename, rotate."""
    path = checkpoint_path(out_dir, iter_num)
    tmp = os.path.join(out_dir, f'.{os.path.basename(path)}.tmp-{os.getpid()}')
    os.makedirs(out_dir, exist_ok=True)
    log(f"saving {path} ...")
    t0 = time.time()
    try:
        _write_and_sync({**state, CHECKSUMS: _checksums(state)}, tmp, path)
        _check_loads(tmp, path)
        _fault('kill_after_temp_write')
        os.replace(tmp, path)  # atomic: the name shows the old file (or none) or the complete new one
    finally:
        _remove(tmp)  # after a failure; nothing left to remove once renamed
    _fsync_dir(out_dir)  # the rename must be durable before rotation deletes older checkpoints
    log(f"saved {path} ({_gb(_size(path))}) in {time.time() - t0:.1f}s")
    _fault('kill_before_rotate')
    _rotate(out_dir, iter_num, keep_last_n, log)
    return path


# The save group's timeout (train.py's save_group): ranks wait in its barriers while a checkpoint is written
# (rank 0 alone for a .pt), and a wait past it kills the job. It is fixed when the group is made, before any save.
TIMEOUT_MARGIN = 3  # times the expected write: the disk slows down, others share it, the test was short
MIN_TIMEOUT_S = 3600  # never below what runs used before the timeout followed the size (and other waits fit)
SPEED_TEST_BYTES = 256 << 20


def write_speed(out_dir, nbytes=SPEED_TEST_BYTES):
    """Bytes per second out_dir takes, written and fsynced as a save is (about a second on a local
    NVMe disk, a few on a network filesystem); measured once at start-up, for the process group's timeout."""
    os.makedirs(out_dir, exist_ok=True)
    block, count = os.urandom(1 << 20), max(1, nbytes >> 20)  # random: ZFS or btrfs would compress zeros
    fd, path = tempfile.mkstemp(prefix='.write-speed-', dir=out_dir)
    os.remove(path)  # unlinked while open: a kill leaves no file behind, and the bytes still go to disk
    t0 = time.time()
    try:
        for _ in range(count):
            os.write(fd, block)
        os.fsync(fd)  # the disk's speed, not the page cache's
    finally:
        os.close(fd)
    return count * len(block) / max(time.time() - t0, 1e-6)


def process_group_timeout(checkpoint_bytes, write_bytes_per_s):
    """How long a rank may wait for a save: TIMEOUT_MARGIN times the expected write, at least
    MIN_TIMEOUT_S, so that a larger model or a slower disk never turns a save into a killed job."""
    return datetime.timedelta(seconds=max(MIN_TIMEOUT_S, TIMEOUT_MARGIN * checkpoint_bytes / write_bytes_per_s))


def _finish_replacement(out_dir, log):
    """save_sharded replaces a folder by two renames: the old one aside, the new one in. A kill between
    them leaves ckpt_N missing: the new folder goes into place if it is complete (its write ended with
    .metadata and trainer_state.pt before the renames began), else the old one goes back."""
    for m, entry in list(_scan(out_dir, _TEMP_RE)):
        final = os.path.join(out_dir, f'ckpt_{m.group(1)}')
        if m.group(3) and not os.path.exists(final):
            newer = entry.path[:-len('-replaced')]
            complete = all(os.path.exists(os.path.join(newer, name)) for name in ('.metadata', TRAINER_STATE))
            os.replace(newer if complete else entry.path, final)
            _fsync_dir(out_dir)
            log(f"restored {final}/ ({'the new' if complete else 'the old'} one) after a save that was interrupted")


def remove_stale_temp_files(out_dir, log=print):
    """Delete the temp files of killed saves (each as large as a checkpoint); returns their paths. A
    sharded checkpoint a kill left under a temp name goes back in place first (_finish_replacement).

    Call at start-up, before the first save: a temp file is in use only while its save runs.
    """
    _finish_replacement(out_dir, log)
    removed = []
    for _, entry in _scan(out_dir, _TEMP_RE):
        size = _size(entry.path)
        _remove(entry.path)
        log(f"removed {entry.path} ({_gb(size)}), left by an interrupted save")
        removed.append(entry.path)
    return removed


def run_folder_problem(path):
    """One line where path is a run's out_dir, not one of its checkpoints (a common slip for init_from), or None."""
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, TRAINER_STATE)) and (
            found := list_checkpoints(path)):
        return (f"{path} is a run's folder, not a checkpoint: name one of its checkpoints, e.g. its newest "
                f"{found[0][1]} (or pass the folder as out_dir, where its newest is resumed)")
    return None


def load_checkpoint(path, log=print):
    """The dict saved in path, on CPU and memory-mapped; CheckpointError if it is unusable."""
    if problem := run_folder_problem(path):
        raise CheckpointError(problem)
    log(f"loading {path} ...")
    t0 = time.time()
    sharded = os.path.isdir(path)
    try:
        state = _torch_load(os.path.join(path, TRAINER_STATE) if sharded else path)
        if sharded:
            _check_shards(path)
    except Exception as e:  # RuntimeError (zip), UnpicklingError (weights_only), OSError, ...
        raise CheckpointError(f"cannot load {path}: {_one_line(e)}") from e
    if not isinstance(state, dict):
        raise CheckpointError(f"cannot load {path}: it holds a {type(state).__name__}, not a dict")
    if not sharded and (damaged := _damaged_tensor(state)):
        raise CheckpointError(f"cannot load {path}: the bytes of {damaged} are not those its save wrote (their "
                              "checksum differs): the file is damaged")
    if sharded:
        state["sharded_path"] = path  # the model and optimizer stay on disk until restore()
    missing = [k for k in REQUIRED_KEYS if k not in state and not (sharded and k in ("model", "optimizer"))]
    if missing:
        raise CheckpointError(f"cannot load {path}: it lacks the keys {missing}")
    if not sharded and (bad := _first_nonfinite(state["model"])):
        raise CheckpointError(f"cannot load {path}: its weight {bad} is not finite, which no save writes (it refuses "
                              "such weights): the file is damaged")
    log(f"loaded {path} in {time.time() - t0:.1f}s")
    return state


def _first_nonfinite(weights):
    """The name of the first floating tensor holding a NaN or an infinity, or None. A save refuses such weights
    (the Checkpointer), so here they are bytes damaged on disk: without the CRC the save leaves out, one pass over
    the weights (read again from the page cache by the load that follows) is what tells garbage from a model."""
    return next((name for name, t in weights.items()
                 if torch.is_tensor(t) and t.is_floating_point() and not torch.isfinite(t).all()), None)


def nonfinite_on_any_rank(weights, device):
    """_first_nonfinite over this rank's shards of weights ({name: tensor}), agreed by every rank (one that raised
    alone would leave the others waiting in a collective): the name this rank found, or 'a shard of another rank',
    or None. What a save refuses (the Checkpointer) and a sharded load calls damage (restore)."""
    local = {name: t.to_local() if isinstance(t, DTensor) else t for name, t in weights.items()}
    bad = _first_nonfinite(local)
    if not dist.is_initialized():
        return bad
    flag = torch.tensor([float(bad is not None)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bad or ("a shard of another rank" if flag.item() > 0 else None)


def load_newest(out_dir, log=print):
    """(state, path) of the newest checkpoint that loads, or None if out_dir has no checkpoints.

    Unusable checkpoints are reported and skipped. If some exist but none loads, CheckpointError:
    returning None would make the trainer start from scratch over the run's history.
    """
    checkpoints = list_checkpoints(out_dir)
    if not checkpoints:
        return None
    for _, path in checkpoints:
        try:
            return load_checkpoint(path, log), path
        except CheckpointError as e:
            log(f"WARNING: {e}; falling back to an older checkpoint")
    raise CheckpointError(
        f"none of the {len(checkpoints)} checkpoints in {out_dir} loads (see the warnings above); "
        f"not starting from scratch over them: repair or move them away, or use another out_dir")


def load_newest_on_every_rank(out_dir, log=print):
    """load_newest's state on every rank, or None. Rank 0 chooses and tells the others, which could
    see a lagging shared filesystem differently and resume from another step."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    state, path, error = None, None, None
    if rank == 0:
        try:
            state, path = load_newest(out_dir, log=log) or (None, None)
        except CheckpointError as e:
            error = str(e)
    if dist.is_initialized():
        message = [path, error]
        dist.broadcast_object_list(message, src=0)
        path, error = message
        if rank != 0 and path:
            state = load_checkpoint(path, log=log)
    if error:
        raise CheckpointError(error)
    return state


def scores_path(out_dir, step):
    """ckpt_<step>.eval.json: scripts/eval.py's scores of that checkpoint (a .pt or a folder), beside it."""
    return os.path.join(out_dir, f"ckpt_{step}.eval.json")


def roll_back_to(path, log=print):
    """Make path the newest checkpoint: move every newer one into out_dir/rolled_back/<time>_to_<N>_<id>/, with
    its scores (its ckpt_<N>.eval.json and lines of eval.jsonl), which would otherwise pass for the scores of the
    checkpoint that training writes anew at its step.

    Nothing is deleted (move a file back into out_dir to undo). Returns the moved checkpoints' new paths.
    """
    path = os.path.normpath(path)
    out_dir = os.path.dirname(path) or '.'
    numbers = {os.path.normpath(p): n for n, p in list_checkpoints(out_dir)}  # './ckpt_5.pt' is 'ckpt_5.pt'
    if path not in numbers:
        raise CheckpointError(f"cannot roll back to {path}: it is not an existing out_dir/ckpt_<N>.pt or ckpt_<N>/")
    target = numbers[path]
    newer = [p for p, n in numbers.items() if n > target]
    if not newer:
        log(f"{path} is already the newest checkpoint; nothing to roll back")
        return []
    parent = os.path.join(out_dir, ROLLED_BACK_DIR)
    moved = []
    try:
        os.makedirs(parent, exist_ok=True)
        # a fresh folder per roll back, so rolling back twice past the same step overwrites nothing
        dest = tempfile.mkdtemp(prefix=time.strftime('%Y%m%d-%H%M%S') + f'_to_{target}_', dir=parent)
        with runlock.merging(os.path.join(out_dir, SCORES_LOG)):  # not amid an eval.py's write of scores
            for p in newer:
                os.rename(p, os.path.join(dest, os.path.basename(p)))
                moved.append(os.path.join(dest, os.path.basename(p)))
                log(f"moved {p} to {moved[-1]}")
                if os.path.isfile(scores := scores_path(out_dir, numbers[p])):
                    os.rename(scores, os.path.join(dest, os.path.basename(scores)))
            _set_aside_scores_log(out_dir, target, dest)
        for d in (dest, parent, out_dir):
            _fsync_dir(d)  # else after a power cut the rolled-back checkpoints could reappear and be resumed
    except OSError as e:
        raise CheckpointError(f"cannot roll back to {path}: {e.strerror} setting the newer checkpoints aside in "
                              f"{parent} ({len(moved)} of {len(newer)} moved); fix that and rerun") from None
    return moved


def _set_aside_scores_log(out_dir, target, dest):
    """The lines of out_dir's eval.jsonl after step target into dest's (the rest stay), so that eval.py --watch
    scores the checkpoints written anew at those steps. A torn line, which eval.py skips anyway, goes."""
    path = os.path.join(out_dir, SCORES_LOG)
    if not os.path.isfile(path):
        return
    with open(path) as f:
        records = [r for r in map(scores_record, f) if r is not None]
    if later := [r for r in records if r["iter"] > target]:
        bins.write_jsonl_atomic(os.path.join(dest, SCORES_LOG), later)
        bins.write_jsonl_atomic(path, [r for r in records if r["iter"] <= target])


def scores_record(line):
    """An eval.jsonl line as its record, or None for one that a crash mid-write tore (or not a record)."""
    try:
        record = json.loads(line)
        return record if isinstance(record, dict) and isinstance(record["iter"], int) else None
    except (ValueError, KeyError, TypeError):
        return None


def identity(path):
    """What tells a checkpoint from one written again at its step: its file's (a folder's trainer_state.pt's) inode
    and time, which a rename (a roll back) keeps."""
    found = os.stat(os.path.join(path, TRAINER_STATE) if os.path.isdir(path) else path)
    return found.st_ino, found.st_mtime_ns


def rolled_back_since(path, before):
    """Whether the checkpoint at path, of identity() before, was rolled back since: it lies in rolled_back/, or
    path holds another checkpoint now. False where it is still there, or was only rotated away (deleted)."""
    name, parent = os.path.basename(path), os.path.join(os.path.dirname(path) or ".", ROLLED_BACK_DIR)
    moved = glob.glob(os.path.join(glob.escape(parent), "*", name))
    if os.path.exists(path) and identity(path) != before:
        return True
    return any(identity(p) == before for p in moved)


# -----------------------------------------------------------------------------
# the model and optimizer in a checkpoint: whole tensors in a .pt file, or shards in a folder

def full_state(model, optimizer):
    """(model, optimizer) state dicts for a .pt checkpoint: whole tensors, and optimizer state keyed
    by parameter name (as torch.distributed.checkpoint.state_dict makes it, not by index), so a .pt
    file and a sharded folder hold the same names and each converts into the other."""
    return get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))


def _rank():
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier(group=None):
    if dist.is_initialized():
        dist.barrier(group=group)


def _check_shards(path):
    # usable only if the metadata reads and every shard file holds the bytes it points at;
    # a truncated shard would otherwise fail halfway through loading over the live model
    metadata = dcp.FileSystemReader(path).read_metadata()
    needed = {}
    for info in metadata.storage_data.values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, end in needed.items():
        shard = os.path.join(path, name)
        if not os.path.isfile(shard) or os.path.getsize(shard) < end:
            raise ValueError(f"shard {name} is missing or cut short")


def restore(state, model, optimizer=None):
    """Load a checkpoint's model (and optimizer, if given) into live objects, plain or FSDP-sharded.

    A .pt holds whole tensors, which set_state_dict shards as needed; a sharded folder is read with
    torch.distributed.checkpoint, which reshards to however many processes load it (one included).
    A folder that fails here may have overwritten part of the model: the caller must not go on."""
    if "sharded_path" not in state:
        model_sd, optimizer_sd = state["model"], state.get("optimizer")
        options = StateDictOptions(full_state_dict=True)
    else:
        if optimizer is None:
            target = {"model": get_model_state_dict(model)}
        else:
            target = dict(zip(("model", "optimizer"), get_state_dict(model, optimizer)))
        target = stage(target)  # plain views of the live tensors (fp8 weights included), read into in place
        try:
            dcp.load(target, checkpoint_id=state["sharded_path"])
        except BaseException as e:  # dcp's CheckpointException derives from BaseException
            if isinstance(e, KeyboardInterrupt):
                raise
            raise CheckpointError(f"cannot load {state['sharded_path']}: {_one_line(e)}; move that checkpoint aside "
                                  f"and rerun to resume from the one before") from e
        model_sd, optimizer_sd = target["model"], target.get("optimizer")
        if bad := nonfinite_on_any_rank(model_sd, next(model.parameters()).device):
            raise CheckpointError(f"cannot load {state['sharded_path']}: its weight {bad} is not finite, which no save "
                                  "writes: the shards are damaged; move that checkpoint aside and rerun to resume from "
                                  "the one before")
        options = StateDictOptions()
    if optimizer is None:
        set_model_state_dict(model, model_sd, options=options)
    else:
        set_state_dict(model, optimizer, model_state_dict=model_sd, optim_state_dict=optimizer_sd, options=options)


def _sharded_paths(out_dir, iter_num):
    return os.path.join(out_dir, f'ckpt_{operator.index(iter_num)}'), os.path.join(out_dir, f'.ckpt_{iter_num}.tmp-sharded')


def _sharded_failed(e, path, tmp, out_dir):
    if _rank() == 0:
        _remove(tmp)
    if isinstance(e, (CheckpointError, KeyboardInterrupt)):
        raise e
    raise CheckpointError(f"could not write {path}: {_one_line(e)}; older checkpoints are untouched. "
                          f"Check free space in {out_dir} and rerun the same command to resume.") from e


def _publish(trainer_state, path, tmp, out_dir, iter_num, keep_last_n, t0, log):
    """Rank 0, once every rank's shards and DCP's .metadata are in tmp: trainer_state.pt, then the renames."""
    try:
        _write_and_sync(trainer_state, os.path.join(tmp, TRAINER_STATE), path)
    except BaseException as e:
        _sharded_failed(e, path, tmp, out_dir)
    _fsync_dir(tmp)
    _fault('kill_after_temp_write')
    if os.path.exists(path):  # unreadable at resume, or the one a rollback went back to
        os.replace(path, tmp + '-replaced')  # a folder cannot be renamed over; a kill now keeps the older ones
        os.replace(tmp, path)
        _remove(tmp + '-replaced')
    else:
        os.replace(tmp, path)
    _fsync_dir(out_dir)
    log(f"saved {path}/ ({_gb(_size(path))}) in {time.time() - t0:.1f}s")
    _rotate(out_dir, iter_num, keep_last_n, log)


def save_sharded(model, optimizer, trainer_state, out_dir, iter_num, keep_last_n, log=print, group=None):
    """Every rank: write out_dir/ckpt_<iter_num>/ (the Saver's sharded save, synchronous) and return its path once
    it is in place on every rank."""
    Saver(group=group, log=log).save_sharded(model, optimizer, trainer_state, out_dir, iter_num, keep_last_n)
    _barrier(group)
    return _sharded_paths(out_dir, iter_num)[0]


# -----------------------------------------------------------------------------
# the Saver: either format's save, synchronous or in the background (checkpoint_async)

class Saver:
    """Each format's save is one path in two halves (start_save for a .pt, save_sharded's staging for a folder):
    the start stages the state, and the finish writes it by the temp-file, fsync and rename steps. A
    synchronous save runs the finish at once; an asynchronous one first copies the state to host memory, then
    runs the finish on a thread while training goes on, so the training stall is that copy. A kill during the
    write leaves the previous checkpoint the newest loadable one either way.

    At most one save is in flight: wait() (every rank, at the next save, a rollback and the end of the run)
    finishes the previous one, logs when it had to wait, and raises CheckpointError if it failed, so a failed
    write is never silently lost. group: the process group of a sharded save's collectives and of wait()'s
    barrier (gloo where saves run in the background: their collectives run on the CPU beside training's)."""

    def __init__(self, asynchronous=False, group=None, log=print):
        self.asynchronous, self.group, self.log = asynchronous, group, log
        self.thread = self.error = self.name = None

    def save_checkpoint(self, state, out_dir, iter_num, keep_last_n):
        """Rank 0: out_dir/ckpt_<iter_num>.pt, as save_checkpoint writes it."""
        self._finish(f"ckpt_{iter_num}.pt", start_save(state, out_dir, iter_num, keep_last_n, self.log,
                                                       host_copy=self.asynchronous))

    def save_sharded(self, model, optimizer, trainer_state, out_dir, iter_num, keep_last_n):
        """Every rank: out_dir/ckpt_<iter_num>/. This rank's shards are staged into the temp folder
        (.ckpt_<N>.tmp-sharded); the finish (on a thread for an asynchronous save) has DCP write every rank's
        shards and .metadata, then rank 0 adds trainer_state.pt and renames the folder into place, so under its
        final name a folder is always complete."""
        path, tmp = _sharded_paths(out_dir, iter_num)
        if _rank() == 0:
            _remove(tmp)
            os.makedirs(tmp)
            self.log(f"saving {path}/ ...")
        _barrier(self.group)
        t0 = time.time()
        model_sd, optimizer_sd = get_state_dict(model, optimizer)
        shards = stage({"model": model_sd, "optimizer": optimizer_sd}, self.asynchronous)
        trainer_state = stage(trainer_state)
        if self.asynchronous:
            self.log(f"copied the shards for ckpt_{iter_num}/ to host memory in {time.time() - t0:.2f}s; writing "
                     f"them in the background")

        def finish():
            try:
                dcp.save(shards, checkpoint_id=tmp, process_group=self.group)  # returns once .metadata is written too
            except BaseException as e:  # dcp's CheckpointException derives from BaseException
                _sharded_failed(e, path, tmp, out_dir)
            if _rank() == 0:
                _publish(trainer_state, path, tmp, out_dir, iter_num, keep_last_n, t0, self.log)
        self._finish(f"ckpt_{iter_num}/", finish)

    def _finish(self, name, finish):
        if not self.asynchronous:
            finish()
            return

        def run():
            try:
                finish()
            except BaseException as e:  # kept for wait(), which raises it in the training thread
                self.error = e
        self.name, self.thread = name, threading.Thread(target=run, name=f"save {name}", daemon=True)
        self.thread.start()

    def wait(self):
        """Every rank: the save in flight (if any) is complete, on every rank; CheckpointError if it failed.
        The barrier is on `group`, whose timeout allows for a whole write."""
        if self.thread is not None:
            if self.thread.is_alive():
                t0 = time.time()
                self.thread.join()
                self.log(f"waited {time.time() - t0:.1f}s for the background save of {self.name} to finish")
            self.thread, error, self.error = None, self.error, None
            if error is not None:
                if isinstance(error, CheckpointError):
                    raise error
                raise CheckpointError(f"the background save of {self.name} failed: {_one_line(error)}") from error
        _barrier(self.group)
