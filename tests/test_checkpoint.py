"""checkpoint.py: atomic saves, numeric rotation, fallback past broken files, kills mid-save, full disks."""
import glob
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer import checkpoint, faults
from trainer.checkpoint import CheckpointError, checkpoint_path, list_checkpoints, load_checkpoint, load_newest, \
    remove_stale_temp_files, roll_back_to, save_checkpoint

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def quiet(*args):
    pass


def make_state(n):
    return {'model': {'w': torch.full((64, 64), float(n))}, 'model_args': {}, 'iter_num': n}


def save(out_dir, n, keep_last_n=0):
    return save_checkpoint(make_state(n), str(out_dir), n, keep_last_n, log=quiet)


def steps(out_dir):
    return [n for n, _ in list_checkpoints(str(out_dir))]


def assert_holds_step(path, n):
    state = load_checkpoint(path, log=quiet)
    assert state['iter_num'] == n and torch.equal(state['model']['w'], make_state(n)['model']['w'])


def test_checkpoint_path():
    assert checkpoint_path('out', 120) == os.path.join('out', 'ckpt_120.pt')
    assert checkpoint_path('out', np.int64(7)) == os.path.join('out', 'ckpt_7.pt')
    with pytest.raises(ValueError):
        checkpoint_path('out', -1)
    with pytest.raises(TypeError):
        checkpoint_path('out', 5.0)  # ckpt_5.0.pt would never be found again


def test_list_is_numeric_newest_first_and_ignores_other_names(tmp_path):
    for name in ['ckpt_9.pt', 'ckpt_10.pt', 'ckpt_100.pt', 'ckpt_2.pt', 'ckpt_0.pt',
                 # not checkpoints: other names, temp files, zero padding (ckpt_010.pt would be a
                 # second name for step 10), a sign, a folder, and anything in rolled_back/
                 'ckpt_best.pt', 'ckpt_10.pt.tmp', '.ckpt_11.pt.tmp-123', 'ckpt_-1.pt', 'ckpt_010.pt',
                 'ckpt_+5.pt', 'ckpt_5.PT', 'xckpt_5.pt', 'ckpt_5.pt.bak', 'ckpt_٣.pt']:
        (tmp_path / name).write_bytes(b'')
    (tmp_path / 'ckpt_7.pt').mkdir()
    (tmp_path / 'rolled_back').mkdir()
    (tmp_path / 'rolled_back' / 'ckpt_1000.pt').write_bytes(b'')
    assert list_checkpoints(str(tmp_path)) == [(n, str(tmp_path / f'ckpt_{n}.pt')) for n in [100, 10, 9, 2, 0]]
    assert list_checkpoints(str(tmp_path / 'missing')) == []


def test_rotation_keeps_newest_n_by_number_not_name(tmp_path):
    for n in range(1, 11):
        save(tmp_path, n, keep_last_n=3)
    assert steps(tmp_path) == [10, 9, 8]  # lexically ckpt_10.pt < ckpt_8.pt; it must survive
    for n in [99, 100, 1000]:
        save(tmp_path, n, keep_last_n=3)
    assert steps(tmp_path) == [1000, 100, 99]
    assert set(os.listdir(tmp_path)) == {'ckpt_1000.pt', 'ckpt_100.pt', 'ckpt_99.pt'}


@pytest.mark.parametrize('keep_last_n', [0, -1])
def test_keep_last_n_not_positive_keeps_all(tmp_path, keep_last_n):
    for n in [9, 10, 100]:
        save(tmp_path, n, keep_last_n)
    assert steps(tmp_path) == [100, 10, 9]


def test_rotation_never_deletes_the_new_checkpoint_for_a_newer_one(tmp_path):
    # the newest was unreadable, the trainer resumed from 900 and now saves 950 with keep_last_n=1
    save(tmp_path, 900)
    (tmp_path / 'ckpt_1000.pt').write_bytes(b'broken')
    save(tmp_path, 950, keep_last_n=1)
    assert steps(tmp_path) == [1000, 950]
    save(tmp_path, 1000, keep_last_n=1)  # replaces the broken file with a good one
    assert steps(tmp_path) == [1000]
    assert_holds_step(checkpoint_path(str(tmp_path), 1000), 1000)


