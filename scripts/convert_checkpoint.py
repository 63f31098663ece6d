"""
Turn a sharded checkpoint folder (FSDP, ckpt_<N>/) into a single ckpt_<N>.pt file, or the reverse:

    python scripts/convert_checkpoint.py out/gpt3_6b/ckpt_1000 out/single/      # for sample.py, or one GPU
    python scripts/convert_checkpoint.py out/gpt3_6b/ckpt_1000.pt out/sharded/  # to continue on many GPUs

The result holds the same model, optimizer and trainer state, so training resumes from it exactly
where the source left off. train.py and sample.py also read either form directly; converting
is for moving a run between machines or tools. Runs in one process on the CPU: it needs host
memory for the weights and AdamW moments (16 bytes per parameter, ~107 GB at 6.7B).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from trainer import checkpoint, cli  # noqa: E402
from trainer import optim, runlock  # noqa: E402
from model import GPT, model_config  # noqa: E402


def main():
    parser = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="a ckpt_<N>/ folder or a ckpt_<N>.pt file")
    parser.add_argument("dest_dir", help="the out_dir to write the other form into")
    args = parser.parse_args()
    if not os.path.exists(args.source):
        sys.exit(f"error: no such checkpoint {args.source}")
    lock = runlock.hold_or_exit(args.dest_dir, "conversion")  # a live run there, or a folder it cannot write: refused
    if found := checkpoint.list_checkpoints(args.dest_dir):  # its newest would be resumed: one run's, not a mix
        sys.exit(f"error: {args.dest_dir} holds checkpoints already ({os.path.basename(found[0][1])}): convert into "
                 "a new folder")
    try:
        state = checkpoint.load_checkpoint(args.source)
    except checkpoint.CheckpointError as e:
        sys.exit(f"error: {e}")
    model = GPT(model_config(saved_args=state["model_args"]))
    config = state["config"]
    mode = optim.mode_of(config)  # the checkpoint's own memory mode: nothing converted on the way
    if mode[1] == "bfloat16":
        optim.use_bf16_weights(model)
    optimizer = optim.build(model, mode[0], config["weight_decay"], config["learning_rate"],
                            (config["beta1"], config["beta2"]), "cpu", *mode[1:])
    try:
        checkpoint.restore(state, model, optimizer)
    except checkpoint.CheckpointError as e:
        sys.exit(f"error: {e}")
    trainer_state = {k: v for k, v in state.items() if k not in ("model", "optimizer", "sharded_path")}
    try:
        if "sharded_path" in state:
            model_sd, optimizer_sd = checkpoint.full_state(model, optimizer)
            checkpoint.save_checkpoint(dict(trainer_state, model=model_sd, optimizer=optimizer_sd),
                                       args.dest_dir, state["iter_num"], keep_last_n=0)
        else:
            checkpoint.save_sharded(model, optimizer, trainer_state, args.dest_dir, state["iter_num"], keep_last_n=0)
    except (OSError, checkpoint.CheckpointError) as e:  # a full or read-only disk: the save leaves nothing half-written
        sys.exit(f"error: writing to {args.dest_dir} failed: {e}")
    lock.close()


if __name__ == "__main__":
    main()
