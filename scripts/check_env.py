"""
Check a machine before spending GPU-hours on it:

    python scripts/check_env.py config/train_gpt3_6b.py [--key=value ...]

The PyTorch features the trainer needs (first: without them nothing else can be checked), the GPU
PyTorch sees (CUDA or ROCm/HIP, name, gfx arch, memory), host memory for offload and async saves, bf16, which attention kernel really runs
for the config's shapes, fused AdamW, torch.compile (with compile=True), free disk for the
checkpoints, and the data bins. Each line starts with ok, WARN, FAIL, or -- for what this machine cannot check (on a
CPU-only machine: everything about the GPU). Exits 1 if anything FAILs.
"""
import inspect
import math
import os
import shutil
import signal
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer import machine  # noqa: E402  (needs the repo root on sys.path first)

if problem := machine.torch_problem():  # before the imports below, which use these features
    print(f"FAIL  {problem}", flush=True)
    sys.exit(1)
from trainer import bins  # noqa: E402
from trainer import checkpoint  # noqa: E402
import configurator  # noqa: E402
from trainer import machine  # noqa: E402
from trainer import cost  # noqa: E402
import plan  # noqa: E402  (scripts/plan.py, beside this file)
from model import Block, GPTConfig  # noqa: E402

failures = []


def gb(nbytes):
    return f"{nbytes / 1e9:,.1f} GB" if nbytes >= 1e9 else f"{nbytes / 1e9:.3f} GB"


def report(status, message):
    if status == "FAIL":
        failures.append(message)
    print(f"{status:<4}  {message}", flush=True)


def check_settings(cfg, processes):
    """What train.py refuses before it starts (configurator.check, for this many processes), and a sharded strategy
    checked for one process, whose memory is then a whole model's, not a shard's."""
    if problem := configurator.check(cfg, processes, "WORLD_SIZE" in os.environ):
        report("FAIL", f"settings: {problem}")
    elif cfg.strategy in ("fsdp", "hsdp") and processes == 1:
        report("WARN", f"strategy={cfg.strategy} checked for one process: WORLD_SIZE=N python "
                       "scripts/check_env.py ... checks each of the job's N GPUs' share of the memory")
    else:
        report("ok", f"settings: as train.py checks them, for {processes} process(es)")


def check_torch():
    if torch.version.hip:
        build = f"ROCm/HIP {torch.version.hip}"
    elif torch.version.cuda:
        build = f"CUDA {torch.version.cuda}"
    else:
        build = "CPU only: install the ROCm (MI300X) or CUDA (H100/H200) wheel to train on a GPU"
    report("ok" if torch.version.hip or torch.version.cuda else "WARN", f"torch {torch.__version__}, {build}")


def check_gpu(cfg, needed_gb):
    """The device, its memory against what plan.py says the config needs, and bf16. False without a GPU."""
    if not torch.cuda.is_available():
        report("--", "no GPU visible to PyTorch (CUDA and ROCm both answer through torch.cuda): cannot check "
                     "the device, its memory, bf16 or fused AdamW; the attention check below runs on the CPU")
        return False
    props = torch.cuda.get_device_properties(0)
    description, key = machine.local_gpu()
    arch = f"compute capability {props.major}.{props.minor}" if torch.version.cuda else ""
    report("ok" if key else "WARN", f"{torch.cuda.device_count()} x {description} {arch}: "
           + (f"peak bf16 {machine.GPUS[key].peak_tflops:g} TFLOPS" if key else
              "unknown peak: set --peak_tflops for MFU, and plan.py --gpu for the nearest known GPU"))
    free, total = torch.cuda.mem_get_info(0)
    status = "ok" if needed_gb * 1e9 <= free else "FAIL"
    report(status, f"GPU memory: {gb(total)}, {gb(free)} free; this config needs about "
                   f"{gb(needed_gb * 1e9)} (scripts/plan.py)")
    bf16 = torch.cuda.is_bf16_supported()
    if cfg.dtype == "bfloat16":
        report("ok" if bf16 else "FAIL", f"bf16 {'supported' if bf16 else 'NOT supported'} (dtype={cfg.dtype})")
    return True


