"""
The sharded format: out_dir/ckpt_<N>/, written by every rank of an FSDP run with torch.distributed.checkpoint.

Each rank writes its own model and optimizer shards, DCP adds .metadata, and rank 0 then adds
trainer_state.pt (everything else, as in a .pt file) and renames the folder from its temp name
(.ckpt_<N>.tmp-sharded) into place, so under its final name a folder is always complete. Loading,
discovery, rotation and roll back are checkpoint.py's, alike for both formats.
"""
import operator
import os
import time

import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict

from trainer import checkpoint
from trainer.checkpoint import TRAINER_STATE, CheckpointError


def _paths(out_dir, iter_num):
    return os.path.join(out_dir, f'ckpt_{operator.index(iter_num)}'), os.path.join(out_dir, f'.ckpt_{iter_num}.tmp-sharded')


def _failed(e, path, tmp, out_dir):
    if checkpoint._rank() == 0:
        checkpoint._remove(tmp)
    if isinstance(e, (CheckpointError, KeyboardInterrupt)):
        raise e
    raise CheckpointError(f"could not write {path}: {checkpoint._one_line(e)}; older checkpoints are untouched. "
                          f"Check free space in {out_dir} and rerun the same command to resume.") from e


def _publish(trainer_state, path, tmp, out_dir, iter_num, keep_last_n, t0, log):
    """Rank 0, once every rank's shards and DCP's .metadata are in tmp: trainer_state.pt, then the renames."""
    try:
        checkpoint._write_and_sync(trainer_state, os.path.join(tmp, TRAINER_STATE), path)
    except BaseException as e:
        _failed(e, path, tmp, out_dir)
    checkpoint._fsync_dir(tmp)
    checkpoint._fault('kill_after_temp_write')
    if os.path.exists(path):  # unreadable at resume, or the one a rollback went back to
        os.replace(path, tmp + '-replaced')  # a folder cannot be renamed over; a kill now keeps the older ones
        os.replace(tmp, path)
        checkpoint._remove(tmp + '-replaced')
    else:
        os.replace(tmp, path)
    checkpoint._fsync_dir(out_dir)
    log(f"saved {path}/ ({checkpoint._gb(checkpoint._size(path))}) in {time.time() - t0:.1f}s")
    checkpoint._rotate(out_dir, iter_num, keep_last_n, log)


def start_save(model, optimizer, trainer_state, out_dir, iter_num, keep_last_n, log=print, group=None,
               host_copy=False):
    """Every rank, a sharded save's first half: the temp folder, and this rank's shards staged
    (checkpoint.stage; host_copy: copied to host memory). Returns the second half, finish(), which
    every rank calls (on a thread of its own for an asynchronous save, saving.py): DCP writes the
    shards, then rank 0 publishes the folder. group: the process group of the save's collectives and
    barriers (default: the default group; gloo where finish() runs beside training)."""
    path, tmp = _paths(out_dir, iter_num)
    if checkpoint._rank() == 0:
        checkpoint._remove(tmp)
        os.makedirs(tmp)
        log(f"saving {path}/ ...")
    checkpoint._barrier(group)
    t0 = time.time()
    model_sd, optimizer_sd = get_state_dict(model, optimizer)
    shards = checkpoint.stage({"model": model_sd, "optimizer": optimizer_sd}, host_copy)
    trainer_state = checkpoint.stage(trainer_state)
    if host_copy:
        log(f"copied the shards for ckpt_{iter_num}/ to host memory in {time.time() - t0:.2f}s; writing them "
            f"in the background")

    def finish():
        try:
            dcp.save(shards, checkpoint_id=tmp, process_group=group)  # returns once .metadata is written too
        except BaseException as e:  # dcp's CheckpointException derives from BaseException
            _failed(e, path, tmp, out_dir)
        if checkpoint._rank() == 0:
            _publish(trainer_state, path, tmp, out_dir, iter_num, keep_last_n, t0, log)
        return path
    return finish


def save_sharded(model, optimizer, trainer_state, out_dir, iter_num, keep_last_n, log=print, group=None):
    """Every rank: write out_dir/ckpt_<iter_num>/ and return its path once it is in place on every rank."""
    path = start_save(model, optimizer, trainer_state, out_dir, iter_num, keep_last_n, log, group)()
    checkpoint._barrier(group)
    return path
