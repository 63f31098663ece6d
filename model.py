"""
The GPT-2 / GPT-3 architecture in one file.

Pre-LayerNorm transformer blocks, fused-QKV causal self-attention through
scaled_dot_product_attention, a 4x GELU MLP, learned position embeddings and a
token embedding tied to the LM head: GPT-3 exactly, by default.

The internals of later models are settings (docs/architecture.md measures each): rotary positions
('rope', Su et al. 2021, in Llama's rotate-half layout), RMSNorm, a parameter-free RMSNorm on queries
and keys (qk_norm), ReLU^2 or SwiGLU in the MLP, an untied LM head and logit soft-capping (c*tanh(z/c),
inside the chunked head). With every one at its default the model is bit-identical to GPT-3's.

Activation checkpointing trades compute for memory, per block: 'full' keeps only a block's input and
recomputes its whole forward in backward (about a third more FLOPs); 'selective' keeps the outputs of the
matmuls and of the attention kernel and recomputes only the cheap element-wise ops (LayerNorm, GELU,
adds, casts). cost.py says which one a GPU's memory forces.

This file knows nothing about files, data or devices beyond what a forward pass needs.
"""
import math
from dataclasses import dataclass
from functools import partial

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

CHECKPOINTING_POLICIES = ("none", "selective", "full")
ACTIVATIONS = ("gelu", "gelu_tanh", "relu2", "swiglu")  # GPT-2 used gelu_tanh; relu2 is ReLU squared
POSITIONS = ("learned", "rope")
NORMS = ("layernorm", "rmsnorm")
NORM_EPS = 1e-5  # LayerNorm's, as GPT-2; RMSNorm's, as Llama 2 (rms_norm_eps)


def swiglu_hidden(n_embd):
    """SwiGLU's hidden width: its three C x H matrices match the 4x MLP's two (8 C^2) at H = 8C/3, rounded
    up to a multiple of 32 for the matmul tiles (4096 -> 10944, 0.2% over; 128 -> 352, 3% over)."""
    return 32 * math.ceil(8 * n_embd / 3 / 32)


