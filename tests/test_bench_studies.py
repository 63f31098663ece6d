"""Each study in scripts/bench/ runs for a few seconds at a tiny size, so none can rot unnoticed: the
figures they print are the docs' measurements at full size (docs/performance.md, docs/configuration.md)."""
import importlib.util
import json
import math
import sys

import pytest

from conftest import REPO, run_here
from trainer import ladder_analysis, metrics

STUDIES = REPO / "scripts" / "bench"


def study(name):
    """scripts/bench/<name>.py as a module (the folder on sys.path: bench_fp8 imports bench_optim)."""
    if str(STUDIES) not in sys.path:
        sys.path.insert(0, str(STUDIES))
    spec = importlib.util.spec_from_file_location(name, STUDIES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_study_is_run_by_some_test():
    tests = "".join(p.read_text() for p in (REPO / "tests").glob("test_*.py"))
    assert [p.stem for p in STUDIES.glob("*.py") if f'"{p.stem}"' not in tests] == []


CASES = [
    ("bench_cast", ["--n_layer", "1", "--n_embd", "32", "--block_size", "16", "--vocab_size", "64",
                    "--batch_size", "1", "--micro_steps", "2"], "6.7B"),
    ("bench_lm_head", ["--batch_size", "1", "--block_size", "16", "--n_embd", "32", "--vocab_size", "64",
                       "--chunk_rows", "8"], "chunked"),
    ("bench_sample", ["--new_tokens", "2", "--prompt_tokens", "2", "--block_size", "8", "--vocab_size", "64",
                      "--repeat", "1"], "x"),
    ("bench_checkpoint", ["--mb", "1", "--tensors", "2", "--repeats", "1"], "async save stall"),
    ("bench_muon", ["--sizes", "8x16", "--repeats", "1"], "Newton-Schulz"),
    ("bench_cpu_bf16", ["--n_layer", "1", "--n_embd", "32", "--block_size", "16", "--batch_size", "2",
                        "--repeats", "1"], "bf16/fp32"),
    ("form_choice", ["--draws", "1", "--noise", "0.01"], "| s-shaped | 1.0% | no local |"),
]


@pytest.mark.parametrize("name, argv, printed", CASES, ids=[c[0] for c in CASES])
def test_a_study_runs(name, argv, printed, capsys, tmp_path):
    if name == "bench_checkpoint":
        argv = [*argv, "--dir", str(tmp_path)]
    study(name).main(argv)
    assert printed in capsys.readouterr().out


def test_fp8_study(data_dir, tmp_path, capsys):
    study("bench_fp8").main(["--modes", "bf16,tensorwise", "--steps", "2", "--n_layer", "1", "--n_embd", "32",
                             "--block_size", "16", "--batch_size", "2", "--eval_interval", "1", "--eval_iters", "1",
                             "--data_dir", data_dir, "--out", str(tmp_path / "fp8.png")])
    assert "tensorwise" in capsys.readouterr().out and (tmp_path / "fp8.png").is_file()


@pytest.mark.e2e
def test_optim_study_reads_its_runs_metrics(data_dir, tmp_path, capsys):
    tiny = ("--n_layer=1 --n_head=2 --n_embd=32 --block_size=16 --vocab_size=64 --eval_interval=1 --eval_iters=1 "
            "--log_interval=1 --warmup_iters=1 --device=cpu --dtype=float32 --compile=False")
    study("bench_optim").main(["--modes", "adamw", "--steps", "2", "--data_dir", data_dir, "--args", tiny,
                               "--out", str(tmp_path / "optim.png")])
    out = capsys.readouterr().out
    assert "adamw            final val loss" in out and (tmp_path / "optim.png").is_file()


@pytest.mark.e2e
def test_prepare_study(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    study("bench_prepare").main(["--megabytes", "0.02", "--encoding", "bytes", "--num_proc", "1", "--repeat", "1"])
    assert "ratio (b)/(a)" in capsys.readouterr().out


@pytest.mark.e2e
def test_forecast_study_fits_its_runs(data_dir, tmp_path, capsys):
    """The study trains (a real train.py per run), then fits its evaluations at 25% and 50%."""
    tiny = ("--n_layer=1 --n_head=2 --n_embd=32 --block_size=16 --vocab_size=64 --batch_size=2 "
            f"--gradient_accumulation_steps=1 --warmup_iters=1 --data_dir={data_dir} --device=cpu --dtype=float32")
    study("forecast_accuracy").main(["--iters", "8", "--eval_interval", "1", "--eval_iters", "1", "--schedules",
                                     "cosine", "--work", str(tmp_path / "runs"), "--out", str(tmp_path / "r.json"),
                                     "--args", tiny])
    printed = capsys.readouterr().out
    assert "| cosine | 1337 | 25% of 8 |" in printed and "| cosine | 1337 | 50% of 8 |" in printed
    assert (tmp_path / "r.json").is_file()


def test_val_windows_study_measures_the_windows_train_py_measured(data_dir, tmp_path, capsys):
    """Its fixed-windows loss is the run's own final val loss: the same windows, the same model."""
    out = tmp_path / "run"
    tiny = ["--n_layer=1", "--n_head=2", "--n_embd=32", "--block_size=16", "--vocab_size=64", "--batch_size=2",
            "--gradient_accumulation_steps=1", "--max_iters=4", "--lr_decay_iters=4", "--warmup_iters=1",
            "--eval_interval=4", "--eval_iters=3", f"--data_dir={data_dir}", "--device=cpu", "--dtype=float32",
            "--compile=False", f"--out_dir={out}", "--seed=2"]  # not VAL_WINDOWS_KEY: the windows are the data's
    assert run_here(["train.py", "config/train_tiny.py", *tiny]).returncode == 0
    study("val_windows").main([str(out), "--draws", "3", "--out", str(tmp_path / "w.json")])
    row = json.loads((tmp_path / "w.json").read_text())[0]
    assert row["windows"] == 6 and row["fixed"] == pytest.approx(metrics.read(out, "eval")[-1]["val_loss"], rel=1e-5)
    assert f"| {out} | 6 of " in capsys.readouterr().out


def test_train_val_gap_compares_the_last_quarter_of_steps_with_its_evals(tmp_path, capsys):
    """Steps from iteration 6 of 8 on (a rolled-back step's later record standing), the evals there: train 1.0
    against val 1.25, a gap of -20%; a run without its done record is left out."""
    done, unfinished = tmp_path / "done", tmp_path / "unfinished"
    records = [{"kind": "start", "iter": 0, "max_iters": 8},
               *({"kind": "step", "iter": i, "loss": 3.0 if i < 6 else 1.0} for i in range(8)),
               {"kind": "step", "iter": 7, "loss": 1.0}, {"kind": "eval", "iter": 4, "val_loss": 2.0},
               {"kind": "eval", "iter": 6, "val_loss": 1.3}, {"kind": "eval", "iter": 8, "val_loss": 1.2}]
    for run, end in ((done, [{"kind": "done", "iter": 8}]), (unfinished, [])):
        run.mkdir()
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records + end))
    study("train_val_gap").main([str(done), str(unfinished), "--out", str(tmp_path / "g.json")])
    [row] = json.loads((tmp_path / "g.json").read_text())
    assert (row["train"], row["val"], row["gap"]) == pytest.approx((1.0, 1.25, -0.2))
    assert "gap -20.0%" in capsys.readouterr().out


