"""data/climbmix/prepare.py on local parquet shards laid out as karpathy/climbmix-400b-shuffle's (the text in
'text'): the shared prepare job with ClimbMix's defaults, capped by --max_tokens."""
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conftest import REPO
from test_prepare import FLAGS, make_docs, read_docs
from trainer import bins
from trainer.tokenizer import get_encoding


@pytest.mark.e2e  # the script as a user runs it: its own process and its pool's (no torch import: cheap)
def test_climbmix_script_prepares_local_parquet_shards(tmp_path):
    docs = make_docs(600, seed=7)
    for i, part in enumerate((docs[:300], docs[300:])):
        pq.write_table(pa.table({"text": part}), tmp_path / f"shard_{i:05d}.parquet", row_group_size=100)
    result = subprocess.run([sys.executable, "data/climbmix/prepare.py", "--source", str(tmp_path / "shard_*.parquet"),
                             "--data_dir", str(tmp_path / "out"), *FLAGS], cwd=REPO, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    encoding = get_encoding("bytes")
    written = read_docs(tmp_path / "out", "train", encoding) + read_docs(tmp_path / "out", "val", encoding)
    assert sorted(written) == sorted(d for d in docs if d)
    meta = bins.read_meta(tmp_path / "out")
    assert meta["complete"] and "data/climbmix/prepare.py" in meta["command"]
    assert subprocess.run([sys.executable, "data/climbmix/prepare.py", "--help"], cwd=REPO, capture_output=True,
                          text=True).stdout.count("karpathy/climbmix-400b-shuffle") >= 1
