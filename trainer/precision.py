"""
FP8 training (`fp8`): torchao's Float8Linear in place of the transformer blocks' nn.Linear layers.

A converted layer casts its input, its weight and (in backward) its output's gradient to 8-bit floats
with dynamic scales, multiplies them with torch._scaled_mm and returns a bf16 result. 'tensorwise' is one
scale per tensor, e4m3 forward and e5m2 for gradients (the fastest); 'rowwise' one scale per row, e4m3
throughout, scales rounded to powers of 2 (closer to bf16, slower kernels). These are torchao's own
recipes (Float8LinearConfig.from_recipe_name); only the float8 flavour is set here (below).

What stays in bf16: the LM head (tied to the token embedding, and the logits are where precision matters
most), the embeddings, LayerNorms and attention, and any layer whose features are not multiples of 16
(what torch._scaled_mm needs). The weights stay ordinary parameters (fp32, or bf16 master_weights):
Float8Linear only casts them on the fly, so state_dict keys and tensors are those of a plain GPT and a
checkpoint resumes, exports and samples alike with fp8 on or off.

Float8 comes in two flavours: the OCP one (float8_e4m3fn / float8_e5m2: NVIDIA, AMD MI350) and AMD's
fnuz one (float8_e4m3fnuz / float8_e5m2fnuz), the only one the MI300 series' matrix cores take. torchao
picks fnuz on an MI300 by itself, once, when it is imported; it is set explicitly here, per model, so
that a test can ask for fnuz on the CPU and a run never depends on import order.

Under FSDP2, tensorwise weights are all-gathered in fp8 (torchao's enable_fsdp_float8_all_gather: half
the traffic of bf16), and update_weight_scales() then computes every weight's scale in one all-reduce
after each change of the weights. torchao's fp8 all-gather is tensorwise only: rowwise weights are
all-gathered in bf16 (FSDP2's mixed precision) and cast after.
"""
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
    the rule train.py applies to its device (device_problem) and plan.py to a card of hardware.GPUS."""
    if has_fp8_units(capability, gfx_arch):
        return None
    arch = gfx_arch.split(":")[0] if gfx_arch else f"sm_{capability[0]}{capability[1]}"
    return (f"fp8: the {name} ({arch}) has no FP8 matrix units (NVIDIA's start at sm_89, Ada and Hopper; "
            f"AMD's at gfx942, the MI300 series): set fp8='' to train in bf16")


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
