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

'muon' is PyTorch's Muon (torch.optim.Muon) on the blocks' weight matrices (attention's qkv and
projection, the MLP's two, and SwiGLU's gate), AdamW on everything else (the embeddings and the LM head,
tied or not, LayerNorm gains, biases), as Moonshot (arXiv 2502.16982), nanochat and modded-nanogpt split it, in one
optimizer object (MuonAdamW). Muon's lr is adjusted with 'match_rms_adamw' (0.2 sqrt(max(A, B))), so
`learning_rate` means what it means for AdamW; its state is one fp32 momentum, 4 bytes a parameter.
`muon_split_qkv=True` orthogonalises the fused qkv as three (C, C) matrices, q, k and v apart (row_blocks).

A memory mode is the triple (optimizer, master_weights, optimizer_offload), in that order everywhere.
"""
import functools
import inspect

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor
from torch.optim import _muon  # Muon's Newton-Schulz and lr adjustment, for MuonAdamW's step

from trainer.offload import CONFIG_KEYS, IMPLEMENTATION_KEYS, HostAdamW

OPTIMIZERS = ("adamw", "adamw8bit", "adamw4bit", "muon")
MASTER_WEIGHTS = ("float32", "bfloat16")
BLOCK = 256  # values per quantization scale
# bytes of optimizer state per parameter: two moments, plus a 4-byte scale per block for each
STATE_BYTES = {"adamw": 8.0, "adamw8bit": 2 * (1 + 4 / BLOCK), "adamw4bit": 2 * (0.5 + 4 / BLOCK)}
MUON_STATE_BYTES = 4.0  # Muon's one fp32 momentum per matrix value; the rest of a 'muon' run keeps AdamW's 8


# torchao's quantized step makes fp32 temporaries of the parameter it updates, one parameter at a
# time: bytes per value of the largest (the embedding), measured on real tensors on the CPU
# (python scripts/bench_optim.py --step_memory); PyTorch's fused AdamW and torchao's unquantized one
# make none worth counting
STEP_TEMP_BYTES = {"adamw": 0, "adamw8bit": 8, "adamw4bit": 26}
# Muon's step, one matrix at a time, peaks on the largest: the fp32 Nesterov update, the bf16 iterate and
# the next one, then the bf16 result and its fp32 promotion in the weight's add_, ~10 bytes a value, plus
# two bf16 Gram matrices of its smaller side (cost.simulate() runs the step on fake tensors: 10.3 B/value
# with the Gram matrices on a 512 x 2048 matrix; tests/test_muon.py checks the two agree)
MUON_STEP_BYTES = 10
# from the fastest step to the leanest: what plan.py tries on a card, in this order
RECIPES = [("adamw", "float32", False), ("adamw8bit", "float32", False), ("adamw4bit", "float32", False),
           ("adamw", "float32", True), ("adamw", "bfloat16", False), ("adamw8bit", "bfloat16", False),
           ("adamw4bit", "bfloat16", False), ("adamw", "bfloat16", True)]
MODE_KEYS = (("optimizer", "adamw"), ("master_weights", "float32"), ("optimizer_offload", False))


def mode_of(config):
    """The memory mode of a config dict (a checkpoint's), older ones without the keys included."""
    return tuple(config.get(key, default) for key, default in MODE_KEYS)


def bytes_per_param(optimizer, master_weights="float32", offload=False, matrix_share=0.0):
    """What a mode keeps per parameter on the GPU for the whole run: {'weights', 'grads', 'optimizer'} bytes
    (offload's state is in the host's memory: offload.host_bytes). matrix_share: the fraction of the
    parameters under Muon (muon_share(model)), for 'muon': 4 bytes for those, AdamW's 8 for the rest."""
    weights = 2 if master_weights == "bfloat16" else 4
    if offload:
        return {"weights": weights, "grads": 4, "optimizer": 0}
    if optimizer == "muon":
        state = MUON_STATE_BYTES * matrix_share + STATE_BYTES["adamw"] * (1 - matrix_share)
    else:
        state = 2 * weights if optimizer == "adamw" else STATE_BYTES[optimizer]
    return {"weights": weights, "grads": 4, "optimizer": state}


def saved_bytes_per_param(optimizer, master_weights="float32", offload=False, matrix_share=0.0):
    """A checkpoint's bytes per parameter: the weights and the optimizer state (offload's fp32 moments,
    and its fp32 master behind bf16 weights)."""
    per_param = bytes_per_param(optimizer, master_weights, offload, matrix_share)
    if offload:  # fp32 moments, and the fp32 master where it is not the weight itself
        return per_param["weights"] + STATE_BYTES["adamw"] + (4 if master_weights == "bfloat16" else 0)
    return per_param["weights"] + per_param["optimizer"]


def checkpoint_bytes(n_params, mode=("adamw", "float32", False), matrix_share=0.0):
    """A saved checkpoint of a mode (optimizer, master_weights, offload): the weights and the optimizer
    state; the sampler, RNG and config add kilobytes. plan.py shows it, train.py sizes its timeout by it
    (for 'muon' without matrix_share, as if AdamW's: an upper bound)."""
    return saved_bytes_per_param(*mode, matrix_share) * n_params


def step_temp_bytes(model, optimizer, shards=1):
    """The optimizer step's temporaries at its peak, per GPU. Muon's are a whole matrix's even under FSDP:
    its owner gathers it; AdamW's (fused) beside it make none."""
    if optimizer == "muon":
        rows, cols = max((p.shape for n, p in model.named_parameters() if is_muon_matrix(n, p)),
                         key=lambda shape: shape.numel())
        return MUON_STEP_BYTES * rows * cols + 2 * 2 * min(rows, cols) ** 2
    return STEP_TEMP_BYTES[optimizer] * max(p.numel() for p in model.parameters()) / shards


def matrix_newton_schulz_flops(rows, cols, ns_steps=_muon.DEFAULT_NS_STEPS):
    """FLOPs of Muon's orthogonalisation of one rows x cols matrix: on m x n (m <= n, transposed if not) each
    iteration makes A = X X^T (2 m^2 n), B = bA + cA^2 (2 m^3) and aX + BX (2 m^2 n)."""
    m, n = sorted((rows, cols))
    return ns_steps * (4 * m * m * n + 2 * m ** 3)


def newton_schulz_flops(model, ns_steps=_muon.DEFAULT_NS_STEPS, split_qkv=False):
    """FLOPs of Muon's orthogonalisation per optimizer step, over every matrix under Muon (each of its row blocks:
    split_qkv's c_attn is three (C, C) matrices, ~29% more FLOPs than one (3C, C))."""
    return sum(blocks * matrix_newton_schulz_flops(p.shape[0] // blocks, p.shape[1], ns_steps)
               for name, p in model.named_parameters() if is_muon_matrix(name, p)
               for blocks in [row_blocks(name, split_qkv)])


def is_muon_matrix(name, p):
    """Muon's parameters: the blocks' 2-D weights (qkv, attention's and the MLP's projections, the MLP's fc and
    SwiGLU's gate). The embeddings and the LM head (tied to wte or not) and the 1-D gains and biases stay with AdamW."""
    return p.dim() == 2 and ".h." in f".{name}"


def row_blocks(name, split_qkv):
    """How many row blocks Muon orthogonalises a matrix in: attention's fused c_attn as q, k and v apart (3) with
    split_qkv, as modded-nanogpt, Moonshot's and nanochat's models do; every other matrix whole (1)."""
    return 3 if split_qkv and name.endswith("attn.c_attn.weight") else 1


def muon_share(model):
    """The fraction of model's parameters (shapes suffice: meta tensors) that 'muon' puts under Muon."""
    params = dict(model.named_parameters())
    return sum(p.numel() for n, p in params.items() if is_muon_matrix(n, p)) / sum(p.numel() for p in params.values())


def describe(optimizer, master_weights="float32", offload=False):
    """'8-bit AdamW (torchao), fp32 weights' and the like, for messages and plans."""
    if offload:
        weights = "bf16 weights (fp32 master on the host)" if master_weights == "bfloat16" else "fp32 weights"
        return f"AdamW on the host (offload), {weights}"
    kind = {"adamw": "AdamW", "adamw8bit": "8-bit AdamW (torchao)", "adamw4bit": "4-bit AdamW (torchao)",
            "muon": "Muon on the blocks' matrices and AdamW on the rest"}[optimizer]
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
    into activation-sized blocks (cost.simulate() makes them in the same order). `step` lives where
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
    cost.simulate() cannot run the step at all."""
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


def _keep_implementation(optimizer):
    """A loaded state dict brings the saving optimizer's way of running (a CPU run's foreach, offload's
    fused=None): keep this one's, fused on a GPU, whose step the memory estimate prices. Registered before
    the load, so that torch places `step` for the way it runs: on the parameters' device for fused or
    capturable, else where it was saved (a CPU tensor after torch.load(map_location='cpu')). So too the
    config's weight decay and betas (CONFIG_KEYS): a resume that changes them means it."""
    running = [{k: group[k] for k in IMPLEMENTATION_KEYS + CONFIG_KEYS if k in group}
               for group in optimizer.param_groups]

    def run_as_built(_, state_dict):
        groups = [{**saved, **keys} for saved, keys in zip(state_dict["param_groups"], running)]
        return {**state_dict, "param_groups": groups}
    optimizer.register_load_state_dict_pre_hook(run_as_built)


def _torch_adamw(groups, learning_rate, betas, device_type):
    """PyTorch's AdamW, fused on a GPU."""
    fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
    extra = {"fused": True} if fused else {"foreach": device_type != "cpu"}
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)


