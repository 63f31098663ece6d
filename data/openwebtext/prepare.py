"""
Prepare OpenWebText, the classic nanoGPT data set, as GPT-2 token bins in data/openwebtext.
Expect ~9.0B train tokens and ~4.4M val tokens (8,013,769 documents, 0.05% to val).

    python data/openwebtext/prepare.py
    python data/openwebtext/prepare.py --source Skylion007/openwebtext@refs/convert/parquet
    python data/openwebtext/prepare.py --source '/disk/owt/*.parquet'

Source: Skylion007/openwebtext on the Hugging Face hub. It used to ship a loading script, which
datasets>=4 refuses ("Dataset scripts are no longer supported"); a conversion of the repo to plain
data files was proposed upstream in 2025. If the default still fails that way, the hub's automatic
parquet export (refs/convert/parquet, second command above) needs no script; check its token counts
against the figures above, since the hub may export only part of a large script-based data set.
Or download the data once and pass local files. The resumable job, flags and output are those of
data/pile/prepare.py.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import preparation  # noqa: E402  (needs the repo root on sys.path first)

if __name__ == "__main__":
    preparation.main(__doc__, source="Skylion007/openwebtext", data_dir="data/openwebtext")
