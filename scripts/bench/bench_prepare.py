"""
Prepare throughput against the fastest raw tiktoken encoding of the same text on the same cores.

    python scripts/bench/bench_prepare.py --encoding .cache/gpt2.tiktoken        # offline GPT-2
    python scripts/bench/bench_prepare.py --input my.jsonl --encoding gpt2

(a) raw: the texts already in memory, encoded to numpy arrays by a pool of --num_proc threads
    (tiktoken's Rust core releases the GIL). This is the strongest in-process setting: tiktoken's own
    encode_ordinary_batch builds a Python list of ints per document, and by default runs 8 threads
    whatever the core count; both are shown for reference.
(b) the whole job, end to end as a user runs it: data/pile/prepare.py --num_proc <cores> on the same
    texts as a .jsonl file, interpreter start, reading, encoding, writing and committing included.
Then where the job's time beyond encoding goes: each stage it adds, timed alone on one core.
Without --input the corpus is real text: Python's standard-library sources, one document per file,
repeated up to --megabytes. Not a test: the numbers depend on the machine and what else it runs.
"""
import argparse
import glob
import json
import os
import pickle
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, REPO)
from trainer import cli  # noqa: E402
from trainer.bins import BinWriter  # noqa: E402
from trainer.preparation import CHUNK_RECORDS, available_cores, is_val  # noqa: E402
from trainer.tokenizer import get_encoding  # noqa: E402


def make_corpus(path, megabytes):
    stdlib = sysconfig.get_paths()["stdlib"]
    texts = []
    for name in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        if "-packages" not in name:
            with open(name, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
    size, i = 0, 0
    with open(path, "w") as f:
        while size < megabytes * 1e6:
            text = texts[i % len(texts)]
            f.write(json.dumps({"text": text}) + "\n")
            size, i = size + len(text.encode()), i + 1


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def job_seconds(command, out_dir):
    return timed(lambda: subprocess.run([*command, "--data_dir", out_dir], check=True, capture_output=True))


def stage_seconds(lines, texts, encoded, tmp, vocab_size):
    """The work prepare.py does besides encoding, each on one core: what its processes add to (a)."""
    chunks = [lines[i:i + CHUNK_RECORDS] for i in range(0, len(lines), CHUNK_RECORDS)]
    arrays = [np.concatenate(encoded[i:i + CHUNK_RECORDS]).astype(np.uint16)
              for i in range(0, len(encoded), CHUNK_RECORDS)]

    def write():
        writer = BinWriter(tmp, vocab_size)
        for a in arrays:
            writer.append("train", a)
        writer.sync()
        writer.close()

    return {
        "JSON parsing": timed(lambda: [json.loads(line) for line in lines]),
        "train/val hash": timed(lambda: [is_val(t, 0.0005) for t in texts]),
        "uint16 arrays": timed(lambda: [np.concatenate(encoded[i:i + CHUNK_RECORDS]).astype(np.uint16)
                                        for i in range(0, len(encoded), CHUNK_RECORDS)]),
        "hand-off (pickle both ways)": timed(lambda: [pickle.loads(pickle.dumps(x, -1)) for x in chunks + arrays]),
        "writing + fsync": timed(write),
    }


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="a .jsonl file with a 'text' field (default: Python's stdlib sources)")
    p.add_argument("--megabytes", type=float, default=95, help="size of the generated corpus (default: %(default)s)")
    p.add_argument("--encoding", default="gpt2")
    p.add_argument("--num_proc", type=int, default=available_cores())
    p.add_argument("--repeat", type=int, default=3, help="best of this many runs of each (default: %(default)s)")
    args = p.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.input or os.path.join(tmp, "corpus.jsonl")
        if not args.input:
            make_corpus(corpus, args.megabytes)
        with open(corpus, "rb") as f:
            lines = f.read().splitlines()
        texts = [json.loads(line)["text"] for line in lines]
        encoding = get_encoding(args.encoding)
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        print(f"{len(texts):,} documents, {megabytes:.1f} MB of text, encoding {args.encoding}, "
              f"{args.num_proc} cores")

        def numpy_threads():
            with ThreadPoolExecutor(args.num_proc) as pool:
                return list(pool.map(encoding.encode_ordinary_numpy, texts))

        encoded = numpy_threads()
        tokens = sum(len(ids) + 1 for ids in encoded)  # +1: end-of-text
        job = [sys.executable, os.path.join(REPO, "data/pile/prepare.py"), "--source", corpus,
               "--encoding", args.encoding, "--num_proc", str(args.num_proc)]
        runs = {"raw": numpy_threads,
                "batch": lambda: encoding.encode_ordinary_batch(texts, args.num_proc),
                "batch 8": lambda: encoding.encode_ordinary_batch(texts),
                "job": lambda: job_seconds(job, tempfile.mkdtemp(dir=tmp))}
        best = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeat):  # interleaved, best of each: the run least disturbed by other load
            for name, run in runs.items():
                best[name] = max(best[name], tokens / timed(run))
        raw, job = best["raw"], best["job"]
        print(f"(a) raw, numpy arrays on {args.num_proc} threads:    {raw / 1e6:6.2f}M tokens/s")
        print(f"    encode_ordinary_batch, {args.num_proc} threads:   {best['batch'] / 1e6:6.2f}M tokens/s (reference)")
        print(f"    encode_ordinary_batch, 8 threads:   {best['batch 8'] / 1e6:6.2f}M tokens/s (reference)")
        print(f"(b) prepare.py, end to end:            {job / 1e6:6.2f}M tokens/s")
        print(f"ratio (b)/(a): {job / raw:.2f}x")
        stages = stage_seconds(lines, texts, encoded, tmp, encoding.n_vocab)
        raw_cpu = args.num_proc * tokens / raw  # core-seconds of encoding alone
        print(f"work beyond encoding, one core each, against (a)'s {raw_cpu:.1f} core-seconds:")
        for name, seconds in stages.items():
            print(f"  {name:28s} {seconds:6.2f}s  {100 * seconds / raw_cpu:5.1f}%")


if __name__ == "__main__":
    main()
