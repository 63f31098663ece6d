"""How much a run's val loss depends on which val windows measure it: trains nothing.

    python scripts/bench/val_windows.py out/ladder_tiny/runs/muon/w112_r4_lr0.0242 \
        out/ladder_tiny/runs/muon/w112_r4_lr0.0242_s1338

For each run folder (one data folder, not a mixture) it loads the newest checkpoint and scores every window of
block_size tokens of its val.bin once, then prints the val loss on the windows train.py measures (drawn by
Mixture.val_windows, as train.py draws them), the spread of that loss over --draws other draws of as many
windows (what the val loss would have been had the windows depended on the seed, as they did before
2026-12-03), and the loss on the whole val set. Writes the table as JSON to --out.
"""
import json
import sys
import types
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
import sample  # noqa: E402
from trainer import bins, cli, metrics  # noqa: E402


def window_losses(model, val, block_size, batch=64):
    """Each whole window's mean cross-entropy, in the order of its index."""
    out, count = [], val.num_windows(block_size)
    for start in range(0, count, batch):
        idx = np.arange(start, min(start + batch, count))
        w = torch.from_numpy(val.windows(idx, block_size))
        with torch.no_grad():
            logprobs, _ = model(w[:, :-1], w[:, 1:], scores=True)[1]
        out.append(-logprobs.mean(dim=1))
    return torch.cat(out).numpy()


def measure(run, draws):
    args = types.SimpleNamespace(out_dir=run, init_from="", encoding="bytes", device="cpu", dtype="float32")
    model, state = sample.load_model(args)[:2]
    cfg = types.SimpleNamespace(**state["config"])
    if cfg.data_mixture:
        sample.fail(f"{run} trained on a data_mixture: give a run of one data folder")
    block_size = model.config.block_size
    data = bins.open_mixture(bins.folders(cfg), block_size, model.config.vocab_size, cfg.seed)
    losses = window_losses(model, data.sources[0].val, block_size)
    start = metrics.read(run, "start")[-1]
    # the config's batch, before activation_checkpointing=auto changed it; runs before 2026-12-03 did not record
    # it, and their batch_size is it unless auto changed it (the ladder's runs set none)
    eval_batch_size = start.get("eval_batch_size", start["batch_size"])
    fixed = next(iter(data.val_windows(cfg.eval_iters, eval_batch_size).values()))
    count = fixed.size  # train.py's own windows (Mixture.val_windows); the other draws as many by other keys
    others = np.array([losses[bins.WindowSampler(len(losses), key).next_indices(count)].mean()
                       for key in range(1, draws + 1)])
    return {"run": str(run), "windows": count, "of": len(losses), "fixed": float(losses[fixed.ravel()].mean()),
            "other_draws_mean": float(others.mean()), "other_draws_sd": float(others.std(ddof=1)),
            "other_draws_range": [float(others.min()), float(others.max())], "whole": float(losses.mean())}


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="run folders (out_dir) with a checkpoint")
    p.add_argument("--draws", type=int, default=20, help="other draws of as many windows")
    p.add_argument("--out", default="/tmp/val_windows.json")
    args = p.parse_args(argv)
    rows = [measure(run, args.draws) for run in args.runs]
    print("| run | windows | val loss (fixed windows) | other draws: sd (range) | whole val set |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['run']} | {r['windows']} of {r['of']} | {r['fixed']:.4f} | {r['other_draws_sd']:.4f} "
              f"({r['other_draws_range'][0]:.4f} … {r['other_draws_range'][1]:.4f}) | {r['whole']:.4f} |")
    Path(args.out).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
