"""
Prepare FineWeb-Edu as GPT-2 token bins: data/fineweb_edu/{train,val}.bin and meta.json.

    python data/fineweb_edu/prepare.py                          # sample-10BT: ~10B tokens, ~20 GB of bins
    python data/fineweb_edu/prepare.py --subset sample-350BT    # enough for a 300B-token GPT-3 run
    python data/fineweb_edu/prepare.py --source '/disk/fineweb-edu/sample/10BT/*.parquet'   # downloaded first

Source: HuggingFaceFW/fineweb-edu on the Hugging Face hub, parquet with the document in 'text'. It is
FineWeb's English Common Crawl filtered by a classifier of educational value (trained on Llama-3-70B's
annotations), keeping documents scored 3 or more: 1.3T tokens in all, counted in GPT-2 tokens, as are
the published samples --subset chooses: sample-10BT, sample-100BT and sample-350BT are named for their
GPT-2 token counts; 'default' is the whole set, and each Common Crawl dump (CC-MAIN-2024-10, ...) is a
configuration too. Bins take 2 bytes a token: ~20 GB, ~200 GB, ~700 GB and ~2.6 TB, plus the download
(parquet, roughly as large again; not measured here).

Licence: ODC-By 1.0, and use is subject to Common Crawl's terms of use.

Caveats: the filter favours knowledge and school-style text, which is what lifts MMLU and ARC; its
card warns that higher score thresholds hurt commonsense benchmarks such as HellaSwag and PIQA (web
chatter is what those test), so mix it with broader web text for a general model. The samples are
random subsets of the same set, so they overlap each other. The dataset carries no val split: val.bin
is carved out of train by --val_fraction, by a hash of each document. The resumable job, flags and
output are those of data/pile/prepare.py. The hub path could not be reached from the machine this was
built on: it is untested; local parquet files are tested.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

if __name__ == "__main__":
    preparation.main(__doc__, source="HuggingFaceFW/fineweb-edu", data_dir="data/fineweb_edu", subset="sample-10BT")