def test_seed_rules_reads_a_ladder_as_each_smaller_rule_would_have_trained_it(tmp_path, capsys):
    """Each size: a lucky run at 2e-3 (0.99 of the law) whose other seeds end 5-6% above it, and 1e-3 at the law
    at every seed. 3x1 keeps the lucky rate's seeds; 3x2 also 1e-3's, and takes it for its lower mean."""
    rules = study("seed_rules")
    runs = []
    for i, n in enumerate((1e4, 2e4, 4e4, 8e4, 1.6e5)):
        law = 10 * n ** -0.15
        for lr, seeds in ((1e-3, (1.0, 1.0, 1.0)), (2e-3, (0.99, 1.05, 1.06)), (4e-3, (1.02,))):
            runs += [{"size": f"s{i}", "params": n, "tokens_per_param": 4, "lr": lr, "seed": 1337 + k,
                      "replica": k > 0, "final_val_loss": law * f, "curve": [[1.0, law * f]], "scores": {},
                      "sweep_best_lr": 1.5e-3} for k, f in enumerate(seeds)]
    assert not any(r["replica"] for r in rules.under_rule(runs, 4, 1, 1))
    assert {(r["lr"], r["seed"]) for r in rules.under_rule(runs, 4, 3, 1) if r["replica"]} == {(2e-3, 1338), (2e-3, 1339)}
    assert {(r["lr"], r["seed"]) for r in rules.under_rule(runs, 4, 2, 2) if r["replica"]} == {(2e-3, 1338), (1e-3, 1338)}
    # adaptive: 2e-3's mean (1.033 of the law) is above 1e-3's one run (1.0), so 1e-3 is challenged and trained
    assert rules.under_rule(runs, 4, 3, 2, adaptive=True) == rules.under_rule(runs, 4, 3, 2)
    steady = [{**r, "final_val_loss": r["final_val_loss"] * (0.995 / 1.055 if r["lr"] == 2e-3 and r["replica"] else 1)}
              for r in runs]  # 2e-3's seeds now 0.99, 0.995, 1.0: a mean below 1e-3's run, which is not trained again
    assert {(r["lr"], r["seed"]) for r in rules.under_rule(steady, 4, 3, 2, adaptive=True) if r["replica"]} == \
        {(2e-3, 1338), (2e-3, 1339)}
    path = tmp_path / "ladder.json"
    path.write_text(json.dumps({"tokens_per_param": [4], "settings": {"seeds": 3, "seeded_rates": 2},
                                "recipes": {"adamw": {"runs": runs}}}))
    rules.main([str(path), "--rules", "1x1", "3x1", "3x2", "3x2a"])
    rows = {line.split(" | ")[2]: line for line in capsys.readouterr().out.splitlines() if "| adamw |" in line}
    law = 10 * 1.6e5 ** -0.15  # the largest size
    assert f"| {law:.4f} ({law:.4f}, {law:.4f}, {law:.4f}) | " in rows["3x2"]  # 1e-3: the lower mean
    assert f"| {law * 3.1 / 3:.4f} ({0.99 * law:.4f}, {1.05 * law:.4f}, {1.06 * law:.4f}) | " in rows["3x1"]
    assert f"| {0.99 * law:.4f} ({0.99 * law:.4f}) | " in rows["1x1"]
    assert rows["3x2a"].split(" | ")[3:-2] == rows["3x2"].split(" | ")[3:-2] and rows["3x2"].endswith("| 35 | nan |")  # 5 sizes x (3 rates + 2 x 2 seeds)
    assert all("0.0%, inside" in row for row in rows.values())  # each rule's sizes on a law of their own
    with pytest.raises(SystemExit, match="rule 4x1 asks for more"):
        rules.main([str(path), "--rules", "4x1"])
    with pytest.raises(SystemExit, match="rule '3': write SEEDSxRATES"):
        rules.main([str(path), "--rules", "3"])


