"""
What a run will cost before you rent the hardware: parameters, tokens, FLOPs, memory per GPU,
whether it fits, days and dollars.

    python scripts/plan.py config/train_gpt3_6b.py [--key=value ...]
                           [--gpu mi300x] [--mfu 0.4] [--price_per_hour 2] [--gpus 1] [--json] [--simulate]
                           [--nodes N --gpus_per_node 8 --interconnect 50 --intranode 450]

The config and its --key=value overrides are resolved by configurator.py, exactly as train.py
resolves them; the model is built on the meta device (shapes, no storage), so a 6.7B plan takes
seconds on a laptop. Memory is cost.py's estimate for bf16 autocast over fp32 weights with fused
AdamW, as train.py trains, and for activation_checkpointing='auto' the policy and micro-batch auto
picks on --gpu; whether it fits is cost.settle's answer, train.py's own, except that the budget is the
card's whole memory (or memory_budget_gb): train.py measures what the CUDA context, the libraries and the
process group take on the device itself, which plan.py cannot. --simulate checks the estimate against
the training step run on fake tensors.
GB = 1e9 bytes, as GPU vendors count.

--nodes N (with --gpus_per_node, --interconnect and --intranode) adds, for DDP, FSDP and HSDP on
N x G GPUs: each GPU's bytes on the wire per optimizer step and their time, whether that hides behind
the step's compute, and days and dollars (cluster_plan states its assumptions).
"""
import argparse
import dataclasses
import json
import math
import os
import signal
import sys
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import configurator  # noqa: E402  (needs the repo root on sys.path first)
from trainer import RunError, cli, machine  # noqa: E402
from trainer import ladder as ladder_fits  # noqa: E402
from trainer.evaluation import GPT3_ZERO_SHOT, gpt3_reference  # noqa: E402
from trainer import cost  # noqa: E402
from trainer import bins  # noqa: E402
from trainer import offload  # noqa: E402
from trainer import optim  # noqa: E402
from trainer import precision  # noqa: E402
from model import CHECKPOINTING_POLICIES  # noqa: E402

DEFAULT_GPU = "mi300x"
MUON_MODE = ("muon", "float32", False)  # shown beside the AdamW modes: what Muon's smaller state buys
LONG_RUN_DAYS = 365
GPUS_PER_NODE = 8


# fp8 is unmeasured here, so its speed is an assumption, stated wherever plan.py uses it: torchao's
# tensorwise fp8 on an MI300X, +15% tokens/s over bf16 (torchtitan reports +28% for Llama-3-8B on an H100).
FP8_ASSUMED_SPEEDUP = 1.15


def compute_seconds(cfg, flops_per_token, gpus, mfu, gpu):
    """One optimizer step's model FLOPs at `mfu` of the GPUs' bf16 peak (MFU is defined on model FLOPs,
    against the bf16 peak even with fp8, which is assumed FP8_ASSUMED_SPEEDUP times faster)."""
    seconds = cfg.tokens_per_step * flops_per_token / (gpus * mfu * gpu.peak_tflops * 1e12)
    return seconds / FP8_ASSUMED_SPEEDUP if cfg.fp8 else seconds


def muon_seconds(cfg, model, gpus, mfu, gpu):
    """Muon's Newton-Schulz matmuls once per optimizer step (optim.newton_schulz_flops) at `mfu` of the bf16 peak,
    shared among the ranks that own the matrices under FSDP (each matrix once per shard group); every DDP rank
    repeats them all. 0 for AdamW."""
    if cfg.optimizer != "muon":
        return 0.0
    owners = {"fsdp": gpus, "hsdp": cfg.hsdp_shard_size or gpus}.get(cfg.strategy, 1) if gpus > 1 else 1
    return optim.newton_schulz_flops(model, split_qkv=cfg.muon_split_qkv) / (owners * mfu * gpu.peak_tflops * 1e12)


def offload_seconds(n_params, mode):
    """The host step's copies over PCIe per optimizer step, at offload.HOST_LINK_BYTES_PER_S; 0 on the GPU."""
    if not mode[2]:
        return 0.0
    return offload.transfer_bytes(n_params, optim.bytes_per_param(*mode)["weights"]) / offload.HOST_LINK_BYTES_PER_S


# -----------------------------------------------------------------------------
# the plan

def card_budget(cfg, gpu):
    """The cost.Budget on a card plan.py has not got: all of it, as nothing on it can be measured."""
    return cost.stated_budget(gpu.capacity_gb * 1e9, "the card's memory, less nothing measured",
                              cfg.memory_budget_gb)


def choose_setting(cfg, gpu, gpus, mode=None):
    """(auto's Choice for this GPU or None when nothing fits, the setting the plan is for as
    cost.settle gives it (a Choice, fits=False when it does not fit), and settle's refusal or None).
    A config that names its policy gets it as it is; 'auto' gets auto's choice, or full checkpointing
    (the least memory) when nothing fits, so the plan can say by how much. mode: another memory mode
    than the config's."""
    cfg = with_mode(cfg, mode) if mode else cfg
    model, budget = cost.meta_model(cfg, "none"), card_budget(cfg, gpu)
    choice = cost.choose_auto(model, cfg.batch_size, cfg.gradient_accumulation_steps, budget.bytes,
                              cost.Setup.of(cfg, gpus))
    try:
        return choice, cost.settle(model, cfg, budget, gpus), None
    except cost.DoesNotFit as e:
        return choice, e.refused, str(e)