def architecture_problem(c):
    """The first architecture setting of c (a GPTConfig or train.py's config) a model cannot be built
    with, as one line, or None: the one check GPTConfig and configurator.check both make."""
    for key, allowed in (("position", POSITIONS), ("norm", NORMS), ("activation", ACTIVATIONS)):
        if getattr(c, key) not in allowed:
            return f"{key} must be one of {', '.join(map(repr, allowed))}, got {getattr(c, key)!r}"
    if c.n_embd % c.n_head:
        return f"n_embd={c.n_embd} must be a multiple of n_head={c.n_head}"
    if c.position == "rope" and (c.n_embd // c.n_head) % 2:
        return (f"position='rope' rotates pairs of dimensions, so the head size n_embd/n_head must be even, "
                f"got {c.n_embd}/{c.n_head} = {c.n_embd // c.n_head}")
    if c.position == "rope" and c.rope_theta <= 0:
        return f"rope_theta must be more than 0, got {c.rope_theta}"
    if c.logit_softcap < 0:
        return f"logit_softcap must be 0 (off) or more, got {c.logit_softcap}"
    return None


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304  # GPT-2's 50257 padded up to a multiple of 64 for faster matmuls
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True  # bias in Linear and LayerNorm layers, as GPT-2; False is a little faster and as good
    activation: str = "gelu"  # the MLP's: exact 'gelu', GPT-2's 'gelu_tanh' (its weights need it), 'relu2', 'swiglu'
    position: str = "learned"  # 'learned' (a position embedding) or 'rope' (rotary, no table)
    rope_theta: float = 10000.0  # RoPE's base wavelength
    norm: str = "layernorm"  # or 'rmsnorm' (a gain and no bias, no mean subtracted)
    qk_norm: bool = False  # a parameter-free RMSNorm over each head's queries and keys before attention
    tie_embeddings: bool = True  # the LM head is the token embedding (GPT-2/3); False: a matrix of its own
    logit_softcap: float = 0.0  # > 0: logits are c*tanh(logits/c), as Gemma 2 and modded-nanogpt
    # Rows of the embedding that are tokens, when vocab_size pads past them (imported GPT-2: 50257 of
    # 50304): the logits of the padding are -inf, so no loss or sample sees them. 0: every row is a token.
    n_tokens: int = 0
    activation_checkpointing: str = "none"  # one of CHECKPOINTING_POLICIES
    # How many blocks the policy applies to, counted from the first (blocks 0..k-1); -1 means all
    # of them. Blocks past k keep all their activations: more memory, no recompute.
    recompute_blocks: int = -1

    def __post_init__(self):
        if problem := architecture_problem(self):
            raise ValueError(problem)
        if self.activation_checkpointing not in CHECKPOINTING_POLICIES:
            raise ValueError(f"activation_checkpointing must be one of {', '.join(CHECKPOINTING_POLICIES)}, "
                             f"got {self.activation_checkpointing!r}")

    def mlp_hidden(self):
        """The MLP's hidden width: 4C, or swiglu_hidden(C) for SwiGLU."""
        return swiglu_hidden(self.n_embd) if self.activation == "swiglu" else 4 * self.n_embd

    def num_recomputed_blocks(self):
        """How many blocks run (part of) their forward again in backward."""
        if self.activation_checkpointing == "none":
            return 0
        if self.recompute_blocks < 0:
            return self.n_layer
        return min(self.recompute_blocks, self.n_layer)

    def block_checkpointing(self, i):
        """The policy block i runs under."""
        return self.activation_checkpointing if i < self.num_recomputed_blocks() else "none"


# What a model's weights fix: a checkpoint or imported weights set these, and a run continuing them keeps them.
ARCHITECTURE_KEYS = ("n_layer", "n_head", "n_embd", "block_size", "vocab_size", "bias", "activation", "position",
                     "rope_theta", "norm", "qk_norm", "tie_embeddings", "logit_softcap")


def model_config(cfg=None, saved_args=None, **fields):
    """The one way a run's settings become a GPTConfig (train.py, plan.py, bench.py, hf.py, sample.py).
    The architecture (and n_tokens) comes from saved_args, a checkpoint's or imported weights' model_args,
    where given, else from cfg; dropout and checkpointing from cfg ('auto' builds as 'none' until
    cost.settle picks a policy); fields override the rest. cfg=None: GPTConfig's defaults."""
    args = {k: getattr(cfg, k) for k in ARCHITECTURE_KEYS} if cfg is not None else {}
    if saved_args is not None:
        args = {k: saved_args.get(k, getattr(GPTConfig, k)) for k in (*ARCHITECTURE_KEYS, "n_tokens")}
    if cfg is not None:
        policy = cfg.activation_checkpointing
        args.update(dropout=cfg.dropout, activation_checkpointing="none" if policy == "auto" else policy,
                    recompute_blocks=cfg.recompute_blocks)
    return GPTConfig(**{**args, **fields})


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias, or RMSNorm (kind='rmsnorm': a gain, never a bias): torch's
    F.layer_norm and F.rms_norm behind one module, so both cast their gains the same way."""

    def __init__(self, ndim, bias, kind="layernorm"):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias and kind == "layernorm" else None
        self.kind = kind

    def forward(self, x):
        # in x's dtype: under FSDP's bf16 gathers the residual stream stays fp32 (trainer/parallel.py), and
        # CPU autocast, unlike CUDA's, does not upcast LayerNorm's weights itself; a no-op when they agree
        if self.kind == "rmsnorm":
            return F.rms_norm(x, self.weight.shape, self.weight.to(x.dtype), NORM_EPS)
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.layer_norm(x, self.weight.shape, self.weight.to(x.dtype), bias, NORM_EPS)


def rope_angles(positions, head_size, theta):
    """(cos, sin) of RoPE's angles at positions (T,), each (T, head_size) in fp32: pair i of a head, the
    dimensions i and i + head_size/2 (Llama's rotate-half layout), turns by position / theta^(2i/head_size)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_size, 2, device=positions.device).float() / head_size)
    angles = positions.float()[:, None] * inv_freq[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):
    """x (B, heads, T, head_size) turned by RoPE's angles (cos, sin: (T, head_size)), in x's dtype."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat((-x2, x1), dim=-1) * sin.to(x.dtype)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.qk_norm = config.qk_norm
        self.fp32_attention = False  # under bf16 autocast: set for the CPU's runs (precision.fp32_attention_on_cpu)

    def forward(self, x, kv_cache=None, rope=None):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.qk_norm:  # before the rotation, which keeps a vector's norm, so the order does not matter
            q, k = F.rms_norm(q, (q.size(-1),), eps=NORM_EPS), F.rms_norm(k, (k.size(-1),), eps=NORM_EPS)
        if rope is not None:  # keys enter the cache rotated at their own positions
            q, k = rotate(q, *rope), rotate(k, *rope)
        if kv_cache is not None:
            k, v = kv_cache.append(k, v)
        # With a cache, the T new queries sit at the end of a longer key sequence: query i may
        # see every cached key plus new keys up to i, which is_causal (top-left aligned) would
        # get wrong when T > 1, so the mask is explicit then.
        past = k.size(2) - T
        if past == 0:
            mask, causal = None, True
        elif T == 1:
            mask, causal = None, False
        else:
            mask = torch.ones(T, k.size(2), dtype=torch.bool, device=x.device).tril(diagonal=past)
            causal = False
        dropout = self.dropout if self.training else 0.0
        if self.fp32_attention and q.dtype == torch.bfloat16:
            with torch.autocast(x.device.type, enabled=False):  # autocast would cast q, k, v back to bf16
                y = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                   is_causal=causal, dropout_p=dropout).to(q.dtype)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, dropout_p=dropout)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    """c_proj(act(c_fc(x))); SwiGLU: c_proj(silu(c_gate(x)) * c_fc(x)), c_gate a third matrix (Llama's gate_proj)."""

    def __init__(self, config):
        super().__init__()
        hidden = config.mlp_hidden()
        self.c_fc = nn.Linear(config.n_embd, hidden, bias=config.bias)
        self.c_gate = nn.Linear(config.n_embd, hidden, bias=config.bias) if config.activation == "swiglu" else None
        self.c_proj = nn.Linear(hidden, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.activation = config.activation

    def forward(self, x):
        h = self.c_fc(x)
        if self.activation == "swiglu":
            h = F.silu(self.c_gate(x)) * h
        elif self.activation == "relu2":
            h = F.relu(h).square()
        else:
            h = F.gelu(h, approximate="tanh" if self.activation == "gelu_tanh" else "none")
        return self.dropout(self.c_proj(h))


# The attention kernels' forward ops: their outputs (with the logsumexp, and the RNG state of
# dropout) are what the kernel's backward needs, and recomputing them is the costliest part of a block.
_ATTENTION_OPS = {getattr(torch.ops.aten, name).default for name in (
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu")
    if hasattr(torch.ops.aten, name)}
_MATMUL_OPS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default}


def selective_policy(mlp_hidden):
    """What 'selective' keeps: the outputs of c_attn, the attention kernel, attention's c_proj and
    c_fc (and SwiGLU's c_gate); everything else (LayerNorm or RMSNorm, the QK-norm, RoPE's rotation,
    GELU, ReLU^2 or SiLU and its product, residual adds, bf16 casts of weights and inputs) is
    recomputed: almost no FLOPs, a few percent of step time in memory traffic. The MLP's c_proj (the one
    matmul reading the mlp_hidden-wide hidden) is not kept: backward needs only its input, and its output
    only feeds the residual add, which backward does not need either."""
    def policy(ctx, op, *args, **kwargs):
        if op in _ATTENTION_OPS:
            return CheckpointPolicy.MUST_SAVE
        if op in _MATMUL_OPS and args[-1].shape[0] != mlp_hidden:  # args[-1]: the (in, out) weight
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class Block(nn.Module):
    def __init__(self, config, checkpointing="none"):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, config.bias, config.norm)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, config.bias, config.norm)
        self.mlp = MLP(config)
        self.checkpointing = checkpointing
        self.policy = selective_policy(config.mlp_hidden())

    def forward(self, x, kv_cache=None, rope=None):
        # The checkpoint sits inside forward so that torch.compile (per block) traces it too.
        # preserve_rng_state (the default) replays dropout masks exactly in the recompute.
        if self.checkpointing == "none" or not (self.training and torch.is_grad_enabled()):
            return self._forward(x, kv_cache, rope)
        if self.checkpointing == "full":  # only the block's input is kept
            return checkpoint(self._forward, x, None, rope, use_reentrant=False)
        return checkpoint(self._forward, x, None, rope, use_reentrant=False,
                          context_fn=partial(create_selective_checkpoint_contexts, self.policy))

    def _forward(self, x, kv_cache=None, rope=None):
        x = x + self.attn(self.ln_1(x), kv_cache, rope)
        return x + self.mlp(self.ln_2(x))


# -----------------------------------------------------------------------------
# the LM head's loss, a chunk of rows at a time
#
# At 6.7B a micro-batch of 4 x 2048 tokens has 8192 x 50304 = 412M logits: 1.65 GB per fp32 copy, and
# F.cross_entropy on the whole (B*T, V) holds three of them at the start of backward (log-probabilities,
# their gradient, the upcast's gradient: 4.9 GB). Here only one chunk of rows exists at a time.
LOSS_CHUNK_ROWS = 1024  # 1024 x 50304 logits: 0.2 GB per fp32 copy; M=1024 still fills a GPU's GEMM tiles


def mask_padding(logits, n_tokens):
    """The logits of the vocabulary's padding rows (past n_tokens; 0: none) at -inf: they are not tokens."""
    if 0 < n_tokens < logits.size(-1):
        logits[..., n_tokens:] = float("-inf")
    return logits


def softcap(logits, cap):
    """cap * tanh(logits / cap): every logit within (-cap, cap); cap 0: the logits unchanged. In place where
    autograd keeps no history of them (the chunked head's fresh chunks): no (rows, V) temporaries."""
    if cap <= 0:
        return logits
    if logits.requires_grad:
        return cap * torch.tanh(logits / cap)
    return logits.div_(cap).tanh_().mul_(cap)


def _chunk_logits(x, weight, n_tokens, cap=0.0):
    """fp32 logits of some rows, computed in x's dtype (bf16 under autocast) as nn.Linear would, soft-capped."""
    return mask_padding(softcap((x @ weight.t()).float(), cap), n_tokens)


class ChunkedCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of x @ weight^T against targets (ignore_index=-1), chunk_rows rows at a
    time. Forward keeps only x and weight in the compute dtype (what nn.Linear keeps for its own
    backward) and the targets; backward computes each chunk's logits again (a third more head
    FLOPs) to form (softmax - onehot) / count, and from it the chunk's rows of grad_x and its share
    of grad_weight, summed in fp32 across chunks. Plain autograd: DDP's and FSDP's hooks see an
    ordinary gradient of the (tied) weight. With a soft-cap c, the gradient also passes through
    c*tanh(z/c), whose derivative is 1 - tanh(z/c)^2."""

    @staticmethod
    def forward(ctx, x, weight, targets, dtype, n_tokens, chunk_rows, cap=0.0):
        x_c, w_c = x.to(dtype), weight.to(dtype)  # the casts autocast's F.linear would make
        total = sum(F.cross_entropy(_chunk_logits(x_c[start:start + chunk_rows], w_c, n_tokens, cap),
                                    targets[start:start + chunk_rows], ignore_index=-1, reduction="sum")
                    for start in range(0, len(x_c), chunk_rows))
        count = (targets != -1).sum()  # a tensor: no host sync
        ctx.save_for_backward(x_c, w_c, targets, count)
        ctx.n_tokens, ctx.chunk_rows, ctx.dtypes, ctx.cap = n_tokens, chunk_rows, (x.dtype, weight.dtype), cap
        return total / count

    @staticmethod
    def backward(ctx, grad_loss):
        x_c, w_c, targets, count = ctx.saved_tensors
        grad_x = torch.empty_like(x_c)
        grad_w = torch.zeros_like(w_c, dtype=torch.float32)  # 4 B x V x C: 0.8 GB at 6.7B
        scale = grad_loss / count
        for start in range(0, len(x_c), ctx.chunk_rows):
            rows = slice(start, start + ctx.chunk_rows)
            t = targets[rows]
            g = _chunk_logits(x_c[rows], w_c, 0, ctx.cap)
            slope = (g / ctx.cap).square_().neg_().add_(1) if ctx.cap > 0 else None  # 1 - tanh^2, before padding's -inf
            g = mask_padding(g, ctx.n_tokens).softmax(-1)
            g[torch.arange(len(t), device=t.device), t.clamp(min=0)] -= 1  # softmax - onehot
            if slope is not None:
                g.mul_(slope)
            g = g.mul_((scale * (t != -1))[:, None]).to(w_c.dtype)  # ignored rows get no gradient
            grad_x[rows] = g @ w_c
            grad_w += g.t() @ x_c[rows]  # a (V, C) product in w_c's dtype, added in fp32
        return grad_x.to(ctx.dtypes[0]), grad_w.to(ctx.dtypes[1]), None, None, None, None, None


def lm_head_loss(x, weight, targets, n_tokens, chunk_rows, cap=0.0):
    """F.cross_entropy(softcap(x @ weight^T, cap), targets, ignore_index=-1) with the logits of padding rows
    past n_tokens at -inf, without the (B*T, V) logits: x (..., C), targets (...). Computed in autocast's
    dtype when it is on (as nn.Linear would be), else in the weight's."""
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    return ChunkedCrossEntropy.apply(x.reshape(-1, x.size(-1)), weight, targets.reshape(-1), dtype, n_tokens,
                                     chunk_rows, cap)


@torch.no_grad()
def lm_head_scores(x, weight, targets, n_tokens, chunk_rows, cap=0.0):
    """For scoring, without gradients: each position's log-probability of its target under x @ weight^T
    (padding rows past n_tokens left out of the softmax) and whether the target is the argmax, as two
    tensors shaped like targets; a target of -1 scores 0 and True. Computed chunk_rows rows of logits at a
    time, in autocast's dtype as lm_head_loss is: never the whole (B*T, V) logits, which at 32 windows of
    2048 tokens and 6.7B's vocabulary would be 6.6 GB in bf16 and twice that for each fp32 copy."""
    device = x.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else weight.dtype
    x_c, w_c, flat = x.reshape(-1, x.size(-1)).to(dtype), weight.to(dtype), targets.reshape(-1)
    logprobs = torch.zeros(flat.shape, dtype=torch.float32, device=x.device)
    hits = torch.ones(flat.shape, dtype=torch.bool, device=x.device)
    for start in range(0, len(flat), chunk_rows):
        rows, t = slice(start, start + chunk_rows), flat[start:start + chunk_rows]
        logits, scored = _chunk_logits(x_c[rows], w_c, n_tokens, cap), t != -1
        picked = logits.gather(-1, t.clamp(min=0)[:, None])[:, 0] - logits.logsumexp(-1)
        logprobs[rows] = torch.where(scored, picked, 0.0)
        hits[rows] = (logits.argmax(-1) == t) | ~scored
    return logprobs.view(targets.shape), hits.view(targets.shape)


class KVCache:
    """Keys and values of one layer for the tokens seen so far, so generation runs one new token per step.
    They are written in place into buffers that double when full (up to the context, limit): a step copies
    one token's keys, where concatenating copied the whole cache every step (a fifth of a decode step's
    time on the CPU, scripts/bench/bench_sample.py). limit: the model's block_size, the most it holds."""

    def __init__(self, limit):
        self.k = self.v = None
        self.length, self.limit = 0, limit

    def append(self, k, v):
        end = self.length + k.size(2)
        if self.k is None or end > self.k.size(2):
            size = max(end, min(self.limit, 2 * end))
            grown = [t.new_empty(*t.shape[:2], size, t.size(3)) for t in (k, v)]
            if self.k is not None:
                grown[0][:, :, :self.length], grown[1][:, :, :self.length] = self.k[:, :, :self.length], \
                    self.v[:, :, :self.length]
            self.k, self.v = grown
        self.k[:, :, self.length:end], self.v[:, :, self.length:end] = k, v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]

    def __len__(self):
        return self.length


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            **({"wpe": nn.Embedding(config.block_size, config.n_embd)} if config.position == "learned" else {}),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config, config.block_checkpointing(i)) for i in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, config.bias, config.norm),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.transformer.wte.weight = self.lm_head.weight  # weight tying: one matrix, counted once
        if self.lm_head.weight.is_meta:  # shapes only (cost.py, plan.py): no values to draw, ~0.3 s saved at 6.7B
            return
        self.apply(self._init_weights)
        # GPT-2: residual projections scaled by 1/sqrt(2*n_layer), since each block adds two of them
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding=True):
        """Parameters counted once (tied weights too). non_embedding=True leaves out the position
        embeddings, as nanoGPT does (RoPE has none), and the token embedding when it is not also the LM
        head: what is left is every matmul's weight, what 6N FLOPs a token counts."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding and "wpe" in self.transformer:
            n -= self.transformer.wpe.weight.numel()
        if non_embedding and not self.config.tie_embeddings:
            n -= self.transformer.wte.weight.numel()
        return n

    def forward(self, idx, targets=None, kv_caches=None, every_position=False, scores=False, n_tokens=None):
        """idx (B, T) token ids → (logits, loss). With targets: (None, the mean cross-entropy), from a
        head that never holds the (B, T, vocab) logits whole (ChunkedCrossEntropy); with scores=True
        (evaluation) instead (None, (each target's log-probability, whether it is the argmax)), from the
        same chunked head (lm_head_scores), its softmax over the first n_tokens rows (default
        config.n_tokens; an encoding may know them where an older checkpoint's config does not). Without:
        (the last position's logits, None), or every position's with every_position.
        kv_caches (one KVCache per block) is for generation: idx then holds only the new tokens."""
        B, T = idx.size()
        past = len(kv_caches[0]) if kv_caches is not None else 0
        if past + T > self.config.block_size:
            raise ValueError(f"sequence of length {past + T} exceeds block_size {self.config.block_size}")
        pos = torch.arange(past, past + T, dtype=torch.long, device=idx.device)
        x, rope = self.transformer.wte(idx), None
        if self.config.position == "rope":
            rope = rope_angles(pos, self.config.n_embd // self.config.n_head, self.config.rope_theta)
        else:
            x = x + self.transformer.wpe(pos)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x = block(x, kv_caches[i] if kv_caches is not None else None, rope)
        x = self.transformer.ln_f(x)
        cap = self.config.logit_softcap
        if targets is not None:
            head = lm_head_scores if scores else lm_head_loss
            tokens = self.config.n_tokens if n_tokens is None else n_tokens
            return None, head(x, self.lm_head.weight, targets, tokens, LOSS_CHUNK_ROWS, cap)
        logits = softcap(self.lm_head(x if every_position else x[:, [-1], :]), cap)
        return mask_padding(logits, self.config.n_tokens), None

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None, use_cache=True):
        """Continue idx (B, T) by max_new_tokens sampled tokens. With use_cache each step feeds
        only the new token through the model; once the context reaches block_size the cache is
        rebuilt from the last block_size tokens (a sliding window)."""
        caches = None
        fed = 0  # how many tokens of idx the caches hold
        for _ in range(max_new_tokens):
            if use_cache and caches is not None and idx.size(1) <= self.config.block_size:
                logits, _ = self(idx[:, fed:], kv_caches=caches)
            else:
                window = idx[:, -self.config.block_size:]
                caches = [KVCache(self.config.block_size) for _ in self.transformer.h] if use_cache else None
                logits, _ = self(window, kv_caches=caches)
            fed = idx.size(1)
            logits = logits[:, -1, :] / max(temperature, 1e-8)
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            idx_next = torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx
