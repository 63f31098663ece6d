"""
Tiny Shakespeare (1.1 MB of the plays) as GPT-2 token bins in data/shakespeare, for fine-tuning
OpenAI's GPT-2 on it (config/finetune_shakespeare.py), nanoGPT's classic example.

    python data/shakespeare/prepare.py                      # downloads input.txt once
    python data/shakespeare/prepare.py --input input.txt    # or a copy you already have

Each speech (a block between blank lines) is one document, followed by end-of-text, and a tenth of
the speeches go to val.bin by the usual hash of their text: ~300k train and ~34k val tokens.
"""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

URL = "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
HERE = os.path.dirname(os.path.abspath(__file__))


def speeches_jsonl(text_path, jsonl_path):
    with open(text_path, encoding="utf-8") as f:
        speeches = [s.strip() for s in f.read().split("\n\n") if s.strip()]
    with open(jsonl_path, "w") as f:
        f.writelines(json.dumps({"text": s}) + "\n" for s in speeches)


if __name__ == "__main__":
    p = preparation.parser(__doc__, source="<data_dir>/speeches.jsonl", data_dir=HERE, val_fraction=0.1)
    p.add_argument("--input", help="a local copy of Tiny Shakespeare's input.txt (default: download it)")
    args = p.parse_args()
    if args.input and not os.path.isfile(args.input):  # a copy named is never downloaded over
        sys.exit(f"error: --input {args.input} is not a file: pass the path of your copy of input.txt, or leave "
                 "--input out to download it")
    if args.source == ["<data_dir>/speeches.jsonl"]:  # else the given --source is prepared as it is
        os.makedirs(args.data_dir, exist_ok=True)
        text_path = args.input or os.path.join(args.data_dir, "input.txt")
        if not os.path.exists(text_path):
            try:
                urllib.request.urlretrieve(URL, text_path)
            except OSError as e:
                sys.exit(f"error: cannot download {URL} ({e}); fetch it elsewhere and pass --input input.txt")
        args.source = [os.path.join(args.data_dir, "speeches.jsonl")]
        speeches_jsonl(text_path, args.source[0])
    sys.exit(preparation.run(args))
