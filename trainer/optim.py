"""
The optimizer a config asks for (`optimizer`), and what its state costs.

'adamw' is PyTorch's AdamW (fused on GPUs, ROCm included): two fp32 moments, 8 bytes a parameter.
'adamw8bit' and 'adamw4bit' are torchao's block-wise quantized AdamW: each moment is stored in 8 or
4 bits with one fp32 scale per block of 256 values, ~2 or ~1 byte a parameter, dequantized, updated
in fp32 and quantized again inside the step (torchao compiles it with torch.compile, so it runs
wherever PyTorch's inductor does: CUDA, ROCm, and the CPU with a C++ compiler). Parameters under
4,096 values (biases, LayerNorm gains) keep full-precision moments.

`master_weights='bfloat16'` keeps the weights themselves in bf16: 2 bytes a parameter instead of 4,
and autocast has no bf16 copies left to make (13.3 GB at 6.7B). The step (torchao's, for all three
optimizers) computes in fp32 and rounds the new weight to bf16 stochastically, so an update smaller
than a bf16 step still moves the weight on average instead of vanishing. Gradients stay fp32
(PyTorch's grad_dtype): summing 160 micro-batches in bf16 would lose the small terms. With 'adamw'
the moments are bf16 like the weights (torchao's); the low-bit ones are unchanged.

torchao rather than bitsandbytes: it is PyTorch's own, its optimizers are plain torch code (no
vendor kernels to build for ROCm), they accept FSDP2's DTensor parameters, and their state is a
tensor subclass that torch.save / torch.load(weights_only=True) handle once torchao is imported.

`optimizer_offload=True` (offload.py) keeps AdamW's state and runs its step on the host: the GPU holds
only the weights and their gradients. With bf16 weights the host's fp32 copy is the master.

A memory mode is the triple (optimizer, master_weights, optimizer_offload), in that order everywhere.
"""
import inspect

import torch
import torch.distributed as dist

from trainer.offload import IMPLEMENTATION_KEYS, HostAdamW

OPTIMIZERS = ("adamw", "adamw8bit", "adamw4bit")
MASTER_WEIGHTS = ("float32", "bfloat16")
BLOCK = 256  # values per quantization scale
# bytes of optimizer state per parameter: two moments, plus a 4-byte scale per block for each
STATE_BYTES = {"adamw": 8.0, "adamw8bit": 2 * (1 + 4 / BLOCK), "adamw4bit": 2 * (0.5 + 4 / BLOCK)}


# torchao's quantized step makes fp32 temporaries of the parameter it updates, one parameter at a
# time: bytes per value of the largest (the embedding), measured on real tensors on the CPU
# (python scripts/bench_optim.py --step_memory); PyTorch's fused AdamW and torchao's unquantized one
# make none worth counting
STEP_TEMP_BYTES = {"adamw": 0, "adamw8bit": 8, "adamw4bit": 26}
# from the fastest step to the leanest: what plan.py tries on a card, in this order
RECIPES = [("adamw", "float32", False), ("adamw8bit", "float32", False), ("adamw4bit", "float32", False),
           ("adamw", "float32", True), ("adamw", "bfloat16", False), ("adamw8bit", "bfloat16", False),
           ("adamw4bit", "bfloat16", False), ("adamw", "bfloat16", True)]
MODE_KEYS = (("optimizer", "adamw"), ("master_weights", "float32"), ("optimizer_offload", False))


def mode_of(config):
    """The memory mode of a config dict (a checkpoint's), older ones without the keys included."""
    return tuple(config.get(key, default) for key, default in MODE_KEYS)


def bytes_per_param(optimizer, master_weights="float32", offload=False):
    """What a mode keeps per parameter on the GPU for the whole run: {'weights', 'grads', 'optimizer'} bytes
    (offload's state is in the host's memory: offload.host_bytes)."""
    weights = 2 if master_weights == "bfloat16" else 4
    if offload:
        return {"weights": weights, "grads": 4, "optimizer": 0}
    return {"weights": weights, "grads": 4, "optimizer": 2 * weights if optimizer == "adamw" else STATE_BYTES[optimizer]}


def saved_bytes_per_param(optimizer, master_weights="float32", offload=False):
    """A checkpoint's bytes per parameter: the weights and the optimizer state (offload's fp32 moments,
    and its fp32 master behind bf16 weights)."""
    per_param = bytes_per_param(optimizer, master_weights, offload)
    if offload:  # fp32 moments, and the fp32 master where it is not the weight itself
        return per_param["weights"] + STATE_BYTES["adamw"] + (4 if master_weights == "bfloat16" else 0)
    return per_param["weights"] + per_param["optimizer"]


def checkpoint_bytes(n_params, mode=("adamw", "float32", False)):
    """A saved checkpoint of a mode (optimizer, master_weights, offload): the weights and the optimizer
    state; the sampler, RNG and config add kilobytes. plan.py shows it, train.py sizes its timeout by it."""
    return saved_bytes_per_param(*mode) * n_params


def describe(optimizer, master_weights="float32", offload=False):
    """'8-bit AdamW (torchao), fp32 weights' and the like, for messages and plans."""
    if offload:
        weights = "bf16 weights (fp32 master on the host)" if master_weights == "bfloat16" else "fp32 weights"
        return f"AdamW on the host (offload), {weights}"
    kind = {"adamw": "AdamW", "adamw8bit": "8-bit AdamW (torchao)", "adamw4bit": "4-bit AdamW (torchao)"}[optimizer]
    return f"{kind}, {'bf16 weights (stochastic rounding)' if master_weights == 'bfloat16' else 'fp32 weights'}"


