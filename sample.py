"""
Sample from a trained model:

    python sample.py --out_dir=out/tiny --start="def " --num_samples=3 --max_new_tokens=256

Loads the newest checkpoint in --out_dir that loads (the same numeric discovery and fallback
past unreadable checkpoints as train.py), or the one --init_from names, and decodes with the
encoding the data was prepared with: the data dir's meta.json, else the one the checkpoint
recorded, else --encoding. Works offline; generation uses model.py's KV cache, so each new token
costs one token's forward pass (with a sliding window past block_size).
"""
import math
import os
import signal
import sys
from contextlib import nullcontext

from trainer import interrupt

if __name__ == "__main__":  # first: a Ctrl-C while torch imports, or while it samples, is one line
    interrupt.stop_at_once("sample.py", "(the samples above are whole where a line of dashes ends them)")
import torch  # noqa: E402

from model import GPT, model_config  # noqa: E402
from trainer import bins, checkpoint, cli, machine, precision, tokenizer  # noqa: E402


def parse_args(argv):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0], allow_abbrev=False)
    p.add_argument("--out_dir", default="out", help="the run's folder of checkpoints (default: out)")
    p.add_argument("--init_from", help="a checkpoint (ckpt_<N>.pt or ckpt_<N>/) instead of the newest in --out_dir")
    p.add_argument("--start", default="\n", help="the prompt, or FILE:path to read it from a file")
    p.add_argument("--num_samples", type=int, default=3)
    p.add_argument("--max_new_tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.8, help="< 1 is more conservative, > 1 more random")
    p.add_argument("--top_k", type=int, default=200, help="sample only among the k likeliest tokens (0: all)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda, cuda:1")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto: bfloat16 autocast on a GPU that supports it, else float32")
    p.add_argument("--encoding", help="override the recorded encoding: 'bytes', 'gpt2' or a .tiktoken rank file")
    return p.parse_args(argv)


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def log(message):
    print(message, file=sys.stderr)  # stdout carries only the samples


def load_state(args):
    """The checkpoint to sample from, as saved by train.py."""
    try:
        if args.init_from:
            if not os.path.exists(args.init_from):
                fail(f"--init_from: no such checkpoint {args.init_from}: give the path of a ckpt_<N>.pt or ckpt_<N>/ "
                     "(GPT-2's weights: scripts/eval.py or an export)")
            return checkpoint.load_checkpoint(args.init_from, log)
        if os.path.isfile(args.out_dir):  # a checkpoint given for its run's folder
            fail(f"--out_dir {args.out_dir} is a file: pass a checkpoint as --init_from {args.out_dir}, or its "
                 "run's folder as --out_dir (its newest checkpoint is used)")
        found = checkpoint.load_newest(args.out_dir, log)
    except checkpoint.CheckpointError as e:
        fail(str(e))
    if found is None:
        fail(f"no checkpoint (ckpt_<N>.pt or ckpt_<N>/) in {args.out_dir}: train first, e.g. python train.py "
             f"config/train_tiny.py (which writes out/tiny), or pass --out_dir / --init_from")
    return found[0]


def encoding_name(args, state):
    """The encoding the model's data was prepared with: --encoding, meta.json, or the checkpoint's record. A run on
    a data_mixture never read its data_dir, whose meta.json may be another corpus's: its own record decides."""
    if args.encoding:
        return args.encoding
    config = state.get("config", {})
    data_dir = None if config.get("data_mixture") else config.get("data_dir")
    try:
        meta = bins.read_meta(data_dir) if data_dir and os.path.isdir(data_dir) else None
    except bins.BinError as e:  # a meta.json cut short
        fail(str(e))
    folder = os.path.dirname(os.path.abspath(args.init_from)) if args.init_from else args.out_dir  # the run's
    record, where, near = (meta, f"{data_dir}/meta.json", data_dir) if meta and meta.get("encoding") else (
        state, "the checkpoint", folder)
    try:
        name = tokenizer.recorded(record, [near])
    except ValueError as e:
        fail(f"{where}: {e}")
    if not name:
        fail("cannot tell which encoding the model was trained with (no meta.json beside its data and none in "
             "the checkpoint): pass --encoding bytes, --encoding gpt2 or --encoding path/to/ranks.tiktoken")
    return name


def device_and_autocast(args, local_rank=0):
    """(device, autocast) from --device and --dtype: the same bf16 autocast over fp32 weights as
    training, so what is measured is what was trained."""
    device, device_type = machine.resolve_device(args.device, local_rank)
    if problem := machine.device_problem(device):
        fail(problem)
    dtype = args.dtype
    if dtype == "auto":
        dtype = "bfloat16" if device_type == "cuda" and torch.cuda.is_bf16_supported() else "float32"
    return device, torch.autocast(device_type, dtype=torch.bfloat16) if dtype == "bfloat16" else nullcontext()


def load_model(args, local_rank=0):
    """(model in eval mode, checkpoint state, encoding, device, autocast) from --out_dir/--init_from,
    --encoding, --device and --dtype; scripts/eval.py shares it."""
    device, autocast = device_and_autocast(args, local_rank)
    state = load_state(args)
    try:
        enc = tokenizer.get_encoding(encoding_name(args, state))
    except ValueError as e:
        fail(str(e))
    with torch.device(device):  # the rows past the encoding's ids (a padded vocab) are masked: never sampled
        model = GPT(model_config(saved_args=state["model_args"], n_tokens=enc.n_vocab))
    if isinstance(autocast, torch.autocast):  # bf16: on the CPU the attention in fp32, as train.py runs it
        precision.fp32_attention_on_cpu(model, autocast.device, "bfloat16")
    try:
        checkpoint.restore(state, model)  # a ckpt_<N>.pt file or an FSDP run's ckpt_<N>/ folder
    except checkpoint.CheckpointError as e:
        fail(str(e))
    return model.eval(), state, enc, device, autocast


def check_encoding_fits(enc, tokens):
    """One line where an encoding given with --encoding has more tokens than the model's rows: its ids past them
    would be garbage sampled, or an IndexError mid-scoring (eval.py)."""
    if enc.n_vocab > tokens:
        fail(f"{enc.name} has {enc.n_vocab} tokens but the model {tokens}: pass the --encoding it was trained with "
             "(bytes, gpt2 or the run's .tiktoken file)")


def prompt_ids(args, enc, vocab_size):
    text = args.start
    if text.startswith("FILE:"):
        try:
            with open(text[5:], encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            fail(f"--start {text}: {e.strerror}")
        except UnicodeDecodeError:  # a checkpoint or other binary file given by mistake
            fail(f"--start {text}: the file is not UTF-8 text: give a UTF-8 text file as the prompt")
    ids = enc.encode_ordinary(text) or [enc.eot_token]  # an empty prompt starts a new document
    if max(ids) >= vocab_size:
        fail(f"the prompt encodes to id {max(ids)} but the model has only {vocab_size} ids: "
             f"is --encoding {enc.name!r} the one it was trained with?")
    return ids


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if problem := cli.below_least(args, {"num_samples": 1, "max_new_tokens": 0, "top_k": 0}):
        fail(problem)
    if not 0 < args.temperature < math.inf:  # nan fails every comparison; inf would sample uniform noise
        fail(f"--temperature must be a finite number > 0, e.g. 0.8; got {args.temperature}")
    torch.manual_seed(args.seed)
    model, state, enc, device, autocast = load_model(args)
    if args.encoding:  # the user's, not the one the model was trained with
        check_encoding_fits(enc, model.config.vocab_size)
    if device == "cpu":  # a decode step is many tiny ops: threads the machine lacks make each one wait (a 10x slowdown)
        log(machine.use_cpu_threads())
    dtype = "bfloat16" if isinstance(autocast, torch.autocast) else "float32"
    idx = torch.tensor([prompt_ids(args, enc, model.config.vocab_size)], dtype=torch.long, device=device)
    log(f"sampling {args.num_samples} x {args.max_new_tokens} tokens from step {state.get('iter_num')} "
        f"({enc.name} encoding, {device}, {dtype})")
    for _ in range(args.num_samples):
        with autocast:
            out = model.generate(idx, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k or None)
        print(enc.decode(out[0].tolist()))
        print("---------------", flush=True)


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends it quietly, as a Unix tool
    main()
