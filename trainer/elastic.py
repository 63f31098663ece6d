"""
How a run stops and restarts: on a signal, every rank after the same micro-batch (StopSignal, StopVote, at the
end of this file); and when one process of a torchrun job hangs or dies, the job ends in minutes, says which
rank, and under `torchrun --max-restarts=N` comes back on its own from the newest complete checkpoint.

- A hung rank. Training's collectives wait at most collective_timeout_minutes (the process group's
  timeout; the 60-minute one of old followed the checkpoint's write, which now waits apart on a gloo
  group of its own: checkpoint.Saver). Then the waiting ranks' collective raises (gloo; NCCL under
  TORCH_NCCL_ASYNC_ERROR_HANDLING=2 as well), and they hold a roll call, a monitored_barrier on that
  gloo group, whose answer names the ranks that did not come: the hung ones. Where NCCL's watchdog
  tears the process down instead (modes 1 and 3), its flight recorder (TORCH_NCCL_DUMP_ON_TIMEOUT)
  writes each rank's last collectives to out_dir/nccl_trace_rank_<R>: the hung rank's lags behind.
- A dead rank. Every rank that fails leaves its one line in out_dir/FAILURES as it exits
  (RunLog.crash). torchrun then stops the others and starts them again, and the new
  rank 0 logs "restart K of N" with those lines, naming first the ranks that left none (kill -9, the
  OOM killer, a lost node). A start that is not a torchrun restart only clears the file. A half-written checkpoint is never loaded: its temp
  name is one discovery skips (checkpoint.py).
"""
import ctypes
import datetime
import os
import re
import signal
import sys
import threading

import torch
import torch.distributed as dist

from trainer import interrupt


FAILURES = "FAILURES"  # in out_dir: one line per failed rank since the last start

# Set where the user has not: a hung NCCL collective then ends the process within the process group's
# timeout instead of holding the GPUs, and leaves a trace of what each rank was doing.
NCCL_DEFAULTS = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",  # at the timeout: abort the communicators, then end the process
    "TORCH_NCCL_ENABLE_MONITORING": "1",  # and end it too if the watchdog itself is stuck (in a CUDA call)...
    "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "300",  # ...for this long
    "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",  # the flight recorder's dump at a timeout...
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",  # ...of the last 2000 collectives (0 would turn it off)
}
ROLL_CALL_S = 60  # the ranks still alive reach the roll call within this of each other (or the collective timeout)


def ranks(environ=os.environ):
    """(distributed, rank, local_rank, world_size): one process, or one per GPU under torchrun (which sets
    RANK, LOCAL_RANK and WORLD_SIZE)."""
    return ("RANK" in environ, int(environ.get("RANK", 0)), int(environ.get("LOCAL_RANK", 0)),
            int(environ.get("WORLD_SIZE", 1)))


def nccl_settings(out_dir):
    """Sets NCCL_DEFAULTS (and the trace's path in out_dir) where unset, before init_process_group reads
    them; RCCL reads the same names. Returns them as one line for the log."""
    defaults = dict(NCCL_DEFAULTS, TORCH_NCCL_DEBUG_INFO_TEMP_FILE=os.path.join(os.path.abspath(out_dir),
                                                                                "nccl_trace_rank_"))
    for key, value in defaults.items():
        os.environ.setdefault(key, value)
    return " ".join(f"{key}={os.environ[key]}" for key in defaults)


def restarts():
    """How many times torchrun has restarted this job so far (0 outside torchrun)."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))


def restart_line(out_dir):
    """Rank 0 at start-up: under a torchrun restart, which restart this is and what ended the attempt before;
    None otherwise. Takes out_dir/FAILURES away in either case, so each line is told once, and the note of a
    run outside torchrun (a config error, say) or of an earlier job is never told as this job's restart."""
    path = os.path.join(out_dir, FAILURES)
    try:
        with open(path) as f:
            notes = [line.strip() for line in f if line.strip()]
        os.remove(path)
    except FileNotFoundError:
        notes = []
    restart = restarts()
    if restart == 0:
        return None
    return (f"elastic: restart {restart} of {os.environ.get('TORCHELASTIC_MAX_RESTARTS', '?')}; the attempt before "
            f"ended with: {died(notes, int(os.environ.get('WORLD_SIZE', 1)))}")


