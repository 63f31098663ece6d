"""
This machine: what its PyTorch offers (checked before anything uses it), the C compiler and what a
compilation failure means, the CPU threads to use, which device and GPU this is, its dense bf16/fp8 peaks,
memory and attention kernel. The arithmetic of what a step costs (FLOPs, MFU, memory) is cost.py's.

requirements.txt states the oldest torch with every feature below. Vendor containers (ROCm's above
all) often ship older or patched builds whose version string says little about what they hold, so
each feature is probed itself rather than the version compared.
"""
import importlib
import os
import shutil
import sys
from dataclasses import dataclass

import torch
from torch.nn import functional as F


def _grad_dtype_works():
    # Without the feature, grad_dtype is a plain Python attribute: setting it raises nothing and bf16
    # weights would silently accumulate bf16 gradients. So ask what backward actually produces.
    w = torch.zeros(2, dtype=torch.bfloat16, requires_grad=True)
    try:
        w.grad_dtype = torch.float32
    except (AttributeError, RuntimeError, TypeError):  # a build whose Tensor refuses the attribute
        return False
    w.float().sum().backward()  # the cast's backward hands AccumulateGrad a bf16 gradient
    return w.grad.dtype == torch.float32


def _has(module, *names):
    def probe():
        try:
            found = importlib.import_module(module)
        except ImportError:
            return False
        for name in names:
            found = getattr(found, name, None)
        return found is not None
    return probe


# (what the code uses, where, the torch that introduced it, a probe), newest first. MemTracker (2.5,
# cost.simulate) is not probed: importing it takes seconds of every train.py start, and any torch
# with grad_dtype has it.
FEATURES = [
    ("Tensor.grad_dtype (fp32 gradients of bf16 weights, optim.py)", "2.10", _grad_dtype_works),
    ("torch.utils.serialization.config.save.use_pinned_memory_for_d2h (checkpoint.py)", "2.7",
     _has("torch.utils.serialization.config", "save", "use_pinned_memory_for_d2h")),
    ("torch.distributed.fsdp.fully_shard (FSDP2, train.py)", "2.6", _has("torch.distributed.fsdp", "fully_shard")),
    ("torch.utils.checkpoint.create_selective_checkpoint_contexts (model.py)", "2.4",
     _has("torch.utils.checkpoint", "create_selective_checkpoint_contexts")),
]


def missing_features():
    """[(feature, torch version that has it)] for each feature this torch lacks; [] if none."""
    return [(feature, version) for feature, version, probe in FEATURES if not probe()]


def torch_problem():
    """One line naming what this torch lacks and the version to install, or None."""
    missing = missing_features()
    if not missing:
        return None
    lacks = "; ".join(f"{feature}, new in torch {version}" for feature, version in missing)
    return (f"torch {torch.__version__} lacks {lacks}: install torch>={missing[0][1]} (the ROCm or CUDA wheel "
            f"for this machine, see README and requirements.txt)")


def c_compiler():
    """The C compiler Triton would build its kernels' launchers with, as it looks for one ($CC, else gcc,
    else clang), or None. Inductor's CPU kernels (torchao's optimizers on the CPU) need one too."""
    if os.environ.get("CC"):
        return shutil.which(os.environ["CC"])
    return shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")


def compiler_problem(compile):
    """compile=True with no C compiler here: one line with both ways out; else None."""
    if not compile or c_compiler():
        return None
    where = f"CC={os.environ['CC']!r} is not on PATH" if os.environ.get("CC") else "none of gcc, clang, cc is on PATH"
    return (f"compile=True needs a C compiler to build Triton's kernels and {where}: install gcc (or set CC), "
            f"or rerun with --compile=False")


def _causes(e):
    while e is not None:
        yield e
        e = e.__cause__ or e.__context__


