"""configurator.py: config files and --key=value overrides, and every way they can be wrong."""
import subprocess
import sys

import pytest

import configurator
from configurator import DEFAULTS, ConfigError, check, load_config
from conftest import REPO


def write(tmp_path, text, name="cfg.py"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_defaults_and_derived_data_dir():
    cfg = load_config([])
    assert cfg.batch_size == DEFAULTS["batch_size"]
    assert cfg.data_dir == "data/pile"
    assert load_config(["--dataset=openwebtext"]).data_dir == "data/openwebtext"


def test_config_file_sees_the_values_it_does_not_set(tmp_path):
    path = write(tmp_path, "batch_size = 4\nmax_iters = round(1e6 / (batch_size * block_size))\n")
    assert load_config(["--block_size=1000", path]).max_iters == 250


def test_file_then_overrides_in_order(tmp_path):
    path = write(tmp_path, "batch_size = 4\n_tokens = 300e9\nmax_iters = round(_tokens / 1e6)\nimport math\n")
    cfg = load_config([path, "--batch_size=2", "--learning_rate=3e-4", "--compile=True"])
    assert (cfg.batch_size, cfg.max_iters, cfg.learning_rate, cfg.compile) == (2, 300000, 3e-4, True)
    assert not hasattr(cfg, "_tokens")


def test_int_accepted_for_float_and_strings_need_no_quotes():
    cfg = load_config(["--learning_rate=1", "--wandb_run_name=2024", "--init_from=out/ckpt_10.pt"])
    assert cfg.learning_rate == 1.0 and isinstance(cfg.learning_rate, float)
    assert cfg.wandb_run_name == "2024"
    assert cfg.init_from == "out/ckpt_10.pt"


def test_value_containing_equals_sign():
    assert load_config(["--wandb_run_name=lr=3e-4,bs=8"]).wandb_run_name == "lr=3e-4,bs=8"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--batch_sise=4"], "unknown config key 'batch_sise'; did you mean batch_size"),
        (["--batch_size=4.5"], "batch_size must be int"),
        (["--compile=1"], "compile must be bool"),
        (["--dropout=high"], "dropout must be float"),
        (["--batch_size"], "needs a value"),
        (["--simulat"], "unknown config key 'simulat'"),  # a key, not a value, is what is wrong with it
        (["config/does_not_exist.py"], "config file not found: config/does_not_exist.py"),
    ],
)
def test_bad_overrides_are_errors(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(".", r"\.")):
        load_config(argv)


def test_config_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown config key 'n_layers'; did you mean n_layer"):
        load_config([write(tmp_path, "n_layers = 4\n")])
    with pytest.raises(ConfigError, match="n_layer must be int"):
        load_config([write(tmp_path, "n_layer = '4'\n")])
    with pytest.raises(ConfigError, match="ZeroDivisionError"):
        load_config([write(tmp_path, "n_layer = 1 / 0\n")])


@pytest.mark.parametrize("name", ["train_gpt3_125m", "train_gpt3_350m", "train_gpt3_760m", "train_gpt3_1_3b",
                                  "train_gpt3_2_7b", "train_gpt3_6b", "train_tiny"])
def test_shipped_configs_load(name):
    cfg = load_config([str(REPO / "config" / f"{name}.py")])
    assert cfg.n_embd % cfg.n_head == 0
    assert cfg.lr_decay_iters <= cfg.max_iters


def test_6b_config_is_self_consistent():
    cfg = load_config([str(REPO / "config" / "train_gpt3_6b.py")])
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.block_size) == (32, 32, 4096, 2048)
    assert cfg.batch_size * cfg.gradient_accumulation_steps * cfg.block_size == cfg.tokens_per_step == 1_310_720
    assert cfg.max_iters == cfg.lr_decay_iters == 228_882  # 300e9 tokens
    assert cfg.activation_checkpointing == "auto" and cfg.compile and cfg.keep_last_n == 3


def test_tokens_per_step_follows_the_batch_and_is_not_a_setting():
    cfg = load_config(["--batch_size=3", "--gradient_accumulation_steps=5", "--block_size=64"])
    assert cfg.tokens_per_step == 3 * 5 * 64
    cfg.gradient_accumulation_steps = 2  # train.py's memory choice may split the batch before it freezes the config
    assert cfg.tokens_per_step == 3 * 2 * 64
    assert "tokens_per_step" not in vars(cfg)  # derived, so never saved or compared as a setting


