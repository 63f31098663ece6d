"""
Prepare DCLM-baseline 1.0 as GPT-2 token bins: data/dclm/{train,val}.bin and meta.json.

    python data/dclm/prepare.py --max_tokens 300e9              # a 300B-token GPT-3 run's worth, ~600 GB of bins
    python data/dclm/prepare.py --source '/disk/dclm/**/*.parquet'   # shards downloaded beforehand

Source: mlfoundations/dclm-baseline-1.0-parquet on the Hugging Face hub, the parquet copy of
mlfoundations/dclm-baseline-1.0, with the document in 'text'. DataComp-LM's baseline: Common Crawl
through RefinedWeb-style heuristics and deduplication, then a fastText quality classifier. Its card
gives 4T tokens in 3B documents without naming the tokenizer of that count (the DCLM paper trains with
GPT-NeoX's); GPT-2 BPE should count within about 10% of it, not measured here. The whole set would be
~8 TB of bins (2 bytes a token) plus a download of several TB: take --max_tokens of it. The stream is in
the repository's file order, so --max_tokens takes the first shards, not a random sample; for a random
one, download a random choice of shards and pass them as --source.

Licence: CC-BY-4.0 (the documents remain their authors', crawled by Common Crawl).

Caveats: the card's figures for a 7B model at 0.28T tokens, CORE 48.9 and MMLU 50.8 against 41.9 and
37.3 for FineWeb-Edu, are the DCLM team's own evaluation. It is English web text only: no code, books
or papers beyond what the web holds. No val split is published: val.bin is carved out of train by
--val_fraction, by a hash of each document. The resumable job, flags and output are those of
data/pile/prepare.py. The hub path could not be reached from the machine this was built on: it is
untested; local parquet files are tested.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

if __name__ == "__main__":
    preparation.main(__doc__, source="mlfoundations/dclm-baseline-1.0-parquet", data_dir="data/dclm")