def compile_failure(e):
    """One line for an exception that compilation caused (Dynamo's BackendCompilerFailed, inductor's
    InductorError, which derives from it, Triton's missing C compiler, or a stale graph from the cache), or
    None: then compilation is not to blame and the caller re-raises e."""
    from torch._dynamo.exc import BackendCompilerFailed  # import torch._dynamo only once something failed
    if line := stale_cache_failure(e):
        return line
    for cause in _causes(e):
        if "C compiler" in str(cause):
            return compiler_problem(True) or f"torch.compile found no usable C compiler ({_first_line(cause)}): " \
                                             f"install gcc (or set CC), or rerun with --compile=False"
        if isinstance(cause, BackendCompilerFailed):
            inner = getattr(cause, "inner_exception", cause)
            return (f"torch.compile failed on this machine ({type(inner).__name__}: {_first_line(inner)}): "
                    f"rerun with --compile=False (eager: slower, the same training)")
    return None


def stale_cache_failure(e):
    """One line for a compiled graph that torch's on-disk AOTAutograd cache served to tensors it was not
    compiled for, or None. DTensor's cache key is its spec (shape, placements) without its local tensor's
    type, so a graph compiled for FSDP's fp8 all-gather weights (a DTensor around torchao's
    WeightWithDynamicFloat8CastTensor) is a hit for plain DTensor weights of the same shapes, e.g. a low-bit
    optimizer's step; its wrapper then reads `._tensor` off a plain tensor (the class of pytorch/pytorch#188390,
    where the key leaves out the local tensor's device). A fresh cache compiles anew."""
    import traceback
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    for cause in _causes(e):
        frames = traceback.extract_tb(cause.__traceback__)
        if isinstance(cause, AttributeError) and frames and "_aot_autograd" in frames[-1].filename:
            stale = os.path.join(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir(), "aotautograd")
            return (f"a compiled graph from torch's cache does not fit this run's tensors ({_first_line(cause)}; "
                    f"a PyTorch cache-key defect, docs/troubleshooting.md): move the cache aside, "
                    f"mv {stale} {stale}.stale, and rerun")
    return None


def _first_line(e):
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def use_cpu_threads():
    """For a run on the CPU: set torch's intra-op threads and return the line saying how many. OMP_NUM_THREADS,
    where set (torchrun sets 1 per process), decides. Otherwise the cores not already busy, by the 1-minute
    load average, and at most torch's default of one per physical core: on a loaded machine every op's
    threads wait for the slowest of them, descheduled behind other work, so a tiny model's step gets slower
    with threads it cannot have (measured in docs/performance.md, "CPU threads")."""
    if os.environ.get("OMP_NUM_THREADS"):
        return f"CPU: {torch.get_num_threads()} thread(s), as OMP_NUM_THREADS says"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    threads = max(1, min(torch.get_num_threads(), int(cores - load + 0.5)))
    torch.set_num_threads(threads)
    return (f"CPU: {threads} thread(s) ({cores} cores, load average {load:.1f}: the idle ones, at most one a physical "
            "core); OMP_NUM_THREADS=N chooses")


@dataclass(frozen=True)
class GPU:
    name: str
    peak_tflops: float  # dense bf16, no sparsity
    memory_gb: float  # as the vendor names it: "192 GB", "141 GB"
    fp8_tflops: float | None = None  # dense fp8, no sparsity; None: no FP8 matrix units, or no published peak
    capability: tuple | None = None  # NVIDIA's compute capability (major, minor); precision.py's fp8 rule reads it
    gfx: str | None = None  # or AMD's gfx architecture
    memory_bytes: float | None = None  # what the card reports (nvidia-smi's MiB), where known

    @property
    def capacity_gb(self):
        """What the device holds in GB of 1e9 bytes: memory_bytes where the card's report is known (an H200's
        "141 GB" is 143,771 MiB = 150.75e9 bytes to nvidia-smi), else the vendor's GB read as GiB (an
        MI300X's "192 GB" 205.8e9)."""
        return (self.memory_bytes or self.memory_gb * 2**30) / 1e9


H200_BYTES = 143_771 * 2**20  # nvidia-smi's total on an H200 SXM and an H200 NVL: 150.75e9