def make_plan(cfg, gpu_key, mfu, price_per_hour, gpus, simulate=False, gpus_per_node=GPUS_PER_NODE):
    """Every figure of the plan as a dict (the --json output); sizes in GB. gpus_per_node: how many of the
    GPUs' processes share one machine's host memory."""
    gpu = machine.GPUS[gpu_key]
    choice, setting, refusal = choose_setting(cfg, gpu, gpus)
    policy, batch_size, accumulation = setting.activation_checkpointing, setting.batch_size, setting.gradient_accumulation_steps
    model = cost.meta_model(cfg, policy, setting.recompute_blocks)
    budget = card_budget(cfg, gpu)
    config = model.config
    n_recomputed = config.num_recomputed_blocks()
    tokens_per_iter = cfg.tokens_per_step
    flops = cost.flops_per_token(model.get_num_params(), config.n_layer, config.n_embd, config.block_size)
    recompute = cost.recompute_flops_per_token(cost.block_params(model), n_recomputed, config.n_embd,
                                               config.block_size, policy)
    head_recompute = cost.head_recompute_flops_per_token(config.vocab_size, config.n_embd)
    mode = optim.mode_of(vars(cfg))
    setup = cost.Setup.of(cfg, gpus)  # what cost.py prices
    n_params = model.get_num_params(non_embedding=False)
    # the recompute is extra work the GPU does at the same time (HFU); offload's copies are time it waits
    seconds_per_iter = compute_seconds(cfg, flops, gpus, mfu, gpu) + offload_seconds(n_params, mode) \
        + muon_seconds(cfg, model, gpus, mfu, gpu)
    days = cfg.max_iters * seconds_per_iter / 86400
    estimate = cost.estimate(model, batch_size, setup)
    plan = {
        "params": n_params,
        "params_without_position_embeddings": model.get_num_params(),
        "tokens_per_iter": tokens_per_iter,
        "batch_size": batch_size,
        "gradient_accumulation_steps": accumulation,
        "max_iters": cfg.max_iters,
        "total_tokens": cfg.max_iters * tokens_per_iter,
        "flops_per_token": flops,
        "activation_checkpointing": policy,
        "recomputed_blocks": n_recomputed,
        "recompute_flops_per_token": recompute,
        "head_recompute_flops_per_token": head_recompute,
        "total_flops": flops * cfg.max_iters * tokens_per_iter,
        "gpu": gpu_key,
        "gpu_name": gpu.name,
        "gpu_memory_gb": gpu.capacity_gb,
        "budget_gb": budget.bytes / 1e9,
        "budget_source": budget.source,
        "gpus": gpus,
        "strategy": cfg.strategy if gpus > 1 else "single",
        "memory_gb": {k: v / 1e9 for k, v in estimate.items()},
        "needed_gb": cost.needed_bytes(estimate["total"]) / 1e9,  # the budget it needs, fragmentation margin included
        # the same micro-batch under each policy, every block
        "total_gb_by_policy": {p: cost.estimate(model, batch_size, setup, (p, -1))["total"] / 1e9
                               for p in CHECKPOINTING_POLICIES},
        "optimizer": cfg.optimizer,
        "muon_share": optim.muon_share(model),  # the parameters Muon would step (the blocks' matrices)
        "master_weights": cfg.master_weights,
        "optimizer_offload": cfg.optimizer_offload,
        # on one machine of min(gpus, gpus_per_node) processes, by part (cost.host_estimate)
        "host_processes": min(gpus, gpus_per_node),
        "host_memory_gb": {k: v / 1e9 for k, v in cost.host_estimate(model, cfg, batch_size, gpus,
                                                                     min(gpus, gpus_per_node)).items()},
        "offload_seconds_per_iter": offload_seconds(n_params, mode),
        "muon_seconds_per_iter": muon_seconds(cfg, model, gpus, mfu, gpu),
        "modes": mode_table(cfg, gpu, gpus, mfu),
        "fits": setting.fits,
        "refusal": refusal,  # train.py's one-line refusal on this budget, or None
        "auto": dataclasses.asdict(choice) if choice else None,
        "peak_tflops": gpu.peak_tflops,
        "mfu": mfu,
        "fp8": cfg.fp8,
        "hfu": mfu * (flops + recompute + head_recompute) / flops,
        "seconds_per_iter": seconds_per_iter,
        "tokens_per_second": tokens_per_iter / seconds_per_iter,
        "days": days,
        "price_per_hour": price_per_hour,
        "cost_usd": days * 24 * price_per_hour * gpus,
        "checkpoint_gb": optim.checkpoint_bytes(n_params, mode, optim.muon_share(model)) / 1e9,
        "keep_last_n": cfg.keep_last_n,
        "math_attention_extra_gb": (cost.estimate(model, batch_size, dataclasses.replace(setup, attention="math"))["total"]
                                    - estimate["total"]) / 1e9,
    }
    if simulate:
        plan["simulated"] = {k: v / 1e9 for k, v in cost.simulate(config, batch_size, setup).items()}
    plan["suggestions"] = suggestions(plan, model, cfg)
    if cfg.data_mixture:  # each source's share of the tokens, against its train.bin where it is prepared here
        shares = bins.folders(cfg)
        epochs = bins.planned_epochs(shares, plan["total_tokens"])
        plan["sources"] = {bins.source_name(p): {"weight": w, "epochs": epochs[bins.source_name(p)], "folder": p}
                           for p, w in shares.items()}
    return plan


def with_mode(cfg, mode):
    """cfg with another memory mode (optimizer, master_weights, optimizer_offload)."""
    return types.SimpleNamespace(**{**vars(cfg), **{key: value for (key, _), value in zip(optim.MODE_KEYS, mode)}})


def mode_table(cfg, gpu, gpus, mfu):
    """Each memory mode (optim.RECIPES) on this GPU at this config, as auto would run it: whether it fits,
    its estimated peak, and its step time against no recompute at all at `mfu`: the recompute FLOPs auto
    needs to fit, and offload's PCIe copies (offload_seconds; the host's arithmetic is left out). The
    on-GPU optimizer step runs once per gradient_accumulation_steps micro-batches and is not counted."""
    # the recipes train.py would run here (bf16 weights need bf16 autocast; neither they nor offload run under FSDP)
    recipes = [mode for mode in [*optim.RECIPES, MUON_MODE] if configurator.check(with_mode(cfg, mode), gpus) is None]
    table = []
    for mode in recipes:
        choice, setting, _ = choose_setting(cfg, gpu, gpus, mode)
        policy, k, batch_size = setting.activation_checkpointing, setting.recompute_blocks, setting.batch_size
        model = cost.meta_model(cfg, policy, k)
        flops = cost.flops_per_token(model.get_num_params(), cfg.n_layer, cfg.n_embd, cfg.block_size)
        recompute = cost.recompute_flops_per_token(cost.block_params(model), model.config.num_recomputed_blocks(),
                                                   cfg.n_embd, cfg.block_size, policy)
        setup = cost.Setup.of(with_mode(cfg, mode), gpus)
        total = cost.estimate(model, batch_size, setup)["total"]
        table.append({"optimizer": mode[0], "master_weights": mode[1], "optimizer_offload": mode[2],
                      "fits": choice is not None, "activation_checkpointing": policy, "recompute_blocks": k,
                      "batch_size": batch_size, "total_gb": total / 1e9,
                      "step_time": (flops + recompute) / flops
                      + (offload_seconds(model.get_num_params(non_embedding=False), mode)
                         + muon_seconds(with_mode(cfg, mode), model, gpus, mfu, gpu))
                      / compute_seconds(cfg, flops, gpus, mfu, gpu)})
    return table


def best_mode(plan, config_batch_size):
    """The mode that fits with the fewest FLOPs a step, then one that keeps at least the config's
    micro-batch (a smaller one costs weight casts and gradient accumulations per token), then the most
    precise (the first of optim.RECIPES); or None. Muon is another training recipe, not a memory saving
    to switch to: suggested only to a config that already uses it."""
    fitting = [m for m in plan["modes"] if m["fits"] and (m["optimizer"] == "muon") == (plan["optimizer"] == "muon")]
    return min(fitting, key=lambda m: (round(m["step_time"], 3), m["batch_size"] < config_batch_size)) \
        if fitting else None


def suggestions(plan, model, cfg):
    """What to change when the run does not fit the GPU or takes longer than a year."""
    out = []
    gpus, limit, batch_size = plan["gpus"], plan["budget_gb"] * 1e9, plan["batch_size"]
    if not plan["fits"]:
        for policy in CHECKPOINTING_POLICIES[CHECKPOINTING_POLICIES.index(plan["activation_checkpointing"]) + 1:]:
            if cost.fits(plan["total_gb_by_policy"][policy], plan["budget_gb"]):
                out.append(f"--activation_checkpointing={policy} (or auto): {plan['total_gb_by_policy'][policy]:.1f} GB")
                break
        best = best_mode(plan, cfg.batch_size)
        if best:
            out.append(f"a leaner memory mode: --optimizer={best['optimizer']} --master_weights={best['master_weights']} "
                       f"--optimizer_offload={best['optimizer_offload']} fits ({best['total_gb']:.1f} GB, "
                       f"{best['step_time']:.2f}x the time of no recompute)")
        setup = cost.Setup.of(cfg, gpus)
        smaller = [b for b in range(batch_size - 1, 0, -1) if cost.fits(cost.estimate(model, b, setup)["total"], limit)]
        if smaller:
            b = smaller[0]
            steps = math.ceil(batch_size * plan["gradient_accumulation_steps"] / b)
            out.append(f"a smaller micro-batch: --batch_size={b} --gradient_accumulation_steps={steps} "
                       f"(about the same tokens per iteration)")
        for n in (2, 4, 8, 16, 32, 64):
            current = n == gpus and cfg.strategy == "fsdp"  # the plan that does not fit
            if n >= gpus and not current and cost.fits(cost.estimate(model, batch_size, cost.Setup(
                    cfg.dtype, cfg.optimizer, fp8=cfg.fp8, gpus=n, strategy="fsdp"))["total"], limit):
                out.append(f"shard over {n} GPUs with FSDP: {torchrun(n)} train.py CONFIG --strategy=fsdp")
                break
        bigger = [key for key, gpu in machine.GPUS.items() if cost.fits(plan["memory_gb"]["total"], gpu.capacity_gb)]
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
    ("weights", "weights", None),  # the notes of these two depend on the memory mode: report()
    ("grads", "gradients (fp32)", "4 B/param"),
    ("optimizer", "AdamW moments", None),
    ("autocast_bf16_weights", "autocast bf16 weight copies", "2 B per matmul weight autograd keeps for backward"),
    ("fsdp_unsharded", "FSDP gathered weights", "the root's and ~2 blocks' weights, 1 block's gradient"),
    ("activations", "activations", None),
    ("logits", "logits and loss", "12 B per token x vocab (fp32 log-probs and gradients)"),
    ("gradients_in_flight", "weight gradients in flight", "the tied head's, waiting for the embedding's, and a block's"),
    ("optimizer_step", "optimizer step temporaries", "torchao's fp32 copies of the largest parameter, in the step"),
]
# simulate()'s categories and the estimate's rows they hold (MemTracker counts whatever the forward
# creates as activations, casts and logits included, and what backward creates as temporaries)
SIMULATED_ROWS = [
    ("weights", ["weights"]), ("grads", ["grads"]), ("optimizer", ["optimizer"]),
    ("activations", ["autocast_bf16_weights", "activations", "logits", "gradients_in_flight"]),
    ("other", ["optimizer_step"]),
]


def policy_text(policy, recomputed, n_layer):
    if policy == "none" or recomputed == 0:
        return "no activation checkpointing"
    return f"{policy} checkpointing" + (f" of {recomputed}/{n_layer} blocks" if recomputed < n_layer else "")


def auto_text(plan, cfg):
    choice, name = plan["auto"], plan["gpu_name"]
    if choice is None:
        return f"auto on {name}: nothing fits {plan['budget_gb']:.1f} GB (see what to change)"
    why = "" if choice["activation_checkpointing"] == "none" else \
        f"; no recompute at micro-batch {cfg.batch_size} needs {plan['total_gb_by_policy']['none']:.1f} GB" \
        if plan["batch_size"] == cfg.batch_size else ""
    policy = policy_text(choice["activation_checkpointing"],
                         cfg.n_layer if choice["recompute_blocks"] < 0 else choice["recompute_blocks"], cfg.n_layer)
    return (f"auto on {name}: {policy}, micro-batch {choice['batch_size']} x {choice['gradient_accumulation_steps']}, "
            f"peak {choice['peak_gb']:.1f} of {choice['budget_gb']:.1f} GB{why}")


def report(plan, cfg, config_args):
    """The plan as text for a person."""
    mem, n_layer = plan["memory_gb"], cfg.n_layer
    k = plan["recomputed_blocks"]
    act_note = (f"batch_size {plan['batch_size']} x block_size {cfg.block_size}, "
                f"{policy_text(plan['activation_checkpointing'], k, n_layer)}")
    gpus = plan["gpus"]
    setup = "1 GPU" if gpus == 1 else f"{gpus} GPUs, {plan['strategy'].upper()}"
    lines = [
        f"plan for {' '.join(config_args) or 'the default config'}: {n_layer} layers, {cfg.n_head} heads, "
        f"{cfg.n_embd} wide, block_size {cfg.block_size}, vocab {cfg.vocab_size}",
        f"parameters       {plan['params']:,} ({plan['params_without_position_embeddings']:,} "
        f"without position embeddings)",
        f"tokens           {plan['tokens_per_iter']:,} per iteration ({plan['batch_size']} x "
        f"{plan['gradient_accumulation_steps']} x {cfg.block_size}) x {plan['max_iters']:,} iterations = "
        f"{plan['total_tokens'] / 1e9:,.1f}B",
        f"training FLOPs   {plan['flops_per_token']:.4g} per token (6N + attention) x tokens = "
        f"{plan['total_flops']:.3g}",
    ]
    for name, source in plan.get("sources", {}).items():
        epochs = (f"not prepared here: {bins.prepare_hint(source['folder'])}" if source["epochs"] is None else
                  f"{source['epochs']:.2f} epochs at max_iters")
        lines.append(f"  source {name}: weight {source['weight']:.3g}, {epochs}")
        if warning := bins.repeat_warning(name, source["epochs"]):
            lines.append(f"  {warning}")
    if plan["recompute_flops_per_token"]:
        lines.append(f"                 + {plan['recompute_flops_per_token']:.4g} per token recomputing {k} blocks "
                     f"and {plan['head_recompute_flops_per_token']:.3g} the head's logits "
                     f"= {plan['total_flops'] * (plan['hfu'] / plan['mfu']):.3g} executed")
    lines += ["", f"memory per GPU on {plan['gpu_name']} ({machine.GPUS[plan['gpu']].memory_gb:g} GB, i.e. "
                  f"{plan['gpu_memory_gb']:.1f}e9 bytes), {setup}:"]
    mode = (plan["optimizer"], plan["master_weights"], plan["optimizer_offload"])
    per_param = optim.bytes_per_param(*mode, plan["muon_share"])
    mode_notes = {"weights": f"{plan['master_weights']}, {per_param['weights']} B/param",
                  "optimizer": f"{optim.describe(*mode).split(',')[0]}, ~{per_param['optimizer']:.3g} B/param"}
    for key, label, note in MEMORY_ROWS:
        if mem[key]:
            note = mode_notes.get(key) or note or act_note
            if key == "optimizer" and plan["optimizer"] == "muon":
                label = "Muon momentum, AdamW moments"
            elif key == "optimizer_step" and plan["optimizer"] == "muon":
                note = "Muon's Newton-Schulz on the largest matrix, whole (its owner's, under FSDP)"
            lines.append(f"  {label:<29} {mem[key]:7.1f} GB  {note}")
    spare, budget = plan["budget_gb"] - plan["needed_gb"], f"the {plan['budget_gb']:.1f} GB budget"
    verdict = f"fits {budget}, {spare:.1f} GB to spare" if plan["fits"] else f"DOES NOT FIT {budget}: {-spare:.1f} GB over"
    by_policy = ", ".join(f"{p} {gb:.1f} GB" for p, gb in plan["total_gb_by_policy"].items())
    lines += [
        f"  {'total (estimated peak)':<29} {mem['total']:7.1f} GB",
        f"  {'needed':<29} {plan['needed_gb']:7.1f} GB  with {cost.FRAGMENTATION_MARGIN:.0%} for allocator "
        f"fragmentation: {verdict} ({plan['budget_source']}; train.py measures the device's start-up cost "
        f"and may find less)",
        f"  at micro-batch {plan['batch_size']} by policy: {by_policy}",
        f"  {auto_text(plan, cfg)}",
        *([f"  train.py would refuse it: {plan['refusal']}"] if plan["refusal"] else []),
        f"  if attention falls back to the math kernel (scripts/check_env.py tells), add "
        f"{plan['math_attention_extra_gb']:.1f} GB",
    ]
    host = plan["host_memory_gb"]
    parts = ", ".join(f"{k.replace('_', ' ')} {v:.1f}" for k, v in host.items() if k != "total" and v >= 0.05)
    lines.append(f"  host memory: {host['total']:.1f} GB per machine of {plan['host_processes']} GPU process(es) "
                 f"({parts}; check_env.py compares it with the machine's)")
    if plan["optimizer_offload"]:
        lines.append(f"  offload: PCIe copies ~{plan['offload_seconds_per_iter']:.1f} s per step at "
                     f"{offload.HOST_LINK_BYTES_PER_S / 1e9:g} GB/s, plus the host's AdamW step")
    lines += ["", "memory modes on this GPU (optimizer, master_weights, offload), as auto would run each:"]
    best = best_mode(plan, cfg.batch_size)
    for m in plan["modes"]:
        recomputed = m["recompute_blocks"] if m["recompute_blocks"] >= 0 else n_layer
        setting = (f"{policy_text(m['activation_checkpointing'], recomputed, n_layer)}, micro-batch {m['batch_size']}, "
                   f"{m['total_gb']:.1f} GB, {m['step_time']:.2f}x the time of no recompute")
        mark = "*" if m is best else " "
        name = f"{m['optimizer']}, {m['master_weights']}" + (", offload" if m["optimizer_offload"] else "")
        lines.append(f" {mark}{name:<31} {setting if m['fits'] else 'does not fit'}")
    if "simulated" in plan:
        lines += simulated_lines(plan)
    lines += [
        "",
        f"time at {plan['mfu']:.0%} MFU of {plan['peak_tflops']:g} TFLOPS per GPU"
        + (f" (HFU {plan['hfu']:.0%} with the recompute)" if plan["recompute_flops_per_token"] else "")
        + (f", fp8 {plan['fp8']} assumed {FP8_ASSUMED_SPEEDUP:g}x bf16's speed (unmeasured)" if plan["fp8"] else "") + ":",
        f"  {plan['seconds_per_iter']:,.1f} s per iteration, {plan['tokens_per_second']:,.0f} tokens/s"
        + (f" (Muon's Newton-Schulz {plan['muon_seconds_per_iter']:.2f} s of it, at the same MFU: an estimate)"
           if plan["muon_seconds_per_iter"] else ""),
        f"  {plan['days']:,.1f} days, ${plan['cost_usd']:,.0f} at ${plan['price_per_hour']:g} per GPU-hour",
        f"checkpoints: {plan['checkpoint_gb']:.1f} GB each (weights + optimizer state); "
        + (f"keep_last_n={cfg.keep_last_n} plus the save in progress: "
           f"{plan['checkpoint_gb'] * (cfg.keep_last_n + 1):.1f} GB of disk" if cfg.keep_last_n > 0
           else "keep_last_n <= 0 keeps them all"),
    ]
    if plan["suggestions"]:
        lines += ["", "what to change:"] + [f"  - {s}" for s in plan["suggestions"]]
    return "\n".join(lines)


def simulated_lines(plan):
    """The simulated peak beside the estimate, category by category (neither holds the fragmentation margin)."""
    sim, mem = plan["simulated"], plan["memory_gb"]
    lines = ["", "simulated on fake tensors (cost.simulate: the training step, MemTracker's peak) vs estimated:"]
    for key, rows in SIMULATED_ROWS:
        estimated = sum(mem[r] for r in rows)
        lines.append(f"  {key:<29} {sim[key]:7.1f} GB  estimated {estimated:7.1f} GB")
    estimated = mem["total"]
    lines.append(f"  {'total':<29} {sim['total']:7.1f} GB  estimated {estimated:7.1f} GB "
                 f"({estimated / sim['total'] - 1:+.1%})")
    return lines


# -----------------------------------------------------------------------------
# clusters: what each strategy sends per step, over which link

BUS_EFFICIENCY = 0.8  # NCCL/RCCL bus bandwidth reaches about 80% of a link's rated speed on large messages


def ring(n, nbytes):
    """Bytes each of n GPUs sends in a ring all-gather or reduce-scatter of nbytes in all (an all-reduce is both)."""
    return nbytes * (n - 1) / n


def cluster_plan(cfg, plan, nodes, gpus_per_node, interconnect_gbps, intranode_gbps):
    """Per strategy on nodes x gpus_per_node GPUs: bytes per GPU per step on each link, seconds, whether it hides
    behind compute, memory per GPU, days and dollars. Assumptions: ring collectives at BUS_EFFICIENCY of each
    link (interconnect: one GPU's share of the network between nodes, rail-optimised; intranode: NVLink or
    Infinity Fabric per GPU); the communication overlaps compute completely, so a step takes the longer of
    the two; gradients are reduced in fp32; FSDP and HSDP gather the blocks' weights in bf16 under
    dtype=bfloat16 (the root group's in fp32), twice per micro-batch (forward and backward), and
    reduce-scatter every micro-batch, as train.py runs them; HSDP all-reduces the shards across nodes, and
    DDP its gradients, once per step."""
    n, g = nodes * gpus_per_node, gpus_per_node
    model = cost.meta_model(cfg, plan["activation_checkpointing"], plan["recomputed_blocks"])
    params = model.get_num_params(non_embedding=False)
    blocks = model.config.n_layer * cost.block_params(model)
    gathered = (2 if cfg.dtype == "bfloat16" else 4) * blocks + 4 * (params - blocks)  # one all-gather's weights
    grads = 4 * params
    micro = max(1, plan["gradient_accumulation_steps"] // n)  # each GPU's micro-batches per step
    between, within = interconnect_gbps * 1e9 * BUS_EFFICIENCY, intranode_gbps * 1e9 * BUS_EFFICIENCY

    def over_every_gpu(nbytes):  # a ring over every GPU crosses the slowest link: between nodes, if there are several
        return (0, nbytes) if nodes > 1 else (nbytes, 0)
    wire = {  # strategy: (bytes per GPU inside a node, between nodes)
        "ddp": over_every_gpu(2 * ring(n, grads)),
        "fsdp": over_every_gpu(micro * ring(n, 2 * gathered + grads)),
        # the shards' gathers and reductions inside the node every micro-batch; the shard's gradient, summed
        # over the micro-batches, all-reduced across nodes once per step (parallel.sync_gradients)
        "hsdp": (micro * ring(g, 2 * gathered + grads), 2 * ring(nodes, grads / g)),
    }
    compute = plan["seconds_per_iter"]
    budget = card_budget(cfg, machine.GPUS[plan["gpu"]])
    rows = []
    for strategy, (inside, across) in wire.items():
        seconds = inside / within + across / between  # on one node nothing goes between nodes
        step = max(compute, seconds)
        days = cfg.max_iters * step / 86400
        total = cost.estimate(model, plan["batch_size"], cost.Setup(
            cfg.dtype, *optim.mode_of(vars(cfg)), fp8=cfg.fp8, gpus=n, strategy=strategy, hsdp_shard_size=g))["total"]
        rows.append({"strategy": strategy, "intranode_gb": inside / 1e9, "internode_gb": across / 1e9,
                     "comm_seconds": seconds, "compute_seconds": compute, "hidden": seconds <= compute,
                     "memory_gb": total / 1e9, "fits": cost.fits(total, budget.bytes), "days": days,
                     "cost_usd": days * 24 * plan["price_per_hour"] * n})
    return {"nodes": nodes, "gpus_per_node": g, "interconnect_gbps": interconnect_gbps,
            "intranode_gbps": intranode_gbps, "micro_batches_per_gpu": micro, "strategies": rows}


def cluster_text(cluster):
    if not cluster:
        return ""
    c = cluster
    lines = ["", f"on {c['nodes']} nodes x {c['gpus_per_node']} GPUs ({c['interconnect_gbps']:g} GB/s per GPU between "
             f"nodes, {c['intranode_gbps']:g} GB/s inside one; {BUS_EFFICIENCY:.0%} of it as bus bandwidth; "
             f"{c['micro_batches_per_gpu']} micro-batches per GPU per step; communication assumed to overlap compute):"]
    for r in c["strategies"]:
        hidden = "hides behind" if r["hidden"] else "exceeds"
        lines.append(f"  {r['strategy'].upper():<5} {r['intranode_gb']:7.1f} GB inside a node + {r['internode_gb']:7.1f} GB "
                     f"between nodes per GPU per step: {r['comm_seconds']:6.2f} s, {hidden} the {r['compute_seconds']:.2f} s "
                     f"of compute; {r['memory_gb']:.1f} GB per GPU ({'fits' if r['fits'] else 'does not fit'}); "
                     f"{r['days']:,.1f} days, ${r['cost_usd']:,.0f}")
    return "\n".join(lines)


def default_gpu():
    """The local GPU if plan.py knows it, else DEFAULT_GPU (with a note on stderr when one is unknown)."""
    description, key = machine.local_gpu()
    if description and not key:
        print(f"plan: the local GPU ({description}) is not in machine.GPUS; planning for {DEFAULT_GPU} "
              f"(pass --gpu)", file=sys.stderr)
    return key or DEFAULT_GPU


def finite(text):
    """argparse's type for plan.py's numbers: nan or inf would print nan days and $nan as a plan."""
    value = float(text)
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number")
    return value


def parse_args(argv):
    """plan.py's own flags, and the rest (config files and --key=value) for the configurator."""
    parser = cli.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False,
                                     usage="%(prog)s CONFIG [--key=value ...] [options]")
    parser.add_argument("--gpu", type=str.lower, choices=sorted(machine.GPUS),
                        help="default: the local GPU, else mi300x")
    parser.add_argument("--mfu", type=finite, default=0.4, help="model FLOPs utilisation, a fraction (default 0.4)")
    parser.add_argument("--price_per_hour", type=finite, default=2.0, help="dollars per GPU-hour (default 2)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs under torchrun (default 1)")
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument("--simulate", action="store_true",
                        help="also run the training step on fake tensors and print its measured peak by category "
                             "beside the estimate (minutes at 6.7B on a CPU; one GPU)")
    parser.add_argument("--beside", metavar="CONFIG", help="also plan this config on the same GPU, MFU and price, "
                                                            "and print both runs' tokens, days and dollars")
    parser.add_argument("--nodes", type=int, default=0, help="plan DDP, FSDP and HSDP on this many nodes")
    parser.add_argument("--gpus_per_node", type=int, default=GPUS_PER_NODE, help="with --nodes (default 8)")
    parser.add_argument("--interconnect", type=finite, default=50.0,
                        help="GB/s per GPU between nodes, e.g. 50 for 400 Gb/s InfiniBand per GPU (default 50)")
    parser.add_argument("--intranode", type=finite, default=450.0,
                        help="GB/s per GPU inside a node: NVLink 4 or MI300X Infinity Fabric (default 450)")
    parser.add_argument("--ladder", metavar="LADDER_JSON",
                        help="scripts/ladder.py's ladder.json (or its folder): print its predictions for this run "
                             "(final val loss, learning rate, zero-shot scores, each recipe's compute multiplier)")
    parser.add_argument("--target_val_loss", type=finite,
                        help="with --ladder: the tokens and days to reach this val loss")
    parser.add_argument("--target", metavar="TASK=SCORE", help="with --ladder: the tokens and days to reach a zero-shot "
                                                              "score in percent, e.g. hellaswag=67.4 (1 or less: a "
                                                              "fraction; GPT-3's metric for the task; or name it: "
                                                              "hellaswag/acc=...; needs the ladder's task fits)")
    parser.add_argument("--ladder_plan", metavar="LADDER_CONFIG", help="what scripts/ladder.py with this config costs on "
                                                                       "the same GPU, MFU and price, as a share of this run")
    args, config_args = parser.parse_known_args(argv)
    if problem := configurator.misspelt_option(config_args, parser):
        parser.error(problem)
    if (args.target_val_loss is not None or args.target) and not args.ladder:
        parser.error("--target_val_loss and --target read a ladder's fits: add --ladder OUT/ladder.json")
    if args.target_val_loss is not None and args.target_val_loss <= 0:
        parser.error(f"--target_val_loss is a val loss, > 0; got {args.target_val_loss}")
    if args.target:
        try:  # now, not after the plan is made
            target_score(args.target)
        except ValueError as e:
            parser.error(str(e))
    if args.nodes:
        if problem := cli.below_least(args, {"nodes": 1, "gpus_per_node": 1}):
            parser.error(problem)
        if not (args.interconnect > 0 and args.intranode > 0):
            parser.error(f"--interconnect and --intranode are GB/s, above 0: got {args.interconnect:g} and "
                         f"{args.intranode:g}")
        args.gpus = args.nodes * args.gpus_per_node
    if not 0 < args.mfu <= 1:
        parser.error(f"--mfu is a fraction in (0, 1], e.g. 0.4 for 40%; got {args.mfu}")
    if problem := cli.below_least(args, {"gpus": 1, "price_per_hour": 0}):
        parser.error(problem)
    if args.simulate and args.gpus > 1:
        parser.error("--simulate runs one GPU's step; leave out --gpus (FSDP's sharding is not simulated)")
    return args, config_args


