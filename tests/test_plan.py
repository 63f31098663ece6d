"""scripts/plan.py: the 6.7B figures against hand arithmetic, what auto picks per GPU, --simulate, and
the command line (its own flags apart from config overrides). cost.py's formulas: test_memory.py."""
import io
import json
import sys
from contextlib import redirect_stdout

import pytest

import configurator
from conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import plan  # noqa: E402

P_6B = 6_657_150_976  # every parameter; 6,648,762,368 without the position embeddings
CONFIG_6B = str(REPO / "config" / "train_gpt3_6b.py")


def run_plan(capsys, *args):
    plan.main([CONFIG_6B, *args, "--json"])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def mi300x():
    """The 6.7B plan on one MI300X, made once for the module (capsys is per test)."""
    out = io.StringIO()
    with redirect_stdout(out):
        plan.main([CONFIG_6B, "--gpu", "mi300x", "--json"])
    return json.loads(out.getvalue())


def test_6b_on_one_mi300x(mi300x):
    p = mi300x
    assert p["params"] == P_6B
    assert p["tokens_per_iter"] == 4 * 160 * 2048 == 1_310_720
    assert p["total_tokens"] == pytest.approx(300e9, rel=1e-4)
    assert p["flops_per_token"] == 6 * 6_648_762_368 + 12 * 32 * 4096 * 2048
    assert p["flops_per_token"] == pytest.approx(4.311e10, rel=1e-3)
    assert p["total_flops"] == pytest.approx(1.29e22, rel=0.01)
    # auto on an MI300X: no recompute at the config's micro-batch
    assert p["auto"]["activation_checkpointing"] == p["activation_checkpointing"] == "none"
    assert (p["batch_size"], p["gradient_accumulation_steps"]) == (4, 160) and p["recompute_flops_per_token"] == 0
    m = p["memory_gb"]
    assert m["weights"] == pytest.approx(4 * P_6B / 1e9)  # fp32 master weights only
    assert m["weights"] + m["grads"] + m["optimizer"] == pytest.approx(16 * P_6B / 1e9) == pytest.approx(106.5, abs=0.1)
    # autograd keeps every matmul weight's bf16 cast for backward: the 13.3 GB the original plan forgot
    assert m["autocast_bf16_weights"] == pytest.approx(2 * (32 * 12 * 4096**2 + 50304 * 4096) / 1e9)
    assert m["total"] == pytest.approx(sum(v for k, v in m.items() if k != "total"))
    assert p["fits"] and m["total"] < p["gpu_memory_gb"] and m["total"] > 150
    by_policy = p["total_gb_by_policy"]
    assert by_policy["full"] < by_policy["selective"] < by_policy["none"] == m["total"]
    assert p["peak_tflops"] == 1307.4 and p["mfu"] == 0.4
    # 1.29e22 FLOPs at 40% of 1307.4 TFLOPS: ~286 days, ~$13.7k at $2/h
    assert p["days"] == pytest.approx(p["total_flops"] / (0.4 * 1307.4e12) / 86400)
    assert 285 < p["days"] < 288 and p["cost_usd"] == pytest.approx(13_740, rel=0.01)
    assert p["checkpoint_gb"] == pytest.approx(12 * P_6B / 1e9)
    assert p["suggestions"] == []  # fits, and under a year


def test_h200_and_multi_gpu(capsys, mi300x):
    h200 = run_plan(capsys, "--gpu", "h200")
    assert h200["peak_tflops"] == 989.4 and h200["gpu_memory_gb"] == pytest.approx(150.75, abs=0.01)  # nvidia-smi's 143,771 MiB
    assert h200["days"] == pytest.approx(mi300x["days"] * 1307.4 / 989.4)
    assert any("more GPUs" in s for s in h200["suggestions"])  # over a year on one H200
    assert h200["auto"]["activation_checkpointing"] == h200["activation_checkpointing"] == "selective"
    assert h200["memory_gb"]["total"] <= h200["gpu_memory_gb"] < h200["total_gb_by_policy"]["none"]
    ddp = run_plan(capsys, "--gpus", "8", "--gpu=mi300x", "--activation_checkpointing=none")
    fsdp = run_plan(capsys, "--gpus", "8", "--gpu=mi300x", "--strategy=fsdp", "--activation_checkpointing=none")
    for p in (ddp, fsdp):
        assert p["days"] == pytest.approx(mi300x["days"] / 8)
        assert p["cost_usd"] == pytest.approx(mi300x["cost_usd"])  # the same GPU-hours
    assert ddp["memory_gb"]["total"] == pytest.approx(mi300x["memory_gb"]["total"])  # DDP replicates everything
    single, sharded = mi300x["memory_gb"], fsdp["memory_gb"]
    for key in ("weights", "grads", "optimizer"):
        assert sharded[key] == pytest.approx(single[key] / 8)
    # FSDP gathers bf16 weights (MixedPrecisionPolicy): autocast has nothing to cast
    assert sharded["autocast_bf16_weights"] == 0
    assert 0 < sharded["fsdp_unsharded"] < 5 and sharded["activations"] == single["activations"]


