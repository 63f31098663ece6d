"""
Precision, in one place: fp8 matmuls (`fp8`) and the bf16 weight copies made once per step. The third
part of the story, bf16 master weights (`master_weights='bfloat16'`), is optim.use_bf16_weights: the
optimizer that rounds them lives beside it in optim.py.

FP8: torchao's Float8Linear in place of the transformer blocks' nn.Linear layers. A converted layer
casts its input, its weight and (in backward) its output's gradient to 8-bit floats with dynamic scales,
multiplies them with torch._scaled_mm and returns a bf16 result. 'tensorwise' is one scale per tensor,
e4m3 forward and e5m2 for gradients (the fastest); 'rowwise' one scale per row, e4m3 throughout, scales
rounded to powers of 2 (closer to bf16, slower kernels). These are torchao's own recipes
(Float8LinearConfig.from_recipe_name); only the float8 flavour is set here (below). kernel_problem()
runs one small _scaled_mm of the recipe at start-up, so a build without the kernel is refused in one line.

What stays in bf16: the LM head (tied to the token embedding or not, and the logits are where precision
matters most), the embeddings, LayerNorms and attention, and any layer whose features are not multiples of 16
(what torch._scaled_mm needs). The weights stay ordinary parameters (fp32, or bf16 master_weights):
Float8Linear only casts them on the fly, so state_dict keys and tensors are those of a plain GPT and a
checkpoint resumes, exports and samples alike with fp8 on or off.

Float8 comes in two flavours: the OCP one (float8_e4m3fn / float8_e5m2: NVIDIA, AMD MI350) and AMD's
fnuz one (float8_e4m3fnuz / float8_e5m2fnuz), the only one the MI300 series' matrix cores take. torchao
picks fnuz on an MI300 by itself, once, when it is imported; it is set explicitly here, per model, so
that a test can ask for fnuz on the CPU and a run never depends on import order.

Under FSDP2, tensorwise weights are all-gathered in fp8 (torchao's enable_fsdp_float8_all_gather: half
the traffic of bf16), and update_weight_scales() then computes every weight's scale in one all-reduce
after each change of the weights. The sharded weights are then DTensors around torchao's
WeightWithDynamicFloat8CastTensor; checkpoint.stage saves the plain tensor inside. torchao's fp8
all-gather is tensorwise only: rowwise weights are all-gathered in bf16 (FSDP2's mixed precision).

bf16 copies once per step (step_cast_contexts, casts_once_per_step): bf16 autocast over fp32 weights casts every matmul
weight where it is used, with its cast cache off once per micro-batch. Autocast's own cache keeps the
bf16 copy of each fp32 leaf that requires grad until the outermost autocast context exits, so one
context around all of a step's micro-batches casts each weight once per step, bit-identically
(tests/test_model.py), with no copy or hook of our own. That context is autocast switched off: it only
holds the nesting level, so the cache outlives each micro-batch's forward while backward runs as before,
and a checkpointed block's recompute finds its weights in the cache. Nothing may run under no_grad
inside it (a copy cached there would have no grad_fn). It does not reach the LM head (model.py's chunked
loss casts the tied weight itself) or torch.compile'd blocks (tracing turns the cache off); with bf16
weights there is nothing to cast. Figures: docs/performance.md.
"""
import contextlib
import dataclasses

import torch
import torch.nn as nn

RECIPES = ("tensorwise", "rowwise")
_FNUZ_ARCHS = ("gfx940", "gfx941", "gfx942")  # the MI300 series: MI300X, MI300A, MI325X
_E5M2 = (torch.float8_e5m2, torch.float8_e5m2fnuz)
# GPUs with FP8 matrix units: NVIDIA from compute capability 8.9 (Ada, Hopper, Blackwell); AMD's MI300
# series, MI350 series (gfx950) and RDNA 4 (gfx12)
_FP8_CAPABILITY = (8, 9)
_FP8_ARCHS = (*_FNUZ_ARCHS, "gfx950", "gfx12")


def float8_dtypes(gfx_arch=None):
    """(e4m3, e5m2) for a GPU: fnuz on the MI300 series, else OCP. gfx_arch: a ROCm architecture
    ('gfx942:sramecc+:xnack-'); None means the ROCm GPU PyTorch sees, if there is one."""
    if gfx_arch is None and torch.version.hip and torch.cuda.is_available():
        gfx_arch = torch.cuda.get_device_properties(torch.cuda.current_device()).gcnArchName
    if gfx_arch and gfx_arch.split(":")[0] in _FNUZ_ARCHS:
        return torch.float8_e4m3fnuz, torch.float8_e5m2fnuz
    return torch.float8_e4m3fn, torch.float8_e5m2


