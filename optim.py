"""
The optimizer a config asks for (`optimizer`), and what its state costs.

'adamw' is PyTorch's AdamW (fused on GPUs, ROCm included): two fp32 moments, 8 bytes a parameter.
'adamw8bit' and 'adamw4bit' are torchao's block-wise quantized AdamW: each moment is stored in 8 or
4 bits with one fp32 scale per block of 256 values, ~2 or ~1 byte a parameter, dequantized, updated
in fp32 and quantized again inside the step (torchao compiles it with torch.compile, so it runs
wherever PyTorch's inductor does: CUDA, ROCm, and the CPU with a C++ compiler). Parameters under
4,096 values (biases, LayerNorm gains) keep fp32 moments. Weights, gradients and their accumulation
over micro-batches stay fp32 in every mode; only the moments shrink.

torchao rather than bitsandbytes: it is PyTorch's own, its optimizers are plain torch code (no
vendor kernels to build for ROCm), they accept FSDP2's DTensor parameters, and their state is a
tensor subclass that torch.save / torch.load(weights_only=True) handle once torchao is imported.
"""
import inspect

import torch

OPTIMIZERS = ("adamw", "adamw8bit", "adamw4bit")
BLOCK = 256  # values per quantization scale
# bytes of optimizer state per parameter: two moments, plus a 4-byte scale per block for each
STATE_BYTES = {"adamw": 8.0, "adamw8bit": 2 * (1 + 4 / BLOCK), "adamw4bit": 2 * (0.5 + 4 / BLOCK)}


def param_groups(model, weight_decay):
    """Weight decay on 2-D tensors (matmul weights, embeddings), none on biases and LayerNorm gains."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def build(model, name, weight_decay, learning_rate, betas, device_type):
    """The optimizer `name` (one of OPTIMIZERS) over model's parameters."""
    groups = param_groups(model, weight_decay)
    if name == "adamw":
        fused = device_type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra = {"fused": True} if fused else {"foreach": device_type != "cpu"}
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)
    from torchao.optim import AdamW4bit, AdamW8bit
    cls = {"adamw8bit": AdamW8bit, "adamw4bit": AdamW4bit}[name]
    return cls(groups, lr=learning_rate, betas=betas, block_size=BLOCK)


def set_lr(optimizer, lr):
    """The learning rate of every group; torchao's low-bit AdamW keeps it as a tensor (so that a new
    value does not recompile its step), to be filled in place."""
    for group in optimizer.param_groups:
        if torch.is_tensor(group["lr"]):
            group["lr"].fill_(lr)
        else:
            group["lr"] = lr
