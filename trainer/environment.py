"""
What this machine's PyTorch must offer, checked before anything uses it, and compilation turned into
one line with the way out when it cannot run here.

requirements.txt states the oldest torch with every feature below. Vendor containers (ROCm's above
all) often ship older or patched builds whose version string says little about what they hold, so
each feature is probed itself rather than the version compared.
"""
import importlib
import os
import shutil

import torch


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
# memory.simulate) is not probed: importing it takes seconds of every train.py start, and any torch
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
