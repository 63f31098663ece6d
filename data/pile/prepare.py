"""
Prepare the Pile as GPT-2 token bins: data/pile/{train,val}.bin and meta.json.

    python data/pile/prepare.py                                   # stream monology/pile-uncopyrighted
    python data/pile/prepare.py --max_tokens 10e9                 # a ~10B-token subset to validate on first
    python data/pile/prepare.py --source '/disk/pile/train/*.jsonl.zst'   # shards downloaded beforehand

At full size this is a job of its own: ~300B tokens, ~600 GB of bins, many hours. Kill it at any
moment and re-run the same command: it continues where its last commit left off.

Source: EleutherAI/pile on the Hugging Face hub lost its data files in 2023, so the default is the
community mirror monology/pile-uncopyrighted, streamed with `datasets` (jsonl.zst shards with a
'text' field, the same layout as the original). Caveats: it is the Pile minus the subsets with
copyright problems (Books3 among them; see its dataset card), so it is smaller than the original
825 GiB and its mix differs from the one GPT-3-era papers report; it is a third party's upload that
may change or vanish; and streaming re-downloads anything a failed run had not committed. For a
fixed, fast input, download the shards once and pass them as a glob. Only its train split is read;
val.bin is carved out of it by --val_fraction (by a hash of each document, like nanoGPT's 0.0005).
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

if __name__ == "__main__":
    preparation.main(__doc__, source="monology/pile-uncopyrighted", data_dir="data/pile")
