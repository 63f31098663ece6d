"""The memory and time figures the docs quote are the ones scripts/plan.py gives now, computed here by plan.py's own
functions in-process (its meta model, cost.estimate, auto's choice), so that a change of the pricing cannot
leave the docs behind. A failure lists every stale figure: the doc, the figure it quotes, and the value to
write instead. (The simulated columns of docs/memory.md need `plan.py --simulate`, minutes at 6.7B, and
are not checked here.)"""
import re
import sys

import pytest

import configurator
from conftest import REPO
from trainer import cost, machine, optim

sys.path.insert(0, str(REPO / "scripts"))
import plan  # noqa: E402

SIX_B = "config/train_gpt3_6b.py"
FAST = "config/train_gpt3_6b_fast.py"
AUTO_TEXT = {"none": "no recompute", "selective": "selective", "full": "full"}


@pytest.fixture(scope="module")
def figures():
    """{name: (value, the plan.py command that prints it)} for GPT-3 6.7B at micro-batch 4, one GPU."""
    cfg = configurator.load_config([SIX_B])
    model = cost.meta_model(cfg, "none")
    mode = optim.mode_of(vars(cfg))

    def estimate(policy, blocks=-1, fp8="", batch_size=cfg.batch_size):
        return cost.estimate(model, batch_size, cost.Setup(cfg.dtype, *mode, fp8=fp8, strategy=cfg.strategy),
                             (policy, blocks))

    def gb(nbytes):
        return nbytes / 1e9

    found = {}
    for name, policy, blocks in (("none", "none", -1), ("selective", "selective", -1), ("full16", "full", 16),
                                 ("full", "full", -1)):
        e = estimate(policy, blocks)
        command = f"plan.py {SIX_B} --activation_checkpointing={policy}" + (
            f" --recompute_blocks={blocks}" if blocks > 0 else "")
        found[f"{name} total"] = gb(e["total"]), command
        found[f"{name} needed"] = gb(cost.needed_bytes(e["total"])), command + " ('needed')"
        found[f"{name} activations"] = gb(e["total"] - e["weights"] - e["grads"] - e["optimizer"]), command
    e = estimate("none")
    found["weights+grads+moments"] = gb(e["weights"] + e["grads"] + e["optimizer"]), f"plan.py {SIX_B}"
    found["none at 8 x 80 needed"] = gb(cost.needed_bytes(estimate("none", batch_size=8)["total"])), \
        f"plan.py {SIX_B} --batch_size=8 --gradient_accumulation_steps=80 ('needed')"
    fp8_none = estimate("none", fp8="tensorwise")["total"]
    found["fp8 none total"] = gb(fp8_none), f"plan.py {SIX_B} --gpu h200 --fp8=tensorwise (by policy: none)"
    found["fp8 none needed"] = gb(cost.needed_bytes(fp8_none)), found["fp8 none total"][1] + " ('needed')"
    config = model.config
    flops = cost.flops_per_token(model.get_num_params(), config.n_layer, config.n_embd, config.block_size)
    step = plan.compute_seconds(cfg, flops, 1, 0.4, machine.GPUS["h200"]) + plan.offload_seconds(
        model.get_num_params(non_embedding=False), mode)
    found["h200 days"] = cfg.max_iters * step / 86400, f"plan.py {SIX_B} --gpu h200 ('days')"
    found["h200 days for 7630 steps"] = 7630 * step / 86400, f"plan.py {SIX_B} --gpu h200 --max_iters=7630 ('days')"
    for key in ("mi300x", "h200", "h100"):
        found[f"{key} budget"] = machine.GPUS[key].capacity_gb, f"plan.py {SIX_B} --gpu {key} (its memory in 1e9 bytes)"
    for key, fp8 in (("mi300x", ""), ("h200", ""), ("h200", "tensorwise")):
        cfg.fp8 = fp8
        choice, _, _ = plan.choose_setting(cfg, machine.GPUS[key], 1)
        name = f"{key}{' fp8' if fp8 else ''} auto"
        found[f"{name} peak"] = choice.peak_gb, f"plan.py {SIX_B} --gpu {key}{' --fp8=' + fp8 if fp8 else ''} ('auto on')"
        found[f"{name} policy"] = AUTO_TEXT[choice.activation_checkpointing], found[f"{name} peak"][1]
    small = configurator.load_config(["config/train_gpt3_1_3b.py"])
    e = cost.estimate(cost.meta_model(small, "none"), small.batch_size,
                      cost.Setup(small.dtype, *optim.mode_of(vars(small)), strategy=small.strategy), ("none", -1))
    found["1.3b none total"] = gb(e["total"]), "plan.py config/train_gpt3_1_3b.py --gpu h200 (by policy: none)"
    fast, six_b = configurator.load_config([FAST]), configurator.load_config([SIX_B])  # cfg's fp8 was changed above
    for key in ("h200", "mi300x"):  # plan.py's defaults: 40% MFU, $2 a GPU-hour, one GPU
        command = f"{FAST} --gpu {key} --beside {SIX_B}"
        plans = {"fast": plan.make_plan(fast, key, 0.4, 2.0, 1), "gpt3": plan.make_plan(six_b, key, 0.4, 2.0, 1)}
        found[f"{key} recipe command"] = command, "the command for the fast-recipe table's row"
        for recipe, p in plans.items():
            found[f"{key} {recipe} tokens"] = p["total_tokens"] / 1e9, f"plan.py {command}"
            found[f"{key} {recipe} days"] = p["days"], f"plan.py {command}"
            found[f"{key} {recipe} dollars"] = f"{p['cost_usd']:,.0f}", f"plan.py {command}"
        found[f"{key} days ratio"] = f"{plans['fast']['days'] / plans['gpt3']['days']:.2f}", f"plan.py {command}"
    for key, gpus in (("mi300x", 1), ("h200", 1), ("mi300x", 8)):  # the README's figures table
        p, command = plan.make_plan(six_b, key, 0.4, 2.0, gpus), f"plan.py {SIX_B} --gpu {key} --gpus {gpus}"
        found[f"{key} x{gpus} step"] = p["seconds_per_iter"], command
        found[f"{key} x{gpus} whole days"] = f"{p['days']:.0f}" if gpus == 1 else f"{p['days']:.1f}", command
        found[f"{key} x{gpus} dollars"] = f"{p['cost_usd']:,.0f}", command
        found[f"{key} x{gpus} tok/s"] = f"{p['tokens_per_second']:,.0f}", command
    return found


