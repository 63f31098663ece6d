"""
Generation with model.py's KV cache (what sample.py uses) against regenerating from the full
context at every new token (use_cache=False). Not a test; the target is >= 5x.

    python scripts/bench/bench_sample.py [--new_tokens 256] [--prompt_tokens 256] [--repeat 2]

A randomly initialised 6-layer, 384-wide, 6-head model with a 512-token context and GPT-2's
padded vocabulary. The prompt plus the new tokens fill the context exactly, so the cache never
slides and the uncached side feeds 256..511 tokens per new token. Rounds alternate the two, and
the fastest of each counts, so load from elsewhere on the machine hits both alike.

Where a cached decode step's time goes (torch.profiler, 1 thread, 2026-12-02, a loaded 2-core EPYC): the
matmuls, 78%, the LM head over the whole vocabulary the largest of them (7 of 24 ms: its 77 MB of fp32
weights read for one token); the cache's concatenation took 21% until the cache was written in place
(model.KVCache). With torch's 2 threads on a loaded machine every op waited for a descheduled thread:
307 ms a step against 28 ms with one, which is why sample.py takes machine.use_cpu_threads()'s
count; OMP_NUM_THREADS=N sets this benchmark's.

The measured ratio is in docs/performance.md (CPU ratios).
"""
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from trainer import cli  # noqa: E402
from model import GPT, GPTConfig  # noqa: E402


def timed_generate(model, prompt, new_tokens, use_cache, seed):
    torch.manual_seed(seed)  # the same sampling draws on both sides
    t0 = time.perf_counter()
    model.generate(prompt, new_tokens, temperature=1.0, top_k=200, use_cache=use_cache)
    return time.perf_counter() - t0


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--new_tokens", type=int, default=256)
    p.add_argument("--prompt_tokens", type=int, default=256)
    p.add_argument("--block_size", type=int, default=512)
    p.add_argument("--vocab_size", type=int, default=50304)
    p.add_argument("--repeat", type=int, default=2, help="rounds of both, the fastest of each counts (default 2)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(sys.argv[1:] if argv is None else argv)
    if args.prompt_tokens < 1 or args.new_tokens < 1 or args.repeat < 1 or \
            args.prompt_tokens + args.new_tokens > args.block_size:
        p.error("need --prompt_tokens, --new_tokens and --repeat >= 1, and prompt + new tokens <= --block_size "
                "(past it both sides slide their window, which is not what this measures)")

    torch.manual_seed(0)
    with torch.device(args.device):
        model = GPT(GPTConfig(n_layer=6, n_head=6, n_embd=384, block_size=args.block_size,
                              vocab_size=args.vocab_size, bias=False)).eval()
        prompt = torch.randint(0, args.vocab_size, (1, args.prompt_tokens))
    print(f"{model.get_num_params() / 1e6:.1f}M parameters, {args.prompt_tokens}-token prompt + "
          f"{args.new_tokens} new tokens, {args.device}, {torch.get_num_threads()} threads")
    cached, full = [], []
    for _ in range(args.repeat):
        cached.append(timed_generate(model, prompt, args.new_tokens, True, seed=1))
        full.append(timed_generate(model, prompt, args.new_tokens, False, seed=1))
    print(f"with the KV cache:         {args.new_tokens / min(cached):8.1f} tokens/s ({min(cached):.2f}s)")
    print(f"full-context regeneration: {args.new_tokens / min(full):8.1f} tokens/s ({min(full):.2f}s)")
    print(f"ratio: {min(full) / min(cached):.1f}x (target >= 5x)")


if __name__ == "__main__":
    main()