def main(argv=None):
    args, config_args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = configurator.load_config_or_exit(config_args)
    if args.nodes and cfg.strategy == "hsdp" and not cfg.hsdp_shard_size:
        cfg.hsdp_shard_size = args.gpus_per_node  # train.py's default: one node's GPUs
    if problem := configurator.check(cfg, args.gpus):  # what train.py would refuse under torchrun with --gpus
        print(f"plan: error: {problem}", file=sys.stderr)
        sys.exit(2)
    gpu = machine.GPUS[args.gpu or default_gpu()]
    if cfg.fp8 and (problem := precision.units_problem(gpu.name, gpu.capability, gpu.gfx)):  # as train.py refuses
        print(f"plan: error: {problem}", file=sys.stderr)
        sys.exit(2)
    try:
        plan = make_plan(cfg, args.gpu or default_gpu(), args.mfu, args.price_per_hour, args.gpus, args.simulate,
                         args.gpus_per_node)
    except ValueError as e:  # GPTConfig's check of the shapes and of the policy's name
        print(f"plan: error: {e}", file=sys.stderr)
        sys.exit(2)
    if args.nodes:
        plan["cluster"] = cluster_plan(cfg, plan, args.nodes, args.gpus_per_node, args.interconnect, args.intranode)
    if args.beside:  # e.g. a faster recipe beside the one it shortens
        other = make_plan(configurator.load_config_or_exit([args.beside]), plan["gpu"], args.mfu, args.price_per_hour,
                          args.gpus)
        plan["beside"] = {"config": args.beside, **{k: other[k] for k in ("total_tokens", "days", "cost_usd")}}
    try:
        if args.ladder:
            plan["ladder"] = ladder_forecast(cfg, plan, args.ladder, args.target_val_loss, args.target)
        if args.ladder_plan:
            plan["ladder_plan"] = ladder_cost(args.ladder_plan, plan, args.mfu, args.price_per_hour, args.gpus)
    except (RunError, ValueError, OSError, KeyError) as e:  # a ladder of other data, a target it cannot read, a missing file
        print(f"plan: error: {e}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(plan, indent=1) if args.json else report(plan, cfg, config_args) + cluster_text(plan.get("cluster"))
          + beside_text(plan) + ladder_text(plan))
    budget_note(cfg, config_args)


def beside_text(plan):
    """Both runs' tokens, days and dollars, for --beside."""
    if "beside" not in plan:
        return ""
    other = plan["beside"]
    return (f"\n\nbeside {other['config']} on the same GPU, MFU and price:\n"
            f"  this run  {plan['total_tokens'] / 1e9:,.1f}B tokens, {plan['days']:,.1f} days, ${plan['cost_usd']:,.0f}\n"
            f"  that run  {other['total_tokens'] / 1e9:,.1f}B tokens, {other['days']:,.1f} days, ${other['cost_usd']:,.0f}"
            f"  (this run takes {plan['days'] / other['days']:.2f}x its days; the quality each reaches is not planned)")


# -----------------------------------------------------------------------------
# the scaling ladder's predictions (scripts/ladder.py, trainer/ladder.py)