def recipe_row(gpu, label):
    """docs/time_to_quality.md's row of the fast recipe beside GPT-3's on one GPU: one quote for each figure."""
    names = [f"{gpu} {recipe} {what}" for recipe in ("fast", "gpt3") for what in ("tokens", "days", "dollars")]
    names.append(f"{gpu} days ratio")
    row = r"^\| " + label + r" \| {}B, {} days, \${} \| {}B, {} days, \${} \| {}× \|"
    anything = [r"[\d.]+", r"[\d.]+", r"[\d,]+"] * 2 + [r"[\d.]+"]
    return [("docs/time_to_quality.md", row.format(*[f"({a})" if j == i else a for j, a in enumerate(anything)]), name)
            for i, name in enumerate(names)]


# (doc, a regex whose one group is the figure, the figure's name in `figures`)
QUOTES = [
    ("docs/memory.md", r"^\| none \| ([\d.]+) \|", "weights+grads+moments"),
    *[("docs/memory.md", rf"^\| {row} \| [\d.]+ \| [\d.]+ \| ([\d.]+) \|", f"{name} activations")
      for row, name in (("none", "none"), ("selective", "selective"), ("full, 16 of 32 blocks", "full16"),
                        ("full", "full"))],
    *[("docs/memory.md", rf"^\| {row} \|(?: [\d.]+ \|){{4}} ([\d.]+) \(", f"{name} total")
      for row, name in (("none", "none"), ("selective", "selective"), ("full, 16 of 32 blocks", "full16"),
                        ("full", "full"))],
    *[("docs/memory.md", rf"^\| {row} \|.*\| ([\d.]+) \|$", f"{name} needed")
      for row, name in (("none", "none"), ("selective", "selective"), ("full, 16 of 32 blocks", "full16"),
                        ("full", "full"))],
    ("docs/memory.md", r"none at micro-batch 16 x 32, estimated ([\d.]+) GB", "1.3b none total"),
    ("docs/memory.md", r"^\| MI300X \(([\d.]+)\) \| ", "mi300x budget"),
    ("docs/memory.md", r"^\| MI300X \([\d.]+\) \| (no recompute|selective|full), ", "mi300x auto policy"),
    ("docs/memory.md", r"^\| MI300X \([\d.]+\) \|[^|]+\| ([\d.]+) GB \(", "mi300x auto peak"),
    ("docs/memory.md", r"^\| MI300X \([\d.]+\) \|[^|]+\| [\d.]+ GB \(([\d.]+) needed", "none needed"),
    ("docs/memory.md", r"micro-batch 8 × 80 would need ([\d.]+) GB", "none at 8 x 80 needed"),
    ("docs/memory.md", r"^\| H200 \(([\d.]+)\) \| ", "h200 budget"),
    ("docs/memory.md", r"^\| H200 \([\d.]+\) \| (no recompute|selective|full), ", "h200 auto policy"),
    ("docs/memory.md", r"^\| H200 \([\d.]+\) \|[^|]+\| ([\d.]+) GB \(", "h200 auto peak"),
    ("docs/memory.md", r"^\| H200 \([\d.]+\) \|[^|]+\| [\d.]+ GB \(([\d.]+) needed", "selective needed"),
    ("docs/memory.md", r"^\| H200 \([\d.]+\) .*no recompute needs ([\d.]+) GB", "none needed"),
    ("docs/memory.md", r"^\| H100 80 GB \(([\d.]+)\) \| ", "h100 budget"),
    ("docs/memory.md", r"^\| H100 80 GB .* full: ([\d.]+) GB", "full total"),
    ("docs/memory.md", r"moments alone are ([\d.]+) GB", "weights+grads+moments"),
    ("docs/memory.md", r"`memory_budget_gb`\nbetween ([\d.]+) and", "full needed"),
    ("docs/memory.md", r"`memory_budget_gb`\nbetween [\d.]+ and ([\d.]+) GB", "selective needed"),
    ("docs/memory.md", r"^\| MI300X \([\d.]+ TFLOPS\) \| none \| ([\d.]+) GB", "mi300x auto peak"),
    ("docs/memory.md", r"^\| H200 \([\d.]+ TFLOPS\) \| selective \| ([\d.]+) GB", "h200 auto peak"),
    ("docs/memory.md", r"no recompute still needs ([\d.]+) GB of the", "none needed"),
    ("docs/memory.md", r"no recompute still needs [\d.]+ GB of the ([\d.]+)", "h200 budget"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py` \| MI300X \(([\d.]+)\)", "mi300x budget"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py` \| MI300X \([\d.]+\) \| (no recompute|selective|full),",
     "mi300x auto policy"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py` \| MI300X [^|]+\|[^|]+\| ([\d.]+) GB", "mi300x auto peak"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py` \| MI300X [^|]+\|[^|]+\| [\d.]+ GB \(([\d.]+)\)",
     "none needed"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200` \| H200 \(([\d.]+)\)", "h200 budget"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200` \|[^|]+\| (no recompute|selective|full),",
     "h200 auto policy"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200` \|[^|]+\|[^|]+\| ([\d.]+) GB", "h200 auto peak"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200` \|[^|]+\|[^|]+\| [\d.]+ GB \(([\d.]+)\)",
     "selective needed"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200` \|.*no recompute needs ([\d.]+)", "none needed"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpus 8` \|[^|]+\|[^|]+\| ([\d.]+) GB per GPU",
     "mi300x auto peak"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200 --fp8=tensorwise` \| H200 \(([\d.]+)\)",
     "h200 budget"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200 --fp8=tensorwise` \|[^|]+\| "
                              r"(no recompute|selective|full),", "h200 fp8 auto policy"),
    ("docs/configuration.md", r"^\| `config/train_gpt3_6b.py --gpu h200 --fp8=tensorwise` \|[^|]+\|[^|]+\| ([\d.]+) GB;",
     "h200 fp8 auto peak"),
    ("docs/configuration.md", r"--fp8=tensorwise` .*; no recompute ([\d.]+) GB", "fp8 none total"),
    ("docs/configuration.md", r"--fp8=tensorwise` .*; no recompute [\d.]+ GB \(([\d.]+)\)", "fp8 none needed"),
    ("docs/first_run_h200.md", r"the plan says ([\d.]+) days at 40% MFU", "h200 days"),
    ("docs/first_run_h200.md", r"\(auto: (no recompute|selective|full) checkpointing", "h200 auto policy"),
    ("docs/first_run_h200.md", r"an estimated peak of ([\d.]+) GB", "h200 auto peak"),
    ("docs/first_run_h200.md", r"\n?([\d.]+) days by the same\s+estimate", "h200 days for 7630 steps"),
    ("README.md", r"MI300X: ([\d.]+) s a step", "mi300x x1 step"),
    ("README.md", r"MI300X: [\d.]+ s a step, (\d+) days", "mi300x x1 whole days"),
    ("README.md", r"MI300X: [\d.]+ s a step, \d+ days, \$([\d,]+);", "mi300x x1 dollars"),
    ("README.md", r"H200 \(`--gpu h200`\): ([\d.]+) s,", "h200 x1 step"),
    ("README.md", r"H200 \(`--gpu h200`\): [\d.]+ s, (\d+) days", "h200 x1 whole days"),
    ("README.md", r"^\| 6.7B on 8 × MI300X, planned \| ([\d.]+) s a step", "mi300x x8 step"),
    ("README.md", r"^\| 6.7B on 8 × MI300X, planned \| [\d.]+ s a step, ([\d,]+) tok/s", "mi300x x8 tok/s"),
    ("README.md", r"^\| 6.7B on 8 × MI300X, planned \|.* tok/s, ([\d.]+) days", "mi300x x8 whole days"),
    ("README.md", r"^\| 6.7B on 8 × MI300X, planned \|.* days, \$([\d,]+)", "mi300x x8 dollars"),
    *recipe_row("h200", "H200"), *recipe_row("mi300x", "MI300X"),
    *[("docs/time_to_quality.md", rf"^python scripts/plan.py ({FAST} --gpu {key} .*)$", f"{key} recipe command")
      for key in ("h200", "mi300x")],
]


def shown(value):
    return value if isinstance(value, str) else f"{value:.1f}"


def test_the_docs_quote_the_memory_figures_plan_py_gives(figures):
    stale, texts = [], {}
    for doc, pattern, name in QUOTES:
        text = texts.setdefault(doc, (REPO / doc).read_text())
        match = re.search(pattern, text, re.MULTILINE)
        value, command = figures[name]
        if match is None:
            stale.append(f"{doc}: no line matches {pattern!r} (where it quotes {name} = {shown(value)}); "
                         f"restore the line, or change this test's QUOTES with it")
        elif match.group(1) != shown(value):
            line = text.count("\n", 0, match.start(1)) + 1
            stale.append(f"{doc}:{line}: {name} is quoted as {match.group(1)}; {command} gives {shown(value)}: "
                         f"update it to {shown(value)}")
    assert not stale, "the docs quote figures plan.py no longer gives:\n" + "\n".join(stale)