def died(notes, world_size):
    """What the notes of a failed attempt say, the ranks that left none named first. torchrun's agent keeps
    the exit codes to itself (it logs them; a restarted worker gets only its restart count, and its error
    files hold only what a worker wrote), so a rank without a line is the trace of a kill -9: the others,
    whose collectives then failed (gloo's "Connection reset by peer"), each leave theirs in the out_dir
    every node shares (as sharded checkpoints need)."""
    spoke = {int(m.group(1)) for m in map(re.compile(r"rank ([0-9]+): ").match, notes) if m}
    silent = [str(r) for r in range(world_size) if r not in spoke]
    if not notes:
        return ("no rank left a message: one was killed (kill -9, the OOM killer) or its node went away; "
                "torchrun's output names its exit code")
    if not silent:
        return "; ".join(notes)
    return (f"rank {', '.join(silent)} left no line: killed (kill -9, the OOM killer, or torchrun stopping it after "
            f"another rank failed) or its node went away, torchrun's output names its exit code; then "
            + "; ".join(notes))


def restart_problem():
    """Why torchrun's restarts would fail, as one line, or None. torchrun shares its rendezvous store with
    the workers by default, and a restarted worker can then read the addresses of the attempt before and
    fail to connect to them (pytorch/pytorch#135712; seen here with gloo)."""
    shared = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"  # also under static rendezvous, untested there
    if int(os.environ.get("TORCHELASTIC_MAX_RESTARTS", 0)) > 0 and shared and \
            os.environ.get("TORCH_DISABLE_SHARE_RDZV_TCP_STORE") != "1":
        return ("torchrun --max-restarts needs TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in torchrun's environment, or a "
                "restarted worker can connect to the dead attempt's addresses: export it and launch again")
    return None


def leave_note(out_dir, rank, line):
    """A failing rank's one line, for restart_line in the next attempt (appended: several ranks may fail)."""
    try:
        with open(os.path.join(out_dir, FAILURES), "a") as f:
            f.write(f"rank {rank}: {line}\n")
    except OSError:  # out_dir not shared with this node: its stderr still has the line
        pass


def timed_out(error):
    """True for a collective that ran past the process group's timeout (gloo and NCCL say it in words)."""
    return isinstance(error, RuntimeError) and re.search(r"[Tt]imed out|[Tt]imeout", str(error)) is not None


def roll_call(group, timeout):
    """Every rank still alive after a timed-out collective calls this: the ranks that are missing, in one
    line (rank 0 hears who came; the others hear whether rank 0 did), or None if everyone came."""
    seconds = min(ROLL_CALL_S, timeout.total_seconds())
    try:
        dist.monitored_barrier(group=group, timeout=datetime.timedelta(seconds=seconds), wait_all_ranks=True)
    except RuntimeError as e:
        missing = re.search(r"Ranks? ([0-9, ]+) failed to pass", str(e))
        return f"rank {missing.group(1)} did not answer" if missing else "rank 0 did not answer"
    return None


def explain_timeout(error, group, timeout):
    """The one line train.log gets for a timed-out collective, naming the hung rank; None for other errors."""
    if group is None or not timed_out(error):
        return None
    missing = roll_call(group, timeout)
    who = f"{missing} in {min(ROLL_CALL_S, timeout.total_seconds()):.0f}s: it hung or died" if missing else \
        "every rank answered the roll call afterwards, so it was slow, not hung"
    return (f"a collective waited past collective_timeout_minutes ({timeout}); {who}. "
            f"Under torchrun --max-restarts the job restarts from the newest checkpoint")


# -----------------------------------------------------------------------------
# how a run stops on a signal (SIGINT, SIGTERM, SIGHUP): a flag, then every rank votes
# How a run stops on a signal. SIGINT, SIGTERM and SIGHUP (unless nohup ignores it) only set a flag: the
# loop stops after the current micro-batch and saves the state of the last completed optimizer step. At
# 6.7B a step takes ~100 s, longer than most shutdown grace periods, so waiting for it is not an option.
#
# Under torchrun a signal may reach only some ranks, and every rank must stop after the same
# micro-batch, or the ones that go on wait forever in a collective: the ranks vote.