def test_loaded_tensors_and_values_equal_saved(tmp_path):
    state = {
        'model': {'w': torch.randn(8, 16), 'b': torch.randn(16, dtype=torch.bfloat16)},
        'optimizer': {'state': {0: {'step': torch.tensor(3.0), 'exp_avg': torch.randn(8, 16)}},
                      'param_groups': [{'lr': 6e-4, 'betas': (0.9, 0.95), 'params': [0], 'fused': None}]},
        'iter_num': 120, 'model_args': {'n_layer': 2}, 'best_val_loss': 2.5, 'config': {'name': 'gpt3', 'compile': True},
        'rng': {'torch': torch.get_rng_state(), 'python': (3, (1, 2, 3), None), 'numpy_seed': 1337},
        # views whose bytes a checksum cannot take as they are: a one-element view's stride, an odd bf16 offset
        'views': [torch.arange(10.0)[::5][:1], torch.arange(11, dtype=torch.bfloat16)[1:]],
    }
    logs = []
    path = save_checkpoint(state, str(tmp_path), 120, 3, log=logs.append)
    assert path == checkpoint_path(str(tmp_path), 120)
    assert logs[0] == f"saving {path} ..." and logs[-1].startswith(f"saved {path} (0.00 GB) in ")
    logs.clear()
    loaded = load_checkpoint(path, log=logs.append)
    assert logs[0] == f"loading {path} ..." and logs[-1].startswith(f"loaded {path} in ")

    def assert_same(a, b):
        assert type(a) is type(b)
        if isinstance(a, torch.Tensor):
            assert a.device.type == 'cpu' and a.dtype == b.dtype and torch.equal(a, b)
        elif isinstance(a, dict):
            assert a.keys() == b.keys()
            for k in a:
                assert_same(a[k], b[k])
        elif isinstance(a, (list, tuple)):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert_same(x, y)
        else:
            assert a == b
    assert_same(loaded, state)


def test_no_checkpoints_returns_none(tmp_path):
    assert load_newest(str(tmp_path / 'missing'), log=quiet) is None
    (tmp_path / 'ckpt_best.pt').write_bytes(b'not a checkpoint by name')
    assert load_newest(str(tmp_path), log=quiet) is None


