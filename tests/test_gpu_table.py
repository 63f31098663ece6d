"""machine.GPUS: the NVL parts' dense peaks (NVIDIA's sparse figures halved), the H200's memory as the card
reports it, and plan.py refusing fp8 on a card without fp8 units by train.py's own rule (precision.py)."""
import sys

import pytest

from conftest import REPO
from trainer import machine, precision

sys.path.insert(0, str(REPO / "scripts"))
import plan  # noqa: E402


@pytest.mark.parametrize("name, key", [("NVIDIA H200 NVL", "h200-nvl"), ("NVIDIA H100 NVL", "h100-nvl"),
                                       ("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100")])
def test_nvl_parts_are_told_from_the_sxm_ones(name, key):
    assert machine.identify_gpu(name, None, 132) == key


def test_nvl_peaks_are_the_datasheets_sparse_figures_halved():
    for key in ("h200-nvl", "h100-nvl"):
        gpu = machine.GPUS[key]
        assert (gpu.peak_tflops, gpu.fp8_tflops) == (1671 / 2, 3341 / 2)
        assert gpu.peak_tflops < machine.GPUS["h200"].peak_tflops  # lower clocks than the SXM part
    assert machine.GPUS["h100-nvl"].memory_gb == 94


def test_h200_memory_is_what_the_card_reports():
    assert machine.GPUS["h200"].capacity_gb * 1e9 == machine.GPUS["h200-nvl"].capacity_gb * 1e9 == 143_771 * 2**20
    assert machine.GPUS["h200"].capacity_gb == pytest.approx(150.75, abs=0.01)


def test_fp8_rule_is_the_same_for_train_and_plan():
    assert precision.units_problem("NVIDIA A100 80GB", (8, 0)).startswith("fp8: the NVIDIA A100 80GB (sm_80) has no")
    assert precision.units_problem("NVIDIA H200", (9, 0)) is None
    assert precision.units_problem("MI300X", None, "gfx942:sramecc+:xnack-") is None
    assert "gfx90a" in precision.units_problem("MI250X", None, "gfx90a")
    for key, gpu in machine.GPUS.items():  # every card has an architecture the rule can read
        assert (gpu.capability is None) != (gpu.gfx is None), key
        if gpu.fp8_tflops:
            assert precision.units_problem(gpu.name, gpu.capability, gpu.gfx) is None, key


def test_plan_refuses_fp8_on_a_card_without_fp8_units(capsys):
    with pytest.raises(SystemExit) as stopped:
        plan.main(["config/train_gpt3_6b.py", "--gpu", "a100", "--fp8=tensorwise"])
    err = capsys.readouterr().err.strip()
    assert stopped.value.code == 2 and "\n" not in err
    assert err.startswith("plan: error: fp8: the NVIDIA A100 80GB (sm_80) has no FP8 matrix units") and "fp8=''" in err