def ladder_forecast(cfg, plan, path, target_loss=None, target=None):
    """Per recipe of a ladder.json, at this run's size and tokens: the predicted final val loss and its
    interval (Chinchilla's form where the ladder measured several tokens per parameter, else its fit along
    its one ratio, noted when this run's differs), the recommended learning rate, the zero-shot scores of its
    task fits beside GPT-3's, the tokens and days to a target; and each recipe's compute multiplier against
    the first: the first recipe's compute to reach this recipe's loss over this run's."""
    result, _ = ladder_fits.load(path, expected=ladder_fits.identity(cfg), fitted=True)
    n, tokens, ratio = plan["params_without_position_embeddings"], plan["total_tokens"], result["tokens_per_param"][0]
    largest = max((r["params"] for rec in result["recipes"].values() for r in rec.get("runs", [])), default=None)
    out = {"path": path, "ladder_ratio": ratio, "run_ratio": tokens / n, "largest_params": largest,
           "extrapolation": largest and n / largest, "recipes": {}}
    reference = None
    # Chinchilla's form for every recipe or for none: a multiplier compares two fits of one form, and where one
    # recipe's could not be made (loss_nd_problem) every recipe is read along the ratio
    nd = all("loss_nd" in rec["fits"] for rec in result["recipes"].values())
    no_nd = next((f"recipe {k}'s fit in N and D could not be made ({r['fits']['loss_nd_problem']}), so no recipe's "
                  "is read" for k, r in result["recipes"].items() if "loss_nd_problem" in r["fits"]), None)
    for name, rec in result["recipes"].items():
        fits = rec["fits"]
        loss_fit = ladder_fits.Fit.from_json(fits["loss_nd" if nd else "loss"])
        distances = [rec.get("held_out", {}), *rec.get("held_out_further", [])]  # the ladder's own checks
        row = {"form": loss_fit.form, "val_loss": loss_fit.predict((n, tokens) if nd else n),
               "lr": ladder_fits.Fit.from_json(fits["lr"]).predict(n), "scores": {},
               "checks": [(h["extrapolation"], h["relative_error"], h["form"],
                           h.get("last_step", {}).get("relative_error"))
                          for h in distances if "extrapolation" in h],
               "nd_checks": [(h["extrapolation"], [(c["tokens_per_param"], c["relative_error"]) for c in h["chinchilla"]])
                             for h in distances if isinstance(h.get("chinchilla"), list)] if nd else []}
        top = ladder_fits.best_runs(rec.get("runs", []), ratio)[-2:]
        if len(top) == 2 and keeps_ratio(out):  # a reading beside the fit, whose misses the checks line shows too
            row["last_step"] = ladder_fits.along_last_step([r["params"] for r in top],
                                                           [r["final_val_loss"] for r in top], n)
        if nd and keeps_ratio(out):  # the fit along the ladder's ratio applies too, without splitting N from D
            rule = ladder_fits.Fit.from_json(fits["loss"])
            row["along_the_ratio"] = (rule.form, rule.predict(n))
        for key, task_fit in fits.get("tasks", {}).items():
            task, metric = key.split("/")
            row["scores"][key] = (float(ladder_fits.Fit.from_json(task_fit)(row["val_loss"][0])),
                                  gpt3_reference(n, task, metric)[1])
        goal = target_loss if target is None else target_loss_for(fits, target)
        if goal is not None:
            needed = goal if isinstance(goal, str) else no_nd or ladder_fits.tokens_for_loss(loss_fit, n, goal)
            row["target"] = needed if isinstance(needed, str) else {
                "val_loss": goal, "tokens": needed, "days": needed / plan["tokens_per_second"] / 86400}
        if reference is None:
            reference = loss_fit
        elif nd:  # at this run's size: the tokens the first recipe needs for this loss, over this run's
            needed = ladder_fits.tokens_for_loss(reference, n, row["val_loss"][0])
            row["compute_multiplier"] = needed if isinstance(needed, str) else needed / tokens
        else:  # along the ladder's rule compute is 6 ratio N^2
            row["compute_multiplier"] = ladder_fits.rule_compute_ratio(
                ladder_fits.size_for_loss(reference, row["val_loss"][0], ratio), n)
        out["recipes"][name] = row
    return out


def keeps_ratio(forecast):
    """Whether the run's tokens per parameter is the ladder's first ratio (ladder.same_ratio)."""
    return ladder_fits.same_ratio(forecast["run_ratio"], forecast["ladder_ratio"])


def target_loss_for(fits, target):
    """The val loss at which a TASK=SCORE (or TASK/METRIC=SCORE) target is reached by the ladder's task fit, or
    why it is not. A bare task means the metric GPT-3's table gives for it (hellaswag: acc_norm; lambada_openai:
    acc, its first), else the task's one fitted metric: ladder.json fits every metric eval.py reports, acc
    before acc_norm."""
    task, score = target_score(target)
    fitted = sorted(fits.get("tasks", {}))
    if "/" in task:
        keys = [task] if task in fitted else []
    else:
        keys = [k for k in fitted if k.split("/")[0] == task]
        paper = [f"{task}/{metric}" for t, metric in GPT3_ZERO_SHOT if t == task]  # the table's first: its headline
        keys = [k for k in paper if k in keys][:1] or keys
    if not keys:
        raise ValueError(f"--target {target}: the ladder has no task fit for {task!r} (it has "
                         f"{fitted or 'none: run scripts/eval.py on its checkpoints'})")
    if len(keys) > 1:
        raise ValueError(f"--target {target}: {task} has fits of {', '.join(keys)}: name one, e.g. "
                         f"--target {keys[0]}{target[len(task):]}")
    return ladder_fits.loss_for_score(ladder_fits.Fit.from_json(fits["tasks"][keys[0]]), score)


def target_score(target):
    """(TASK, SCORE as a fraction) of a --target TASK=SCORE, SCORE a percent (1 or less: a fraction); ValueError
    naming it when it is not one."""
    task, sep, score = target.partition("=")
    if not sep:
        raise ValueError(f"--target {target}: write TASK=SCORE, e.g. hellaswag=67.4")
    try:
        value = float(score)
    except ValueError:
        value = math.nan  # refused below, as nan and inf are
    if not 0 < value <= 100:
        raise ValueError(f"--target {target}: SCORE {score!r} is not a number in (0, 100]: write a percent, e.g. "
                         f"{task}=67.4 (1 or less: a fraction)")
    return task, value / 100 if value > 1 else value


def ladder_cost(path, plan, mfu, price_per_hour, gpus):
    """What scripts/ladder.py with this ladder config trains for one recipe, priced by make_plan on this plan's
    GPU, MFU and price: each size's sweep at the first tokens_per_param, its lowest rates at the other seeds, and
    one run per other ratio (the extra points a sweep's edge adds are not counted), and its share of this
    run's GPU-hours; and its days on this plan's GPUs, the runs one after another on all of them (--jobs, runs on
    fewer GPUs each at once, spends the same GPU-hours); and the disk its runs' checkpoints hold once they end,
    keep_last_n a run (None where a run keeps them all)."""
    import ladder as ladder_runs  # scripts/ladder.py, beside this file: the runs it would train
    settings = ladder_runs.load_settings(path)
    runner, rows = ladder_runs.Ladder(settings, out=None, nproc=gpus), []
    for i, (size, shape) in enumerate(settings["sizes"].items()):
        for j, ratio in enumerate(settings["tokens_per_param"]):
            count = runner.planned_runs(i) if j == 0 else 1
            one = make_plan(configurator.load_config(runner.argv([], shape, 1e-3, ratio)), plan["gpu"], mfu,
                            price_per_hour, gpus)
            kept = one["keep_last_n"] if one["keep_last_n"] > 0 else None  # the newest ones, at most
            rows.append({"size": size, "tokens_per_param": ratio, "runs": count, "params": one["params"],
                         "n": one["params_without_position_embeddings"],  # N as the ladder's runs count it
                         "gpu_hours": count * one["days"] * 24 * gpus, "cost_usd": count * one["cost_usd"],
                         "disk_gb": kept and count * kept * one["checkpoint_gb"]})
    hours = sum(r["gpu_hours"] for r in rows)
    disk = [r["disk_gb"] for r in rows]
    return {"config": path, "rows": rows, "gpu_hours": hours, "days": hours / gpus / 24, "gpus": gpus,
            "cost_usd": sum(r["cost_usd"] for r in rows), "disk_gb": None if None in disk else sum(disk),
            "keep_last_n": one["keep_last_n"],  # every run's: the ladder config's common
            "share": hours / (plan["days"] * 24 * plan["gpus"]),
            "extrapolation": plan["params_without_position_embeddings"] / max(r["n"] for r in rows)}