def test_full_checkpointing_recomputes_a_third(capsys):
    p = run_plan(capsys, "--gpu", "h200", "--activation_checkpointing=full")
    assert p["recomputed_blocks"] == 32 and 0.3 < p["recompute_flops_per_token"] / p["flops_per_token"] < 0.34
    head = p["head_recompute_flops_per_token"]  # the chunked loss's logits again: 2 V C, ~1% of 6.7B's FLOPs
    assert head == 2 * 50304 * 4096 and 0.009 < head / p["flops_per_token"] < 0.01
    assert p["hfu"] == pytest.approx(p["mfu"] * (1 + (p["recompute_flops_per_token"] + head) / p["flops_per_token"]))
    # the casts are made again in each block's recompute: at the peak, the last block's backward (the chunked
    # head's logits no longer make the start of backward the larger moment), only that block's are alive
    assert p["memory_gb"]["autocast_bf16_weights"] == pytest.approx(2 * 12 * 4096**2 / 1e9)
    selective = run_plan(capsys, "--gpu", "h200", "--activation_checkpointing=selective")
    assert selective["recompute_flops_per_token"] == 0
    assert selective["hfu"] == pytest.approx(selective["mfu"] * (1 + head / selective["flops_per_token"]))


def test_what_to_change_when_it_does_not_fit(capsys):
    p = run_plan(capsys, "--gpu", "h100", "--activation_checkpointing=none")
    assert not p["fits"] and p["memory_gb"]["total"] > 80
    text = " ".join(p["suggestions"])
    assert "--strategy=fsdp" in text and "mi300x" in text
    p = run_plan(capsys, "--gpu", "h200", "--activation_checkpointing=none")
    assert "--activation_checkpointing=selective (or auto)" in " ".join(p["suggestions"])
    auto = run_plan(capsys, "--gpu", "h100")  # nothing fits one 80 GB GPU: the plan says so with full checkpointing
    assert auto["auto"] is None and not auto["fits"] and auto["activation_checkpointing"] == "full"


def test_simulate_beside_the_estimate(capsys):
    tiny = [str(REPO / "config" / "train_tiny.py"), "--dtype=bfloat16", "--activation_checkpointing=selective"]
    plan.main([*tiny, "--simulate", "--json"])
    p = json.loads(capsys.readouterr().out)
    assert set(p["simulated"]) == {"weights", "grads", "optimizer", "activations", "other", "total"}
    estimated = p["memory_gb"]["total"]
    assert estimated == pytest.approx(p["simulated"]["total"], rel=0.05)
    plan.main([*tiny, "--simulate"])
    out = capsys.readouterr().out
    assert "simulated on fake tensors" in out and "estimated" in out


def test_text_report(capsys):
    plan.main([CONFIG_6B, "--gpu", "mi300x"])
    out = capsys.readouterr().out
    for expected in ("6,657,150,976", "1,310,720 per iteration", "AdamW moments", "autocast bf16 weight copies",
                     "fits", "286", "$13,7"):
        assert expected in out