# Keys are what plan.py's --gpu accepts. Peaks from the vendors' data sheets, dense: NVIDIA's sheets print
# the peaks with 2:4 sparsity, twice these, so the table holds them halved. fp8 is twice bf16 on all of
# them: MI300X's 304 CUs x 4,096 fp8 FLOPs a clock x 2.1 GHz = 2614.9, MI300A's 228 CUs 1961.2 (AMD's
# data sheet), H100's 1978.9.
# The NVL parts (PCIe cards, lower clocks): NVIDIA's H200 Tensor Core GPU datasheet (November 2024, the
# edition with the H200 NVL column) and its H100 Tensor Core GPU datasheet (the edition with the 94 GB H100
# NVL column, 2023-2024) print 1,671 TFLOPS bf16 and 3,341 fp8 with sparsity for each: 835.5 and 1670.5 dense.
# These were not found in this project's offline search corpus and are quoted from those documents as
# published; check them against the sheet before relying on an MFU to the percent.
GPUS = {
    "mi325x": GPU("AMD Instinct MI325X", 1307.4, 256, fp8_tflops=2614.9, gfx="gfx942"),
    "mi300x": GPU("AMD Instinct MI300X", 1307.4, 192, fp8_tflops=2614.9, gfx="gfx942"),
    "mi300a": GPU("AMD Instinct MI300A", 980.6, 128, fp8_tflops=1961.2, gfx="gfx942"),
    "mi250x": GPU("AMD Instinct MI250X (one GCD)", 191.5, 64, gfx="gfx90a"),  # PyTorch sees each half as a device
    "h200": GPU("NVIDIA H200", 989.4, 141, fp8_tflops=1978.9, capability=(9, 0), memory_bytes=H200_BYTES),
    "h200-nvl": GPU("NVIDIA H200 NVL", 835.5, 141, fp8_tflops=1670.5, capability=(9, 0), memory_bytes=H200_BYTES),
    "h100": GPU("NVIDIA H100 SXM", 989.4, 80, fp8_tflops=1978.9, capability=(9, 0)),
    "h100-nvl": GPU("NVIDIA H100 NVL", 835.5, 94, fp8_tflops=1670.5, capability=(9, 0)),
    "h100-pcie": GPU("NVIDIA H100 PCIe", 756.0, 80, fp8_tflops=1513.0, capability=(9, 0)),
    "a100": GPU("NVIDIA A100 80GB", 312.0, 80, capability=(8, 0)),
    "a100-40gb": GPU("NVIDIA A100 40GB", 312.0, 40, capability=(8, 0)),
    "l40s": GPU("NVIDIA L40S", 362.05, 45, capability=(8, 9)),  # "48 GB" of GDDR6, 46,068 MiB usable with ECC on
    "a6000": GPU("NVIDIA RTX A6000", 154.8, 48, capability=(8, 6)),
    "rtx4090": GPU("NVIDIA GeForce RTX 4090", 165.2, 24, capability=(8, 9)),
}
GPUS["a100-80gb"] = GPUS["a100"]

# An MI300X or MI325X splits into 2, 4 or 8 GPUs of 152, 76 or 38 CUs (AMD's DPX, QPX and CPX compute
# partition modes: 4, 2 or 1 of its 8 XCDs each), and ROCm names each one as the whole chip. A partition
# has its CUs' share of the peak, and of the memory when every partition trains. An MI300A's partitions
# (of its 6 XCDs) are not in the table: their MFU says n/a, never the whole chip's.
_CHIP_CUS = {"mi300x": 304, "mi325x": 304, "mi300a": 228}
_PARTITION_MODES = {"dpx": 2, "qpx": 4, "cpx": 8}
for _chip in ("mi300x", "mi325x"):
    for _mode, _n in _PARTITION_MODES.items():
        _whole = GPUS[_chip]
        GPUS[f"{_chip}-{_mode}"] = GPU(f"{_whole.name} ({_mode.upper()} partition, 1/{_n})", _whole.peak_tflops / _n,
                                       _whole.memory_gb / _n, fp8_tflops=_whole.fp8_tflops / _n, gfx=_whole.gfx)

