"""
Export a checkpoint as a Hugging Face transformers folder, for lm-evaluation-harness, vLLM, transformers
or the hub: GPT-2's layout for GPT-3's settings, Llama's for a model with Llama's internals (position='rope',
norm='rmsnorm', activation='swiglu', the head tied or not, biases or not), Qwen3's for those with qk_norm=True and
bias=False; any other mix is refused. The checkpoint's settings pick the layout, so the command is the same:

    python scripts/export_hf.py out/gpt3_6b hf/gpt3_6b                 # the newest loadable checkpoint
    python scripts/export_hf.py out/gpt3_6b/ckpt_572205.pt hf/final --dtype float32

Reads a ckpt_<N>.pt (memory-mapped: the RAM it needs is about one safetensors shard) or an FSDP run's
ckpt_<N>/ folder (read into one CPU copy of the weights), on the CPU. OUT_DIR appears only when complete.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer import cli, hf  # noqa: E402


def main():
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("source", help="a ckpt_<N>.pt, a ckpt_<N>/ folder, or an out_dir (its newest loadable checkpoint)")
    p.add_argument("out_dir", help="the folder to write; it must not exist or be empty")
    p.add_argument("--dtype", choices=("bfloat16", "float32"), default="bfloat16",
                   help="of the exported weights (default: %(default)s; training keeps float32 masters)")
    p.add_argument("--encoding", help="the tokenizer, where the checkpoint's does not load here: 'gpt2', 'bytes' or "
                                      "a .tiktoken rank file (scripts/fetch_gpt2_ranks.sh writes .cache/gpt2.tiktoken)")
    args = p.parse_args()
    try:
        hf.export(args.source, args.out_dir, getattr(torch, args.dtype), encoding=args.encoding)
    except hf.WeightsError as e:
        sys.exit(f"error: {e}")


if __name__ == "__main__":
    main()
