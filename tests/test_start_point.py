"""Where a run starts (checkpointer.start_point), decided in-process: out_dir's checkpoint or scratch, the refusals,
the architecture a checkpoint fixes and where a conflicting value was set, and a roll back by path."""
import pytest

import configurator
from model import model_config
from trainer import checkpoint, checkpointer
from trainer.checkpointer import StartError

quiet = lambda line: None  # noqa: E731
TINY = ["config/train_tiny.py", "--n_layer=2", "--n_embd=32", "--n_head=2", "--block_size=16"]


def save_run(out_dir, iter_num, **model_args):
    args = {**dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=320, bias=False, activation="gelu",
                   n_tokens=0), **model_args}
    checkpoint.save_checkpoint({"model": {}, "iter_num": iter_num, "model_args": args}, str(out_dir), iter_num, 0,
                               log=quiet)


def start_point(*argv):
    cfg = configurator.load_config([*TINY, *argv])
    return cfg, checkpointer.start_point(cfg, configurator.DEFAULTS, True, quiet)


def test_start_point_continues_scratch_or_refuses(tmp_path):
    out = tmp_path / "run"
    cfg, start = start_point(f"--out_dir={out}")  # auto, nothing there: scratch
    assert start.state is None and start.saved_args is None and start.origin is None
    for argv, message in [(["--init_from=resume"], "has no checkpoint; use init_from='auto'"),
                          ([f"--init_weights={out}", "--init_from=resume"], "drop one of them"),
                          ([f"--init_from={out}/ckpt_9.pt"], "no such checkpoint"),
                          (["--eval_only=True"], "holds no checkpoint to evaluate")]:  # random weights, exit 0
        with pytest.raises(StartError, match=message):
            start_point(f"--out_dir={out}", *argv)
    save_run(out, 4, activation="gelu_tanh")  # a key the config leaves at its default
    cfg, start = start_point(f"--out_dir={out}", "--eval_only=True")
    assert start.state["iter_num"] == 4 and start.origin == "the checkpoint"
    assert cfg.activation == "gelu_tanh" and cfg.sources["activation"] == "from the checkpoint"  # what it implies
    assert model_config(cfg, start.saved_args).activation == "gelu_tanh"
    with pytest.raises(StartError, match="init_from='scratch' but .* holds 1 checkpoint"):
        start_point(f"--out_dir={out}", "--init_from=scratch")


def test_an_architecture_conflict_names_where_it_was_set(tmp_path):
    out = tmp_path / "run"
    save_run(out, 2)
    with pytest.raises(StartError, match=r"n_layer=3 \(set on the command line\) conflicts with the "
                       r"checkpoint's n_layer=2"):
        start_point(f"--out_dir={out}", "--n_layer=3")
    wider = tmp_path / "wider.py"
    wider.write_text("n_embd = 48\n")
    with pytest.raises(StartError, match=rf"n_embd=48 \(set in {wider}\) conflicts"):
        start_point(f"--out_dir={out}", str(wider))
    # the default, asked for on the command line, is asked for: it used to give way to the checkpoint's silently
    with pytest.raises(StartError, match=r"n_layer=12 \(set on the command line\) conflicts with the checkpoint's "):
        start_point(f"--out_dir={out}", "--n_layer=12")
    default = tmp_path / "default.py"  # a config file's architecture at the default gives way, as a base's does
    default.write_text("n_layer = 12\n")
    assert start_point(f"--out_dir={out}", str(default))[0].n_layer == 2


def test_init_from_a_path_rolls_back_the_newer_checkpoints(tmp_path):
    out = tmp_path / "run"
    for n in (2, 4, 6):
        save_run(out, n)
    _, start = start_point(f"--out_dir={out}", f"--init_from={out}/ckpt_4.pt")
    assert start.state["iter_num"] == 4 and [n for n, _ in checkpoint.list_checkpoints(str(out))] == [4, 2]


def test_another_runs_checkpoint_goes_on_only_in_a_folder_without_checkpoints_of_its_own(tmp_path):
    """A checkpoint from elsewhere continued in an out_dir that holds checkpoints would have its saves overwrite
    them (a reviewer's ckpt_300.pt was replaced): refused, with nothing touched. A new folder takes it."""
    other, out = tmp_path / "other", tmp_path / "run"
    save_run(other, 3)
    for n in (2, 4):
        save_run(out, n)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(StartError, match=rf"continues another run's checkpoint, and {out} holds 2 of its own "
                                         r"\(newest ckpt_4.pt\), which its saves would overwrite: give it a new"):
        start_point(f"--out_dir={out}", f"--init_from={other}/ckpt_3.pt")
    _, start = start_point(f"--out_dir={out}", f"--init_from={out}/ckpt_2.pt")  # a roll back: ckpt_4.pt set aside
    [aside] = (out / checkpoint.ROLLED_BACK_DIR).glob("*/ckpt_4.pt")
    with pytest.raises(StartError, match=rf"is a checkpoint {out} set aside: move it back into {out}"):
        start_point(f"--out_dir={out}", f"--init_from={aside}")  # from rolled_back/: moved back first, as documented
    kept = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.name.startswith(".")}  # locks
    assert kept == {"ckpt_2.pt": before["ckpt_2.pt"]}
    _, start = start_point(f"--out_dir={tmp_path / 'new'}", f"--init_from={other}/ckpt_3.pt")
    assert start.state["iter_num"] == 3


def test_weights_go_on_only_on_data_of_the_encoding_they_learnt(tmp_path, gpt2_rank_file):
    """A reviewer resumed a GPT-2-encoded run on byte-encoded bins with only a note about the mixture; and
    fine-tuning GPT-2 on the quick start's byte bins trained its ids on other text. Both are refused now."""
    import types
    from trainer import tokenizer
    checkpoint_of = lambda name: types.SimpleNamespace(state=tokenizer.describe(name), encoding=None,
                                                     origin="the checkpoint")
    assert checkpointer.encoding_problem(checkpoint_of("gpt2"), "bytes", "data/quickstart") == (
        "the checkpoint learnt the token ids of encoding gpt2, and data/quickstart is encoded with bytes: prepare "
        "it again with --encoding gpt2, or train on it from scratch in another out_dir")
    imported = types.SimpleNamespace(state=None, encoding="gpt2", origin="gpt2")
    assert "gpt2 learnt the token ids of encoding gpt2" in checkpointer.encoding_problem(imported, "bytes", "data/x")
    # GPT-2's own rank file, fetched for offline use, is GPT-2's encoding; unknown encodings are not judged
    assert checkpointer.encoding_problem(checkpoint_of("gpt2"), gpt2_rank_file, "data/pile") is None
    assert checkpointer.encoding_problem(checkpoint_of(gpt2_rank_file), "gpt2", "data/pile") is None
    assert checkpointer.encoding_problem(checkpoint_of("bytes"), None, "data/x") is None
    older = types.SimpleNamespace(state={"encoding": gpt2_rank_file}, encoding=None, origin="the checkpoint")
    assert checkpointer.encoding_problem(older, gpt2_rank_file, "data/pile") is None  # no hash yet: its file's
    older.state = {"encoding": str(tmp_path / "moved.tiktoken")}
    assert checkpointer.encoding_problem(older, "bytes", "data/x") is None  # nor the file: unknown
    assert checkpointer.encoding_problem(types.SimpleNamespace(state={}, encoding=None, origin="x"), "bytes",
                                         "data/x") is None  # a checkpoint older than the record