# ROCm names are not always informative ('AMD Instinct MI300X VF', or a generic
# 'AMD Radeon Graphics'), so the gfx architecture and compute-unit count decide:
# gfx942 is the MI300 series, 304 CUs for MI300X (and MI325X, same peak), 228 for MI300A.
_GFX_CUS = {("gfx942", 304): "mi300x", ("gfx942", 228): "mi300a", ("gfx90a", 110): "mi250x"}

# Substrings of the device name, most specific first. None: a variant with another peak that
# the table lacks (other NVL parts run at other clocks), so MFU says n/a rather than guess.
_NAME_PATTERNS = [
    ("mi325x", "mi325x"), ("mi300x", "mi300x"), ("mi300a", "mi300a"), ("mi250x", "mi250x"),
    ("h200 nvl", "h200-nvl"), ("h100 nvl", "h100-nvl"), ("nvl", None), ("h200", "h200"), ("h100 pcie", "h100-pcie"), ("h100", "h100"),
    ("a100-sxm4-40gb", "a100-40gb"), ("a100-pcie-40gb", "a100-40gb"), ("a100", "a100"),
    ("l40s", "l40s"), ("rtx a6000", "a6000"), ("4090", "rtx4090"),
]


def identify_gpu(name, gfx_arch=None, compute_units=None):
    """The GPUS key for a device, or None when it is not one we know the peak of. The name
    decides when it is specific; a generic ROCm name falls back to gfx architecture and CUs.
    An MI300X or MI325X with fewer CUs than the chip is one of its partitions, whatever its name."""
    key = _key_by_name(name.lower())
    if key is None and gfx_arch:
        key = _GFX_CUS.get((gfx_arch.split(":")[0], compute_units))
    if key in _CHIP_CUS and compute_units and compute_units != _CHIP_CUS[key]:
        return _partition(key, compute_units)
    return key


def _key_by_name(lowered):
    return next((key for pattern, key in _NAME_PATTERNS if pattern in lowered), None)


def _partition(chip, compute_units):
    """The GPUS key of chip's partition of compute_units CUs, or None where the table has none."""
    mode = next((m for m, n in _PARTITION_MODES.items() if n * compute_units == _CHIP_CUS[chip]), None)
    return f"{chip}-{mode}" if f"{chip}-{mode}" in GPUS else None


