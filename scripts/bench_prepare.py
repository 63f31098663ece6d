"""
Prepare throughput against raw tiktoken encoding of the same text on the same cores.

    python scripts/bench_prepare.py --encoding .cache/gpt2.tiktoken        # offline GPT-2
    python scripts/bench_prepare.py --input my.jsonl --encoding gpt2

(a) raw: tiktoken's encode_ordinary_batch (its own thread pool) on the texts, already in memory
    (a plain loop of encode_ordinary on one core is shown for reference);
(b) the whole job, end to end as a user runs it: data/pile/prepare.py --num_proc <all cores> on the
    same texts as a jsonl file, reading, encoding, writing and committing included.
Without --input it generates a corpus: documents of English paragraphs drawn from Python's own
documentation (pydoc_data), which encodes like web prose (~4 bytes a token) rather than like
random text. Not a test: the numbers depend on the machine and on what else it runs.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
from preparation import available_cores  # noqa: E402
from tokenizer import get_encoding  # noqa: E402


def make_corpus(path, megabytes, seed=0):
    from pydoc_data.topics import topics
    paragraphs = [p for topic in topics.values() for p in topic.split("\n\n") if p.strip()]
    rng, size = random.Random(seed), 0
    with open(path, "w") as f:
        while size < megabytes * 1e6:
            text = "\n\n".join(rng.choices(paragraphs, k=rng.randint(2, 30)))
            f.write(json.dumps({"text": text}) + "\n")
            size += len(text)


def timed(fn):
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", help="a .jsonl file with a 'text' field (default: generate one)")
    p.add_argument("--megabytes", type=float, default=60, help="size of the generated corpus")
    p.add_argument("--encoding", default="gpt2")
    p.add_argument("--num_proc", type=int, default=available_cores())
    p.add_argument("--repeat", type=int, default=3, help="best of this many runs of each (default: %(default)s)")
    args = p.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        corpus = args.input or os.path.join(tmp, "corpus.jsonl")
        if not args.input:
            make_corpus(corpus, args.megabytes)
        with open(corpus) as f:
            texts = [json.loads(line)["text"] for line in f]
        encoding = get_encoding(args.encoding)
        megabytes = sum(len(t.encode()) for t in texts) / 1e6
        print(f"{len(texts):,} documents, {megabytes:.1f} MB of text, encoding {args.encoding}, "
              f"{args.num_proc} cores")

        tokens = sum(len(ids) + 1 for ids in encoding.encode_ordinary_batch(texts))  # +1: end-of-text
        job = [sys.executable, os.path.join(REPO, "data/pile/prepare.py"), "--source", corpus,
               "--encoding", args.encoding, "--num_proc", str(args.num_proc)]
        runs = {"raw": lambda: encoding.encode_ordinary_batch(texts),
                "one core": lambda: [encoding.encode_ordinary(t) for t in texts],
                "job": lambda: subprocess.run([*job, "--data_dir", tempfile.mkdtemp(dir=tmp)],
                                              check=True, capture_output=True)}
        best = dict.fromkeys(runs, 0.0)
        for _ in range(args.repeat):  # interleaved, best of each: the run least disturbed by other load
            for name, run in runs.items():
                best[name] = max(best[name], tokens / timed(run))
        raw, job = best["raw"], best["job"]
        print(f"(a) raw encode_ordinary_batch:   {raw / 1e6:6.2f}M tokens/s")
        print(f"    (one core, for reference:    {best['one core'] / 1e6:6.2f}M tokens/s)")
        print(f"(b) prepare.py, end to end:      {job / 1e6:6.2f}M tokens/s")
        print(f"ratio (b)/(a): {job / raw:.2f}x")


if __name__ == "__main__":
    main()
