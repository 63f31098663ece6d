"""
What a training step costs: its FLOPs (MFU and HFU, at the end of this file) and what it holds in GPU
memory, three ways:

- estimate(): arithmetic by category (weights, gradients, AdamW moments, bf16 weight casts,
  activations, logits), for any config and checkpointing policy in microseconds;
- simulate(): the training step itself (two micro-batches under bf16 autocast, clipping, the
  optimizer step) on fake tensors, shapes without storage, with PyTorch's MemTracker counting
  each category at the peak: minutes on a CPU at 6.7B, and it checks the estimate;
- choose_auto(): the cheapest checkpointing policy and micro-batch whose estimate fits a budget,
  which is what activation_checkpointing='auto' runs.

Whether a peak fits a budget is one rule, fits(); what the budget is, device_budget(); the setting a
run trains with, or why it cannot, settle(). plan.py, bench.py and train.py ask this file; model.py
holds only the policies themselves.
Host memory beside it: host_estimate() by part (offload's state, async checkpoint staging, batches,
the loader, each process's runtime), and whether that fits the machine, host_problem().
Sizes are bytes; GB in what people read are 1e9 bytes, as GPU vendors count.
"""
import contextlib
import dataclasses
import os
import weakref

import torch
from torch import nn
from torch.nn import functional as F

from model import GPT, LOSS_CHUNK_ROWS, model_config
from trainer import RunError, bins, machine, offload, optim, precision

# The caching allocator rounds every block up (to 512 B, large ones to 2 MB segments) and splits
# cached blocks, so what it reserves at the peak runs above what tensors hold: typically 2-5% over a
# long run of fixed shapes like ours (gpu_check.sh logs both peaks to check it). An estimate or a
# measured allocated peak gets this on top; a measured reserved peak already holds it.
FRAGMENTATION_MARGIN = 0.05
PEAK_KINDS = ("estimate", "allocated", "reserved")
ATTENTION_KERNELS = ("flash", "efficient", "cudnn", "math")  # machine.attention_backend's answers
# auto tries micro-batches larger than the config's up to this many tokens: past it, what a
# micro-batch costs whatever its size (casting 6.7B weights to bf16, adding to fp32 gradients) is
# a few percent of its matmul time, and more tokens only take memory.
AUTO_MAX_MICRO_TOKENS = 16384


# -----------------------------------------------------------------------------
# the one rule for "does this setting fit", used by train.py, auto, plan.py and bench.py

def size_text(nbytes):
    """Bytes as messages give them: GB to a tenth, or MB below 1 GB, so a small model's figures read as more than 0.0."""
    return f"{nbytes / 1e9:.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e6:.1f} MB"


def needed_bytes(peak_bytes, kind="estimate"):
    """The smallest budget a peak fits: estimate() and torch.cuda.max_memory_allocated() count tensors
    only, so they get FRAGMENTATION_MARGIN; max_memory_reserved() is what the allocator holds, as is."""
    if kind not in PEAK_KINDS:
        raise ValueError(f"kind={kind!r}: one of {', '.join(PEAK_KINDS)}")
    return peak_bytes if kind == "reserved" else peak_bytes * (1 + FRAGMENTATION_MARGIN)


def fits(peak_bytes, budget_bytes, kind="estimate"):
    """Whether a peak of this kind ("estimate", "allocated" or "reserved") fits budget_bytes."""
    return needed_bytes(peak_bytes, kind) <= budget_bytes


# -----------------------------------------------------------------------------
# activations: what autograd keeps between forward and backward, for one micro-batch of
# B sequences of T tokens, C wide. Under bf16 autocast the residual stream stays fp32 (an fp32
# embedding plus bf16 block outputs promotes to fp32) while matmul inputs and outputs are bf16;
# with bf16 weights (master_weights='bfloat16') the embedding and so the residual stream are bf16
# (residual_bytes 2 instead of 4), but a GPU's autocast still runs LayerNorm in fp32 and keeps an fp32
# copy of its input (the CPU's autocast keeps it bf16: there the simulation is a little lower).
# tests/test_memory.py counts the real saved tensors and checks these.

def block_activation_bytes(B, T, C, n_head, act_bytes, internals=None):
    """One transformer block without checkpointing, flash or memory-efficient attention:
    - the fp32 inputs of ln_1 and ln_2 (on a GPU, whatever the residual stream's dtype): 2 x 4 B per BTC element
    - act_bytes (2 in bf16): c_attn input 1, q/k/v (views of one c_attn output) 3, the attention
      output 1 (it is also c_proj's input: flash/efficient return it in (B, T, head, dim) layout,
      so model.py's .contiguous() copies nothing), c_fc input 1, GELU input 4, MLP c_proj input 4:
      14 elements per BTC
    - LayerNorm mean and rstd (2 x 2 x 4 B per token), attention logsumexp (4 B per token and head)
    These kernels keep no T x T attention matrix; the math kernel does (math_attention_bytes).
    internals: the GPTConfig, whose settings beyond GPT-3's keep more (internals_bytes)."""
    base = (8 + 14 * act_bytes) * B * T * C + 16 * B * T + 4 * B * n_head * T
    return base + (internals_bytes(internals, B, act_bytes) if internals else 0)