# Each published CPU ladder's held-out check as docs/ladder_evidence.md reports it ("The config: one depth", "Seeds
# 7, 8 and 9", "Seed 10 and the last step's slope", "A 22-minute ladder", "Half the tokens", "One depth at half the
# tokens", "One depth at three tokens", "Fewer seeds, for the half hour?", "bf16, and the half hour", "Seeds 23, 25
# and 27", "Warmup and the AdamW seeds"; seeds 23 and 25 at their reruns' three seeds, whose errors it quotes, not
# their before and last step): the relative error now (the stop, local among the forms), before (every candidate
# seeded, no local), and of the last step's slope carried on.
PUBLISHED = {"seed7": {"adamw": (0.048, 0.048, 0.005), "muon": (-0.014, -0.036, 0.009)},  # ladder_tiny_deepening
             "seed8": {"adamw": (-0.004, -0.004, -0.021), "muon": (-0.028, -0.028, -0.0115)},
             "seed9": {"adamw": (0.045, 0.045, 0.0185), "muon": (0.000, -0.022, 0.015)},
             "seed10": {"adamw": (0.0305, 0.0305, -0.012), "muon": (-0.022, -0.022, 0.001)},
             "depth2_seed10": {"adamw": (0.018, 0.018, 0.021), "muon": (-0.008, 0.059, 0.021)},  # config/ladder_tiny.py
             "depth2_seed11": {"adamw": (0.0174, 0.0174, 0.0063), "muon": (-0.0092, 0.0634, 0.0144)},
             "depth2_seed12": {"adamw": (0.0266, 0.0266, -0.0006), "muon": (-0.0007, 0.0717, 0.0227)},
             "depth2_seed13": {"adamw": (-0.0054, -0.0054, 0.0015), "muon": (-0.0006, 0.0626, 0.0145)},
             "depth2_seed14": {"adamw": (-0.0109, -0.0109, 0.0153), "muon": (0.0045, -0.0267, 0.0136)},
             "depth2_seed15": {"adamw": (-0.0243, -0.0243, -0.0562), "muon": (-0.0027, 0.0655, 0.0118)},
             "depth2_seed16": {"adamw": (-0.0382, -0.0382, -0.0133), "muon": (-0.0173, -0.0523, -0.0024)},
             "bf16_seed18": {"adamw": (0.0246, 0.0246, 0.0195), "muon": (0.0061, 0.0706, 0.0234)},  # ladder_tiny, bf16
             "bf16_seed19": {"adamw": (-0.0343, -0.0343, -0.0153), "muon": (-0.0063, 0.0662, 0.0131)},
             "bf16_seed20": {"adamw": (-0.0275, -0.0275, -0.0057), "muon": (-0.0186, 0.0586, 0.0071)},  # tiny_bf16
             "bf16_seed21": {"adamw": (-0.0431, -0.0431, -0.0381), "muon": (-0.0133, 0.0651, 0.0160)},
             "bf16_seed23": {"adamw": (0.0612, 0.0612, 0.0200), "muon": (-0.0033, 0.0605, 0.0106)},  # three seeds
             "bf16_seed25": {"adamw": (0.0572, 0.0572, 0.0574), "muon": (-0.0082, 0.0685, 0.0255)},
             "bf16_seed27": {"adamw": (0.0376, 0.0376, 0.0389), "muon": (-0.0173, 0.0646, 0.0124)},  # two seeds
             "warmup_seed39": {"adamw": (0.0139, 0.0139, 0.0257), "muon": (-0.0079, 0.0740, 0.0044)},  # a quarter
             "warmup_seed41": {"adamw": (0.0159, 0.0159, 0.0042), "muon": (-0.0054, 0.0958, 0.0056)},  # warmup
             "warmup_seed43": {"adamw": (0.0155, 0.0155, 0.0237), "muon": (0.0056, -0.0386, 0.0013)},
             "warmup_seed45": {"adamw": (-0.0125, -0.0125, 0.0147), "muon": (-0.0012, -0.0475, 0.0014)},
             "warmup_seed51": {"adamw": (0.0061, 0.0061, 0.0128), "muon": (0.0031, -0.0425, -0.0047)},
             "fp32_seed47": {"adamw": (0.0032, 0.0032, 0.0081), "muon": (-0.0065, 0.0869, 0.0213)},  # ladder_tiny
             "fp32_seed53": {"adamw": (-0.0039, -0.0039, 0.0148), "muon": (-0.0082, 0.0823, 0.0174)},
             "scored_seed57": {"adamw": (0.0152, 0.0152, 0.0037), "muon": (0.0025, -0.0422, -0.0012)},  # tiny_bf16
             "scored_seed59": {"adamw": (0.0287, 0.0287, 0.024), "muon": (-0.0132, 0.0795, 0.012)},
             "scored_seed61": {"adamw": (0.0006, 0.0006, 0.020), "muon": (0.0030, 0.0769, 0.0195)},
             "one_seed17": {"adamw": (-0.0741, -0.0741, -0.0400), "muon": (-0.0040, -0.0361, 0.0052)},  # one seed
             "small_seed9": {"adamw": (0.059, 0.059, 0.026), "muon": (0.156, 0.156, 0.040)},  # config/ladder_tiny_small.py
             "half_seed7": {"adamw": (0.042, 0.042, 0.036), "muon": (-0.026, -0.026, -0.002)},  # ladder_tiny_half_tokens
             "half_seed8": {"adamw": (0.024, 0.024, 0.010), "muon": (-0.045, -0.045, -0.028)},
             "half_seed9": {"adamw": (-0.000, -0.000, -0.021), "muon": (-0.0195, -0.0195, -0.005)},
             "half_depth2_seed11": {"adamw": (0.0713, 0.0713, 0.066), "muon": (0.0196, -0.0409, 0.0131)},  # one depth
             "three_depth2_seed11": {"adamw": (0.0187, 0.0187, 0.013), "muon": (-0.0468, -0.0468, -0.0053)}}  # 3 tokens


def kept_ladder(name):
    """A published ladder's ladder.json, kept in docs/ladder_runs/NAME (its run folders are not kept)."""
    return REPO / "docs" / "ladder_runs" / name / "ladder.json"


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_the_published_ladders_held_out_checks_are_what_the_docs_say(name):
    rules, forms = study("seed_rules"), study("form_choice")
    result = json.loads(kept_ladder(name).read_text())
    ratio = result["tokens_per_param"][0]
    for recipe, (now, before, last_step) in PUBLISHED[name].items():
        runs = result["recipes"][recipe]["runs"]
        held = ladder_analysis.held_out(rules.under_rule(runs, ratio, 3, 2, adaptive=True), ratio)
        assert held["relative_error"] == pytest.approx(now, abs=5e-4)
        assert held["last_step"]["relative_error"] == pytest.approx(last_step, abs=5e-4)
        with forms.choosing_among(forms.RULES["no local"]):
            assert ladder_analysis.held_out(runs, ratio)["relative_error"] == pytest.approx(before, abs=5e-4)