def ladder_text(plan):
    """The ladder's predictions and cost, for --ladder and --ladder_plan."""
    lines = []
    if "ladder" in plan:
        lad = plan["ladder"]
        lines += ["", f"the scaling ladder's predictions ({lad['path']}; fitted on small runs, extrapolated: "
                      "an estimate, not a measurement):"]
        if not any(r["form"] == "chinchilla" for r in lad["recipes"].values()) and not keeps_ratio(lad):
            lines.append(f"  note: the ladder measured {lad['ladder_ratio']:g} tokens per parameter and this run has "
                         f"{lad['run_ratio']:.1f}: its losses are for a run of this size at the ladder's ratio")
        if lad["largest_params"]:
            lines.append(f"  this run's {plan['params_without_position_embeddings'] / 1e6:,.1f}M parameters are "
                         f"{lad['extrapolation']:.1f}x the ladder's largest size ({lad['largest_params'] / 1e6:,.1f}M)")
        for name, r in lad["recipes"].items():
            (loss, low, high), (lr, lr_low, lr_high) = r["val_loss"], r["lr"]
            lines.append(f"  {name}: final val loss {loss:.3f} {ladder_fits.interval_text((low, high), '.3f')} "
                         f"({r['form']} fit), "
                         f"learning rate {lr:.3g} [{lr_low:.3g}, {lr_high:.3g}]")
            if r["nd_checks"]:  # each prediction with the ladder's own misses beneath it
                lines.append("    its largest size predicted from the sizes below by this fit, the miss at each distance "
                             "(and tokens per parameter): " + "; ".join(f"{x:.1f}x " + ", ".join(
                                 f"{e:+.1%} at {ratio:g}" for ratio, e in misses) for x, misses in r["nd_checks"]))
            if "along_the_ratio" in r:
                form, (loss, low, high) = r["along_the_ratio"]
                lines.append(f"    final val loss by the fit along the ladder's ratio (this run keeps it): {loss:.3f} "
                             f"{ladder_fits.interval_text((low, high), '.3f')} ({form} fit)")
            if r["checks"]:
                misses = [f"{x:.1f}x {e:+.1%} ({form}" + ("" if last is None else f"; the last step {last:+.1%}") + ")"
                          for x, e, form, last in r["checks"]]
                lines.append("    its largest size predicted from the sizes below by the fit along its ratio, the miss "
                             "at each distance: " + ", ".join(misses))
            if "last_step" in r:
                lines.append("    the last step's slope carried on to this size (a reading beside the fit, no "
                             f"interval): {r['last_step']:.3f}")
            if "compute_multiplier" in r:
                m = r["compute_multiplier"]
                lines.append(f"    compute multiplier against {next(iter(lad['recipes']))}: "
                             + (m if isinstance(m, str) else f"{m:.2f}x (its compute to reach this loss, over this run's)"))
            for key, (score, gpt3) in r["scores"].items():
                lines.append(f"    {key:<24} predicted {100 * score:5.1f}"
                             + ("" if gpt3 is None else f"   GPT-3 at this size: {gpt3:g}"))  # not one of GPT-3's tasks
            if "target" in r:
                t = r["target"]
                lines.append("    target: " + (t if isinstance(t, str) else f"val loss {t['val_loss']:.3f} after "
                                               f"{t['tokens'] / 1e9:,.1f}B tokens, {t['days']:,.1f} days at this plan's speed"))
    if "ladder_plan" in plan:
        lp = plan["ladder_plan"]
        runs = sum(r["runs"] for r in lp["rows"])
        lines += ["", f"the ladder {lp['config']} per recipe on this GPU, MFU and price: {runs} runs, "
                      f"{lp['gpu_hours']:,.0f} GPU-hours, {lp['days']:,.1f} days on {lp['gpus']} GPU(s), "
                      f"${lp['cost_usd']:,.0f}: {lp['share']:.1%} of this run's "
                      "GPU-hours (Bhagia et al.'s ladder: ~1% of its target's compute); this run's size is "
                      f"{lp['extrapolation']:.1f}x its largest"]
        lines += [f"  {r['size']:<6} {r['params'] / 1e6:7.0f}M params, {r['tokens_per_param']:g} tokens/param: "
                  f"{r['runs']} run(s), {r['gpu_hours']:,.1f} GPU-hours" for r in lp["rows"]]
        kept = "keep_last_n <= 0 keeps them all: set it in the config's common" if lp["disk_gb"] is None else (
            f"{lp['disk_gb']:,.0f} GB of disk per recipe (keep_last_n={lp['keep_last_n']} a run; the ladder and "
            "eval.py need only the newest: --keep_last_n=1 in the config's common keeps one)")
        lines.append(f"  checkpoints once its runs end: {kept}")
    return "\n" + "\n".join(lines) if lines else ""

def budget_note(cfg, config_args):
    """A line on stderr when --key=value overrides change the run's token count: a config derives
    max_iters from its own batch, so --batch_size=8 alone makes a 300B-token run a 600B one. A --max_iters
    on the command line chose the count on purpose (a shorter first run): nothing to say then."""
    if cfg.sources["max_iters"] == "on the command line":
        return
    files = configurator.load_config_or_exit([a for a in config_args if not a.startswith("--")])
    before, after = (c.max_iters * c.tokens_per_step for c in (files, cfg))
    count = lambda tokens: f"{tokens / 1e9:,.1f}B" if tokens >= 1e8 else f"{tokens / 1e6:,.2f}M"  # a tiny run's too
    if before != after:
        print(f"note: the overrides change the run from {count(before)} to {count(after)} tokens (the config "
              f"derives max_iters from its own batch); for {count(before)} set --max_iters and --lr_decay_iters to "
              f"{round(before / (after / cfg.max_iters))}", file=sys.stderr)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly, as a Unix tool
    main()
