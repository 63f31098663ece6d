"""
Two zero-shot tasks for models trained on the quick-start corpus, so that the CPU's scaling ladder can fit
scores as a GPU ladder fits HellaSwag's (Bhagia et al.'s step 2, docs/scaling_ladder.md). Given a few lines
of a val-split Python file, which of four lines comes next?
- next_line: the others are lines of other files, within the same length limits (what the line says);
- next_line_swaps: the others are the true line with two neighbouring characters swapped, one pair each (how
  Python is spelled): the tiny models the AdamW ladder trains are at chance on next_line and not on this.
Written from data/quickstart/val.bin (python data/quickstart/prepare.py first) as lm-evaluation-harness
files, with no download:

    python data/quickstart/next_line.py        # data/quickstart/next_line/{next_line,next_line_swaps}.{jsonl,yaml}
    python scripts/eval.py out/tiny --tasks next_line,next_line_swaps --include_path data/quickstart/next_line

Chance is 25%. The examples are drawn with a fixed seed, so the files are the same on every machine that
prepared the same corpus. Context and line fit in 128 bytes, the tiny models' block_size.
"""
import os
import random
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
from trainer import bins, cli  # noqa: E402  (needs the repo root on sys.path first)

HERE = os.path.dirname(os.path.abspath(__file__))
CONTEXT_BYTES, LINE_BYTES = (24, 88), (8, 39)  # context (with the answer's indentation) and answer: under 128 bytes


def documents(val_bin):
    """The val split's files as lists of ASCII lines (a file with other bytes is left out: a byte-level
    model reads UTF-8, lm-eval hands it text)."""
    tokens = np.fromfile(val_bin, dtype=np.uint16)
    ends = np.flatnonzero(tokens == 256)
    out = []
    for a, b in zip(np.concatenate([[-1], ends]), np.concatenate([ends, [len(tokens)]])):
        data = tokens[a + 1:b]
        if len(data) and data.max() < 128:
            out.append(bytes(data.astype(np.uint8)).decode("ascii").split("\n"))
    return out


def examples(docs, n, seed=0):
    """n examples: the lines before (as many whole lines as fit) and the answer's indentation, then the
    answer without it and three lines of other files without theirs: the choices differ in what they say,
    not in how many easy spaces they start with."""
    rng = random.Random(seed)
    fits = lambda text: LINE_BYTES[0] <= len(text) <= LINE_BYTES[1]
    pool = [(d, line.strip()) for d, lines in enumerate(docs) for line in lines if fits(line.strip())]
    if len({d for d, _ in pool}) < 2 or len({line for _, line in pool}) < 4:
        raise SystemExit("error: the val split has too few ASCII files with lines of "
                         f"{LINE_BYTES[0]}-{LINE_BYTES[1]} bytes to make four-way examples")
    made = []
    for _ in range(1000 * n):  # tries: a split where few lines qualify ends with an error, not a hang
        if len(made) == n:
            break
        d = rng.randrange(len(docs))
        lines = docs[d]
        i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
        answer = lines[i].strip() if i else ""
        if not fits(answer):
            continue
        context = lines[i][:len(lines[i]) - len(lines[i].lstrip())]
        for line in reversed(lines[:i]):  # whole lines back from the answer, up to the length budget
            if len(context) + len(line) + 1 > CONTEXT_BYTES[1]:
                break
            context = line + "\n" + context
        if len(context) < CONTEXT_BYTES[0]:
            continue
        others = set()
        for _ in range(1000):  # lines from other files, unlike the answer
            od, line = rng.choice(pool)
            if od != d and line != answer:
                others.add(line)
            if len(others) == 3:
                break
        if len(others) < 3:
            continue
        choices = sorted(others)
        label = rng.randrange(4)
        choices.insert(label, answer)
        made.append({"context": context, "choices": choices, "label": label})
    if len(made) < n:
        raise SystemExit(f"error: the val split gave {len(made)} of {n} examples: ask for fewer (-n)")
    return made


def swapped(made, seed=0):
    """next_line's examples with other choices: the answer three times with two neighbouring, different
    characters swapped, at three places (the choices are as long as the answer, so acc is acc_norm). An
    answer with fewer than three such places is left out."""
    rng, out = random.Random(seed), []
    for e in made:
        answer = e["choices"][e["label"]]
        places = [i for i in range(len(answer) - 1) if answer[i] != answer[i + 1]]
        if len(places) < 3:
            continue
        choices = sorted(answer[:i] + answer[i + 1] + answer[i] + answer[i + 2:] for i in rng.sample(places, 3))
        label = rng.randrange(4)
        choices.insert(label, answer)
        out.append({"context": e["context"], "choices": choices, "label": label})
    return out


def write_task(out_dir, name, made):
    """NAME.jsonl and the lm-eval task NAME.yaml that reads it (JSON is YAML), in out_dir."""
    data = os.path.abspath(os.path.join(out_dir, f"{name}.jsonl"))
    bins.write_jsonl_atomic(data, made)
    task = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"validation": data}},
            "output_type": "multiple_choice", "validation_split": "validation", "doc_to_text": "context",
            "doc_to_choice": "choices", "doc_to_target": "label", "target_delimiter": "",
            "metric_list": [{"metric": m, "aggregation": "mean", "higher_is_better": True}
                            for m in ("acc", "acc_norm")]}
    bins.write_json_atomic(os.path.join(out_dir, f"{name}.yaml"), task)
    print(f"wrote {len(made)} examples to {data} and the task {name}.yaml beside it")


def main(argv=None):
    p = cli.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data_dir", default=HERE, help="where val.bin is (default: %(default)s)")
    p.add_argument("--out_dir", default=os.path.join(HERE, "next_line"), help="default: %(default)s")
    p.add_argument("-n", type=int, default=1000, help="examples (default: %(default)s)")
    args = p.parse_args(argv)
    val_bin = os.path.join(args.data_dir, "val.bin")
    if not os.path.isfile(val_bin):
        sys.exit(f"error: {val_bin} not found: run python data/quickstart/prepare.py first")
    made = examples(documents(val_bin), args.n)
    os.makedirs(args.out_dir, exist_ok=True)
    write_task(args.out_dir, "next_line", made)
    write_task(args.out_dir, "next_line_swaps", swapped(made))


if __name__ == "__main__":
    main()