def internals_bytes(config, B, act_bytes):
    """What a block without checkpointing keeps beyond GPT-3's for model.py's other settings, counted from
    the tensors CPU autograd saves (tests/test_memory.py); T, C, n_head from config:
    - SwiGLU: gate, SiLU, up and product outputs (4 x H wide) instead of GELU's two 4C, and under autocast
      a second bf16 copy of the MLP's input (c_gate casts its own);
    - RMSNorm (composite on the CPU; a fused GPU kernel keeps less): each norm's fp32 normalised input
      (2 x 4 B per BTC element) and one fp32 statistic per token instead of two;
    - QK-norm: fp32 queries and keys (2 x 4 B), one statistic per token and head for each, attention's
      output laid out anew for c_proj (a copy), and under autocast the bf16 casts attention takes;
    - RoPE (without QK-norm): the rotated queries and keys; under autocast also the bf16 casts of the angles."""
    T, C, H = config.block_size, config.n_embd, config.n_head
    BT, bf16 = B * T, act_bytes == 2
    extra = 0
    if config.activation == "swiglu":
        extra += act_bytes * (4 * config.mlp_hidden() - 8 * C) * BT + 2 * bf16 * BT * C
    if config.norm == "rmsnorm":
        extra += 8 * BT * C - 8 * BT
    if config.qk_norm:
        extra += (8 + act_bytes + 2 * act_bytes * bf16) * BT * C + 8 * BT * H
    elif config.position == "rope":
        extra += 2 * act_bytes * BT * C
    if config.position == "rope" and bf16:
        extra += 8 * T * (C // H)
    return extra


def selective_block_bytes(B, T, C, n_head, act_bytes, residual_bytes=4, internals=None):
    """One block under 'selective': its input (residual_bytes per BTC element), and the outputs of c_attn
    (3), the attention kernel (1, with its fp32 logsumexp), attention's c_proj (1) and c_fc (4):
    9 act_bytes elements per BTC; SwiGLU's c_fc and c_gate instead of c_fc (2 x H wide, internals' H)."""
    kept_hidden = 2 * internals.mlp_hidden() if internals and internals.activation == "swiglu" else 4 * C
    return (residual_bytes + 5 * act_bytes) * B * T * C + act_bytes * B * T * kept_hidden + 4 * B * n_head * T


def kept_block_bytes(policy, B, T, C, n_head, act_bytes, residual_bytes=4, internals=None):
    """What one block keeps from its forward to its backward under a policy (internals: the GPTConfig)."""
    if policy == "full":
        return residual_bytes * B * T * C  # only its input
    if policy == "selective":
        return selective_block_bytes(B, T, C, n_head, act_bytes, residual_bytes, internals)
    return block_activation_bytes(B, T, C, n_head, act_bytes, internals)


def math_attention_bytes(B, T, C, n_head, act_bytes):
    """What a block keeps beyond flash attention's when SDPA falls back to the math kernel: the fp32
    softmax probabilities (4 B per B x n_head x T x T element) and, under bf16 autocast, fp32 copies of
    q, k and v in place of their bf16 originals, but no logsumexp (tests/test_memory.py counts them)."""
    return 4 * B * n_head * T * T + (12 - 3 * act_bytes) * B * T * C - 4 * B * n_head * T


def logits_bytes(B, T, V, C, act_bytes, chunk_rows=LOSS_CHUNK_ROWS, softcap=0.0):
    """model.py's chunked LM head and loss, at their peak: the fp32 gradient of the tied weight it sums
    (4 B per V*C), the gradient of its input (act_bytes per BTC), and one chunk of R rows: its fp32 logits
    and their (log-)softmax, 8 B per R*V (backward lets go of the previous chunk's gradient before the next
    chunk's softmax; simulate() measures it), or in backward the logits' gradient and its (V, C) product
    added into the weight's. Never the whole B*T x V logits: at 6.7B, micro-batch 4, 1.4 GB instead of 4.9
    (scripts/bench_lm_head.py). A soft-cap adds one fp32 chunk (its slope, 1 - tanh^2, in backward)."""
    R = min(chunk_rows, B * T)
    backward = act_bytes * (R * V + V * C)
    return 4 * V * C + act_bytes * B * T * C + max(8 * R * V, backward) + (4 * R * V if softcap > 0 else 0)


def activation_peaks(model, config, B, act_bytes, residual_bytes=4, attention="flash", fp8=""):
    """What a micro-batch holds besides weights, gradients and moments, by category, at the two
    moments that can be the peak: the start of backward, where every block's kept activations
    meet the logits' gradients, and the last block's backward, where its activations (kept or
    rebuilt) meet the gradients flowing through it. The last-block terms beyond its activations
    are fitted to simulate() (tests/test_memory.py checks them): 14 B per BTC element of
    activation gradients, 8 B per C^2 of weight gradients in flight, and the head's fp32 weight
    gradient (4 B per V*C) that waits in autograd for the tied embedding's before it is added.
    model gives the shapes, config the checkpointing policy. attention="math": the math kernel's T x T
    matrices (math_attention_bytes) are kept by each block without checkpointing ('selective' recomputes
    them: the math kernel's matmuls and softmax are not among what it saves) and exist, with their
    gradient, in the block whose backward runs. That last term errs high: simulate(attention="math")
    comes out 0-14% below the estimate on the small models of tests/test_memory.py, never above.
    fp8 (precision.py): torchao's Float8Linear keeps the bf16 input and the fp32 weight itself for
    backward and casts both to fp8 again there, so the blocks keep no bf16 weight copies; only the
    block running holds its fp8 weights (1 B per weight) for the matmul."""
    T, C, H, V = config.block_size, config.n_embd, config.n_head, config.vocab_size
    policies = [config.block_checkpointing(i) for i in range(config.n_layer)]
    kept = [kept_block_bytes(p, B, T, C, H, act_bytes, residual_bytes, config) for p in policies]
    in_backward = block_activation_bytes(B, T, C, H, act_bytes, config)
    if attention == "math":  # in the backward also the probabilities' fp32 gradient
        kept = [k + math_attention_bytes(B, T, C, H, act_bytes) * (p == "none") for k, p in zip(kept, policies)]
        in_backward += math_attention_bytes(B, T, C, H, act_bytes) + 4 * B * H * T * T
    per_block_casts = sum(m.weight.numel() for m in model.transformer.h[0].modules() if isinstance(m, nn.Linear))
    # bf16 weight casts (autocast runs without its cast cache): a cast lives only while autograd
    # keeps it for backward, so in the blocks without checkpointing; the others cast again when
    # they recompute. LayerNorm stays fp32 and the embedding lookup is no matmul.
    casts = [2 * per_block_casts if act_bytes == 2 and p == "none" and not fp8 else 0 for p in policies]
    running_block_casts = per_block_casts if fp8 else 2 * per_block_casts if act_bytes == 2 else 0
    head_cast = 2 * V * C if act_bytes == 2 else 0
    head = (4 + act_bytes) * B * T * C + 8 * B * T  # ln_f's fp32 input and stats, lm_head input
    at_loss = {"autocast_bf16_weights": sum(casts) + head_cast, "activations": sum(kept) + head,
               "logits": logits_bytes(B, T, V, C, act_bytes, softcap=config.logit_softcap), "gradients_in_flight": 0}
    in_last_block = {"autocast_bf16_weights": sum(casts[:-1]) + running_block_casts,
                     "activations": sum(kept[:-1]) + in_backward + (6 + 4 * act_bytes) * B * T * C, "logits": 0,
                     "gradients_in_flight": 8 * C * C + 4 * V * C}
    return at_loss, in_last_block


_META_MODELS = {}  # repr(GPTConfig) -> its meta model


def meta_model(cfg, activation_checkpointing=None, recompute_blocks=None):
    """The model train.py builds for cfg (model.model_config), on the meta device: every shape, no memory,
    no init time; a policy and block count given replace cfg's. One per configuration, built once: a plan
    prices each memory mode on the same shapes, and building 32 blocks takes longer than pricing them.
    Callers only read it."""
    config = model_config(cfg, **{k: v for k, v in (("activation_checkpointing", activation_checkpointing),
                                                    ("recompute_blocks", recompute_blocks)) if v is not None})
    key = repr(config)
    if key not in _META_MODELS:
        with torch.device("meta"):
            _META_MODELS[key] = GPT(config)
    return _META_MODELS[key]


def block_params(model):
    return sum(p.numel() for p in model.transformer.h[0].parameters())


_COUNTS = weakref.WeakKeyDictionary()  # model -> what estimate() reads of its parameters


def _counts(model, optimizer, shards):
    """(parameters, one block's, Muon's share, the optimizer step's temporaries) of model, each walk of its
    parameters made once: plan.py prices one model in hundreds of settings. Shapes only, which never change."""
    counts = _COUNTS.setdefault(model, {})
    if not counts:
        counts.update(n=model.get_num_params(non_embedding=False), block=block_params(model),
                      muon_share=optim.muon_share(model))
    if (optimizer, shards) not in counts:
        counts[optimizer, shards] = optim.step_temp_bytes(model, optimizer, shards)
    return counts["n"], counts["block"], counts["muon_share"], counts[optimizer, shards]


@dataclasses.dataclass(frozen=True)
class Setup:
    """How a training step runs beside the model and its micro-batch: what estimate(), choose_auto() and
    simulate() price. dtype; the memory mode (optimizer, master_weights, offload: optim.py); attention, the
    kernel scaled_dot_product_attention runs (machine.attention_backend); fp8, the config's recipe ('' for
    none); gpus, strategy and hsdp_shard_size, how the GPUs share the model (simulate() runs one device)."""
    dtype: str = "bfloat16"
    optimizer: str = "adamw"
    master_weights: str = "float32"
    offload: bool = False
    attention: str = "flash"
    fp8: str = ""
    gpus: int = 1
    strategy: str = "ddp"
    hsdp_shard_size: int = 0

    @classmethod
    def of(cls, cfg, gpus=1, attention="flash"):
        """A run's config (train.py's, plan.py's) on `gpus` GPUs."""
        return cls(cfg.dtype, *optim.mode_of(vars(cfg)), attention, cfg.fp8, gpus, cfg.strategy, cfg.hsdp_shard_size)


def estimate(model, batch_size, setup=Setup(), checkpointing=None):
    """Bytes per GPU at the peak of a training step, by what holds them, for a Setup and model.config's
    checkpointing policy or the (activation_checkpointing, recompute_blocks) given instead (model
    may live on the meta device: only shapes are read). The peak is
    whichever of activation_peaks() is larger: "gradients_in_flight" is non-zero when it is the
    last block's backward.

    DDP replicates weights, gradients and moments on every GPU (this assumes
    gradient_as_bucket_view=True, as train.py sets). FSDP2 shards all three N ways and, under bf16,
    gathers bf16 weights (train.py's MixedPrecisionPolicy), so autocast has nothing left to cast.
    HSDP shards them over hsdp_shard_size GPUs (0: all of them) and replicates the shards, so a
    GPU holds what FSDP over hsdp_shard_size GPUs would.
    Each GPU runs the same micro-batch either way. optimizer, master_weights and offload: the memory
    mode (optim.py), whose bytes per parameter on the GPU optim.bytes_per_param says (offload's are on
    the host, not counted here); bf16 weights leave autocast nothing to cast. attention: the kernel
    scaled_dot_product_attention runs (machine.attention_backend); "math" keeps T x T matrices.
    fp8: the config's recipe ('' for none), which keeps no bf16 weight copies (activation_peaks).

    "total" is the peak tensors hold, what simulate() and torch.cuda.max_memory_allocated() measure;
    fits() adds the allocator's fragmentation to it."""
    dtype, optimizer, master_weights, offload, attention, fp8, gpus, strategy, hsdp_shard_size = \
        dataclasses.astuple(setup)
    if attention not in ATTENTION_KERNELS:
        raise ValueError(f"attention={attention!r}: one of {', '.join(ATTENTION_KERNELS)}")
    config = model.config
    if checkpointing:
        config = dataclasses.replace(config, activation_checkpointing=checkpointing[0],
                                     recompute_blocks=checkpointing[1])
    shards = {"fsdp": gpus, "hsdp": hsdp_shard_size or gpus}.get(strategy, 1) if gpus > 1 else 1
    n_params, block, muon_share, step_temp = _counts(model, optimizer, shards)  # n_params: wpe included
    bf16 = dtype == "bfloat16"
    act_bytes = 2 if bf16 else 4  # matmul inputs and outputs: bf16 under autocast, else fp32
    unsharded_root = n_params - config.n_layer * block  # embedding = head, ln_f
    residual_bytes = 2 if master_weights == "bfloat16" else 4
    peaks = activation_peaks(model, config, batch_size, act_bytes, residual_bytes, attention, fp8)
    peaks = [{**p, "optimizer_step": 0} for p in peaks]
    # the third moment: the optimizer step, activations gone, the low-bit step's temporaries there
    peaks.append({**{k: 0 for k in peaks[0]}, "optimizer_step": step_temp})
    moment = max(peaks, key=lambda p: sum(p.values()))
    per_param = optim.bytes_per_param(optimizer, master_weights, offload, muon_share)
    m = {
        "weights": per_param["weights"] * n_params / shards,  # the master weights
        "grads": per_param["grads"] * n_params / shards,  # fp32, accumulated across micro-batches
        "optimizer": per_param["optimizer"] * n_params / shards,  # AdamW's exp_avg and exp_avg_sq, unless on the host
        **moment,
        # FSDP2 gathers the root's weights for the whole step, the block running and the one
        # prefetched, and in backward holds one block's unsharded gradient (and its fp32 copy for
        # the reduce-scatter under bf16) before reducing it.
        "fsdp_unsharded": (act_bytes * (unsharded_root + 2 * block)
                           + (act_bytes + 4 if bf16 else 4) * block) if shards > 1 else 0,
    }
    if shards > 1 or master_weights == "bfloat16":
        m["autocast_bf16_weights"] = 0
    m["total"] = sum(m.values())
    return m


# -----------------------------------------------------------------------------
# the budget: what a step's peak may use on a device

@dataclasses.dataclass
class Budget:
    bytes: float  # what a training step's peak may use per device
    fixed_cost_bytes: float  # what the device spends outside our tensors, as measured; 0 where not measured
    total_bytes: float  # the device's memory
    source: str  # where bytes came from, for messages

    def text(self):
        return f"{size_text(self.bytes)} budget ({self.source})"


def stated_budget(total_bytes, source, memory_budget_gb=0.0):
    """A budget without measuring: memory_budget_gb when set (the user's word), else all of total_bytes."""
    if memory_budget_gb > 0:
        return Budget(memory_budget_gb * 1e9, 0.0, total_bytes, "memory_budget_gb")
    return Budget(total_bytes, 0.0, total_bytes, source)


ALLOCATOR_VARIABLES = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_HIP_ALLOC_CONF")


def use_expandable_segments(environ=os.environ, hip_version=torch.version.hip):
    """Let the caching allocator grow segments in place (expandable_segments:True) unless the user chose
    allocator settings. Without it, AdamW's 53 GB of moments at 6.7B, and every later allocation, must
    find room among blocks a forward and backward have already split: fragmentation the estimate's
    margin then has to absorb. The allocator reads this once, when the device initialises, so call it
    before that. Both names are set: some torch releases honour only the older CUDA one for this key.
    ROCm before 7.0 has no expandable segments (PyTorch switches them off with a warning), so there it
    is left alone. Returns the setting in force, for the log."""
    chosen = next((f"{name}={environ[name]}" for name in ALLOCATOR_VARIABLES if environ.get(name)), None)
    if chosen:
        return f"{chosen} (yours)"
    if hip_version and int(hip_version.split(".")[0]) < 7:
        return f"the default (ROCm {hip_version} has no expandable segments)"
    environ["PYTORCH_ALLOC_CONF"] = environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    return "expandable_segments:True"


def device_budget(device, memory_budget_gb=0.0):
    """The Budget of this process's device. On a CPU the machine's memory (nothing fixed is measured).
    On CUDA/ROCm it is measured on the device, so call it after init_process_group (NCCL/RCCL buffers
    are a fixed cost too) and before the model exists: cuBLAS/hipBLASLt workspaces and the kernel
    images load on first use, so one bf16 matmul and one attention, forward and backward, run first;
    then the budget is the free memory, plus the blocks the caching allocator holds unused (ours to
    reuse), plus the tensors of ours already allocated before those first kernels (estimate() counts
    them, so they must not count against the budget too). The allocations those kernels leave behind
    (a workspace the allocator serves) are a fixed cost. Everything else (context, libraries, other
    processes) is total - budget. Not run on the CPU: tests/test_memory.py checks it against a fake device."""
    device = torch.device(device)
    if memory_budget_gb > 0 or device.type != "cuda":
        return stated_budget(machine.memory_capacity(device), "the machine's memory", memory_budget_gb)
    ours = torch.cuda.memory_allocated(device)
    load_first_kernels(device)
    torch.cuda.synchronize(device)
    free, total = torch.cuda.mem_get_info(device)
    unused = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    budget = free + unused + ours
    return Budget(budget, total - budget, total, "free after start-up")


def load_first_kernels(device):
    """One bf16 matmul and one causal attention, forward and backward, so the libraries allocate what
    they allocate lazily before device_budget() reads the free memory."""
    q = torch.ones(1, 4, 256, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.ones(64, 64, device=device, dtype=torch.bfloat16, requires_grad=True)
    (F.scaled_dot_product_attention(q, q, q, is_causal=True).reshape(-1, 64) @ w).sum().backward()


# -----------------------------------------------------------------------------
# auto: the cheapest policy and micro-batch that fit, and the setting a run trains with

@dataclasses.dataclass
class Choice:
    activation_checkpointing: str
    recompute_blocks: int
    batch_size: int
    gradient_accumulation_steps: int
    peak_gb: float  # estimate()'s total
    budget_gb: float
    fits: bool = True

    def describe(self, n_layer):
        k = self.recompute_blocks
        policy = (f"full on {k}/{n_layer} blocks" if self.activation_checkpointing == "full" and 0 < k < n_layer
                  else self.activation_checkpointing)
        return f"{policy}, micro-batch {self.batch_size} x {self.gradient_accumulation_steps}"


def peak_text(peak_bytes):
    """An estimate as messages give it: the peak, and the budget it needs with the fragmentation margin."""
    return (f"{size_text(peak_bytes)} ({size_text(needed_bytes(peak_bytes))} with the "
            f"{FRAGMENTATION_MARGIN:.0%} fragmentation margin)")


def auto_policies(n_layer):
    """From the cheapest in compute: no recompute; the element-wise ops only; whole blocks, the
    fewest first (blocks 0..k-1 recompute, the rest keep everything); every block."""
    return [("none", -1), ("selective", -1), *[("full", k) for k in range(1, n_layer)], ("full", -1)]


def choose_auto(model, batch_size, gradient_accumulation_steps, budget_bytes, setup=Setup()):
    """The Choice 'auto' makes for a memory budget per GPU and a Setup (model's own policy does not matter),
    keeping the global batch, or None when nothing fits (by fits()). The config's micro-batch and its
    doublings come first (up to AUTO_MAX_MICRO_TOKENS): for each policy from the cheapest, the largest
    that fits, since a larger micro-batch at the same global batch spends less per token on weight
    casts and gradient accumulation. Halvings of it are tried only when none of those fits at all."""
    sequences, gpus = batch_size * gradient_accumulation_steps, setup.gpus
    T = model.config.block_size
    # the config's micro-batch doubled or halved, as long as it divides the global batch among the GPUs
    sizes = [b for b in (batch_size * 2**j for j in range(8)) if b * T <= AUTO_MAX_MICRO_TOKENS or b == batch_size]
    larger = [b for b in reversed(sizes) if sequences % (b * gpus) == 0]
    smaller = [b for b in (batch_size // 2**j for j in range(1, 16)) if b >= 1 and sequences % (b * gpus) == 0]
    smaller = sorted(set(smaller), reverse=True)
    for candidates in (larger, smaller):
        for policy, k in auto_policies(model.config.n_layer):
            for b in candidates:
                peak = estimate(model, b, setup, (policy, k))["total"]
                if fits(peak, budget_bytes):
                    return Choice(policy, k, b, sequences // b, peak / 1e9, budget_bytes / 1e9)
    return None


class DoesNotFit(RunError):
    """A setting whose estimate does not fit the budget: str() is the one-line reason, .refused the setting."""

    def __init__(self, message, refused):
        super().__init__(message)
        self.refused = refused


def settle(model, cfg, budget, gpus=1, attention="flash"):
    """The Choice a run trains with, for cfg (train.py's config: activation_checkpointing,
    recompute_blocks, batch_size, gradient_accumulation_steps, dtype, strategy, hsdp_shard_size, the memory mode,
    ignore_memory_estimate) on a Budget per device: auto's choice, or the config's own setting when it
    fits. Otherwise DoesNotFit, whose message names the estimate, the budget and what would fit;
    with ignore_memory_estimate=True the setting comes back instead, with fits=False. When auto finds
    nothing, the refused setting is full checkpointing at the config's micro-batch (plan.py shows it)."""
    setup = Setup.of(cfg, gpus, attention)
    accumulation = cfg.gradient_accumulation_steps

    def auto():
        return choose_auto(model, cfg.batch_size, accumulation, budget.bytes, setup)

    def peak(batch_size, policy, k):
        return estimate(model, batch_size, setup, (policy, k))["total"]

    if cfg.activation_checkpointing == "auto":
        if choice := auto():
            return choice
        refused = Choice("full", -1, cfg.batch_size, accumulation, peak(cfg.batch_size, "full", -1) / 1e9,
                         budget.bytes / 1e9, False)
        message = (f"activation_checkpointing=auto: nothing fits the {budget.text()}: even full checkpointing at "
                   f"micro-batch 1 is estimated at {peak_text(peak(1, 'full', -1))}; a smaller model, or more GPUs "
                   f"with strategy=fsdp")
    else:
        policy, k = cfg.activation_checkpointing, cfg.recompute_blocks
        bytes_ = peak(cfg.batch_size, policy, k)
        refused = Choice(policy, k, cfg.batch_size, accumulation, bytes_ / 1e9, budget.bytes / 1e9, fits(bytes_, budget.bytes))
        if refused.fits:
            return refused
        choice = auto()
        instead = (f"activation_checkpointing=auto would run {choice.describe(model.config.n_layer)} "
                   f"({size_text(choice.peak_gb * 1e9)})" if choice else
                   "nothing fits at any recompute or micro-batch: a smaller model, or more GPUs with strategy=fsdp")
        message = f"the estimated peak is {peak_text(bytes_)} per device, over the {budget.text()}; {instead}"
    if cfg.ignore_memory_estimate:
        return refused
    raise DoesNotFit(f"{message}. To try anyway: ignore_memory_estimate=True", refused)


def settle_run(shapes, cfg, device, world_size, log, argv=()):
    """train.py's settle at start-up: the attention kernel this device runs (the math one's T x T matrices are
    priced, and warned of), the device's budget (after init_process_group: NCCL's buffers are a fixed cost),
    then settle() and the host's check (settle_host); logs the choice. Raises DoesNotFit, which names the
    plan.py command (train.py's argv) that shows the whole table."""
    attention = machine.attention_backend(device, torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32,
                                          cfg.n_head, cfg.n_embd // cfg.n_head, cfg.block_size)
    if attention == "math":
        log("warning: attention runs the math kernel, which keeps the T x T attention matrices (priced in the "
            "memory estimate below; slower too); see python scripts/check_env.py")
    budget = device_budget(device, cfg.memory_budget_gb)
    try:
        choice = settle(shapes, cfg, budget, world_size, attention)
        host = settle_host(shapes, cfg, choice, world_size, torch.device(device).type)  # offload, async staging, batches, loader
    except DoesNotFit as e:  # the same refusal, with where to see every setting's estimate
        raise DoesNotFit(f"{e}; see python scripts/plan.py {' '.join(argv)}", e.refused) from None
    if cfg.activation_checkpointing == "auto":
        log(f"auto: {choice.describe(cfg.n_layer)}")
    log(start_up_line(choice, budget))
    log(host)
    return choice


def start_up_line(choice, budget):
    """What train.py logs once it has settled: the estimate against the budget, whatever the policy."""
    line = f"memory: estimated peak {size_text(choice.peak_gb * 1e9)} of {budget.text()}"
    return line if choice.fits else f"{line}: does not fit, starting anyway (ignore_memory_estimate=True)"


# -----------------------------------------------------------------------------
# host memory: what the machine's RAM holds beside the GPUs, per machine (the busiest: rank 0's)

# Python, PyTorch and the GPU runtime's host side, per process: an allowance, not a measurement on a GPU
# (train.py on the tiny config, on a CPU, peaks at 0.41 GB RSS; the CUDA/ROCm libraries and context add more).
RUNTIME_HOST_BYTES = 2e9
PAGE_BYTES = 4096


def host_estimate(model, cfg, batch_size, world_size=1, processes=1, device_peak=0.0):
    """Bytes of host memory on rank 0's machine, by part, and their "total". processes: this machine's
    share of the world_size processes (torchrun's LOCAL_WORLD_SIZE); device_peak: a CPU run's training
    step (estimate()'s total), which lives in the same memory; 0 on a GPU.
    - optimizer_offload: each process's pinned fp32 master and moments (offload.host_bytes; DDP
      replicates them, so every process on the machine holds the whole model's);
    - checkpoint_staging (checkpoint_async): a .pt save's stager copies rank 0's whole saved state to
      pinned memory (a stager reused across saves keeps it for the rest of the run); a sharded save
      copies each process's shard, held while the write goes on;
    - batches: each process's micro-batch and the next one, as int64 arrays and their pinned copies
      (the pinned allocator rounds each to a power of two);
    - loader: the token bins' pages that reads touch, resident until bins.TokenBin re-maps its file
      (the page cache holds them anyway; reclaimable, but in RSS);
    - runtime: RUNTIME_HOST_BYTES per process;
    - training_step: device_peak per process with the fragmentation margin (a CPU run only)."""
    T = model.config.block_size
    numels = [p.numel() for p in model.parameters()]
    mode = optim.mode_of(vars(cfg))
    sharded = world_size > 1 and cfg.strategy in ("fsdp", "hsdp")
    saved = optim.checkpoint_bytes(sum(numels), mode)
    staging = 0.0
    if cfg.checkpoint_async and cfg.checkpoint_interval > 0:
        staging = processes * saved / world_size if sharded else saved
    batch = batch_size * (T + 1) * 8  # int64 windows of T + 1 tokens
    pages = -(-2 * (T + 1) // PAGE_BYTES) + 1  # a window's uint16 tokens, across at most this many pages
    parts = {
        "optimizer_offload": processes * offload.host_bytes(numels, optim.bytes_per_param(*mode)["weights"])
        if cfg.optimizer_offload else 0.0,
        "checkpoint_staging": staging,
        "batches": processes * 2 * (batch + offload.pinned_bytes(batch)),
        "loader": processes * bins.TokenBin.REMAP_EVERY * batch_size * pages * PAGE_BYTES,
        "runtime": processes * RUNTIME_HOST_BYTES,
        "training_step": processes * needed_bytes(device_peak) if device_peak else 0.0,
    }
    return {**parts, "total": sum(parts.values())}


def host_capacity():
    """(bytes, where from) of this machine's memory: the physical memory, or a smaller cgroup limit (a
    container's). Not MemAvailable: what other processes hold now is no property of the machine."""
    physical = machine.memory_capacity("cpu")
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
    except OSError:
        limit = "max"
    if limit.isdigit() and int(limit) < physical:
        return int(limit), "the container's memory limit"
    return physical, "the machine's memory"


HOST_PART_ADVICE = {"optimizer_offload": "optimizer_offload=False (or a leaner on-GPU mode: plan.py lists them)",
                    "checkpoint_staging": "checkpoint_async=False", "training_step": "a smaller model or batch_size"}


def host_problem(estimate, capacity=None):
    """The one rule for "host memory fits": None when estimate's total fits the machine's memory
    (host_capacity(), or capacity=(bytes, source)), else the refusal as one line naming the parts and
    what to change."""
    capacity, source = capacity or host_capacity()
    if estimate["total"] <= capacity:
        return None
    parts = sorted((k for k in estimate if k != "total" and estimate[k]), key=lambda k: -estimate[k])
    listed = ", ".join(f"{k.replace('_', ' ')} {size_text(estimate[k])}" for k in parts)
    advice = "; ".join(HOST_PART_ADVICE[k] for k in parts if k in HOST_PART_ADVICE) or "a machine with more memory"
    return (f"host memory: the estimate is {size_text(estimate['total'])} per machine ({listed}), over {source}, "
            f"{size_text(capacity)}: {advice}. To try anyway: ignore_memory_estimate=True")


def host_line(estimate, capacity=None):
    """The host estimate against the machine's memory, for the log and check_env.py."""
    capacity, source = capacity or host_capacity()
    return f"host memory: estimated {size_text(estimate['total'])} of {size_text(capacity)} ({source})"


def settle_host(model, cfg, choice, world_size, device_type, environ=os.environ, capacity=None):
    """train.py's host check, after settle(): the line to log, or DoesNotFit (host_problem's line) unless
    ignore_memory_estimate. This machine runs torchrun's LOCAL_WORLD_SIZE processes (1 without torchrun)."""
    estimate = host_estimate(model, cfg, choice.batch_size, world_size, int(environ.get("LOCAL_WORLD_SIZE", 1)),
                             0.0 if device_type == "cuda" else choice.peak_gb * 1e9)
    if problem := host_problem(estimate, capacity):
        if not cfg.ignore_memory_estimate:
            raise DoesNotFit(problem, choice)
        return f"{host_line(estimate, capacity)}: does not fit, starting anyway (ignore_memory_estimate=True)"
    return host_line(estimate, capacity)


# -----------------------------------------------------------------------------
# the simulation: a real training step on fake tensors

SIMULATED_CATEGORIES = ("weights", "grads", "optimizer", "activations", "other", "total")


def simulate(config, batch_size, setup=Setup(), micro_batches=2, fake=True):
    """Bytes at the peak of a training step as PyTorch's MemTracker counts them, by category
    (SIMULATED_CATEGORIES), for a GPTConfig with its checkpointing policy, on one device (the Setup's
    gpus, strategy and hsdp_shard_size do not apply).

    The step is train.py's: the AdamW moments already exist (optim.build makes them, as for
    train.py, before the first forward), then `micro_batches` forward and
    backward passes under bf16 autocast without its cast cache accumulate into fp32 gradients,
    then clipping and the optimizer step. The tensors are fake CPU tensors (shapes, dtypes, no
    storage), so 6.7B runs on a laptop. What the CPU stands in for: the optimizer is fused
    AdamW, as train.py runs on a GPU (it allocates no per-parameter temporaries; the CPU's
    default foreach AdamW would add a gradient-sized 26.6 GB at 6.7B), and attention is the CPU's
    flash kernel, which keeps what the GPU's flash kernel keeps (its output and logsumexp). The
    caching allocator's rounding and fragmentation are not simulated: that is FRAGMENTATION_MARGIN.
    fake=False runs the same step on real CPU tensors (the tests compare the two).

    optimizer and master_weights: the memory mode (optim.py), weights in their dtype. torchao's step
    cannot run on fake tensors (its quantization reads values), so its state is made as its first
    step makes it and its step is left out; estimate() adds the step's temporaries from a measurement
    on real tensors (optim.STEP_TEMP_BYTES). With offload there is no optimizer on the GPU at all.
    attention="math" runs the math kernel in place of the flash one ("efficient" and "cudnn" keep
    what flash keeps and are not on the CPU). fp8: the blocks' Linears converted as train.py converts
    them (precision.py); on the CPU torchao's Float8Linear ignores CPU autocast and returns fp32, so the
    simulation keeps fp32 matmul outputs where a GPU keeps bf16 ones and comes out above the estimate."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dtype, optimizer, master_weights, offload, attention, fp8 = dataclasses.astuple(setup)[:6]

    fused = optimizer == "adamw" and master_weights == "float32" and not offload
    steps = fused or optimizer == "muon"  # Muon's matmuls run on fake tensors, its AdamW half fused
    if not steps and not offload:  # on real tensors first: torchao computes its quantization tables once, from values
        optim.build(nn.Linear(64, 64), optimizer, 0.0, 1e-4, (0.9, 0.95), "cpu", master_weights)
    with FakeTensorMode() if fake else contextlib.nullcontext():
        model = GPT(config)
        model.train()
        if master_weights == "bfloat16":
            optim.use_bf16_weights(model)
        if fp8:
            precision.convert(model, fp8)
        if offload:  # its state and its step are in the host's memory
            optimizer = None
        else:  # as train.py builds it on a GPU (PyTorch's fused CPU AdamW stands in), its state made at build
            optimizer = optim.build(model, optimizer, 0.0, 1e-4, (0.9, 0.95), "cuda", master_weights)
        idx = torch.zeros(batch_size, config.block_size, dtype=torch.long)
        autocast = torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=False, enabled=dtype == "bfloat16")
        tracker = MemTracker()
        tracker.track_external(model, idx, *([optimizer] if optimizer else []))
        kernel = SDPBackend.MATH if attention == "math" else SDPBackend.FLASH_ATTENTION
        with tracker, sdpa_kernel(kernel):
            for _ in range(micro_batches):
                tracker.reset_mod_stats()  # per-module figures only; the peak is kept across micro-batches
                with autocast:
                    loss = model(idx, idx)[1]
                (loss / micro_batches).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if steps:
                optimizer.step()
            model.zero_grad(set_to_none=True)
        peak = next(iter(tracker.get_tracker_snapshot("peak").values()))
    by_name = {str(key.name if hasattr(key, "name") else key): value for key, value in peak.items()}
    result = {
        "weights": by_name.get("PARAM", 0) + by_name.get("BUFFER", 0),
        "grads": by_name.get("GRAD", 0),
        "optimizer": by_name.get("OPT", 0),
        "activations": by_name.get("ACT", 0),
    }
    result["other"] = by_name["Total"] - sum(result.values())  # gradients of activations, temporaries, inputs
    result["total"] = by_name["Total"]
    return result


# FLOPs: what MFU and HFU count. MFU (model FLOPs utilisation) is model FLOPs per second over the GPU's peak
# dense bf16 FLOPS (machine.py's peaks). Recomputed activations run the blocks' forward a second time: that work
# counts in HFU (hardware FLOPs utilisation), not in MFU, so MFU stays comparable across checkpointing policies.
def flops_per_token(n_params, n_layer, n_embd, block_size):
    """Model FLOPs to train on one token: 6N for the weights' forward and backward, plus
    12 * L * C * T for attention scores and their use (N without position embeddings)."""
    return 6 * n_params + 12 * n_layer * n_embd * block_size


def recompute_flops_per_token(block_params, n_recomputed, n_embd, block_size, policy="full"):
    """Extra FLOPs per token when n_recomputed blocks recompute in backward. 'full' runs their
    forward again: 2 per weight plus 4 * C * T for attention, per block. 'selective' recomputes no
    matmul and no attention, only element-wise ops (LayerNorm, GELU, adds, casts: a few FLOPs per
    element, under 0.1% of a block's); they count as 0 here, since what they cost is memory
    traffic, which FLOP counts do not measure."""
    if policy != "full":
        return 0
    return n_recomputed * (2 * block_params + 4 * n_embd * block_size)


def head_recompute_flops_per_token(vocab_size, n_embd):
    """The LM head's forward again in backward, whatever the checkpointing: the chunked loss keeps no logits
    (model.ChunkedCrossEntropy) and computes each chunk's again, 2 * V * C per token (~1% at GPT-3 6.7B)."""
    return 2 * vocab_size * n_embd


def utilisation(flops_per_tok, tokens_per_second, peak_tflops):
    """Fraction of peak reached; None when the peak is unknown."""
    if not peak_tflops:
        return None
    return flops_per_tok * tokens_per_second / (peak_tflops * 1e12)


class Utilisation:
    """A run's MFU and HFU per GPU from its tokens per second: model FLOPs (flops_per_token) and hardware
    FLOPs (those plus recompute) against the bf16 peak. config: the run's GPTConfig."""

    def __init__(self, n_params, block_params, config, peak_tflops, world_size):
        self.model = flops_per_token(n_params, config.n_layer, config.n_embd, config.block_size)
        blocks = recompute_flops_per_token(block_params, config.num_recomputed_blocks(), config.n_embd,
                                           config.block_size, config.activation_checkpointing)
        self.hardware = self.model + blocks + head_recompute_flops_per_token(config.vocab_size, config.n_embd)
        self.peak_tflops, self.world_size = peak_tflops, world_size
        self.recomputes = blocks > 0  # else hfu is mfu but for the head's ~1%, and the step line leaves it out

    def __call__(self, tokens_per_second):
        """(mfu, hfu), None each where the peak is unknown."""
        per_gpu = tokens_per_second / self.world_size
        return (utilisation(self.model, per_gpu, self.peak_tflops),
                utilisation(self.hardware, per_gpu, self.peak_tflops))