def test_truncated_newest_falls_back_and_reports(tmp_path):
    save(tmp_path, 1)
    path2 = save(tmp_path, 2)
    with open(path2, 'r+b') as f:
        f.truncate(os.path.getsize(path2) // 2)
    logs = []
    state, path = load_newest(str(tmp_path), log=logs.append)
    assert path == checkpoint_path(str(tmp_path), 1) and state['iter_num'] == 1
    warnings = [line for line in logs if line.startswith('WARNING')]
    assert len(warnings) == 1 and path2 in warnings[0] and 'truncated' in warnings[0]
    assert '\n' not in warnings[0]


def test_garbage_named_like_a_checkpoint_falls_back(tmp_path):
    save(tmp_path, 40)
    (tmp_path / 'ckpt_50.pt').write_bytes(b'garbage, not a zip')
    logs = []
    state, path = load_newest(str(tmp_path), log=logs.append)
    assert state['iter_num'] == 40
    assert any('ckpt_50.pt' in line and 'not a zip' in line for line in logs)


def test_wrong_content_does_not_load(tmp_path):
    torch.save([1, 2], tmp_path / 'ckpt_1.pt')
    torch.save({'model': {}}, tmp_path / 'ckpt_2.pt')
    with pytest.raises(CheckpointError, match='not a dict'):
        load_checkpoint(str(tmp_path / 'ckpt_1.pt'), log=quiet)
    with pytest.raises(CheckpointError, match=r"lacks the keys \['model_args', 'iter_num'\]"):
        load_checkpoint(str(tmp_path / 'ckpt_2.pt'), log=quiet)
    with pytest.raises(CheckpointError, match='No such file'):
        load_checkpoint(str(tmp_path / 'ckpt_3.pt'), log=quiet)


def test_all_broken_raises_instead_of_starting_from_scratch(tmp_path):
    (tmp_path / 'ckpt_10.pt').write_bytes(b'')
    torch.save({'iter_num': 20}, tmp_path / 'ckpt_20.pt')
    logs = []
    with pytest.raises(CheckpointError, match='none of the 2 checkpoints') as info:
        load_newest(str(tmp_path), log=logs.append)
    assert '\n' not in str(info.value)
    assert len([line for line in logs if line.startswith('WARNING')]) == 2


def test_numpy_rng_state_is_refused(tmp_path):
    # np.random.get_state() pickles numpy objects, which weights_only=True refuses to load: the trainer
    # must store RNG state as tensors or plain values, or no checkpoint of the run would ever resume
    state = dict(make_state(7), rng=np.random.get_state())
    torch.save(state, tmp_path / 'ckpt_7.pt')  # as if written without checkpoint.py
    with pytest.raises(CheckpointError, match='numpy') as info:
        load_checkpoint(str(tmp_path / 'ckpt_7.pt'), log=quiet)
    assert '\n' not in str(info.value)
    with pytest.raises(CheckpointError, match='would not load back.*numpy'):
        save_checkpoint(dict(state, iter_num=8), str(tmp_path), 8, 3, log=quiet)
    assert os.listdir(tmp_path) == ['ckpt_7.pt']  # refused before publishing, temp file removed


def test_disk_full_raises_and_keeps_older_checkpoints(tmp_path, monkeypatch):
    save(tmp_path, 1)
    save(tmp_path, 2)
    monkeypatch.setattr(faults, 'active', faults.Faults('disk_full'))
    with pytest.raises(CheckpointError, match='No space left on device') as info:
        save(tmp_path, 3, keep_last_n=1)
    message = str(info.value)
    assert checkpoint_path(str(tmp_path), 3) in message and 'free' in message and 'rerun' in message
    assert '\n' not in message
    assert sorted(os.listdir(tmp_path)) == ['ckpt_1.pt', 'ckpt_2.pt']  # no temp file, no rotation
    assert_holds_step(checkpoint_path(str(tmp_path), 1), 1)
    assert_holds_step(checkpoint_path(str(tmp_path), 2), 2)


SAVE_IN_CHILD = """
import sys, torch
from trainer import checkpoint, faults
n = int(sys.argv[2])
saver = checkpoint.Saver(asynchronous=sys.argv[3] == 'async', log=lambda line: None)
state = {'model': {'w': torch.full((64, 64), float(n))}, 'model_args': {}, 'iter_num': n}
saver.save_checkpoint(state, sys.argv[1], n, 2)
state['model']['w'].fill_(-1.0)  # training goes on while an asynchronous save writes: it must not see this
saver.wait()
"""


@pytest.mark.e2e
@pytest.mark.parametrize('mode', ['sync', 'async'])
@pytest.mark.parametrize('fault', ['kill_after_temp_write', 'kill_before_rotate'])
def test_sigkill_during_save_leaves_every_checkpoint_loadable(tmp_path, fault, mode):
    """kill -9 in the middle of a save, the synchronous one or the background thread of an asynchronous one."""
    for n in [1, 2, 3]:
        save(tmp_path, n, keep_last_n=2)
    child = subprocess.run([sys.executable, '-c', SAVE_IN_CHILD, str(tmp_path), '4', mode], cwd=REPO,
                           env=dict(os.environ, TRAINER_FAULTS=fault, PYTHONPATH=REPO), capture_output=True)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    for path in glob.glob(str(tmp_path / 'ckpt_*.pt')):
        load_checkpoint(path, log=quiet)
    assert_holds_step(checkpoint_path(str(tmp_path), 3), 3)  # the previous newest is intact
    temps = glob.glob(str(tmp_path / '.ckpt_4.pt.tmp-*'))
    if fault == 'kill_after_temp_write':
        assert steps(tmp_path) == [3, 2] and len(temps) == 1
        assert load_newest(str(tmp_path), log=quiet)[1] == checkpoint_path(str(tmp_path), 3)
    else:
        assert steps(tmp_path) == [4, 3, 2] and temps == []  # renamed, not yet rotated
        assert_holds_step(checkpoint_path(str(tmp_path), 4), 4)
    logs = []
    assert remove_stale_temp_files(str(tmp_path), log=logs.append) == temps
    assert len(logs) == len(temps) and all('GB' in line for line in logs)
    save(tmp_path, 5, keep_last_n=2)
    survivors = ['ckpt_4.pt', 'ckpt_5.pt'] if fault == 'kill_before_rotate' else ['ckpt_3.pt', 'ckpt_5.pt']
    assert sorted(os.listdir(tmp_path)) == survivors


def test_an_async_save_writes_the_state_it_was_given_and_the_next_save_waits_for_it(tmp_path, monkeypatch):
    write = checkpoint.write_checkpoint
    disk_free = threading.Event()

    def save_when_the_disk_is_free(*args, **kwargs):
        disk_free.wait(60)
        return write(*args, **kwargs)
    monkeypatch.setattr(checkpoint, 'write_checkpoint', save_when_the_disk_is_free)
    logs = []
    saver = checkpoint.Saver(asynchronous=True, log=logs.append)
    state = make_state(1)
    saver.save_checkpoint(state, str(tmp_path), 1, 0)  # returns while its write cannot have begun
    assert steps(tmp_path) == []  # training goes on while it writes
    state['model']['w'].fill_(-1.0)  # the next steps change the weights under the write
    threading.Timer(0.5, disk_free.set).start()
    saver.wait()  # as train.py's next save does first: one in flight at most
    assert any(line.startswith('waited ') and 'ckpt_1.pt' in line for line in logs)
    assert_holds_step(checkpoint_path(str(tmp_path), 1), 1)


def test_a_failed_async_save_fails_the_next_wait_and_keeps_older_checkpoints(tmp_path, monkeypatch):
    save(tmp_path, 1)
    saver = checkpoint.Saver(asynchronous=True, log=quiet)
    monkeypatch.setattr(faults, 'active', faults.Faults('disk_full'))
    saver.save_checkpoint(make_state(2), str(tmp_path), 2, 1)  # returns: the failure is in the background
    with pytest.raises(CheckpointError, match='could not write .*ckpt_2.pt'):
        saver.wait()
    saver.wait()  # told once
    assert steps(tmp_path) == [1] and os.listdir(tmp_path) == ['ckpt_1.pt']


def test_remove_stale_temp_files_touches_only_temp_files(tmp_path):
    save(tmp_path, 1)
    for name in ['.ckpt_2.pt.tmp-123', '.ckpt_30.pt.tmp-9']:
        (tmp_path / name).write_bytes(b'x' * 1000)
    for name in ['ckpt_2.pt.tmp', 'notes.txt', '.ckpt_2.pt.tmp-abc']:
        (tmp_path / name).write_bytes(b'keep')
    removed = remove_stale_temp_files(str(tmp_path), log=quiet)
    assert sorted(os.path.basename(p) for p in removed) == ['.ckpt_2.pt.tmp-123', '.ckpt_30.pt.tmp-9']
    assert sorted(os.listdir(tmp_path)) == ['.ckpt_2.pt.tmp-abc', 'ckpt_1.pt', 'ckpt_2.pt.tmp', 'notes.txt']
    assert remove_stale_temp_files(str(tmp_path / 'missing'), log=quiet) == []


@pytest.mark.parametrize('new_one_complete', [True, False])
def test_a_kill_while_a_sharded_folder_is_replaced_keeps_a_checkpoint(tmp_path, new_one_complete):
    """save_sharded replaces a folder by two renames: the old one aside, the new one in. Killed between
    them, start-up puts the new one in place if its write had ended, else the old one back."""
    for name in ['.ckpt_6.tmp-sharded-replaced', '.ckpt_6.tmp-sharded', '.ckpt_7.tmp-sharded']:
        (tmp_path / name).mkdir()
        (tmp_path / name / 'trainer_state.pt').write_bytes(name.encode())
    if new_one_complete:
        (tmp_path / '.ckpt_6.tmp-sharded' / '.metadata').write_bytes(b'written last')
    remove_stale_temp_files(str(tmp_path), log=quiet)
    assert sorted(os.listdir(tmp_path)) == ['ckpt_6']
    kept = '.ckpt_6.tmp-sharded' if new_one_complete else '.ckpt_6.tmp-sharded-replaced'
    assert (tmp_path / 'ckpt_6' / 'trainer_state.pt').read_bytes() == kept.encode()


def test_roll_back_moves_newer_aside_and_rotation_leaves_them(tmp_path):
    for n in [1, 2, 3, 4, 5]:
        save(tmp_path, n)
    logs = []
    moved = roll_back_to(checkpoint_path(str(tmp_path), 3), log=logs.append)
    assert [os.path.basename(p) for p in moved] == ['ckpt_5.pt', 'ckpt_4.pt'] and len(logs) == 2
    assert all(os.path.dirname(os.path.dirname(p)) == str(tmp_path / checkpoint.ROLLED_BACK_DIR) for p in moved)
    assert steps(tmp_path) == [3, 2, 1]
    assert load_newest(str(tmp_path), log=quiet)[1] == checkpoint_path(str(tmp_path), 3)
    for n in [4, 5, 6]:  # training resumes from 3 and saves the same step numbers again
        save(tmp_path, n, keep_last_n=2)
    assert steps(tmp_path) == [6, 5]
    assert_holds_step(moved[0], 5)
    assert_holds_step(moved[1], 4)
    # rolling back past the same steps again overwrites nothing that was moved before
    again = roll_back_to(checkpoint_path(str(tmp_path), 5), log=quiet)
    assert [os.path.basename(p) for p in again] == ['ckpt_6.pt'] and os.path.exists(moved[0])
    assert roll_back_to(checkpoint_path(str(tmp_path), 5), log=quiet) == []


def test_roll_back_sets_the_newer_checkpoints_scores_aside_with_them(tmp_path):
    """ckpt_N.eval.json and eval.jsonl's lines after the step rolled back to go with their checkpoints: the
    checkpoint training writes anew at step N is another model, which eval.py must score, not take as scored."""
    for n in [1, 2, 3]:
        save(tmp_path, n)
        (tmp_path / f"ckpt_{n}.eval.json").write_text(json.dumps({"iter": n, "results": {"piqa": {"acc": n}}}))
    (tmp_path / checkpoint.SCORES_LOG).write_text("".join(json.dumps({"iter": n, "piqa": n}) + "\n" for n in [1, 2, 3])
                                                  + '{"iter": 3, "pi')  # torn by a kill mid-write
    moved = roll_back_to(checkpoint_path(str(tmp_path), 1), log=quiet)
    aside = Path(moved[0]).parent
    assert sorted(p.name for p in tmp_path.glob("ckpt_*.eval.json")) == ["ckpt_1.eval.json"]
    assert sorted(p.name for p in aside.glob("ckpt_*.eval.json")) == ["ckpt_2.eval.json", "ckpt_3.eval.json"]
    assert [json.loads(line)["iter"] for line in (tmp_path / checkpoint.SCORES_LOG).read_text().splitlines()] == [1]
    assert [json.loads(line)["iter"] for line in (aside / checkpoint.SCORES_LOG).read_text().splitlines()] == [2, 3]


def test_a_checkpoint_whose_weights_are_not_finite_is_damaged_and_the_one_before_loads(tmp_path):
    """No save writes non-finite weights, so bytes damaged on disk that read as a NaN are a damaged file: eval.py,
    export and sample.py would have used it (exit 0, a NaN perplexity), a resume would have skipped NaN steps."""
    save(tmp_path, 1)
    damaged = make_state(2)
    damaged['model']['w'][0] = float('nan')
    torch.save(damaged, tmp_path / 'ckpt_2.pt')  # as a bit flip on disk leaves it, past the save's own check
    with pytest.raises(CheckpointError, match=r"ckpt_2.pt: its weight w is not finite, which no save writes"):
        load_checkpoint(str(tmp_path / 'ckpt_2.pt'), log=quiet)
    logs = []
    assert load_newest(str(tmp_path), log=logs.append)[1] == checkpoint_path(str(tmp_path), 1)
    assert any("falling back to an older checkpoint" in line for line in logs)


@pytest.mark.parametrize("damage", ["zeroed", "random"])
def test_a_checkpoint_damaged_in_the_middle_fails_its_checksums_and_the_one_before_loads(tmp_path, damage):
    """Bytes damaged inside a tensor (an optimizer moment here, which no finiteness check reads) load without an
    error from torch: the checksums the save wrote name the tensor, and the newest whole checkpoint loads."""
    save(tmp_path, 1)
    state = make_state(2)
    state['optimizer'] = {'state': {'w': {'exp_avg': torch.full((256,), 0.375)}}}
    save_checkpoint(state, str(tmp_path), 2, 0, log=quiet)
    path = tmp_path / 'ckpt_2.pt'
    data = bytearray(path.read_bytes())
    start = data.index(torch.full((256,), 0.375).numpy().tobytes()) + 512
    data[start:start + 64] = bytes(64) if damage == "zeroed" else bytes(range(7, 71))
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match=r"ckpt_2.pt: the bytes of optimizer/state/w/exp_avg/0 are not those its "
                                              r"save wrote \(their checksum differs\): the file is damaged"):
        load_checkpoint(str(path), log=quiet)
    assert load_newest(str(tmp_path), log=quiet)[1] == checkpoint_path(str(tmp_path), 1)
    assert checkpoint.CHECKSUMS not in load_checkpoint(str(tmp_path / 'ckpt_1.pt'), log=quiet)  # what callers see