def has_fp8_units(capability=None, gfx_arch=None):
    """Whether a GPU multiplies fp8 in hardware: an NVIDIA compute capability (major, minor), or a ROCm arch."""
    if gfx_arch:
        return gfx_arch.split(":")[0].startswith(_FP8_ARCHS)
    return tuple(capability) >= _FP8_CAPABILITY


def device_problem(device):
    """Why fp8 cannot train on a resolved device ('cpu', 'cuda:N', 'mps'), as one line, or None. The CPU
    can (torch._scaled_mm has a CPU kernel: slow, for tests and small runs)."""
    if device == "cpu":
        return None
    if not device.startswith("cuda"):
        return f"fp8 runs on CUDA and ROCm GPUs and on the CPU, not on device={device}: set fp8='' to train in bf16"
    props = torch.cuda.get_device_properties(device)
    return units_problem(props.name, (props.major, props.minor), props.gcnArchName if torch.version.hip else None)


def units_problem(name, capability=None, gfx_arch=None):
    """Why a GPU of this compute capability or gfx architecture cannot train in fp8, as one line, or None:
    the rule train.py applies to its device (device_problem) and plan.py to a card of machine.GPUS."""
    if has_fp8_units(capability, gfx_arch):
        return None
    arch = gfx_arch.split(":")[0] if gfx_arch else f"sm_{capability[0]}{capability[1]}"
    return (f"fp8: the {name} ({arch}) has no FP8 matrix units (NVIDIA's start at sm_89, Ada and Hopper; "
            f"AMD's at gfx942, the MI300 series): set fp8='' to train in bf16")


def kernel_problem(recipe, device, dtypes=None):
    """Why the recipe's fp8 matmuls fail on a resolved device, as one line, or None: one small torch._scaled_mm
    of each of its calls, run at start-up, so that a build without the kernel (rowwise on gfx942 needs
    e4m3fnuz and bf16 output and ROCm >= 6.3; OCP e4m3fn needs ROCm >= 6.5) is refused before the model is
    built, not at the first forward with a hipBLASLt or C++ error. dtypes: as convert()'s, the device's own
    by default."""
    gpu = device.startswith("cuda")
    gfx = torch.cuda.get_device_properties(device).gcnArchName if gpu and torch.version.hip else ""
    e4m3, e5m2 = dtypes or float8_dtypes(gfx)  # as convert() picks them
    m, k, n = 16, 32, 16
    tensor_wide = (torch.ones((), device=device),) * 2
    per_row = (torch.ones(m, 1, device=device), torch.ones(1, n, device=device))
    # tensorwise: e4m3 weights and activations, e5m2 gradients. rowwise: e4m3 throughout, per-row scales where
    # torchao uses fast accumulation (the forward) and its tensor-wide kernel with the scales applied after it
    # everywhere else (the backward), so both calls are probed
    calls = ([(e4m3, tensor_wide), (e5m2, tensor_wide)] if recipe == "tensorwise" else
             [(e4m3, per_row), (e4m3, tensor_wide)])
    for a_dtype, (scale_a, scale_b) in calls:
        try:
            a = torch.ones(m, k, device=device).to(a_dtype)
            b = torch.ones(n, k, device=device).to(e4m3).t()  # column-major, as _scaled_mm wants it
            torch._scaled_mm(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=torch.bfloat16)
            if gpu:
                torch.cuda.synchronize(device)  # a kernel's launch error shows here, not at the call
        except Exception as e:
            name = f"the {torch.cuda.get_device_name(device)}{f' ({gfx.split(chr(58))[0]})' if gfx else ''}" \
                if gpu else f"device={device}"
            build = f"ROCm {torch.version.hip}" if torch.version.hip else f"CUDA {torch.version.cuda}"
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            # tensorwise makes the same tensor-wide call, so it is offered only where per-row scales failed
            scales, instead = (("per-row scales", "--fp8=tensorwise or --fp8=''") if scale_a.dim() else
                               ("one scale a tensor", "--fp8=''"))
            return (f"fp8={recipe!r}: its torch._scaled_mm ({a_dtype}, {scales}, bf16 output) fails on {name} "
                    f"under torch {torch.__version__}, {build}: {why}. Use {instead} (bf16)")
    return None


def _fits_the_kernels(module, fqn):
    return module.in_features % 16 == 0 and module.out_features % 16 == 0


def _config(recipe, fsdp, dtypes):
    """torchao's recipe with each cast's e4m3 or e5m2 in the flavour of dtypes, and FSDP2's fp8
    all-gather where torchao has it (tensorwise)."""
    from torchao.float8 import Float8LinearConfig
    config = Float8LinearConfig.from_recipe_name(recipe)
    e4m3, e5m2 = dtypes
    casts = {}
    for field in dataclasses.fields(config):
        if field.name.startswith("cast_config"):
            cast = getattr(config, field.name)
            casts[field.name] = dataclasses.replace(cast, target_dtype=e5m2 if cast.target_dtype in _E5M2 else e4m3)
    return dataclasses.replace(config, **casts, enable_fsdp_float8_all_gather=fsdp and recipe == "tensorwise")


