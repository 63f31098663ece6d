"""
How a run stops on a signal. SIGINT, SIGTERM and SIGHUP (unless nohup ignores it) only set a flag: the
loop stops after the current micro-batch and saves the state of the last completed optimizer step. At
6.7B a step takes ~100 s, longer than most shutdown grace periods, so waiting for it is not an option.

Under torchrun a signal may reach only some ranks, and every rank must stop after the same
micro-batch, or the ones that go on wait forever in a collective: the ranks vote.
"""
import signal
import sys

import torch
import torch.distributed as dist


class StopSignal:
    """Installs the handlers; `.signum` is the first signal received, or None."""

    def __init__(self):
        self.signum = None
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            # under nohup a hang-up stays ignored; SIGINT and SIGTERM are always heard, though a shell
            # starts a background job (`python train.py ... &` in a script) with SIGINT ignored
            if sig in (signal.SIGINT, signal.SIGTERM) or signal.getsignal(sig) is not signal.SIG_IGN:
                signal.signal(sig, self._request)

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


def hear_sigint():
    """For a tool whose work may stop anywhere (scripts/eval.py --watch: a result is written only once it is
    whole): SIGINT raises KeyboardInterrupt again, as Python's own handler does, even where the process
    inherited it ignored (`cmd &` in a script), which Python otherwise keeps."""
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