def test_roll_back_from_inside_out_dir(tmp_path, monkeypatch):
    for n in [1, 2]:
        save(tmp_path, n)
    monkeypatch.chdir(tmp_path)  # out_dir='.' names the files './ckpt_N.pt'
    moved = roll_back_to("ckpt_1.pt", log=quiet)
    assert [os.path.basename(p) for p in moved] == ['ckpt_2.pt'] and steps(tmp_path) == [1]


def test_roll_back_to_a_non_checkpoint_raises(tmp_path):
    save(tmp_path, 1)
    for path in [tmp_path / 'ckpt_2.pt', tmp_path / 'ckpt_best.pt']:
        with pytest.raises(CheckpointError, match='cannot roll back'):
            roll_back_to(str(path), log=quiet)
    assert steps(tmp_path) == [1]


def test_a_save_copies_gpu_tensors_through_pinned_memory(tmp_path, monkeypatch):
    # what torch.save is asked for; the copy itself only exists on a GPU (torch.serialization does it)
    asked, real_save = [], torch.save
    options = checkpoint.serialization_config.save

    def spy(*args, **kwargs):
        asked.append({"pinned": options.use_pinned_memory_for_d2h, "crc32": options.compute_crc32})
        return real_save(*args, **kwargs)
    monkeypatch.setattr(torch, "save", spy)
    save(tmp_path, 1)
    assert asked == [{"pinned": True, "crc32": False}]
    assert not options.use_pinned_memory_for_d2h  # only during the save