@pytest.mark.parametrize("args, message", [
    (["--gpu", "h300"], "invalid choice"),
    (["--mfu", "40"], "--mfu is a fraction"),
    (["--gpus", "3"], "must divide among 3 processes"),
    (["--gpus=2", "--strategy=fsdp", "--optimizer_offload=True"], "optimizer_offload=True runs without FSDP"),
    (["--n_lyer=3"], "unknown config key 'n_lyer'"),  # a config override, told apart from plan's flags
    (["--n_head=33"], "must be a multiple of n_head=33"),
    (["--activation_checkpointing=some"], "activation_checkpointing must be one of"),
    (["--simulate", "--gpus=2"], "--simulate runs one GPU's step"),
    # no number, or nan/inf, is a plan of nan days and $nan
    (["--price_per_hour", "nan"], "argument --price_per_hour: nan is not a finite number"),
    (["--mfu=inf"], "argument --mfu: inf is not a finite number"),
    (["--nodes=2", "--interconnect=inf"], "argument --interconnect: inf is not a finite number"),
    (["--ladder=x", "--target_val_loss", "nan"], "argument --target_val_loss: nan is not a finite number"),
    (["--ladder=x", "--target_val_loss=0"], "--target_val_loss is a val loss, > 0; got 0.0"),
    (["--ladder=x", "--target", "next_line/acc=abc"], "--target next_line/acc=abc: SCORE 'abc' is not a number in (0, "
                                                       "100]: write a percent, e.g. next_line/acc=67.4"),
    (["--ladder=x", "--target", "hellaswag=nan"], "--target hellaswag=nan: SCORE 'nan' is not a number in (0, 100]"),
    (["--ladder=x", "--target", "hellaswag=-5"], "--target hellaswag=-5: SCORE '-5' is not a number in (0, 100]"),
])
def test_bad_input_is_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        plan.main([CONFIG_6B, *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and "Traceback" not in err


def test_a_target_score_is_a_percent_or_a_fraction():
    assert plan.target_score("hellaswag/acc_norm=67.4") == ("hellaswag/acc_norm", pytest.approx(0.674))
    assert plan.target_score("hellaswag=0.55") == ("hellaswag", 0.55)


def test_own_flags_and_overrides_mix(capsys):
    p = run_plan(capsys, "--gpu=a100", "--batch_size=2", "--mfu", "0.5", "--price_per_hour=3")
    assert p["tokens_per_iter"] == 2 * 160 * 2048 and p["gpu"] == "a100" and p["mfu"] == 0.5
    assert p["cost_usd"] == pytest.approx(p["days"] * 24 * 3)


def budget_note_of(capsys, *overrides):
    """What plan.py's budget note says on stderr for the 6.7B config with these overrides."""
    args = [CONFIG_6B, *overrides]
    plan.budget_note(configurator.load_config(args), args)
    return capsys.readouterr().err


def test_the_budget_note_asks_to_keep_the_tokens_only_where_the_batch_changed_them(capsys):
    """A config's max_iters follows its own batch, so --batch_size=8 alone doubles the tokens: the note gives the
    steps that keep 300B. A --max_iters of the user's (a shorter first run) was meant: nothing to undo."""
    assert budget_note_of(capsys, "--batch_size=8") == (
        "note: the overrides change the run from 300.0B to 600.0B tokens (the config derives max_iters from its "
        "own batch); for 300.0B set --max_iters and --lr_decay_iters to 114441\n")
    assert budget_note_of(capsys, "--max_iters=7630", "--lr_decay_iters=7630") == ""  # docs/first_run_h200.md
    assert budget_note_of(capsys, "--batch_size=8", "--max_iters=7630") == ""
    assert budget_note_of(capsys) == ""


def test_plan_reads_a_ladders_folder_as_its_ladder_json_and_refuses_another_folder_in_one_line(tmp_path, capsys):
    """--ladder OUT names scripts/ladder.py's OUT/ladder.json (the one a folder can hold); a folder without one
    is refused naming it, with no IsADirectoryError."""
    shipped = REPO / "docs" / "ladder_runs" / "scored_seed61"
    tiny = [str(REPO / "config" / "train_tiny.py"), "--n_layer=2", "--n_head=14", "--n_embd=224", "--batch_size=98",
            "--gradient_accumulation_steps=1", "--max_iters=400", "--lr_decay_iters=400", "--dtype=bfloat16"]
    plan.main([*tiny, "--gpu", "h200", "--json", "--ladder", str(shipped)])
    by_folder = json.loads(capsys.readouterr().out)["ladder"]["recipes"]
    plan.main([*tiny, "--gpu", "h200", "--json", "--ladder", str(shipped / "ladder.json")])
    assert by_folder == json.loads(capsys.readouterr().out)["ladder"]["recipes"]
    with pytest.raises(SystemExit) as e:
        plan.main([*tiny, "--gpu", "h200", "--ladder", str(tmp_path)])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err == (f"plan: error: {tmp_path} is a folder without a ladder.json: pass the "
                                         "ladder.json scripts/ladder.py wrote (OUT/ladder.json)\n")




def test_plan_and_settle_agree(capsys):
    """plan.py's verdict is cost.settle's on the card's whole memory: the same refusal train.py gives."""
    p = run_plan(capsys, "--gpu", "h200", "--activation_checkpointing=none")
    cfg = plan.configurator.load_config([CONFIG_6B, "--activation_checkpointing=none"])
    budget = plan.cost.stated_budget(p["gpu_memory_gb"] * 1e9, "the card's memory, less nothing measured")
    with pytest.raises(plan.cost.DoesNotFit) as e:
        plan.cost.settle(plan.cost.meta_model(cfg, "none"), cfg, budget)
    assert not p["fits"] and p["refusal"] == str(e.value) and "the card's memory, less nothing measured" in p["refusal"]
    assert p["needed_gb"] == pytest.approx(p["memory_gb"]["total"] * (1 + plan.cost.FRAGMENTATION_MARGIN))
    auto = run_plan(capsys, "--gpu", "h200")
    assert auto["fits"] and auto["refusal"] is None and auto["auto"]["fits"]
    plan.main([CONFIG_6B, "--gpu", "h200"])
    assert "less nothing measured; train.py measures the device's start-up cost" in capsys.readouterr().out
