"""
The GPT-3 paper's six zero-shot tasks as local files, for scripts/eval.py on a machine without the hub:

    python data/eval/prepare.py                           # all six into data/eval/<task>.jsonl (~25 MB)
    python data/eval/prepare.py --tasks hellaswag,piqa --out_dir /mnt/eval
    python data/eval/prepare.py --synthetic 8 --out_dir data/eval_synthetic   # offline: made-up examples

Each task's file is the split lm-eval scores (its own config says which, and which hub dataset), one
record a line as the hub holds it, written atomically. Run it once where there is a network and copy
the folder to the GPU machine. data/eval/hellaswag.jsonl also feeds the in-loop HellaSwag
(data/hellaswag/prepare.py --source data/eval/hellaswag.jsonl).

--synthetic N writes N made-up examples per task in each task's format instead: they try the whole path
offline (the tests use them, and docs/evaluation.md's table); their scores mean nothing.
"""
import argparse
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import bins, cli, lm_eval_adapter  # noqa: E402  (needs the repo root on sys.path first)

WORDS = "the a man woman dog cat river stone cloud paper green blue sun rain walks runs sees holds".split()


def download(task, config):
    import datasets
    return datasets.load_dataset(config["dataset_path"], config["dataset_name"], split=config["split"])


def synthetic(task, n, seed=0):
    """n made-up records with the fields lm-eval's config for task reads."""
    rng = random.Random(f"{seed}-{task}")

    def words(k):
        return " ".join(rng.choice(WORDS) for _ in range(k))

    make = {
        "hellaswag": lambda: {"activity_label": words(1).title(), "ctx_a": words(8) + ".", "ctx_b": words(3),
                              "endings": [words(5) + " [title] " + words(2) for _ in range(4)],
                              "label": str(rng.randrange(4))},
        "lambada_openai": lambda: {"text": words(rng.randrange(8, 40))},
        "piqa": lambda: {"goal": words(6), "sol1": words(5), "sol2": words(7), "label": rng.randrange(2)},
        "arc_easy": lambda: {"id": words(1), "question": words(9) + "?", "answerKey": rng.choice("ABCD"),
                             "choices": {"text": [words(3) for _ in range(4)], "label": list("ABCD")}},
        "winogrande": lambda: {"sentence": f"{words(5)} _ {words(6)}.", "option1": words(1), "option2": words(1),
                               "answer": rng.choice("12")},
    }
    make["arc_challenge"] = make["arc_easy"]
    return [make[task]() for _ in range(n)]


def main():
    p = cli.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default=",".join(lm_eval_adapter.PAPER_TASKS), help="comma-separated (default: %(default)s)")
    p.add_argument("--out_dir", default=os.path.dirname(os.path.abspath(__file__)), help="default: data/eval")
    p.add_argument("--synthetic", type=int, default=0, metavar="N", help="N made-up examples per task, offline")
    args = p.parse_args()
    if args.synthetic < 0:
        sys.exit(f"error: --synthetic must be 0 (download) or a number of examples, got {args.synthetic}")
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = [t for t in tasks if t not in lm_eval_adapter.PAPER_TASKS]
    if unknown:
        sys.exit(f"error: unknown task {unknown[0]!r}: prepare one of {', '.join(lm_eval_adapter.PAPER_TASKS)} (other tasks "
                 "come with their own configs through scripts/eval.py --include_path)")
    os.makedirs(args.out_dir, exist_ok=True)
    for task, config in lm_eval_adapter.builtin_configs(tasks).items():
        path = lm_eval_adapter.task_file(args.out_dir, task)
        try:
            records = synthetic(task, args.synthetic) if args.synthetic else download(task, config)
        except Exception as e:  # no network, no hub cache, a dataset moved: datasets raises many kinds
            sys.exit(f"error: cannot get {task} ({config['dataset_path']}, split {config['split']}) from the hub: "
                     f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; run this where there is "
                     f"a network and copy {args.out_dir} here")
        bins.write_jsonl_atomic(path, records)
        print(f"wrote {path}: {len(records):,} examples")


if __name__ == "__main__":
    main()