def test_the_process_group_timeout_follows_the_checkpoint_and_the_disk():
    minimum = checkpoint.MIN_TIMEOUT_S
    assert checkpoint.process_group_timeout(1e9, 1e9).total_seconds() == minimum  # a small save: the floor
    # 80 GB at 20 MB/s is 4,000 s to write: three times that
    assert checkpoint.process_group_timeout(80e9, 20e6).total_seconds() == 3 * 4000
    assert checkpoint.process_group_timeout(160e9, 20e6) == 2 * checkpoint.process_group_timeout(80e9, 20e6)


def test_write_speed_writes_fsyncs_and_leaves_nothing(tmp_path, monkeypatch):
    synced, real_fsync = [], os.fsync

    def spy(fd):
        synced.append(os.fstat(fd).st_size)
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", spy)
    speed = checkpoint.write_speed(tmp_path / "new_out_dir", nbytes=2 << 20)
    assert speed > 0 and synced == [2 << 20]  # every byte on disk before the clock stops
    assert os.listdir(tmp_path / "new_out_dir") == []


def test_a_rank_the_saving_run_lacked_gets_rngs_of_its_own():
    """1 -> 2 processes: rank 0 continues the saved stream exactly; rank 1 draws other dropout masks, not rank 0's."""
    from trainer import checkpointer
    torch.manual_seed(0)
    saved = [checkpointer.rng_state("cpu")]
    draws = []
    for rank in (0, 1, 0):
        checkpointer.restore_rngs(saved, rank, 2, seed=1337, iteration=4, device_type="cpu")
        draws.append(torch.rand(4))
    assert torch.equal(draws[0], draws[2]) and not torch.equal(draws[0], draws[1])
    torch.manual_seed(0)
    assert torch.equal(draws[0], torch.rand(4))  # where the saving run left it


def test_a_runs_folder_given_for_a_checkpoint_names_its_newest(tmp_path):
    """init_from=out/run (its folder, not ckpt_N.pt): one line naming a checkpoint to pass instead."""
    from trainer import hf
    checkpoint.save_checkpoint({"model": {}, "model_args": {}, "iter_num": 2}, str(tmp_path), 2, keep_last_n=0,
                               log=lambda m: None)
    (tmp_path / "config.json").write_text("{}")  # train.py's settings, not a Hugging Face model's
    with pytest.raises(checkpoint.CheckpointError, match=r"is a run's folder, not a checkpoint: .*ckpt_2\.pt"):
        checkpoint.load_checkpoint(str(tmp_path), log=lambda m: None)
    with pytest.raises(hf.WeightsError, match="is a run's folder, not a checkpoint"):
        hf.load_weights(str(tmp_path), log=lambda m: None)
