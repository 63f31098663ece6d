"""
optimizer_offload=True: AdamW with its state and its step in the host's memory instead of the GPU's.

The GPU keeps only the weights and their fp32 gradients; the host keeps an fp32 copy of every weight
and the two moments, pinned. Once per optimizer step each gradient goes to the host, PyTorch's fused
CPU AdamW updates the host copy (behind bf16 weights, the fp32 master), and the new weight comes back
in the GPU's dtype, the two directions on side streams so that the copies and the host's arithmetic
overlap. Written here rather than torchao's CPUOffloadOptimizer, which copies gradients after every
micro-batch, keeps no fp32 master behind bf16 weights and cannot run on a CPU (so no test could run
it). Figures and the comparison: docs/configuration.md, "Offload".

The state dict is AdamW's own (step, exp_avg, exp_avg_sq per parameter), plus the fp32 master when the
weights are bf16, so a run with fp32 weights can turn offload on or off at a resume.
"""
import os

import torch
from torch.optim.adamw import adamw

IMPLEMENTATION_KEYS = ("foreach", "fused", "capturable", "differentiable")  # how a torch optimizer runs, not state
# the config's at every start, not the checkpoint's: a resume may change them, and its note says so (checkpointer.py)
CONFIG_KEYS = ("weight_decay", "betas")

# PCIe in practice: ~25 GB/s each way on a 4.0 x16 link, ~50 on 5.0; plan.py prices the copies at
# this (both directions added, as if they did not overlap) and leaves out the host's arithmetic,
# which depends on its cores (scripts/bench/bench_optim.py --host_step measures it on yours)
HOST_LINK_BYTES_PER_S = 25e9


def pinned_bytes(nbytes):
    """What PyTorch's pinned-memory allocator takes for nbytes: it rounds every allocation up to a power of
    two (at 6.7B, c_attn's 201 MB fp32 weights take 268 MB)."""
    return 1 << max(nbytes - 1, 0).bit_length()


def host_bytes(numels, weight_bytes):
    """Pinned host memory of HostAdamW over parameters of these sizes: per parameter its fp32 master and
    moments, and two staging buffers of the largest for gradients (and for bf16 weights, weight_bytes 2)."""
    largest = max(numels)
    staging = 2 * pinned_bytes(4 * largest) + (2 * pinned_bytes(weight_bytes * largest) if weight_bytes != 4 else 0)
    return 3 * sum(pinned_bytes(4 * n) for n in numels) + staging


def transfer_bytes(n_params, weight_bytes):
    """PCIe traffic per optimizer step: fp32 gradients to the host, weights back."""
    return n_params * (4 + weight_bytes)