class StopSignal:
    """Installs the handlers; `.signum` is the first signal received, or None."""

    def __init__(self):
        self.signum = None
        for sig in interrupt.stop_signals():
            signal.signal(sig, self._request)
        # until training begins there is nothing to save: a worker still in init_process_group waits in C++ for
        # a dead launcher's store (half an hour, the GIL held: no Python handler or thread runs), holding the
        # out_dir's lock, so the kernel kills it outright
        on_launcher_death(signal.SIGKILL)

    def training_begins(self):
        """From now on a launcher's death stops the run as any signal does: it saves first."""
        on_launcher_death(signal.SIGTERM)

    def _request(self, signum, frame):
        if self.signum is not None:  # heard: say so, since nothing else visibly happens until the save ends
            print(f"{signal.Signals(signum).name}: already stopping after this micro-batch and saving; "
                  "the run exits when the checkpoint is complete", file=sys.stderr, flush=True)
        self.signum = self.signum or signum

    @property
    def received(self):
        return self.signum is not None

    def name(self):
        return signal.Signals(self.signum).name if self.signum else "a signal to another rank"


def on_launcher_death(sig):
    """Under torchrun, sig from the kernel when torchrun itself dies (kill -9, the OOM killer). Without one its
    workers train on with no one to stop them, holding the GPUs and the out_dir's lock, and a rerun is refused;
    with SIGTERM they stop and save as at any signal. Linux's prctl(PR_SET_PDEATHSIG), and sig at once where the
    launcher died while this process imported (its parent is no longer the one it started with); elsewhere
    nothing."""
    if "TORCHELASTIC_RUN_ID" in os.environ and sys.platform.startswith("linux"):
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, sig)
        if os.getppid() != interrupt.PARENT:  # it died before: the kernel sends nothing for a death in the past
            os.kill(os.getpid(), sig)


def hear_sigint(signals=(signal.SIGINT,)):
    """For a tool whose work may stop anywhere (scripts/eval.py --watch: a result is written only once it is
    whole): SIGINT (or each of signals) raises KeyboardInterrupt again, as Python's own handler does, even where
    the process inherited it ignored (`cmd &` in a script), which Python otherwise keeps. Returns an Event each
    sets, with the last one's name as .name, for the tool to check between results: a library's bare `except:`
    can swallow the interrupt."""
    heard = threading.Event()
    heard.name = "SIGINT"

    def interrupt(signum, frame):
        heard.name = signal.Signals(signum).name
        heard.set()
        raise KeyboardInterrupt

    for sig in signals:
        signal.signal(sig, interrupt)
    return heard


class StopVote:
    """A signal on any rank, agreed without stalling the GPU (as an all-reduce read back with .item()
    on a GPU tensor would): each micro-batch posts its flag in a non-blocking all-reduce on a CPU (gloo)
    group and reads the vote of the micro-batch before, long done, so every rank stops after the same
    micro-batch. Create it after init_process_group; timeout: how long a vote may wait for a rank (as the
    training collectives' own: a hung rank must not hold the others here longer)."""

    def __init__(self, stop_signal, timeout=None):
        self.stop_signal = stop_signal
        self.group = dist.new_group(backend="gloo", timeout=timeout) if dist.is_initialized() else None
        self.pending = None

    def read_previous_and_post(self):
        if self.group is None:
            return self.stop_signal.received
        previous, flag = self.pending, torch.tensor([float(self.stop_signal.received)])
        self.pending = flag, dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group, async_op=True)
        if previous is None:
            return False
        previous[1].wait()
        return previous[0].item() > 0

    def finish(self):
        """Every rank posted the vote still out: wait for it, then let go of the work and the group, which
        must not outlive destroy_process_group (at interpreter exit gloo's threads abort the process)."""
        if self.pending:
            self.pending[1].wait()
        self.group = self.pending = None
