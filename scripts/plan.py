"""
What a run will cost before you rent the hardware: parameters, tokens, FLOPs, memory per GPU,
whether it fits, days and dollars.

    python scripts/plan.py config/train_gpt3_6b.py [--key=value ...]
                           [--gpu mi300x] [--mfu 0.4] [--price_per_hour 2] [--gpus 1] [--json]

The config and its --key=value overrides are resolved by configurator.py, exactly as train.py
resolves them; the model is built on the meta device (shapes, no storage), so a 6.7B plan takes
seconds on a laptop. Memory counts bytes per tensor as derived in the comments below, for bf16
autocast over fp32 weights with fused AdamW, as train.py trains. GB = 1e9 bytes, as GPU vendors count.
"""
import argparse
import json
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import configurator  # noqa: E402  (needs the repo root on sys.path first)
import hardware  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402

DEFAULT_GPU = "mi300x"
# Allocator fragmentation grows with what is allocated (the caching allocator rounds and splits
# blocks; 5% is typical of long runs); the CUDA/ROCm context and the BLAS and attention
# workspaces are about a fixed 1 GB whatever the model.
MARGIN_FRACTION = 0.05
CONTEXT_BYTES = 1e9
LONG_RUN_DAYS = 365
GPUS_PER_NODE = 8


def build_meta_model(cfg):
    """The model train.py builds for cfg, on the meta device: every shape, no memory, no init time."""
    gptconf = GPTConfig(n_layer=cfg.n_layer, n_head=cfg.n_head, n_embd=cfg.n_embd, block_size=cfg.block_size,
                        vocab_size=cfg.vocab_size, bias=cfg.bias, dropout=cfg.dropout,
                        gradient_checkpointing=cfg.gradient_checkpointing, recompute_blocks=cfg.recompute_blocks)
    with torch.device("meta"):
        return GPT(gptconf)


def block_params(model):
    return sum(p.numel() for p in model.transformer.h[0].parameters())


def autocast_copy_bytes(model, n_recomputed):
    """bf16 weight casts alive at the peak (2 B each): the matmul weights (autocast casts nothing
    else; LayerNorm stays fp32 and the embedding lookup is no matmul) of the blocks
    blocks_with_full_activations counts, at most all of them, and of the head (the tied embedding)."""
    config = model.config
    per_block = sum(m.weight.numel() for m in model.transformer.h[0].modules() if isinstance(m, nn.Linear))
    blocks = min(config.n_layer, blocks_with_full_activations(config.n_layer, n_recomputed))
    return 2 * (blocks * per_block + model.lm_head.weight.numel())


def checkpoint_bytes(n_params):
    """A saved checkpoint: fp32 weights (4 B/param) and AdamW's two fp32 moments (8 B/param);
    the sampler, RNG and config add kilobytes."""
    return 12 * n_params


# -----------------------------------------------------------------------------
# activations: what autograd keeps between forward and backward, for one micro-batch of
# B sequences of T tokens, C wide. Under bf16 autocast the residual stream stays fp32 (an fp32
# embedding plus bf16 block outputs promotes to fp32) while matmul inputs and outputs are bf16.
# tests/test_plan.py counts the real saved tensors with saved_tensors_hooks and checks these.

def block_activation_bytes(B, T, C, n_head, act_bytes):
    """One transformer block without checkpointing, flash or memory-efficient attention:
    - fp32 residual stream: the inputs of ln_1 and ln_2, 2 x 4 B per BTC element
    - act_bytes (2 in bf16): c_attn input 1, q/k/v (views of one c_attn output) 3, the attention
      output 1 (it is also c_proj's input: flash/efficient return it in (B, T, head, dim) layout,
      so model.py's .contiguous() copies nothing), c_fc input 1, GELU input 4, MLP c_proj input 4:
      14 elements per BTC
    - LayerNorm mean and rstd (2 x 2 x 4 B per token), attention logsumexp (4 B per token and head)
    These kernels keep no T x T attention matrix; the math kernel does (math_attention_bytes)."""
    return (8 + 14 * act_bytes) * B * T * C + 16 * B * T + 4 * B * n_head * T


def math_attention_bytes(B, T, n_head):
    """Extra per block when SDPA falls back to the math kernel: it upcasts to fp32 and keeps the
    softmax probabilities, B x n_head x T x T, twice (measured with PyTorch 2.13)."""
    return 8 * B * n_head * T * T


def blocks_with_full_activations(n_layer, n_recomputed):
    """Blocks whose activations coexist at the peak of backward: those not recomputed, the block
    being recomputed (if any), plus one more for the gradients of the block being differentiated
    (an estimate: its activation gradients never outsize its activations)."""
    return n_layer - n_recomputed + (1 if n_recomputed else 0) + 1


def activation_element_bytes(cfg):
    """Bytes per element of the matmul inputs and outputs: bf16 under autocast, else fp32."""
    return 2 if cfg.dtype == "bfloat16" else 4


def activation_bytes(config, B, n_recomputed, act_bytes):
    T, C = config.block_size, config.n_embd
    full = blocks_with_full_activations(config.n_layer, n_recomputed) * block_activation_bytes(
        B, T, C, config.n_head, act_bytes)
    block_inputs = n_recomputed * 4 * B * T * C  # a checkpointed block keeps only its fp32 input
    head = (4 + act_bytes) * B * T * C + 8 * B * T  # ln_f input (fp32) and stats, lm_head input
    return full + block_inputs + head


def logits_bytes(B, T, V):
    """Logits and loss at their peak. Forward: logits (bf16, 2 B), their fp32 upcast for
    cross-entropy (4 B) and the fp32 log-probabilities kept for backward (4 B): 10 B per
    B*T*V element. Backward: the log-probabilities with their gradient and the upcast's gradient
    (3 x 4 B): 12 B, the peak. In fp32 the same 12 B."""
    return 12 * B * T * V


def memory_breakdown(model, cfg, batch_size, gpus, strategy):
    """Bytes per GPU at the peak of a step, by what holds them (the peak of forward, with every
    bf16 copy cached, and of backward, with the recompute, are added: a slight overestimate).

    DDP replicates weights, gradients and moments on every GPU (this assumes
    gradient_as_bucket_view=True; otherwise DDP's buckets are a second 4 B/param copy of the
    gradients). FSDP2 shards all three N ways. Each GPU runs the same micro-batch either way."""
    config = model.config
    n_params = model.get_num_params(non_embedding=False)  # every trained weight, wpe included
    shards = gpus if gpus > 1 and strategy == "fsdp" else 1
    bf16 = cfg.dtype == "bfloat16"
    n_recomputed = config.num_recomputed_blocks()
    m = {
        "weights": 4 * n_params / shards,  # fp32 master weights
        "grads": 4 * n_params / shards,  # fp32, accumulated across micro-batches
        "optimizer": 8 * n_params / shards,  # AdamW's exp_avg and exp_avg_sq, fp32
        # train.py runs autocast without its cast cache, so a weight's bf16 cast lives only while
        # autograd keeps it for backward: in every block that keeps its activations, in the one
        # being recomputed, and in the head. Under FSDP they are casts of the gathered weights,
        # so full size on every GPU, not 1/N.
        "autocast_bf16_weights": autocast_copy_bytes(model, n_recomputed) if bf16 else 0,
        # FSDP2 gathers fp32 weights per block: the root's own (embedding = head, ln_f) for the
        # whole step, the block running and the one prefetched, and in backward one block's
        # unsharded gradient before its reduce-scatter.
        "fsdp_unsharded": 4 * (n_params - config.n_layer * block_params(model) + 3 * block_params(model))
        if shards > 1 else 0,
        "activations": activation_bytes(config, batch_size, n_recomputed, activation_element_bytes(cfg)),
        "logits": logits_bytes(batch_size, config.block_size, config.vocab_size),
    }
    subtotal = sum(m.values())
    m["margin"] = MARGIN_FRACTION * subtotal + CONTEXT_BYTES
    m["total"] = subtotal + m["margin"]
    return m


# -----------------------------------------------------------------------------
# the plan

def make_plan(cfg, gpu_key, mfu, price_per_hour, gpus):
    """Every figure of the plan as a dict (the --json output); sizes in GB."""
    model = build_meta_model(cfg)
    config, gpu = model.config, hardware.GPUS[gpu_key]
    n_recomputed = config.num_recomputed_blocks()
    tokens_per_iter = cfg.batch_size * cfg.gradient_accumulation_steps * config.block_size
    flops = hardware.flops_per_token(model.get_num_params(), config.n_layer, config.n_embd, config.block_size)
    recompute = hardware.recompute_flops_per_token(block_params(model), n_recomputed, config.n_embd, config.block_size)
    # MFU is defined on model FLOPs; the recompute is extra work the GPU does at the same time (HFU)
    seconds_per_iter = tokens_per_iter * flops / (gpus * mfu * gpu.peak_tflops * 1e12)
    days = cfg.max_iters * seconds_per_iter / 86400
    memory = memory_breakdown(model, cfg, cfg.batch_size, gpus, cfg.strategy)
    act_bytes = activation_element_bytes(cfg)
    n_full = blocks_with_full_activations(config.n_layer, n_recomputed)
    plan = {
        "params": model.get_num_params(non_embedding=False),
        "params_without_position_embeddings": model.get_num_params(),
        "tokens_per_iter": tokens_per_iter,
        "max_iters": cfg.max_iters,
        "total_tokens": cfg.max_iters * tokens_per_iter,
        "flops_per_token": flops,
        "recompute_flops_per_token": recompute,
        "recomputed_blocks": n_recomputed,
        "total_flops": flops * cfg.max_iters * tokens_per_iter,
        "gpu": gpu_key,
        "gpu_name": gpu.name,
        "gpu_memory_gb": gpu.capacity_gb,
        "gpus": gpus,
        "strategy": cfg.strategy if gpus > 1 else "single",
        "memory_gb": {k: v / 1e9 for k, v in memory.items()},
        "fits": memory["total"] <= gpu.capacity_gb * 1e9,
        "peak_tflops": gpu.peak_tflops,
        "mfu": mfu,
        "hfu": mfu * (flops + recompute) / flops,
        "seconds_per_iter": seconds_per_iter,
        "tokens_per_second": tokens_per_iter / seconds_per_iter,
        "days": days,
        "price_per_hour": price_per_hour,
        "cost_usd": days * 24 * price_per_hour * gpus,
        "checkpoint_gb": checkpoint_bytes(model.get_num_params(non_embedding=False)) / 1e9,
        "keep_last_n": cfg.keep_last_n,
        "math_attention_extra_gb": n_full * math_attention_bytes(cfg.batch_size, config.block_size,
                                                                 config.n_head) / 1e9,
    }
    plan["memory_gb"]["activations_no_checkpointing"] = activation_bytes(config, cfg.batch_size, 0, act_bytes) / 1e9
    plan["memory_gb"]["activations_full_checkpointing"] = activation_bytes(
        config, cfg.batch_size, config.n_layer, act_bytes) / 1e9
    plan["suggestions"] = suggestions(plan, model, cfg)
    return plan


def suggestions(plan, model, cfg):
    """What to change when the run does not fit the GPU or takes longer than a year."""
    out = []
    gpus, limit = plan["gpus"], plan["gpu_memory_gb"] * 1e9
    if not plan["fits"]:
        if not cfg.gradient_checkpointing:
            saved = plan["memory_gb"]["activations"] - plan["memory_gb"]["activations_full_checkpointing"]
            extra = hardware.recompute_flops_per_token(block_params(model), cfg.n_layer, cfg.n_embd,
                                                       cfg.block_size) / plan["flops_per_token"]
            out.append(f"turn on --gradient_checkpointing=True: {saved:.1f} GB less activation memory "
                       f"for {extra:.0%} more compute (each block's forward runs twice)")
        smaller = [b for b in range(cfg.batch_size - 1, 0, -1)
                   if memory_breakdown(model, cfg, b, gpus, cfg.strategy)["total"] <= limit]
        if smaller:
            b = smaller[0]
            steps = math.ceil(cfg.batch_size * cfg.gradient_accumulation_steps / b)
            out.append(f"a smaller micro-batch: --batch_size={b} --gradient_accumulation_steps={steps} "
                       f"(about the same tokens per iteration)")
        for n in (2, 4, 8, 16, 32, 64):
            current = n == gpus and cfg.strategy == "fsdp"  # the plan that does not fit
            if n >= gpus and not current and memory_breakdown(model, cfg, cfg.batch_size, n, "fsdp")["total"] <= limit:
                out.append(f"shard over {n} GPUs with FSDP: {torchrun(n)} train.py CONFIG --strategy=fsdp")
                break
        bigger = [key for key, gpu in hardware.GPUS.items() if plan["memory_gb"]["total"] <= gpu.capacity_gb]
        if bigger:
            out.append(f"a GPU with more memory: --gpu {' / '.join(bigger)}")
    if plan["days"] > LONG_RUN_DAYS:
        n = 2 ** math.ceil(math.log2(plan["days"] * gpus / LONG_RUN_DAYS))
        out.append(f"more GPUs: {torchrun(n)} train.py CONFIG takes {plan['days'] * gpus / n:,.0f} days "
                   f"at the same MFU (the cost stays ${plan['cost_usd']:,.0f}: the GPU-hours do not shrink)")
        iters = int(LONG_RUN_DAYS * 86400 / plan["seconds_per_iter"])
        out.append(f"fewer tokens: --max_iters={iters} --lr_decay_iters={iters} trains "
                   f"{iters * plan['tokens_per_iter'] / 1e9:,.1f}B tokens in a year")
    if out:
        out.append("a smaller model (config/train_gpt3_*.py): memory grows with the parameters, FLOPs with "
                   "parameters x tokens")
    return out


def torchrun(n):
    nodes = math.ceil(n / GPUS_PER_NODE)
    if nodes == 1:
        return f"torchrun --standalone --nproc_per_node={n}"
    return f"torchrun --nnodes={nodes} --nproc_per_node={GPUS_PER_NODE} (with a rendezvous)"


# -----------------------------------------------------------------------------
# output

MEMORY_ROWS = [
    ("weights", "weights (fp32 master)", "4 B/param"),
    ("grads", "gradients (fp32)", "4 B/param"),
    ("optimizer", "AdamW moments (fp32)", "8 B/param"),
    ("autocast_bf16_weights", "autocast bf16 weight copies", "2 B per matmul weight autograd keeps for backward"),
    ("fsdp_unsharded", "FSDP gathered weights", "the root's and ~2 blocks' fp32 weights, 1 block's gradient"),
    ("activations", "activations", None),
    ("logits", "logits and loss", "12 B per token x vocab (fp32 log-probs and gradients)"),
    ("margin", "margin", f"{MARGIN_FRACTION:.0%} for allocator fragmentation + 1 GB context and workspaces"),
]


def report(plan, cfg, config_args):
    """The plan as text for a person."""
    mem, n_layer = plan["memory_gb"], cfg.n_layer
    k = plan["recomputed_blocks"]
    if k:
        act_note = f"checkpointing {k}/{n_layer} blocks (without: {mem['activations_no_checkpointing']:.1f} GB)"
    else:
        act_note = f"no checkpointing (with it: {mem['activations_full_checkpointing']:.1f} GB)"
    act_note = f"batch_size {cfg.batch_size} x block_size {cfg.block_size}, {act_note}"
    gpus = plan["gpus"]
    setup = "1 GPU" if gpus == 1 else f"{gpus} GPUs, {plan['strategy'].upper()}"
    lines = [
        f"plan for {' '.join(config_args) or 'the default config'}: {n_layer} layers, {cfg.n_head} heads, "
        f"{cfg.n_embd} wide, block_size {cfg.block_size}, vocab {cfg.vocab_size}",
        f"parameters       {plan['params']:,} ({plan['params_without_position_embeddings']:,} "
        f"without position embeddings)",
        f"tokens           {plan['tokens_per_iter']:,} per iteration ({cfg.batch_size} x "
        f"{cfg.gradient_accumulation_steps} x {cfg.block_size}) x {plan['max_iters']:,} iterations = "
        f"{plan['total_tokens'] / 1e9:,.1f}B",
        f"training FLOPs   {plan['flops_per_token']:.4g} per token (6N + attention) x tokens = "
        f"{plan['total_flops']:.3g}",
    ]
    if k:
        lines.append(f"                 + {plan['recompute_flops_per_token']:.4g} per token recomputing {k} blocks "
                     f"= {plan['total_flops'] * (plan['hfu'] / plan['mfu']):.3g} executed")
    lines += ["", f"memory per GPU on {plan['gpu_name']} ({hardware.GPUS[plan['gpu']].memory_gb:g} GB, i.e. "
                  f"{plan['gpu_memory_gb']:.1f}e9 bytes), {setup}:"]
    for key, label, note in MEMORY_ROWS:
        if mem[key]:
            lines.append(f"  {label:<29} {mem[key]:7.1f} GB  {note or act_note}")
    spare = plan["gpu_memory_gb"] - mem["total"]
    verdict = f"fits, {spare:.1f} GB to spare" if plan["fits"] else f"DOES NOT FIT: {-spare:.1f} GB over"
    lines += [
        f"  {'total':<29} {mem['total']:7.1f} GB  {verdict}",
        f"  if attention falls back to the math kernel (scripts/check_env.py tells), add "
        f"{plan['math_attention_extra_gb']:.1f} GB",
        "",
        f"time at {plan['mfu']:.0%} MFU of {plan['peak_tflops']:g} TFLOPS per GPU"
        + (f" (HFU {plan['hfu']:.0%} with the recompute)" if k else "") + ":",
        f"  {plan['seconds_per_iter']:,.1f} s per iteration, {plan['tokens_per_second']:,.0f} tokens/s",
        f"  {plan['days']:,.1f} days, ${plan['cost_usd']:,.0f} at ${plan['price_per_hour']:g} per GPU-hour",
        f"checkpoints: {plan['checkpoint_gb']:.1f} GB each (fp32 weights + AdamW moments); "
        + (f"keep_last_n={cfg.keep_last_n} plus the save in progress: "
           f"{plan['checkpoint_gb'] * (cfg.keep_last_n + 1):.1f} GB of disk" if cfg.keep_last_n > 0
           else "keep_last_n <= 0 keeps them all"),
    ]
    if plan["suggestions"]:
        lines += ["", "what to change:"] + [f"  - {s}" for s in plan["suggestions"]]
    return "\n".join(lines)


def default_gpu():
    """The local GPU if plan.py knows it, else DEFAULT_GPU (with a note on stderr when one is unknown)."""
    description, key = hardware.local_gpu()
    if description and not key:
        print(f"plan: the local GPU ({description}) is not in hardware.GPUS; planning for {DEFAULT_GPU} "
              f"(pass --gpu)", file=sys.stderr)
    return key or DEFAULT_GPU


def parse_args(argv):
    """plan.py's own flags, and the rest (config files and --key=value) for the configurator."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                     usage="%(prog)s CONFIG [--key=value ...] [options]")
    parser.add_argument("--gpu", choices=sorted(hardware.GPUS), help="default: the local GPU, else mi300x")
    parser.add_argument("--mfu", type=float, default=0.4, help="model FLOPs utilisation, a fraction (default 0.4)")
    parser.add_argument("--price_per_hour", type=float, default=2.0, help="dollars per GPU-hour (default 2)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs under torchrun (default 1)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    args, config_args = parser.parse_known_args(argv)
    if not 0 < args.mfu <= 1:
        parser.error(f"--mfu is a fraction in (0, 1], e.g. 0.4 for 40%; got {args.mfu}")
    if args.gpus < 1 or args.price_per_hour < 0:
        parser.error("--gpus must be >= 1 and --price_per_hour >= 0")
    return args, config_args


def main(argv=None):
    args, config_args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = configurator.load_config_or_exit(config_args)
    if cfg.gradient_accumulation_steps % args.gpus:
        print(f"plan: error: gradient_accumulation_steps={cfg.gradient_accumulation_steps} does not divide "
              f"among {args.gpus} GPUs (each runs an equal share of the micro-batches)", file=sys.stderr)
        sys.exit(2)
    try:
        plan = make_plan(cfg, args.gpu or default_gpu(), args.mfu, args.price_per_hour, args.gpus)
    except ValueError as e:  # GPTConfig's check of the shapes
        print(f"plan: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(plan, indent=1) if args.json else report(plan, cfg, config_args))


if __name__ == "__main__":
    main()