# Each published CPU ladder's in-run forecast with its prior at 25% and 50% of its held-out run, as
# docs/ladder_evidence.md reports them (seeds 23 and 25: their reruns' three seeds), re-derived from the run's curve
# kept in its ladder.json (no run folders).
FORECASTS = {"seed8": {"adamw": (-0.0040, -0.0155), "muon": (-0.0095, -0.0153)},  # ladder_tiny_deepening
             "seed10": {"adamw": (-0.0184, -0.0252), "muon": (-0.0056, -0.0328)},
             "depth2_seed10": {"adamw": (0.0185, -0.0068), "muon": (0.0062, -0.0224)},  # config/ladder_tiny.py
             "depth2_seed11": {"adamw": (-0.0113, -0.0215), "muon": (-0.0176, -0.0231)},
             "depth2_seed12": {"adamw": (-0.0055, -0.0305), "muon": (0.0122, -0.0251)},
             "depth2_seed13": {"adamw": (0.0079, -0.0291), "muon": (0.0058, -0.0173)},
             "depth2_seed14": {"adamw": (0.0099, -0.0238), "muon": (-0.0111, -0.0051)},
             "depth2_seed15": {"adamw": (0.0006, -0.0268), "muon": (-0.0030, 0.0065)},
             "depth2_seed16": {"adamw": (-0.0078, -0.0215), "muon": (-0.0062, -0.0071)},
             "bf16_seed18": {"adamw": (0.0158, -0.0186), "muon": (-0.0014, -0.0128)},  # ladder_tiny.py in bf16
             "bf16_seed19": {"adamw": (-0.0106, -0.0315), "muon": (0.0006, 0.0120)},
             "bf16_seed20": {"adamw": (0.0049, -0.0284), "muon": (0.0014, -0.0091)},  # ladder_tiny_bf16.py
             "bf16_seed21": {"adamw": (-0.0299, -0.0525), "muon": (0.0063, 0.0014)},
             "bf16_seed23": {"adamw": (0.0338, 0.0037), "muon": (-0.0038, -0.0199)},  # the reruns' three seeds
             "bf16_seed25": {"adamw": (0.0212, -0.0092), "muon": (0.0190, 0.0103)},
             "bf16_seed27": {"adamw": (-0.0140, -0.0161), "muon": (-0.0128, -0.0121)},  # two seeds
             "warmup_seed39": {"adamw": (0.0059, -0.0222), "muon": (-0.0103, -0.0319)},  # a quarter's warmup
             "warmup_seed41": {"adamw": (0.0201, -0.0059), "muon": (0.0002, 0.0100)},
             "warmup_seed43": {"adamw": (0.0034, -0.0219), "muon": (0.0088, 0.0104)},
             "warmup_seed45": {"adamw": (0.0222, 0.0031), "muon": (-0.0322, -0.0235)},
             "warmup_seed51": {"adamw": (0.0085, -0.0147), "muon": (-0.0063, -0.0000)},
             "fp32_seed47": {"adamw": (0.0197, -0.0070), "muon": (0.0043, -0.0008)},  # ladder_tiny.py, a quarter's
             "fp32_seed53": {"adamw": (-0.0017, -0.0204), "muon": (-0.0059, -0.0262)},
             "scored_seed57": {"adamw": (0.0193, -0.0289), "muon": (-0.0015, -0.0028)},  # ladder_tiny_bf16.py
             "scored_seed59": {"adamw": (0.0346, 0.0047), "muon": (-0.0010, -0.0050)},
             "scored_seed61": {"adamw": (0.0300, 0.0030), "muon": (-0.0035, -0.0034)},
             "scored_seed63": {"adamw": (-0.0030, -0.0269), "muon": (-0.0034, -0.0219)},
             "beyond_seed63": {"adamw": (-0.0326, -0.0349), "muon": (-0.1451, -0.0009)},  # w320, 3.8x beyond
             "beyond_seed61": {"adamw": (-0.0695, -0.0769), "muon": (-0.1394, -0.0036)},
             "full6_seed65": {"adamw": (0.0036, 0.0033), "muon": (-0.0086, -0.0269)},  # the whole stdlib
             "full_seed65": {"adamw": (-0.0068, -0.0528), "muon": (-0.1381, -0.0175)},  # and w320 on it
             "full6_seed67": {"adamw": (0.0182, 0.0086), "muon": (-0.0042, -0.0284)},
             "full_seed67": {"adamw": (-0.0590, -0.0643), "muon": (-0.1260, -0.0510)},
             "full6_seed69": {"adamw": (0.0059, -0.0090), "muon": (0.0024, -0.0093)},
             "full_seed69": {"adamw": (0.0000, -0.0047), "muon": (-0.1278, -0.0608)},
             "further_seed69": {"adamw": (-0.0082, -0.0273), "muon": (-0.0418, -0.0117)},  # and w400
             "further_seed67": {"adamw": (0.0095, -0.0001), "muon": (-0.0597, -0.0051)},
             "further_seed65": {"adamw": (-0.0232, 0.0067), "muon": (-0.0536, -0.0224)},
             "one_seed17": {"adamw": (-0.0088, -0.0317), "muon": (-0.0069, 0.0057)},  # config/ladder_tiny_one_seed.py
             "small_seed9": {"adamw": (0.0395, 0.0183), "muon": (0.0540, -0.0075)},
             "half_seed9": {"adamw": (-0.0201, -0.0356), "muon": (-0.0001, -0.0115)},
             "three_depth2_seed11": {"adamw": (0.0098, -0.0044), "muon": (-0.0289, -0.0318)}}


