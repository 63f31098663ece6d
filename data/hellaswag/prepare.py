"""
HellaSwag's validation set (10,042 examples), tokenized with the run's encoding into hellaswag.json
beside the run's bins, for train.py's hellaswag_interval (scored as lm-eval's `hellaswag` task scores it).

    python data/hellaswag/prepare.py --data_dir data/pile            # the encoding from its meta.json
    python data/hellaswag/prepare.py --source ~/hellaswag_val.jsonl --data_dir data/pile

Without --source it tries, in order: data/eval/hellaswag.jsonl (data/eval/prepare.py's copy, the one
scripts/eval.py scores), data/hellaswag/hellaswag_val.jsonl, the official file on GitHub
(rowanz/hellaswag), and the Hugging Face hub's copy (Rowan/hellaswag, validation split). On a machine
without internet, copy one of those files (11 MB) from one that has it and pass --source.
The file is written atomically; a re-run simply writes it again.
"""
import argparse
import json
import os
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import bins, cli  # noqa: E402  (needs the repo root on sys.path first)
from trainer import evaluation  # noqa: E402
from trainer.tokenizer import get_encoding, recorded  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
URL = "https://raw.githubusercontent.com/rowanz/hellaswag/master/data/hellaswag_val.jsonl"
HUB = "Rowan/hellaswag"
EVAL_COPY = os.path.join(HERE, "..", "eval", "hellaswag.jsonl")


def from_hub(folder):
    """The hub's validation split written as JSON lines (its fields are the official file's)."""
    import datasets
    path = os.path.join(folder, "hellaswag_val.jsonl")
    with open(path, "w") as f:
        for ex in datasets.load_dataset(HUB, split="validation"):
            f.write(json.dumps(dict(ex)) + "\n")
    return path


def find_source(folder):
    for local in (EVAL_COPY, os.path.join(HERE, "hellaswag_val.jsonl")):
        if os.path.isfile(local):
            return local
    local = os.path.join(HERE, "hellaswag_val.jsonl")
    tried = []
    try:
        urllib.request.urlretrieve(URL, local)
        return local
    except OSError as e:
        tried.append(f"{URL}: {e}")
    try:
        return from_hub(folder)
    except Exception as e:  # no network, no datasets cache
        tried.append(f"{HUB}: {type(e).__name__}")
    sys.exit(f"error: no HellaSwag source reachable ({'; '.join(tried)}): copy hellaswag_val.jsonl here "
             f"from a machine with internet and pass --source hellaswag_val.jsonl")


def main():
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--source", help="the official hellaswag_val.jsonl (default: find or download it)")
    p.add_argument("--data_dir", default="data/pile", help="the run's bins; hellaswag.json goes here (default: %(default)s)")
    p.add_argument("--encoding", help="default: the one in data_dir's meta.json, else 'gpt2'")
    args = p.parse_args()
    try:
        meta = bins.read_meta(args.data_dir) if os.path.isdir(args.data_dir) else None
        name = args.encoding or (meta and recorded(meta, [args.data_dir])) or "gpt2"
        encoding = get_encoding(name)
    except (ValueError, bins.BinError) as e:  # an encoding that does not load, a meta.json cut short
        sys.exit(f"error: {e}")
    with tempfile.TemporaryDirectory() as tmp:
        try:
            examples = evaluation.read_hellaswag_jsonl(args.source or find_source(tmp))
        except evaluation.HellaSwagError as e:
            sys.exit(f"error: {e}")
    os.makedirs(args.data_dir, exist_ok=True)
    out = os.path.join(args.data_dir, evaluation.HELLASWAG_FILE)
    evaluation.write_hellaswag(out, examples, encoding)
    print(f"wrote {out}: {len(examples):,} examples, {encoding.name} encoding")


if __name__ == "__main__":
    main()