def check_device(cfg, needed_gb):
    """The device the config asks for exists here; a CPU run also needs the config to fit host RAM."""
    device, device_type = machine.resolve_device(cfg.device)
    problem = machine.device_problem(device)
    if problem:
        report("FAIL", problem)
    elif device_type == "cpu":
        ram = machine.memory_capacity("cpu")
        report("ok" if needed_gb * 1e9 <= ram else "FAIL",
               f"device=cpu: host RAM {gb(ram)}; this config needs about {gb(needed_gb * 1e9)} (scripts/plan.py)")
    else:
        report("ok", f"device={cfg.device}: {device}")


def check_host(host_gb):
    """The host memory plan.py estimates (offload's state, async checkpoint staging, batches, runtime) against
    this machine's, by train.py's own rule (cost.host_problem); a WARN where other processes hold too much now."""
    estimate = {k: v * 1e9 for k, v in host_gb.items()}
    if problem := cost.host_problem(estimate):
        report("FAIL", problem)
        return
    available = available_memory()
    busy = available is not None and estimate["total"] > available
    report("WARN" if busy else "ok", cost.host_line(estimate) + (
        f"; only {gb(available)} is available now (MemAvailable): other processes hold the rest" if busy else ""))


def available_memory():
    """/proc/meminfo's MemAvailable in bytes, or None where there is none (macOS)."""
    try:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        return None


def check_attention(cfg, on_gpu, math_extra_gb):
    dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
    head_dim = cfg.n_embd // cfg.n_head
    if on_gpu:
        backend = machine.attention_backend("cuda", dtype, cfg.n_head, head_dim, cfg.block_size)
        where = "on the GPU"
    else:  # a short sequence keeps the CPU check quick; the kernel choice depends on head_dim and dtype
        backend = machine.attention_backend("cpu", dtype, 1, head_dim, min(cfg.block_size, 256))
        where = "on the CPU (the GPU may choose differently: run this there)"
    if backend == "math":
        report("FAIL" if on_gpu else "WARN",
               f"attention runs the math kernel {where} for head_dim {head_dim}, {cfg.dtype}: it keeps the "
               f"T x T attention matrix, about {math_extra_gb:.1f} GB more for this config (scripts/plan.py)")
    else:
        report("ok", f"attention runs the {backend} kernel {where} for head_dim {head_dim}, {cfg.dtype}")


def check_fused_adamw(on_gpu):
    if not on_gpu:
        report("--", "fused AdamW: needs a GPU to check (train.py uses the foreach AdamW on the CPU)")
        return
    if "fused" not in inspect.signature(torch.optim.AdamW).parameters:
        report("FAIL", f"this torch {torch.__version__} has no fused AdamW: the foreach fallback needs ~4 B/param "
                       f"of temporaries more than scripts/plan.py counts; upgrade torch")
        return
    p = torch.zeros(8, device="cuda", requires_grad=True)
    p.grad = torch.ones_like(p)
    try:
        torch.optim.AdamW([p], fused=True).step()
    except RuntimeError as e:
        report("FAIL", f"fused AdamW does not run here: {str(e).splitlines()[0]}")
        return
    report("ok", "fused AdamW runs")


def check_compile(cfg, on_gpu):
    """compile=True: a C compiler for Triton's kernels, then a small block compiled as train.py compiles
    each one and run forward and backward (ROCm's inductor may fail where CUDA's works)."""
    if not cfg.compile:
        report("--", "torch.compile: off (compile=False), the model runs eagerly")
        return
    if problem := machine.compiler_problem(cfg.compile):
        report("FAIL", problem)
        return
    if not on_gpu:
        report("--", f"torch.compile: a C compiler is here ({machine.c_compiler()}); compiling for the GPU "
                     f"needs a GPU to check")
        return
    dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
    block = Block(GPTConfig(n_layer=1, n_head=2, n_embd=128, block_size=64, bias=cfg.bias)).cuda()
    block.compile()
    x = torch.randn(2, 64, 128, device="cuda", requires_grad=True)
    try:
        with torch.autocast("cuda", dtype=dtype, enabled=dtype == torch.bfloat16):
            block(x).sum().backward()
        torch.cuda.synchronize()
    except Exception as e:  # whatever fails here fails at train.py's first step
        report("FAIL", machine.compile_failure(e) or
               f"torch.compile does not run here ({type(e).__name__}: {str(e).strip().splitlines()[0]}): "
               f"rerun with --compile=False")
        return
    report("ok", "torch.compile: a block compiles and runs forward and backward")


