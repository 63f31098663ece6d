"""
One job per folder: a training run holds out_dir, a prepare job its data_dir, through an exclusive
OS lock (flock) on a file in the folder, held for the life of the process. The kernel releases it
when the process ends in any way, kill -9 included, so a stale lock is impossible; the file itself
stays, holding the last holder's host, pid, start time and command for the message a second job gets.

On network filesystems flock is only as good as the server's locking: NFSv4 and Lustre (mounted with
flock) honour it across machines; NFSv3 needs a running lockd; some FUSE mounts accept it locally
only, so two machines sharing such a mount are not protected from each other.
"""
import contextlib
import fcntl
import json
import os
import socket
import sys
import time

from trainer import RunError

LOCK_FILE = ".lock"
MERGE_LOCK_FILE = ".merge.lock"


class Unavailable(RunError):
    """Another live process holds the folder, or it cannot be created or written."""


def hold(folder, what="run"):
    """Lock folder for this process (kept until it exits) or raise Unavailable naming the holder. Returns the
    open lock file: keep a reference, since closing it releases the lock. Raises Unavailable."""
    path = os.path.join(folder, LOCK_FILE)
    if os.path.isfile(folder):  # a checkpoint, a bin or a config given for its folder: not a permission problem
        raise Unavailable(f"{folder} is a file, not a folder: give the folder it lies in "
                          f"({os.path.dirname(folder) or '.'}), or another")
    try:
        os.makedirs(folder, exist_ok=True)
        f = open(path, "a+")
    except OSError as e:
        raise Unavailable(f"cannot write to {folder}: {e.strerror}; choose a folder this user can write") from None
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        try:
            holder = json.loads(f.read())
            who = (f"pid {holder['pid']} on {holder['host']}, started {holder['started']}: "
                   f"{holder['command']}")
        except (ValueError, KeyError):
            who = "another process"
        f.close()
        raise Unavailable(f"{folder} is in use by another {what} ({who}); wait for it to end, stop it, "
                          f"or choose another folder") from None
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                        "started": time.strftime("%Y-%m-%d %H:%M:%S"), "command": " ".join(sys.argv)}))
    f.flush()
    return f


def hold_or_exit(folder, what="run"):
    """hold(), or exit with its one line when another process holds the folder."""
    try:
        return hold(folder, what)
    except Unavailable as e:
        sys.exit(f"error: {e}")


@contextlib.contextmanager
def merging(path):
    """Hold path's folder for one read-merge-write of path, waiting while another process holds it: two eval.py
    calls on one checkpoint each merge their tasks into its eval.json, where the later write would drop the
    earlier's. Apart from hold()'s lock, which the training run holds meanwhile."""
    with open(os.path.join(os.path.dirname(path) or ".", MERGE_LOCK_FILE), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield
