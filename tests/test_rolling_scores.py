"""Scoring continuations and lm-eval's rolling windows through model.py's chunked head: the same log-probabilities
and greedy flags as the whole logits give, and no tensor the size of the whole (rows, T, vocab) logits."""
import pytest
import torch
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import model as model_module
from model import GPT, GPTConfig, mask_padding
from trainer import evaluation, lm_eval_adapter
from trainer.tokenizer import get_encoding

BYTES = get_encoding("bytes")


class LargestTensor(TorchDispatchMode):
    """The most elements any operation's output has while it is on."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def whole_logits_scores(model, pairs, block_size, n_tokens):
    """What continuation_logprobs computed before: every position's logits at once."""
    x, y, mask = evaluation._rows(pairs, block_size)
    with torch.no_grad():
        logprobs = F.log_softmax(mask_padding(model(x, every_position=True)[0].float(), n_tokens), -1)
    summed = torch.where(mask, logprobs.gather(-1, y[..., None])[..., 0], 0).sum(1)
    return summed, ((logprobs.argmax(-1) == y) | ~mask).all(1)


def test_chunked_scores_equal_the_whole_logits_and_never_hold_them(monkeypatch):
    monkeypatch.setattr(model_module, "LOSS_CHUNK_ROWS", 16)  # several chunks even in a tiny batch
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=64, vocab_size=320)).eval()
    pairs = [([5, 6, 7] * 10, [8, 9] * 8), ([1], [2, 3, 4]), ([], list(range(40, 100))), ([7] * 80, [1, 2])]
    pairs = [(c or [BYTES.eot_token], t) for c, t in pairs]
    expected = whole_logits_scores(gpt, pairs, 64, BYTES.n_vocab)
    with LargestTensor() as seen:
        summed, greedy = evaluation.continuation_logprobs(gpt, pairs, 64, "cpu", torch.no_grad(), BYTES.n_vocab)
    torch.testing.assert_close(summed, expected[0], rtol=0, atol=1e-4)
    assert torch.equal(greedy, expected[1])
    whole = len(pairs) * 64 * 320  # rows x positions x vocabulary
    assert seen.largest < whole / 2  # the largest is an activation of the body; the whole logits never exist


def test_rolling_windows_score_a_long_text_in_chunks(monkeypatch):
    """lm-eval's rolling log-likelihood over a text of several windows: the same total as the whole logits."""
    monkeypatch.setattr(model_module, "LOSS_CHUNK_ROWS", 32)
    torch.manual_seed(1)
    gpt = GPT(GPTConfig(n_layer=2, n_head=2, n_embd=32, block_size=48, vocab_size=320)).eval()
    lm = lm_eval_adapter.GPTLM(gpt, BYTES, "cpu", torch.no_grad(), batch_size=8)

    class Request:
        args, task_name = ("a text far longer than the window of forty-eight bytes, " * 3,), "test"
    with LargestTensor() as seen:
        [total] = lm.loglikelihood_rolling([Request()])
    ids = BYTES.encode_ordinary(Request.args[0])
    windows = [lm_eval_adapter.make_disjoint_window(w) for w in lm_eval_adapter.get_rolling_token_windows(
        ids, prefix_token=BYTES.eot_token, max_seq_len=48, context_len=1)]
    assert len(windows) > 2
    assert total == pytest.approx(whole_logits_scores(gpt, windows, 48, BYTES.n_vocab)[0].sum().item(), abs=1e-3)
    assert seen.largest < len(windows) * 48 * 320