class HostAdamW(torch.optim.Optimizer):
    """AdamW (decoupled weight decay, as torch.optim.AdamW) over GPU parameters, computed on the host."""

    def __init__(self, param_groups, lr, betas, eps=1e-8):
        # torch.optim.AdamW's own group keys (amsgrad, foreach, ...; they vary with PyTorch's version), so
        # that its state dicts and this one's load into each other
        defaults = torch.optim.AdamW([torch.zeros(1)], lr=lr, betas=betas, eps=eps).defaults
        super().__init__(param_groups, defaults)
        params = [p for group in self.param_groups for p in group["params"]]
        self.on_gpu = params[0].device.type == "cuda"
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        self.threads = max(1, cores // int(os.environ.get("LOCAL_WORLD_SIZE", 1)))
        host = dict(dtype=torch.float32, pin_memory=self.on_gpu)  # pinning needs a GPU runtime
        for p in params:  # bf16 weights' masters now: a save before the first step holds the real ones
            self.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros(p.shape, **host),
                             "exp_avg_sq": torch.zeros(p.shape, **host),
                             "master": torch.empty(p.shape, **host).copy_(p.detach())}
        # fp32 weights' masters (never saved) again at the first step, from the weights as DDP broadcast them
        # or a checkpoint set them; so too after a load without masters
        self.masters_from_weights = all(p.dtype == torch.float32 for p in params)
        # two of each staging buffer, so that one parameter's copy runs while the host updates another
        largest = max(p.numel() for p in params)
        self.grad_buffers = [torch.empty(largest, **host) for _ in range(2)]
        low = [p.dtype for p in params if p.dtype != torch.float32]  # bf16 weights: rounded on the host
        self.weight_buffers = [torch.empty(largest, dtype=low[0], pin_memory=self.on_gpu) for _ in range(2)] \
            if low else None
        # gradients down and weights up on streams of their own: PCIe carries both directions at once
        self.down, self.up = (torch.cuda.Stream(params[0].device) for _ in range(2)) if self.on_gpu else (None, None)

    def _copy(self, dst, src, stream):
        """dst.copy_(src) on stream; returns an event to wait for (None on the CPU: done). The event blocks
        the waiting thread instead of spinning, leaving the cores to the host's AdamW."""
        if not self.on_gpu:
            dst.copy_(src)
            return None
        with torch.cuda.stream(stream):
            dst.copy_(src, non_blocking=True)
        done = torch.cuda.Event(blocking=True)
        done.record(stream)
        return done

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        work = [(group, p) for group in self.param_groups for p in group["params"] if p.grad is not None]
        if not work:
            return loss
        if self.masters_from_weights:
            for p in self.state:
                self.state[p]["master"].copy_(p)
            self.masters_from_weights = False
        if self.on_gpu:  # gradients final, weights no longer read, and last step's weights up once it gets here
            self.down.wait_stream(torch.cuda.current_stream())
            self.up.wait_stream(torch.cuda.current_stream())
        threads = torch.get_num_threads()
        torch.set_num_threads(self.threads)
        try:
            self._step(work)
        finally:
            torch.set_num_threads(threads)
        if self.on_gpu:  # the next forward runs on the new weights
            torch.cuda.current_stream().wait_stream(self.up)
        return loss

    def _step(self, work):
        def fetch_grad(i):  # into buffer i % 2, whose last reader (the update of parameter i - 2) is done
            p = work[i][1]
            grad = self.grad_buffers[i % 2][:p.numel()].view(p.shape)
            return grad, self._copy(grad, p.grad, self.down)

        # sent starts empty: last step's uploads are done once the first gradient arrives (down waited on the
        # current stream, which waited on up), and that wait comes before any staging buffer is written
        fetched, sent = fetch_grad(0), [None, None]
        for i, (group, p) in enumerate(work):
            grad, arrived = fetched
            if i + 1 < len(work):
                fetched = fetch_grad(i + 1)
            if arrived is not None:
                arrived.synchronize()
            state = self.state[p]
            beta1, beta2 = group["betas"]
            adamw([state["master"]], [grad], [state["exp_avg"]], [state["exp_avg_sq"]], [], [state["step"]],
                  fused=True, amsgrad=False, beta1=beta1, beta2=beta2, lr=group["lr"],
                  weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
            new_weight = state["master"]
            if p.dtype != torch.float32:  # rounded on the host into a staging buffer: half the bytes to send
                if sent[i % 2] is not None:
                    sent[i % 2].synchronize()  # that buffer's previous copy has left
                new_weight = self.weight_buffers[i % 2][:p.numel()].view(p.shape)
                new_weight.copy_(state["master"])
            sent[i % 2] = self._copy(p, new_weight, self.up)

    def state_dict(self):
        """AdamW's state dict; the master only where the weights are not fp32 (elsewhere it is the weight)."""
        saved = super().state_dict()
        params = [p for group in self.param_groups for p in group["params"]]
        saved["state"] = {i: {k: v for k, v in state.items() if k != "master" or params[i].dtype != torch.float32}
                          for i, state in saved["state"].items()}
        return saved

    def load_state_dict(self, state_dict):
        """Into the host buffers, in place and in fp32 (Optimizer's own would cast the state to the
        parameters' device and dtype). A state without masters (fp32 weights, or torch.optim.AdamW's)
        takes them from the weights at the next step. The groups take the saved hyperparameters, but not
        how the saving optimizer ran (IMPLEMENTATION_KEYS) nor what the config sets (CONFIG_KEYS)."""
        params = [p for group in self.param_groups for p in group["params"]]
        saved_ids = [i for group in state_dict["param_groups"] for i in group["params"]]
        if len(saved_ids) != len(params):
            raise ValueError(f"the optimizer state holds {len(saved_ids)} parameters, the model {len(params)}")
        for p, i in zip(params, saved_ids):
            for key, value in state_dict["state"].get(i, {}).items():
                if value.shape != self.state[p][key].shape:
                    raise ValueError(f"the optimizer state's {key} is {tuple(value.shape)}, the parameter's "
                                     f"{tuple(self.state[p][key].shape)}")
                self.state[p][key].copy_(value)
        self.masters_from_weights = any("master" not in state_dict["state"].get(i, {}) for i in saved_ids)
        for group, saved in zip(self.param_groups, state_dict["param_groups"]):
            group.update({k: v for k, v in saved.items()
                          if k != "params" and k not in IMPLEMENTATION_KEYS + CONFIG_KEYS})