def convert(model, recipe, fsdp=False, dtypes=None):
    """Swap the transformer blocks' nn.Linear layers of a GPT for Float8Linear (in place, the same
    Parameter objects), before compile, DDP or fully_shard. recipe: one of RECIPES; fsdp: the model is
    about to be sharded by FSDP2; dtypes: (e4m3, e5m2), float8_dtypes() by default.
    Returns (converted, total): how many of the model's linear layers now run in fp8."""
    from torchao.float8 import convert_to_float8_training
    from torchao.float8.float8_linear import Float8Linear
    config = _config(recipe, fsdp, dtypes or float8_dtypes())
    convert_to_float8_training(model.transformer.h, config=config, module_filter_fn=_fits_the_kernels)
    total = sum(isinstance(m, nn.Linear) for m in model.modules())
    return sum(isinstance(m, Float8Linear) for m in model.modules()), total


def describe(recipe, converted, total, fsdp=False):
    """The start-up log line of a converted model."""
    line = f"fp8 {recipe}: {converted} of {total} linear layers converted (the LM head and embeddings stay bf16)"
    if fsdp:
        line += ("; FSDP2 all-gathers their weights in fp8" if recipe == "tensorwise" else
                 "; FSDP2 all-gathers their weights in bf16 (torchao's fp8 all-gather is tensorwise only)")
    return line


def update_weight_scales(model):
    """Under FSDP2 with fp8 all-gather, every converted weight's scale for the next all-gather, from one
    all-reduce of their absolute maxima (else each weight all-reduces its own, in the forward). Call it
    after anything that changes the weights: each optimizer step, each checkpoint restore. Otherwise a no-op."""
    from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
    precompute_float8_dynamic_scale_for_fsdp(model)


def mfu_note(bf16_tflops, fp8_tflops):
    """The start-up note of an fp8 run: its MFU stays against the bf16 peak."""
    fp8 = f"{fp8_tflops:g} TFLOPS" if fp8_tflops else "unknown"
    return (f"note: mfu is against the bf16 peak ({bf16_tflops:g} TFLOPS) even with fp8, as peers report it; "
            f"the fp8 peak is {fp8}")


def fp32_attention_on_cpu(model, device_type, dtype):
    """For a bf16 run on the CPU, have the model's attention run in fp32 (q, k, v cast up, the result back):
    torch's CPU attention kernel is 3.7x slower in bf16 than in fp32, where the matmuls are several times
    faster in bf16 on a CPU with bf16 instructions (docs/performance.md, "bf16 on the CPU"). Only there: on
    a GPU bf16 attention is the fast one, and the memory simulations, whose CPU tensors stand for a GPU's,
    keep bf16."""
    for module in model.modules():
        if hasattr(module, "fp32_attention"):
            module.fp32_attention = device_type == "cpu" and dtype == "bfloat16"


def autocast_contexts(dtype, device_type, once):
    """(autocast, step, forward): the run's autocast (bf16 over fp32 weights, no loss scaling, or nothing), and
    the contexts around a step's micro-batches and around each forward; once (casts_once_per_step()): cast once
    per step. The plain autocast has no cast cache: with checkpointing it would keep every block's bf16 copy to
    the end of the forward (13.3 GB at 6.7B) for nothing."""
    autocast = torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=False) \
        if dtype == "bfloat16" else contextlib.nullcontext()
    return (autocast, *step_cast_contexts(device_type)) if once else (autocast, contextlib.nullcontext(), autocast)


def step_cast_contexts(device_type):
    """(step, forward): autocast contexts for around all of a step's micro-batches (forwards and
    backwards) and around each forward, for bf16 autocast over unsharded fp32 weights."""
    return (torch.autocast(device_type, dtype=torch.bfloat16, enabled=False, cache_enabled=True),
            torch.autocast(device_type, dtype=torch.bfloat16, cache_enabled=True))


def casts_once_per_step(policy, dtype, master_weights, sharded, compiled, fp8):
    """Whether train.py casts once per step: where there is something to cast (bf16 autocast over
    unsharded fp32 weights), where the cache reaches (eager blocks, no fp8: Float8Linear casts its own)
    and where it costs no memory: with no block recomputing ('none'), whose copies were kept for the
    backward anyway. A checkpointed block would hold its copies for the whole step (12.9 GB at 6.7B),
    which would push 'auto' to recompute more: ~1-3% of step time saved is not worth that."""
    return (dtype == "bfloat16" and master_weights == "float32" and not sharded and not compiled and not fp8
            and policy == "none")
