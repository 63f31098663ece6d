"""
HellaSwag accuracy of a checkpoint, zero-shot, completion style (see hellaswag.py):

    python scripts/eval_hellaswag.py --out_dir=out/gpt3_6b               # its newest loadable checkpoint
    python scripts/eval_hellaswag.py --init_from=out/gpt3_6b/ckpt_5000.pt --limit=500 --json
    torchrun --nproc_per_node=8 scripts/eval_hellaswag.py --init_from=out/gpt3_6b/ckpt_5000/

--data takes the prepared hellaswag.json (default: the one beside the run's bins) or the official
hellaswag_val.jsonl as it is. Under torchrun each process scores a share of the examples.
"""
import argparse
import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer import hellaswag  # noqa: E402
import sample  # noqa: E402  (loads a checkpoint as sample.py does)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out_dir", default="out", help="the run's folder of checkpoints (default: out)")
    p.add_argument("--init_from", help="a checkpoint (ckpt_<N>.pt or ckpt_<N>/) instead of the newest in --out_dir")
    p.add_argument("--data", help="hellaswag.json or hellaswag_val.jsonl (default: hellaswag.json beside the bins)")
    p.add_argument("--limit", type=int, default=0, help="score only the first N examples (0: all)")
    p.add_argument("--json", action="store_true", help="print {'acc', 'acc_norm', 'n'} as JSON")
    p.add_argument("--device", default="auto", help="auto (a GPU if there is one), cpu, cuda")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--encoding", help="override the checkpoint's encoding: 'bytes', 'gpt2' or a .tiktoken file")
    args = p.parse_args()
    if args.limit < 0:
        sample.fail(f"--limit must be 0 (all) or positive, got {args.limit}")
    rank, world_size = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    model, state, encoding, device, autocast = sample.load_model(args, int(os.environ.get("LOCAL_RANK", 0)))
    if world_size > 1:
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
        dist.init_process_group("nccl" if device.startswith("cuda") else "gloo", timeout=timedelta(minutes=30))
    data = args.data or os.path.join(state.get("config", {}).get("data_dir", ""), hellaswag.FILE)
    try:
        examples = hellaswag.load(data, encoding)
    except hellaswag.HellaSwagError as e:
        sample.fail(str(e))
    if rank == 0 and (note := hellaswag.truncation_note(examples, model.config.block_size)):
        print(note, file=sys.stderr)
    result = hellaswag.evaluate(model, examples, model.config.block_size, device, autocast, args.limit, rank, world_size)
    if rank == 0:
        name, reference = hellaswag.gpt3_reference(model.get_num_params(non_embedding=False))
        print(json.dumps(result) if args.json else
              f"hellaswag: acc_norm {result['acc_norm']:.4f}, acc {result['acc']:.4f} ({result['n']:,} examples, "
              f"step {state.get('iter_num')}); {name} zero-shot: {reference}%")
    if world_size > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