def check_disk(cfg, checkpoint_gb):
    """Room for keep_last_n checkpoints plus the one being written (rotation deletes only after it is complete)."""
    existing = len(checkpoint.list_checkpoints(cfg.out_dir))
    if cfg.checkpoint_interval <= 0:
        report("--", "disk for checkpoints: none needed, checkpoint_interval=0 turns saving off")
        return
    if cfg.keep_last_n <= 0:
        saves = math.ceil(cfg.max_iters / cfg.checkpoint_interval)
        need, why = max(saves - existing, 1), f"keep_last_n={cfg.keep_last_n} keeps every one of ~{saves} saves"
    else:
        need, why = max(cfg.keep_last_n + 1 - existing, 1), f"keep_last_n={cfg.keep_last_n} + 1 being written"
    folder = os.path.abspath(cfg.out_dir)
    while not os.path.isdir(folder):  # out_dir is created at the first run: ask its nearest existing parent
        folder = os.path.dirname(folder)
    free = shutil.disk_usage(folder).free
    status = "ok" if free >= need * checkpoint_gb * 1e9 else "FAIL"
    report(status, f"disk for {cfg.out_dir}: {gb(free)} free; needs {need} more checkpoint(s) of "
                   f"{gb(checkpoint_gb * 1e9)} = {gb(need * checkpoint_gb * 1e9)} ({why}, {existing} there now)")


def check_data(cfg, tokens_needed):
    for data_dir, share in bins.folders(cfg).items():  # data_dir, or each source of a data_mixture
        check_folder(cfg, data_dir, share * tokens_needed)


def check_folder(cfg, data_dir, tokens_needed):
    key = "data_mixture" if cfg.data_mixture else None  # which setting named the folder, for the advice
    try:
        meta = bins.read_meta(data_dir) if os.path.isdir(data_dir) else None
    except bins.BinError as e:  # a meta.json cut short: what train.py would refuse
        report("FAIL", str(e))
        return
    for split in bins.SPLITS:
        try:  # the checks train.py makes at start-up
            tokens = bins.open_split(data_dir, split, cfg.block_size, cfg.vocab_size, key=key).num_tokens
        except bins.BinError as e:
            report("FAIL", str(e))
            continue
        epochs = tokens_needed / tokens
        extra = f", {epochs:,.2f} epochs to max_iters" if split == "train" else ""
        many = split == "train" and epochs > bins.MAX_REPEATS  # repeated that often, data stops helping
        report("WARN" if many else "ok", f"{bins.bin_path(data_dir, split)}: {tokens:,} tokens ({gb(2 * tokens)})"
               f"{extra}" + (": the data is far smaller than the run; prepare more, or lower max_iters" if many else ""))
    if meta is None and os.path.isfile(bins.bin_path(data_dir, "train")):
        report("WARN", f"{data_dir} has no meta.json: its encoding is unknown (sample.py will need --encoding)")
    elif meta:
        report("ok", f"{data_dir} was prepared with the {meta['encoding']!r} encoding ({meta['vocab_size']} ids)")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] in (["-h"], ["--help"]):
        print(__doc__.strip())
        return
    cfg = configurator.load_config_or_exit(argv)
    failures.clear()
    gpu_key = plan.default_gpu()
    processes = int(os.environ.get("WORLD_SIZE", "1"))  # the job's, set by hand (or torchrun's); else one
    try:
        p = plan.make_plan(cfg, gpu_key, 0.4, 0.0, processes)
    except ValueError as e:  # GPTConfig's check of the shapes
        print(f"check_env: error: {e}", file=sys.stderr)
        sys.exit(2)
    check_settings(cfg, processes)
    check_torch()
    check_device(cfg, p["memory_gb"]["total"])
    on_gpu = check_gpu(cfg, p["memory_gb"]["total"])
    check_host(p["host_memory_gb"])
    check_attention(cfg, on_gpu, p["math_attention_extra_gb"])
    check_fused_adamw(on_gpu)
    check_compile(cfg, on_gpu)
    check_disk(cfg, p["checkpoint_gb"])
    check_data(cfg, p["total_tokens"])
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly, as a Unix tool
    main()