@pytest.mark.e2e
def test_script_reports_one_line_and_exits_nonzero():
    result = subprocess.run(
        [sys.executable, "-c", "import sys, configurator; configurator.load_config_or_exit(sys.argv[1:])",
         "--n_lyer=3"], cwd=REPO, capture_output=True, text=True,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0
    assert "n_lyer" in result.stderr and "n_layer" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("override,message", [
    ("--batch_size=0", "batch_size must be at least 1, got 0"),
    ("--spike_skip_batches=-1", "spike_skip_batches must be 0 or more, got -1"),
    ("--max_rollbacks=-2", "max_rollbacks must be 0 or more"),
    ("--hellaswag_interval=-1", "hellaswag_interval must be 0 or more"),
    ("--max_iters=0", "max_iters must be at least 1, got 0"), ("--warmup_iters=-5", "warmup_iters must be 0 or more"),
    ("--learning_rate=-1", "learning_rate must be more than 0"), ("--dropout=2.0", "dropout must be at least 0 and"),
    ("--beta2=1.5", "beta2 must be at least 0 and below 1"),
    ("--min_lr=1", "min_lr must be between 0 and learning_rate"),
    ("--grad_clip=-1", "grad_clip must be 0 (off) or more"),
    ("--max_nonfinite_steps=0", "max_nonfinite_steps must be at least 1, got 0"),  # it stopped a healthy run
    ("--checkpoint_interval=-2", "checkpoint_interval must be 0 or more"),  # it was "never save", silently
    ("--eval_interval=-1", "eval_interval must be 0 or more"),
    ("--checkpoint_minutes=-1", "checkpoint_minutes must be 0 or more"),
    ("--warmup_iters=100 --lr_decay_iters=20", "warmup_iters (100) is past lr_decay_iters (20), where the decay ends"),
])
def test_values_out_of_range_are_named(override, message):
    from configurator import check
    assert check(load_config(override.split()), world_size=1).startswith(message)


@pytest.mark.parametrize("overrides, message", [
    (["--fp8=tensorwize"], "fp8 must be '' (off), 'tensorwise' or 'rowwise', got 'tensorwize'"),
    (["--fp8=rowwise", "--dtype=float32"], "fp8='rowwise' needs dtype='bfloat16' (fp8 matmuls inside bf16 autocast)"),
])
def test_fp8_values_are_checked(overrides, message):
    from configurator import check
    assert check(load_config(overrides), world_size=1).startswith(message)


@pytest.mark.parametrize("overrides", [
    ["--activation_checkpointing=selective"], ["--activation_checkpointing=full"], ["--compile=True"],
    ["--master_weights=bfloat16"], ["--optimizer=adamw8bit"], ["--optimizer=adamw4bit"], ["--optimizer_offload=True"],
    ["--strategy=fsdp"],
])
def test_fp8_composes_with_the_other_settings(overrides):
    """Float8Linear keeps ordinary Parameters and its matmuls are aten.mm to the checkpointing policy, so nothing
    else needs to know: tests/test_fp8.py trains the combinations the CPU can run."""
    from configurator import check
    for recipe in ("tensorwise", "rowwise"):
        assert check(load_config([f"--fp8={recipe}", *overrides]), world_size=2) is None


def test_every_key_has_a_one_line_help_shown_by_usage():
    assert configurator.missing_help() == [], "keys without a line in configurator.HELP"
    assert set(k for group in configurator.HELP.values() for k in group) <= set(configurator.DEFAULTS)
    text = configurator.usage()
    for group, keys in configurator.HELP.items():
        assert f"\n{group}:\n" in text
        for key, line in keys.items():
            assert "\n" not in line and f"  {key} = {configurator.DEFAULTS[key]!r}  # {line}" in text


def test_the_config_records_where_each_value_came_from(tmp_path):
    extra = tmp_path / "extra.py"
    extra.write_text("n_layer = 4  # the value train_tiny.py gives it too\n_private = 1\n")
    cfg = configurator.load_config(["config/train_tiny.py", str(extra), "--n_head=2"])
    assert cfg.sources["n_head"] == "on the command line"
    assert cfg.sources["n_layer"] == f"in {extra}"  # the last file that set it
    assert cfg.sources["n_embd"] == "in config/train_tiny.py" and cfg.sources["beta2"] == "by default"
    assert "sources" not in vars(cfg)  # never saved among the settings


def test_a_tools_misspelt_option_is_named_with_the_one_it_is_near():
    """plan.py --simulat (parse_known_args leaves it for the config): the tool's --simulate, not 'needs a value';
    a misspelt config key is left to load_config, which names the keys it is near."""
    import argparse
    import configurator
    parser = argparse.ArgumentParser()
    parser.add_argument("--simulate", action="store_true")
    parser.add_argument("--ladder")
    assert configurator.misspelt_option(["--simulat"], parser) == "unknown option --simulat: did you mean --simulate?"
    assert configurator.misspelt_option(["--n_lyer=3", "--batch_size=4", "config/train_tiny.py"], parser) is None


def test_micro_batches_that_do_not_divide_among_the_processes_name_the_counts_that_would():
    assert check(load_config(["--gradient_accumulation_steps=3"]), world_size=2).endswith(
        "set it to 2 or 4, or run a number of processes that divides 3")
    assert check(load_config(["--gradient_accumulation_steps=1"]), world_size=2).endswith(
        "set it to 2, or run a number of processes that divides 1")
