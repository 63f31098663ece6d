"""Shared pytest fixtures: the repo root on sys.path, a quick exit for the Pythons the tests start, and
GPT-2's BPE ranks for offline tests."""
import os
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# every Python the tests start skips the ~2 s collection at exit (fast_exit/sitecustomize.py says why)
FAST_EXIT = str(REPO / "tests" / "fast_exit")
if FAST_EXIT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [FAST_EXIT, os.environ.get("PYTHONPATH")]))
# Tiny models gain nothing from threads, and two test workers on 2 cores would fight over them: here
# and in every process the tests start.
torch.set_num_threads(1)
os.environ["OMP_NUM_THREADS"] = "1"


@pytest.fixture(scope="session")
def gpt2_rank_file():
    """GPT-2's ranks as a .tiktoken file (scripts/fetch_gpt2_ranks.sh puts them in .cache/).

    Skipped where the file is absent, unless REQUIRE_GPT2_RANKS=1 (CI sets it) makes that a failure.
    """
    path = Path(os.environ.get("GPT2_TIKTOKEN", REPO / ".cache" / "gpt2.tiktoken"))
    if not path.is_file():
        if os.environ.get("REQUIRE_GPT2_RANKS") == "1":
            pytest.fail(f"{path} is missing: run scripts/fetch_gpt2_ranks.sh")
        pytest.skip(f"{path} is missing: run scripts/fetch_gpt2_ranks.sh")
    return str(path)


VOCAB = 64  # the tiny token bins' vocabulary; tests train with --vocab_size=VOCAB


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """Token bins with learnable structure: a few repeated 'sentences' of ids."""
    folder = tmp_path_factory.mktemp("data")
    rng = np.random.default_rng(0)
    sentences = [rng.integers(0, VOCAB, size=rng.integers(5, 12)) for _ in range(20)]
    for split, n in (("train", 3000), ("val", 300)):
        ids = np.concatenate([sentences[i] for i in rng.integers(0, len(sentences), size=n)])
        ids.astype(np.uint16).tofile(folder / f"{split}.bin")
    return str(folder)