def mode_change(saved_config, cfg):
    """Why a checkpoint saved under saved_config cannot resume under cfg's memory mode, or None. 8-bit
    moments are not fp32 ones, nor bf16 weights fp32 ones: no silent conversion. Offload on or off is
    no change with fp32 weights (the same AdamW state, on the host or the GPU); behind bf16 weights it
    is (an fp32 master and moments, or bf16 moments and none)."""
    saved, wanted = mode_of(saved_config), mode_of(vars(cfg))
    if saved == wanted or (saved[:2] == wanted[:2] == ("adamw", "float32")):
        return None
    return (f"the checkpoint holds {describe(*saved)} state but this config asks for {describe(*wanted)}: "
            f"resume with {', '.join(f'{k}={v!r}' for (k, _), v in zip(MODE_KEYS, saved))}, or start a new "
            f"out_dir from its weights (init_weights=...) with a fresh optimizer")


def use_bf16_weights(model):
    """master_weights='bfloat16': the weights in bf16, their gradients accumulated in fp32."""
    for p in model.parameters():  # in place, not model.to(): the same Parameter objects, fake ones too
        p.data = p.data.to(torch.bfloat16)
        p.grad_dtype = torch.float32


def make_adamw_state(optimizer):
    """PyTorch AdamW's state as its first step would make it, made now instead: its 53 GB of moments at
    6.7B then take the allocator's first, unsplit memory, before a forward and backward have cut it
    into activation-sized blocks (memory.simulate() makes them in the same order). `step` lives where
    torch's AdamW wants it: on the parameters' device for fused or capturable, else on the host."""
    for group in optimizer.param_groups:
        on_device = group.get("fused") or group.get("capturable")
        for p in group["params"]:
            step = torch.zeros((), dtype=torch.float32, device=p.device) if on_device else torch.tensor(0.0)
            optimizer.state[p] = {"step": step, "exp_avg": torch.zeros_like(p, memory_format=torch.preserve_format),
                                  "exp_avg_sq": torch.zeros_like(p, memory_format=torch.preserve_format)}


def make_state(optimizer):
    """A torchao optimizer's state as its first step makes it, without the step (_new_buffer is the
    method torchao makes it with). Made at build: PyTorch's own way (a save before the first step, a
    restore) gives bf16 gradients, which bf16 weights' fp32 grad_dtype refuses, and the fake tensors of
    memory.simulate() cannot run the step at all."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            optimizer.state[p] = {"step": torch.tensor(0.0), "exp_avg": optimizer._new_buffer(p, True),
                                  "exp_avg_sq": optimizer._new_buffer(p, False)}


def step(optimizer, seed, device_type):
    """optimizer.step() drawing its random numbers (bf16 stochastic rounding) from a generator seeded by
    `seed` alone: every rank rounds its replica of the weights alike, a resumed step rounds as the
    original did, and the dropout stream goes on untouched."""
    devices = [torch.cuda.current_device()] if device_type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        optimizer.step()


def average_gradients(params, world_size):
    """DDP cannot reduce fp32 gradients of bf16 weights, so under torchrun they are averaged here,
    once per optimizer step after the last micro-batch (as DDP would, less the overlap with backward)."""
    for p in params:
        if p.grad is not None:
            dist.all_reduce(p.grad)
            p.grad.div_(world_size)


def broadcast_weights(params):
    """Rank 0's weights on every rank, as DDP's constructor makes them, for the replicas it does not wrap."""
    for p in params:
        dist.broadcast(p.data, 0)


def param_groups(model, weight_decay):
    """Weight decay on 2-D tensors (matmul weights, embeddings), none on biases and LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build(model, name, weight_decay, learning_rate, betas, device_type, master_weights="float32", offload=False):
    """The optimizer `name` (one of OPTIMIZERS) over model's parameters, whose dtype master_weights says,
    on the host if offload (AdamW only: configurator.py checks)."""
    groups = param_groups(model, weight_decay)
    if offload:
        return HostAdamW(groups, lr=learning_rate, betas=betas)
    rounding = master_weights == "bfloat16"
    if name == "adamw" and not rounding:
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra = {"fused": True} if fused else {"foreach": device_type != "cpu"}
        optimizer = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)
        # a loaded state dict brings the saving optimizer's way of running (a CPU run's foreach, offload's
        # fused=None): keep this one's, fused on a GPU, whose step the memory estimate prices. Before the
        # load, so that torch places `step` for the way it runs: on the parameters' device for fused or
        # capturable, else where it was saved (a CPU tensor after torch.load(map_location='cpu'))
        running = [{k: group[k] for k in IMPLEMENTATION_KEYS if k in group} for group in optimizer.param_groups]

        def run_as_built(_, state_dict):
            groups = [{**saved, **keys} for saved, keys in zip(state_dict["param_groups"], running)]
            return {**state_dict, "param_groups": groups}
        optimizer.register_load_state_dict_pre_hook(run_as_built)
        make_adamw_state(optimizer)
        return optimizer
    from torchao.optim import _AdamW, AdamW4bit, AdamW8bit  # _AdamW: torchao's unquantized one, which rounds
    if name == "adamw":
        optimizer = _AdamW(groups, lr=learning_rate, betas=betas, bf16_stochastic_round=True)
    else:
        cls = {"adamw8bit": AdamW8bit, "adamw4bit": AdamW4bit}[name]
        optimizer = cls(groups, lr=learning_rate, betas=betas, block_size=BLOCK, bf16_stochastic_round=rounding)
    make_state(optimizer)
    return optimizer


def set_lr(optimizer, lr):
    """The learning rate of every group; torchao's low-bit AdamW keeps it as a tensor (so that a new
    value does not recompile its step), to be filled in place."""
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