class MuonAdamW(torch.optim.Optimizer):
    """torch.optim.Muon over `matrices` and torch.optim.AdamW over `adamw_groups`, as one Optimizer: its
    param_groups are theirs (Muon's first) and its state is theirs too (one dict, keyed by parameter),
    so state_dict, load_state_dict, zero_grad, set_lr and torch.distributed.checkpoint see one ordinary
    optimizer. lr is one value for both; Muon's is scaled per matrix by 'match_rms_adamw'.

    Muon's step is torch's _single_tensor_muon, matrix by matrix, with torch's own Newton-Schulz and lr
    adjustment (tests/test_muon.py: bit for bit), taken here for two things torch's step cannot do:
    - row_blocks: a matrix that stacks several (the fused qkv, with muon_split_qkv) is orthogonalised block by
      block, each its own (C, C) matrix, and its lr adjusted for that shape;
    - FSDP2 (DTensor shards; Newton-Schulz needs the whole matrix): each matrix has one owner rank in its shard
      group, chosen largest first onto the least loaded rank. The momentum is updated on the shards, the owner
      gathers the update in bf16 (what Newton-Schulz casts it to first, so the result is one process's bit for
      bit), orthogonalises it and scatters the shards back."""

    def __init__(self, matrices, adamw_groups, learning_rate, betas, weight_decay, device_type, row_blocks=None):
        self.muon = torch.optim.Muon(matrices, lr=learning_rate, weight_decay=weight_decay,
                                     adjust_lr_fn="match_rms_adamw")
        self.adamw = _torch_adamw(adamw_groups, learning_rate, betas, device_type)
        super().__init__(self.muon.param_groups + self.adamw.param_groups, {})
        self._link()
        make_adamw_state(self.adamw)
        for p in matrices:
            self.state[p] = {"momentum_buffer": torch.zeros_like(p, memory_format=torch.preserve_format)}
        self.owners = _owners(matrices)
        self.row_blocks = row_blocks or {}  # {matrix: its row blocks}; 1 where absent

    def describe(self):
        """train.log's line: how many parameters each half steps."""
        count = [sum(p.numel() for g in part.param_groups for p in g["params"]) for part in (self.muon, self.adamw)]
        split = any(blocks > 1 for blocks in self.row_blocks.values())
        return (f"muon: {count[0]:,} parameters under Muon ({len(self.muon.param_groups[0]['params'])} matrices"
                f"{', qkv as q, k and v apart' if split else ''}), {count[1]:,} under AdamW")

    def _link(self):
        """Muon and AdamW step over this optimizer's groups and state (again after a load replaced them)."""
        k = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:k], self.param_groups[k:]
        self.muon.state = self.adamw.state = self.state

    def load_state_dict(self, state_dict):
        super().load_state_dict(state_dict)
        self._link()

    @torch.no_grad()
    def step(self, closure=None):
        self.adamw.step()
        for group in self.muon.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self._matrix_step(p, group)

    def _matrix_step(self, p, group):
        """torch's _single_tensor_muon for one matrix: Newton-Schulz per row block, on its owner under FSDP2."""
        momentum, lr, blocks = group["momentum"], group["lr"], self.row_blocks.get(p, 1)
        buf = self.state[p]["momentum_buffer"]
        buf.lerp_(p.grad, 1 - momentum)
        update = p.grad.lerp(buf, momentum) if group["nesterov"] else buf
        orthogonalise = functools.partial(_orthogonalise, blocks=blocks, coefficients=group["ns_coefficients"],
                                          steps=group["ns_steps"], eps=group["eps"])
        if isinstance(p, DTensor):
            orthogonal = DTensor.from_local(_orthogonalise_on_owner(update, self.owners[p], orthogonalise),
                                            p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
        else:
            orthogonal = orthogonalise(update)
        p.mul_(1 - lr * group["weight_decay"])
        p.add_(orthogonal, alpha=-_muon._adjust_lr(lr, group["adjust_lr_fn"], (p.shape[0] // blocks, p.shape[1])))


def _orthogonalise(matrix, blocks, coefficients, steps, eps):
    """torch's Newton-Schulz of each of matrix's row blocks, stacked back (one block: the matrix's own)."""
    if blocks == 1:
        return _muon._zeropower_via_newtonschulz(matrix, coefficients, steps, eps)
    return torch.cat([_muon._zeropower_via_newtonschulz(block, coefficients, steps, eps)
                      for block in matrix.chunk(blocks)])


def _owners(matrices):
    """Each matrix's owner: its index in the shard group, largest matrices first onto the least loaded."""
    owners, load = {}, {}
    for p in sorted(matrices, key=lambda p: -p.numel()):
        if isinstance(p, DTensor):
            size = p.device_mesh.size(_shard_dim(p))
            owner = min(range(size), key=lambda r: (load.get(r, 0), r))
            owners[p], load[owner] = owner, load.get(owner, 0) + p.numel()
    return owners


def _shard_dim(p):
    """The mesh dimension a DTensor matrix is sharded over (FSDP2 shards dim 0; HSDP replicates over the other)."""
    dims = [i for i, placement in enumerate(p.placements) if placement.is_shard()]
    if len(dims) != 1 or p.placements[dims[0]].dim != 0:
        raise ValueError(f"Muon under FSDP expects one Shard(0) placement, got {p.placements}")
    return dims[0]


def _orthogonalise_on_owner(update, owner, orthogonalise):
    """This rank's rows of orthogonalise(update), computed once, on `owner` of the shard group: the
    bf16 shards (padded to torch.chunk's equal size) gathered there, orthogonalised, scattered back."""
    group = update.device_mesh.get_group(_shard_dim(update))
    size, rows = dist.get_world_size(group), update.shape[0]
    chunk = -(-rows // size)  # FSDP2's torch.chunk: equal chunks, the last ones short or empty
    local = update.to_local().bfloat16()
    padded = torch.zeros(chunk, update.shape[1], dtype=torch.bfloat16, device=local.device)
    padded[:local.shape[0]] = local
    owner_rank = dist.get_global_rank(group, owner)
    mine = dist.get_rank(group) == owner
    pieces = [torch.empty_like(padded) for _ in range(size)] if mine else None
    dist.gather(padded, pieces, dst=owner_rank, group=group)
    if mine:
        full = torch.cat(pieces)[:rows]
        result = orthogonalise(full)
        # contiguous: a tall matrix comes back transposed, and the collectives send memory as it lies
        pieces = [piece.contiguous() for piece in torch.nn.functional.pad(result, (0, 0, 0, chunk * size - rows)).chunk(size)]
    dist.scatter(padded, pieces, src=owner_rank, group=group)
    return padded[:local.shape[0]]


def build(model, name, weight_decay, learning_rate, betas, device_type, master_weights="float32", offload=False,
          muon_split_qkv=False):
    """The optimizer `name` (one of OPTIMIZERS) over model's parameters, whose dtype master_weights says,
    on the host if offload (AdamW only: configurator.py checks); muon_split_qkv: row_blocks."""
    if name == "muon":
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        matrices = [p for n, p in named if is_muon_matrix(n, p)]
        rest = [(n, p) for n, p in named if not is_muon_matrix(n, p)]
        groups = [{"params": [p for _, p in rest if p.dim() >= 2], "weight_decay": weight_decay},
                  {"params": [p for _, p in rest if p.dim() < 2], "weight_decay": 0.0}]
        blocks = {p: row_blocks(n, muon_split_qkv) for n, p in named if is_muon_matrix(n, p)}
        optimizer = MuonAdamW(matrices, groups, learning_rate, betas, weight_decay, device_type, blocks)
        _keep_implementation(optimizer)
        return optimizer
    groups = param_groups(model, weight_decay)
    if offload:
        return HostAdamW(groups, lr=learning_rate, betas=betas)
    rounding = master_weights == "bfloat16"
    if name == "adamw" and not rounding:
        optimizer = _torch_adamw(groups, learning_rate, betas, device_type)
        _keep_implementation(optimizer)
        make_adamw_state(optimizer)
        return optimizer
    from torchao.optim import _AdamW, AdamW4bit, AdamW8bit  # _AdamW: torchao's unquantized one, which rounds
    if name == "adamw":
        optimizer = _AdamW(groups, lr=learning_rate, betas=betas, bf16_stochastic_round=True)
    else:
        cls = {"adamw8bit": AdamW8bit, "adamw4bit": AdamW4bit}[name]
        optimizer = cls(groups, lr=learning_rate, betas=betas, block_size=BLOCK, bf16_stochastic_round=rounding)
    _keep_implementation(optimizer)
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
