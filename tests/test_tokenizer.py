"""Encodings by name: GPT-2's known ids from a rank file, the byte encoding, and robust decoding."""
import os
import pickle
import re

import pytest
import tiktoken

from trainer import tokenizer
from trainer.tokenizer import get_encoding

TEXTS = ["hello world", "", "naïve café — 東京 🚀\n\n\tindent", "a <|endoftext|> b", "lone \ud800 surrogate",
         "x" * 5000]


def test_gpt2_rank_file_gives_gpt2_ids(gpt2_rank_file):
    enc = get_encoding(gpt2_rank_file)
    assert enc.encode_ordinary("hello world") == [31373, 995]
    assert enc.eot_token == 50256 and enc.n_vocab == 50257
    assert enc.name == gpt2_rank_file
    assert enc.decode([31373, 995, 50256]) == "hello world<|endoftext|>"


@pytest.mark.parametrize("name", ["bytes", "gpt2-file"])
def test_encoders_agree_and_never_emit_end_of_text(name, gpt2_rank_file):
    enc = get_encoding(gpt2_rank_file if name == "gpt2-file" else name)
    batch = enc.encode_ordinary_batch(TEXTS)
    for text, ids in zip(TEXTS, batch):
        assert ids == enc.encode_ordinary(text) == enc.encode_ordinary_numpy(text).tolist()
        assert enc.eot_token not in ids  # '<|endoftext|>' in a document is ordinary text
        if "\ud800" not in text:
            assert enc.decode(ids) == text


def test_bytes_encoding():
    enc = get_encoding("bytes")
    assert (enc.n_vocab, enc.eot_token) == (257, 256)
    assert enc.encode_ordinary("hé") == list("hé".encode())
    assert enc.decode([104, 0xFF, 256]) == "h\ufffd<|endoftext|>"  # invalid UTF-8 is replaced, not raised


def test_decode_shows_ids_outside_the_vocab(gpt2_rank_file):
    # an untrained model samples ids up to the padded vocab (50304)
    assert get_encoding(gpt2_rank_file).decode([31373, 50300, 995]) == "hello<|?50300|> world"
    assert get_encoding("bytes").decode([104, 300, -1]) == "h<|?300|><|?-1|>"


def test_pickles_by_name(gpt2_rank_file):
    for name in ["bytes", gpt2_rank_file]:
        enc = pickle.loads(pickle.dumps(get_encoding(name)))
        assert enc.name == name
        assert enc.encode_ordinary("hello world") == get_encoding(name).encode_ordinary("hello world")


def test_bad_names_raise_one_clear_value_error(tmp_path, monkeypatch):
    with pytest.raises(ValueError, match="unknown encoding 'gpt3'"):
        get_encoding("gpt3")
    with pytest.raises(ValueError, match="missing.tiktoken not found"):
        get_encoding(str(tmp_path / "missing.tiktoken"))
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("not base64 at all\n")
    with pytest.raises(ValueError, match="is not a .tiktoken rank file"):
        get_encoding(str(bad))

    def offline(name):
        raise ConnectionError("no network")
    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    (tmp_path / "fetched").mkdir()
    (tmp_path / "fetched" / "gpt2.tiktoken").touch()  # what fetch_gpt2_ranks.sh leaves in .cache/
    fetched_here = os.path.relpath(tmp_path / "fetched" / "gpt2.tiktoken")
    for cache, way in ((tmp_path / "fetched", f"pass --encoding {fetched_here} (GPT-2's ranks, fetched here already)"),
                       (tmp_path, "run scripts/fetch_gpt2_ranks.sh and pass --encoding ")):
        monkeypatch.setattr(tokenizer, "REPO_CACHE", str(cache))
        tokenizer.get_encoding.cache_clear()  # a reviewer with the ranks in .cache/ was told to fetch them
        with pytest.raises(ValueError, match=re.escape(f"encoding (ConnectionError); offline, {way}")):
            tokenizer.get_encoding("gpt2")