@pytest.mark.parametrize("name", sorted(FORECASTS))
def test_the_published_ladders_forecasts_with_their_prior_are_what_the_docs_say(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the runs' folders (out/...) are not here: the curves in ladder.json serve
    study("forecast_accuracy").main(["--ladder", str(kept_ladder(name)), "--out", str(tmp_path / "f.json")])
    rows = json.loads((tmp_path / "f.json").read_text())["rows"]
    for recipe, published in FORECASTS[name].items():
        prior = [r["relative_error"] for r in rows if r["recipe"] == recipe and r["method"] == "ladder prior"]
        assert prior == pytest.approx(list(published), abs=5e-4)
        now = [r["relative_error"] for r in rows if r["recipe"] == recipe and r["method"] == "val loss now"]
        assert abs(prior[0]) < abs(now[0])  # at 25%, better than the val loss now
        assert all(r["forecast"] is None and "is not on disk" in r["error_bar"]
                   for r in rows if r["recipe"] == recipe and r["method"] == "law")
    assert "| adamw | " in capsys.readouterr().out


def test_a_prior_of_another_warmup_share_misses_more_than_one_of_the_runs_own(capsys):
    """docs/scaling_ladder.md, "In the run: forecast_prior": each kept ladder of one family's prior against the
    others' largest runs, by the two warmup shares: why ladder.shape_problem refuses a run off its ladder's."""
    ladders = [str(p) for kind in ("warmup", "bf16", "scored")
               for p in sorted((REPO / "docs" / "ladder_runs").glob(f"{kind}_seed*/ladder.json"))]
    study("forecast_accuracy").main(["--across", *ladders])
    out = capsys.readouterr().out
    for row in ("| 0.1, 0.1 | adamw | 42 | 2.1% | 2.3% |", "| 0.1, 0.1 | muon | 42 | 0.6% | 1.0% |",
                "| 0.1, 0.25 | adamw | 63 | 4.7% | 2.4% |", "| 0.1, 0.25 | muon | 63 | 4.0% | 3.2% |",
                "| 0.25, 0.1 | adamw | 63 | 2.6% | 5.2% |", "| 0.25, 0.1 | muon | 63 | 4.3% | 4.4% |",
                "| 0.25, 0.25 | adamw | 72 | 1.6% | 1.3% |", "| 0.25, 0.25 | muon | 72 | 0.9% | 1.5% |"):
        assert row in out


def prior_errors_under_rule(name, rule, tmp_path, monkeypatch):
    """{(recipe, fraction of the run): the forecast with the prior's relative error} of a kept ladder read under
    a seed rule by forecast_accuracy.py (the curves in its ladder.json: the run folders are not here)."""
    monkeypatch.chdir(tmp_path)
    study("forecast_accuracy").main(["--ladder", str(kept_ladder(name)), "--rule", rule, "--out",
                                     str(tmp_path / "f.json")])
    rows = json.loads((tmp_path / "f.json").read_text())["rows"]
    return {(r["recipe"], round(r["at"], 2)): r["relative_error"] for r in rows if r["method"] == "ladder prior"}


def test_a_ladders_forecast_read_as_if_trained_with_one_seed_is_what_the_docs_say(tmp_path, monkeypatch):
    """docs/ladder_evidence.md, "Fewer seeds, for the half hour?": seed 13's ladder read under 1x1, its prior
    from single runs' curves, misses AdamW's half-way by 3.8% where the config's three seeds missed by 2.9%."""
    prior = prior_errors_under_rule("depth2_seed13", "1x1", tmp_path, monkeypatch)
    assert prior == pytest.approx({("adamw", 0.25): -0.0086, ("adamw", 0.5): -0.0383, ("muon", 0.25): 0.0037,
                                   ("muon", 0.5): -0.0127}, abs=5e-4)


# The ladders read at config/ladder_tiny_bf16.py's rule (2x2a) in docs/ladder_evidence.md: seeds 10-16 in fp32 and
# 18-19 in bf16 read off their three seeds, 20, 21 and 27 as trained, 23 and 25 read off their reruns' three seeds.
BF16_RULE_LADDERS = [f"depth2_seed{s}" for s in range(10, 17)] + [f"bf16_seed{s}" for s in (18, 19, 20, 21, 23, 25, 27)]


def test_two_seeds_read_off_the_ladders_is_what_the_docs_say(tmp_path, monkeypatch):
    """docs/ladder_evidence.md, "bf16, and the half hour" and "Seeds 23, 25 and 27": config/ladder_tiny_bf16.py's
    rule (2x2a) read off the kept ladders. Held out: within 3% in 22 of 28 and inside in 27 of 28, AdamW's errors
    from -4.3% to +9.7% (seed 25's outside), Muon's within 2%; the forecast with the prior at half-way of seeds 19,
    23, 25 and 27 (AdamW: -2.95%, +0.4%, -0.05%, -1.6%)."""
    rules = study("seed_rules")
    held = {}
    for name in BF16_RULE_LADDERS:
        result = json.loads(kept_ladder(name).read_text())
        ratio = result["tokens_per_param"][0]
        for recipe in ("adamw", "muon"):
            runs = rules.under_rule(result["recipes"][recipe]["runs"], ratio, 2, 2, adaptive=True)
            held[name, recipe] = ladder_analysis.held_out(runs, ratio)
    error = {key: h["relative_error"] for key, h in held.items()}
    for name, published in (("depth2_seed16", -0.0360), ("depth2_seed12", 0.0350), ("bf16_seed19", -0.0220),
                            ("bf16_seed21", -0.0431), ("bf16_seed23", 0.0641), ("bf16_seed25", 0.0968),
                            ("bf16_seed27", 0.0376)):
        assert error[name, "adamw"] == pytest.approx(published, abs=5e-4)
    assert (error["bf16_seed23", "muon"], error["bf16_seed25", "muon"]) == pytest.approx((0.0001, -0.0020), abs=5e-4)
    assert sum(abs(e) <= 0.03 for e in error.values()) == 22 and sum(h["inside"] for h in held.values()) == 27
    assert not held["bf16_seed25", "adamw"]["inside"] and max(abs(error[n, "muon"]) for n in BF16_RULE_LADDERS) < 0.02
    for name, published in (("bf16_seed19", -0.0295), ("bf16_seed23", 0.0039), ("bf16_seed25", -0.0005),
                            ("bf16_seed27", -0.0161)):
        prior = prior_errors_under_rule(name, "2x2a", tmp_path, monkeypatch)
        assert prior[("adamw", 0.5)] == pytest.approx(published, abs=5e-4)


# At a quarter's warmup: config/ladder_tiny_bf16.py's named seeds, and config/ladder_tiny.py's (fp32, three seeds)
WARMUP_LADDERS = [f"warmup_seed{s}" for s in (39, 41, 43, 45, 51)] + ["fp32_seed47", "fp32_seed53"] + \
    ["scored_seed57", "scored_seed59", "scored_seed61", "scored_seed63"]


def test_the_ladders_at_a_quarters_warmup_are_what_the_docs_say():
    """docs/ladder_evidence.md, "Warmup and the AdamW seeds": each ladder's held-out size inside its interval and
    within 3% (both recipes), the recommended rate within 2x of the sweep's best (but for seed 61's Muon), the
    forecast with the prior within 3% at half-way but for seed 39's Muon (FORECASTS, re-derived from the curves by
    the test above, which also checks it beats the val loss now at 25%), and the two sizes held out still
    over-predicted by over 10%."""
    for name in WARMUP_LADDERS:
        result = json.loads(kept_ladder(name).read_text())
        for recipe in ("adamw", "muon"):
            held = result["recipes"][recipe]["held_out"]
            assert held["inside"] and abs(held["relative_error"]) <= 0.03
            assert (0.5 <= held["lr_ratio"] <= 2) == ((name, recipe) != ("scored_seed61", "muon"))  # 2.06x
            assert result["recipes"][recipe]["held_out_further"][0]["relative_error"] > 0.10
            half_way = FORECASTS[name][recipe][1]
            assert (abs(half_way) <= 0.03) == ((name, recipe) != ("warmup_seed39", "muon"))


def test_a_fit_no_backtest_judged_has_no_interval_beyond_its_sizes():
    """docs/ladder_evidence.md, "Intervals no backtest judged": on the ten quarter-warmup ladders kept before the
    change, power laws through w32-w64 alone (no backtest) read at w160, 5.6x out, over-predicted by 18-35% and the
    intervals their ladder.json gave them held it 0 times in 20; through w32-w96, whose backtest judged power and
    whose drift widened the interval, 19 in 20 at 2.6x (seed 63's, kept after it: 21 in 22). Now the three sizes'
    fits have no interval."""
    inside, old = {2: 0, 3: 0}, 0
    for name in WARMUP_LADDERS:
        result = json.loads(kept_ladder(name).read_text())
        for rec in result["recipes"].values():
            two, three = (ladder_analysis.held_out(rec["runs"], result["tokens_per_param"][0], k) for k in (2, 3))
            kept = rec["held_out_further"][1]
            assert three["relative_error"] == pytest.approx(kept["relative_error"], abs=1e-6)
            assert 0.18 < three["relative_error"] < 0.35
            assert three["interval"] is None and three["inside"] is None
            inside[2] += two["inside"]
            if kept["interval"] is not None:  # written before the change
                assert kept["interval"][0] > kept["measured_val_loss"]
                inside[3], old = inside[3] + kept["inside"], old + 1
    assert inside == {2: 21, 3: 0} and old == 20


# "w320: beyond the config": w320's misses from w32-w160 (3.8x) and w32-w128 (5.9x) by the chosen form, and
# whether the interval that reaches the other forms' readings held it (seed 63's made the rule; seed 61 checked it);
# with the s-shaped law's reading among them (since "w400: further") it held seed 61's Muon, which it had missed
BEYOND = {"beyond_seed63": {"adamw": ((-0.165, "plateau", True), (-0.202, "plateau", True)),
                            "muon": ((-0.096, "local", True), (-0.134, "local", True))},
          "beyond_seed61": {"adamw": ((-0.175, "plateau", True), (-0.174, "plateau", True)),
                            "muon": ((-0.113, "local", True), (-0.123, "local", True))},
          # "Unrepeated data": the same on the whole standard library, where w320 trains 0.36 of a pass
          "full_seed65": {"adamw": ((-0.076, "plateau", True), (-0.094, "plateau", True)),
                          "muon": ((-0.120, "local", True), (-0.295, "plateau", True))},
          "full_seed67": {"adamw": ((-0.028, "local", True), (0.005, "local", True)),
                          "muon": ((-0.096, "local", True), (-0.113, "local", True))},
          "full_seed69": {"adamw": ((-0.001, "local", True), (-0.139, "plateau", True)),
                          "muon": ((-0.099, "local", True), (-0.111, "local", True))},
          # "w400: further": w400 from the seven sizes below (1.5x), six (6.0x) and five (9.1x), on two seeds
          "further_seed69": {"adamw": ((-0.019, "local", True), (-0.021, "local", True), (-0.195, "plateau", True)),
                             "muon": ((-0.054, "power", True), (-0.171, "local", True), (-0.185, "local", True))},
          "further_seed67": {"adamw": ((-0.006, "local", True), (-0.037, "local", True), (0.002, "local", True)),
                             "muon": ((-0.051, "power", True), (-0.169, "local", True), (-0.188, "local", True))},
          # "w400: a third seed": AdamW, trained at the rate its ladder recommended, missed one and two sizes out
          "further_seed65": {"adamw": ((-0.078, "local", False), (-0.167, "plateau", False), (-0.188, "plateau", True)),
                             "muon": ((-0.064, "power", True), (-0.198, "local", True), (-0.400, "plateau", True))}}
# the checks whose drift alone held the top size (at w320 seeds 67's and 69's AdamW at both distances, their Muon
# at 5.9x; at w400 seed 69's AdamW from six and five sizes, its Muon from seven and five, and seed 67's all but its
# Muon from six): all others missed it
DRIFT_HELD = {*((name, recipe, k) for name in ("full_seed67", "full_seed69") for recipe, k in
                (("adamw", 1), ("adamw", 2), ("muon", 2))),
              ("further_seed69", "adamw", 2), ("further_seed69", "adamw", 3), ("further_seed69", "muon", 1),
              ("further_seed69", "muon", 3), *(("further_seed67", "adamw", k) for k in (1, 2, 3)),
              ("further_seed67", "muon", 1), ("further_seed67", "muon", 3), ("further_seed65", "muon", 1)}


@pytest.mark.parametrize("name", sorted(BEYOND))
def test_sizes_beyond_the_config_are_what_the_docs_say(name):
    """docs/ladder_evidence.md, "w320: beyond the config": a ladder with w320 (3.8x w160) trained once a seed at the
    predicted rate. The chosen forms under-predicted it by 9.6-20.2% on the quick-start corpus, outside the
    intervals of their drift alone; on unrepeated data Muon's by 9.6-29.5% again, AdamW's by 0.1-13.9% (or +0.5%);
    the intervals that reach the other forms' readings held it but for seed 61's Muon from w32-w160. "w400:
    further": one size more, where from w32-w160 (6.0x) Muon's loss lay above every form's reading along the
    rule. With the s-shaped law's reading in the interval too, every check on seeds 67 and 69 held, and seed 65's
    Muon, the first ladder it was not decided on; seed 65's AdamW, trained at its ladder's rate, missed one and two
    sizes out ("w400: a third seed")."""
    from trainer import ladder
    result = json.loads(kept_ladder(name).read_text())
    ratio = result["tokens_per_param"][0]
    for recipe, checks in BEYOND[name].items():
        runs = result["recipes"][recipe]["runs"]
        best = ladder.best_runs(runs, ratio)
        assert best[-1]["size"] == ("w400" if name.startswith("further") else "w320")
        assert len(best[-1]["seed_losses"]) == 2
        for k, (error, form, inside) in enumerate(checks, start=1):
            held = ladder_analysis.held_out(runs, ratio, k)
            assert (held["relative_error"], held["form"]) == (pytest.approx(error, abs=5e-4), form)
            assert held["inside"] == inside
            fit = ladder.fit_loss([r["params"] for r in best[:-k]], [r["final_val_loss"] for r in best[:-k]])
            fit.others = {}  # the drift alone
            _, low, high = fit.predict(best[-1]["params"])
            assert (low <= held["measured_val_loss"] <= high) == ((name, recipe, k) in DRIFT_HELD)


def test_the_bench_tables_say_no_interval_where_a_held_out_check_has_none(tmp_path, capsys):
    """A ladder of four sizes holds out one from three: no backtest, so no interval, and form_choice's table says
    so instead of failing on it."""
    result = json.loads(kept_ladder("scored_seed63").read_text())
    for rec in result["recipes"].values():
        rec["runs"] = [r for r in rec["runs"] if r["size"] in ("w32", "w48", "w64", "w96")]
    (tmp_path / "four").mkdir()
    (tmp_path / "four" / "ladder.json").write_text(json.dumps(result))
    study("form_choice").real_ladders([str(tmp_path / "four" / "ladder.json")])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| four | ")]
    assert rows and all("no interval" in row for row in rows if "last step" not in row)


# "Unrepeated data": the six sizes on the whole standard library, w160 held out: (its miss, the recommended rate over
# the sweep's best, the miss two sizes out, the scores' misses one size out in points), and Muon's compute
# multiplier at w32 and w160 as the ladder with w320 measured it (only there do AdamW's sizes span Muon's w160 loss)
UNREPEATED = {65: ({"adamw": (-0.010, 1.15, 0.093, {"next_line/acc_norm": -0.4, "next_line_swaps/acc": 2.3,
                                                    "next_line/acc": -2.0}),
                    "muon": (-0.052, 0.78, 0.132, {"next_line/acc_norm": -1.5, "next_line_swaps/acc": -1.3,
                                                   "next_line/acc": -4.9})}, (4.33, 7.41)),
              67: ({"adamw": (0.015, 0.79, 0.120, {"next_line/acc_norm": -1.2, "next_line_swaps/acc": -0.6,
                                                   "next_line/acc": -1.4}),
                    "muon": (-0.006, 0.76, 0.129, {"next_line/acc_norm": -1.7, "next_line_swaps/acc": -1.2,
                                                   "next_line/acc": -1.5})}, (4.39, 6.91)),
              69: ({"adamw": (-0.029, 1.47, 0.110, {"next_line/acc_norm": -1.2, "next_line_swaps/acc": 2.7,
                                                    "next_line/acc": -0.4}),
                    "muon": (-0.002, 1.08, 0.127, {"next_line/acc_norm": -2.8, "next_line_swaps/acc": -1.6,
                                                   "next_line/acc": -0.1})}, (4.28, 6.18))}


@pytest.mark.parametrize("name", ["further_seed65", "further_seed67", "further_seed69"])
def test_muons_slope_eased_on_to_w400(name):
    """docs/ladder_evidence.md, "w400: further": on every seed Muon's log-log slope from w320 to w400 less than half
    its slope from w160 to w320, where AdamW's stayed above two-thirds of it on seeds 67 and 69; on seed 65, whose
    AdamW trained at 0.0101, its ladder's rate, as at w320, AdamW's flattened too, to an eighth ("w400: a third
    seed"; its checks are BEYOND's)."""
    from trainer import ladder
    result = json.loads(kept_ladder(name).read_text())
    for recipe in ("muon", "adamw"):
        best = ladder.best_runs(result["recipes"][recipe]["runs"], result["tokens_per_param"][0])[-3:]
        (n0, n1, n2), (l0, l1, l2) = ([r[key] for r in best] for key in ("params", "final_val_loss"))
        eased = (math.log(l2 / l1) / math.log(n2 / n1)) / (math.log(l1 / l0) / math.log(n1 / n0))
        if recipe == "muon":
            assert eased < 0.5
        else:
            assert eased < 0.15 if name == "further_seed65" else eased > 2 / 3


@pytest.mark.parametrize("seed", sorted(UNREPEATED))
def test_the_six_sizes_on_unrepeated_data_are_what_the_docs_say(seed):
    """docs/ladder_evidence.md, "Unrepeated data": each held-out w160 inside its interval (seed 65's Muon outside
    3%), the rates, two sizes out, the scores one size out (next_line's unnormalised acc, below chance at the
    smallest sizes, fitted free) and Muon's compute multiplier, falling and then rising with size."""
    checks, (at_w32, at_w160) = UNREPEATED[seed]
    result = json.loads(kept_ladder(f"full6_seed{seed}").read_text())
    assert result["data"]["dataset"] == "quickstart_full"
    for recipe, (error, rate, two_out, scores) in checks.items():
        rec = result["recipes"][recipe]
        held = ladder_analysis.held_out(rec["runs"], result["tokens_per_param"][0])
        assert held["inside"] and held["relative_error"] == pytest.approx(error, abs=5e-4)
        assert held["lr_ratio"] == pytest.approx(rate, abs=5e-3)
        assert rec["held_out_further"][0]["relative_error"] == pytest.approx(two_out, abs=5e-4)
        for task, miss in scores.items():
            assert 100 * (held["scores"][task]["predicted"] - held["scores"][task]["measured"]) == \
                pytest.approx(miss, abs=0.05)
        assert "chance" not in rec["fits"]["tasks"]["next_line/acc"]
    beyond = json.loads(kept_ladder(f"full_seed{seed}").read_text())["recipes"]["muon"]
    multiplier = {size: m["multiplier"] for size, m in beyond["compute_multiplier_vs_adamw"].items()
                  if m["by"] == "measured"}
    assert (multiplier["w32"], multiplier["w160"]) == pytest.approx((at_w32, at_w160), abs=5e-3)
    assert multiplier["w64"] < min(at_w32, at_w160)


def test_the_last_step_is_nearer_than_the_fit_more_than_one_size_out(capsys):
    """docs/ladder_evidence.md, "The last step, further out": every kept ladder's checks at every distance, and
    how often the fit's interval held them, with the s-shaped law's reading among the others and without it."""
    ladders = sorted(str(p) for p in (REPO / "docs" / "ladder_runs").glob("*/ladder.json"))
    assert len(ladders) == 48
    study("form_choice").main(["--ladders", *ladders, "--further"])
    out = capsys.readouterr().out
    for row in ("| 1 | 96 | 3.0% | 2.4% | 55 of 96 | 92 of 96 | 20% |",
                "| 2 | 96 | 14.4% | 7.3% | 91 of 96 | 73 of 94 | 56% |",
                "| 3 | 94 | 23.4% | 14.2% | 88 of 94 | 16 of 16 | 119% |",
                "| 4 | 16 | 28.2% | 16.4% | 13 of 16 | 6 of 6 | 170% |"):
        assert row in out
    study("form_choice").main(["--ladders", *ladders, "--further", "--without_s_shaped"])
    out = capsys.readouterr().out
    assert "| 1 | 96 | 3.0% | 2.4% | 55 of 96 | 91 of 96 | 19% |" in out
    assert "| 2 | 96 | 14.4% | 7.3% | 91 of 96 | 70 of 94 | 54% |" in out


def test_the_s_shaped_fit_recovers_its_law_from_the_ladders_six_sizes():
    """form_choice's s-shaped law, drawn without noise at the CPU ladder's sizes, fitted back to its parameters."""
    forms = study("form_choice")
    y = forms.LAWS["s-shaped"](forms.SIZES)
    e, logl0, lognb, alpha = forms.fit_s_shaped(forms.SIZES, y)
    assert (e, math.exp(logl0), math.exp(lognb), alpha) == pytest.approx((1.1, 2.63, 1e6, 4.3), rel=1e-4)
    assert forms.s_shaped_misses(forms.SIZES[:4], y[:4], forms.SIZES[-1], y[-1]) is None  # four sizes: no fit


def test_the_s_shaped_form_over_reads_muon_beyond_the_config(capsys):
    """docs/ladder_evidence.md, "The s-shaped form, fitted": on the w320 ladders it reads Muon's w320 too high
    where the chosen forms read it too low, and by its backtest the rule would take it twice in ten."""
    ladders = [str(kept_ladder(f"{corpus}_seed{seed}")) for corpus, seed in
               (("beyond", 61), ("beyond", 63), ("full", 65), ("full", 67), ("full", 69))]
    study("form_choice").main(["--ladders", *ladders, "--s_shaped"])
    out = capsys.readouterr().out
    muon = [line.split(" | ") for line in out.splitlines() if " | muon | w320 from 1 below" in line]
    assert len(muon) == 5 and all(row[4].endswith("%") and "-" in row[4] and row[5].startswith("+") for row in muon)
    for row in ("| 1 | 10 | 9.7% | 13.0% | 4 of 10 | 2 | 9.5% |", "| 2 | 10 | 13.9% | 20.2% | 3 of 10 | 0 | 13.9% |"):
        assert row in out


def test_next_lines_acc_starts_below_chance_and_so_is_fitted_free():
    """docs/ladder_evidence.md, "Five times beyond": next_line's unnormalised acc starts at 0.21-0.22, under its
    chance of 0.25, on every scored ladder; fitted from chance it read AdamW's held-out w160 (28-29%) as 65-70%
    (seeds 61 and 63; seed 59's was a step), fitted free within 2 points on all six of seeds 59, 61 and 63."""
    from trainer import ladder
    for name in ("scored_seed59", "scored_seed61", "scored_seed63"):
        result = json.loads(kept_ladder(name).read_text())
        ratio = result["tokens_per_param"][0]
        for recipe, rec in result["recipes"].items():
            held = ladder_analysis.held_out(rec["runs"], ratio)
            assert "chance" not in ladder_analysis.fits(rec["runs"], ratio)["tasks"]["next_line/acc"]
            acc = held["scores"]["next_line/acc"]
            assert abs(acc["predicted"] - acc["measured"]) < 0.02
            below = [r for r in ladder_analysis.scored_runs(rec["runs"], ratio) if r["size"] != held["size"]]
            if recipe == "adamw" and name != "scored_seed59":
                forced = ladder.fit_task([r["final_val_loss"] for r in below],
                                         [r["scores"]["next_line/acc"] for r in below], 0.25)
                assert float(forced(held["predicted_val_loss"])) > 0.6 > 0.3 > acc["measured"]


# "Scores on the config": the held-out w160 (one and two sizes out) as each task's sigmoid read it at the predicted
# loss, free and from chance 0.25 to 1, and its measured score, in points: seed 57's ladder fitted the free one
# (eval.py gave no chance then), seeds 59 and 61, named to check the change, the one from chance
SCORES = {"scored_seed57": {("adamw", "next_line/acc_norm"): ((31.0, 31.8), (26.6, 28.6), 33.4),
                            ("adamw", "next_line_swaps/acc"): ((82.1, 88.5), (73.0, 84.3), 86.9),
                            ("muon", "next_line/acc_norm"): ((35.3, 37.3), (36.4, 36.0), 35.8),
                            ("muon", "next_line_swaps/acc"): ((93.5, 92.1), (87.7, 88.4), 93.4)},
          "scored_seed59": {("adamw", "next_line/acc_norm"): ((29.6, 30.3), (26.6, 28.8), 33.2),
                            ("adamw", "next_line_swaps/acc"): ((81.6, 89.4), (74.9, 87.9), 87.4),
                            ("muon", "next_line/acc_norm"): ((37.3, 38.4), (34.5, 35.7), 35.6),
                            ("muon", "next_line_swaps/acc"): ((95.8, 92.8), (86.7, 88.9), 93.0)},
          "scored_seed61": {("adamw", "next_line/acc_norm"): ((31.2, 31.7), (31.5, 29.0), 33.7),
                            ("adamw", "next_line_swaps/acc"): ((83.6, 89.0), (74.0, 83.5), 87.7),
                            ("muon", "next_line/acc_norm"): ((34.2, 36.5), (None, 33.5), 36.7),  # None: a step, no fit
                            ("muon", "next_line_swaps/acc"): ((92.7, 92.2), (87.1, 88.8), 93.4)},
          "scored_seed63": {("adamw", "next_line/acc_norm"): ((None, 30.5), (26.5, 28.0), 32.4),
                            ("adamw", "next_line_swaps/acc"): ((81.0, 90.3), (73.8, 85.2), 87.4),
                            ("muon", "next_line/acc_norm"): ((34.9, 37.4), (32.6, 35.5), 36.6),
                            ("muon", "next_line_swaps/acc"): ((93.7, 92.2), (91.0, 88.9), 93.0)}}


@pytest.mark.parametrize("name", sorted(SCORES))
def test_the_scores_on_the_config_are_what_the_docs_say(name):
    """docs/ladder_evidence.md, "Scores on the config": each ladder's held-out scores as its ladder.json holds them
    (the sigmoid it fitted), and both sigmoids read off its runs, with chance given to each run or taken away."""
    result = json.loads(kept_ladder(name).read_text())
    ratio, anchored = result["tokens_per_param"][0], name != "scored_seed57"
    for (recipe, task), (one, two, measured) in SCORES[name].items():
        rec = result["recipes"][recipe]
        free = [{k: v for k, v in r.items() if k != "chance"} for r in rec["runs"]]
        from_chance = [{**r, "chance": {task.split("/")[0]: 0.25}} for r in free]
        for k, both, kept in ((1, one, rec["held_out"]), (2, two, rec["held_out_further"][0])):
            assert 100 * kept["scores"][task]["predicted"] == pytest.approx(both[anchored], abs=0.05)
            assert 100 * kept["scores"][task]["measured"] == pytest.approx(measured, abs=0.05)
            for runs, published in ((free, both[0]), (from_chance, both[1])):
                read = ladder_analysis.held_out(runs, ratio, k)["scores"][task]
                if published is None:  # no fit: the scores below rise as a step
                    assert "the fit is a step" in read["problem"]
                else:
                    assert 100 * read["predicted"] == pytest.approx(published, abs=0.05)


def test_chinchilla_on_the_config_is_what_the_docs_say():
    """docs/ladder_evidence.md, "Chinchilla on the config": seed 57's runs with a second ratio (2 tokens per
    parameter), Chinchilla's misses of w160's runs at 4 and 2 one and two sizes out, and its floor E at 0."""
    result = json.loads(kept_ladder("nd_seed57").read_text())
    published = {"adamw": ((0.158, 0.079), (0.238, 0.144)), "muon": ((0.137, 0.095), (0.219, 0.166))}
    for recipe, misses in published.items():
        rec = result["recipes"][recipe]
        for held, (at4, at2) in zip([rec["held_out"], rec["held_out_further"][0]], misses):
            errors = {c["tokens_per_param"]: c["relative_error"] for c in held["chinchilla"]}
            assert errors == {4.0: pytest.approx(at4, abs=5e-4), 2.0: pytest.approx(at2, abs=5e-4)}
        assert rec["fits"]["loss_nd"]["named"]["E"] == pytest.approx(0, abs=1e-6)