def resolve_device(name, index=0):
    """(device, device_type) for a --device value: 'auto' is the GPU if PyTorch sees one, else the
    CPU; a bare 'cuda' becomes 'cuda:<index>' (under torchrun, each process its own GPU). ROCm's
    GPUs are 'cuda' to PyTorch too."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        name = f"cuda:{index}"
    return name, "cuda" if name.startswith("cuda") else name


def use_device(name, index=0):
    """(device, device_type, problem or None) for a --device value (resolve_device), made the current one:
    under torchrun nothing may touch GPU 0 from another rank. TF32 matmuls on where there are GPUs."""
    device, device_type = resolve_device(name, index)
    if problem := device_problem(device):
        return device, device_type, problem
    if device_type == "cuda":
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return device, device_type, None


def device_problem(device):
    """Why a resolved device (resolve_device's first value) cannot run here, as one line, or None."""
    if device == "cpu":
        return None
    if device == "mps":
        return None if torch.backends.mps.is_available() else "device=mps: this machine has no MPS (Apple GPU); use cpu"
    index = device.removeprefix("cuda:")
    if not device.startswith("cuda:") or not index.isdigit():
        return f"device={device!r} is not a device: use auto, cpu, cuda, cuda:N or mps"
    if not torch.cuda.is_available():
        build = f"ROCm {torch.version.hip}" if torch.version.hip else (f"CUDA {torch.version.cuda}" if torch.version.cuda
                                                                       else "a CPU-only build")
        return (f"device={device}: PyTorch {torch.__version__} ({build}) sees no GPU here: install the ROCm or CUDA "
                f"build for this machine (docs/training.md, Install) or use device=cpu")
    if int(index) >= torch.cuda.device_count():
        return f"device={device}: there are only {torch.cuda.device_count()} GPU(s) here, cuda:0 to cuda:{torch.cuda.device_count() - 1}"
    return None


def memory_capacity(device):
    """Bytes the device holds: the GPU's memory, or the host's RAM for a CPU (or MPS) run."""
    if str(device).startswith("cuda"):
        return torch.cuda.get_device_properties(device).total_memory
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def synchronize(device):
    """Wait for the work queued on a GPU, so that a time taken next holds its kernels; the CPU runs eagerly."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def percent(fraction):
    """A utilisation for a log line; 'n/a' where the peak is unknown."""
    return "n/a" if fraction is None else f"{100 * fraction:.1f}%"


def local_gpu(device_index=0):
    """(description, GPUS key or None) for the visible GPU; (None, None) without one."""
    if not torch.cuda.is_available():
        return None, None
    props = torch.cuda.get_device_properties(device_index)
    gfx = getattr(props, "gcnArchName", None) if torch.version.hip else None
    key = identify_gpu(props.name, gfx, props.multi_processor_count)
    description = props.name + (f" ({gfx}, {props.multi_processor_count} CUs)" if gfx else "")
    return description, key


def peaks(peak_tflops, device_type, device_index=0):
    """(bf16 TFLOPS for MFU: the config's peak_tflops, else the visible GPU's, else 0; its fp8 TFLOPS or None;
    a line naming the GPU and its peak, or None without one). Unknown hardware says so instead of guessing."""
    if device_type != "cuda":
        return peak_tflops, None, None
    description, key = local_gpu(device_index)
    peak = peak_tflops or (GPUS[key].peak_tflops if key else 0.0)
    line = f"GPU: {description}; peak bf16 {peak or 'unknown (set peak_tflops for MFU)'} TFLOPS"
    return peak, GPUS[key].fp8_tflops if key else None, line


def to_device(tensor, device):
    """A host tensor on device; on a GPU through pinned memory, so the copy is asynchronous and the CPU
    goes on queueing work."""
    if str(device).startswith("cuda"):
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def attention_backend(device, dtype, n_head, head_dim, seq_len):
    """The scaled_dot_product_attention kernel ('flash', 'efficient', 'cudnn' or 'math') that runs
    for model.py's attention call at these shapes, read off the grad_fn it leaves. The math kernel
    keeps the T x T attention matrix: GBs more at 6.7B, and slower."""
    # q, k, v laid out as model.py lays them out: views of one (B, T, 3C) tensor, transposed
    qkv = torch.randn(1, seq_len, 3 * n_head * head_dim, device=device, dtype=dtype, requires_grad=True)
    q, k, v = (t.view(1, seq_len, n_head, head_dim).transpose(1, 2) for t in qkv.split(n_head * head_dim, dim=2))
    name = type(F.scaled_dot_product_attention(q, k, v, is_causal=True).grad_fn).__name__
    for kernel in ("Flash", "Efficient", "Cudnn"):
        if kernel in name:
            return kernel.lower()
    return "math"


def peak_memory(device_type):
    """Peak memory for the step record, in bytes: on a GPU since the last call, allocated by tensors and
    reserved by the caching allocator (what really runs out; fragmentation is the difference), and always
    the host's: the process's peak resident memory since it started (pinned memory included), as the OS
    keeps no peak that can be reset."""
    import resource

    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    peak = {"host_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit}
    if device_type == "cuda":
        peak.update(allocated=torch.cuda.max_memory_allocated(), reserved=torch.cuda.max_memory_reserved())
        torch.cuda.reset_peak_memory_stats()
    return peak


def peak_memory_text(peak, host=False):
    """peak_memory()'s figures for the step line: the GPU's, and the host's too where it matters
    (host=True: optimizer_offload) or where there is no GPU."""
    rss = f"{peak['host_rss'] / 1e9:.1f}GB RSS"
    if "allocated" not in peak:
        return rss
    text = f"{peak['allocated'] / 1e9:.1f}GB, reserved {peak['reserved'] / 1e9:.1f}GB"
    return text + (f", host {rss}" if host else "")
