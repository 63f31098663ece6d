"""machine.py: a torch without a feature the trainer uses is one line naming it and the version to
install; compile=True without a C compiler, or a compilation that fails, is one line with compile=False."""
import os
import subprocess
import sys

import pytest
import torch

from trainer import machine
from conftest import REPO

# Each removes one feature the way an older torch lacks it
NO_GRAD_DTYPE = "import torch; torch.Tensor.grad_dtype = None"  # a plain attribute: setting it does nothing
NO_SERIALIZATION_CONFIG = "import sys; sys.modules['torch.utils.serialization.config'] = None"  # import fails
RUN_CHECK_ENV = "import runpy; sys.argv = ['check_env.py', 'config/train_tiny.py']; " \
                "runpy.run_path('scripts/check_env.py', run_name='__main__')"


def python(code):
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)


def test_this_torch_has_every_feature():
    assert machine.missing_features() == [] and machine.torch_problem() is None


@pytest.mark.e2e
def test_check_env_names_the_missing_features_and_the_version_in_one_line():
    # grad_dtype still takes the assignment here: only what backward produces shows it is missing
    result = python(f"import sys; {NO_GRAD_DTYPE}; {NO_SERIALIZATION_CONFIG}; {RUN_CHECK_ENV}")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line, = result.stdout.splitlines()
    assert line.startswith(f"FAIL  torch {torch.__version__} lacks Tensor.grad_dtype (fp32 gradients of bf16 "
                           f"weights, optim.py), new in torch 2.10; torch.utils.serialization.config.")
    assert line.endswith("new in torch 2.7: install torch>=2.10 (the ROCm or CUDA wheel for this machine, see "
                         "README and requirements.txt)")


def test_requirements_ask_for_the_newest_feature():
    newest = max((version for _, version, _ in machine.FEATURES), key=lambda v: tuple(map(int, v.split("."))))
    assert f"torch>={newest} " in (REPO / "requirements.txt").read_text()


def test_compile_without_a_c_compiler_is_one_line(monkeypatch):
    monkeypatch.setenv("PATH", "")
    monkeypatch.delenv("CC", raising=False)
    assert machine.compiler_problem(True) == (
        "compile=True needs a C compiler to build Triton's kernels and none of gcc, clang, cc is on PATH: "
        "install gcc (or set CC), or rerun with --compile=False")
    assert machine.compiler_problem(False) is None
    monkeypatch.setenv("PATH", os.defpath)
    monkeypatch.setenv("CC", "no-such-cc")  # Triton takes $CC alone when it is set
    assert "CC='no-such-cc' is not on PATH" in machine.compiler_problem(True)


def test_a_compilation_failure_becomes_one_line_naming_compile_false():
    def broken_backend(graph, example_inputs):
        raise RuntimeError("LLVM ERROR: cannot select\nmany more lines")
    torch._dynamo.reset()
    with pytest.raises(Exception) as failed:  # Dynamo wraps what the backend raised
        torch.compile(lambda x: x.sin() + 1, backend=broken_backend)(torch.ones(2))
    assert machine.compile_failure(failed.value) == (
        "torch.compile failed on this machine (RuntimeError: LLVM ERROR: cannot select): rerun with "
        "--compile=False (eager: slower, the same training)")
    try:  # Triton's own error, raised while a kernel's launcher is built
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.")
    except RuntimeError as e:
        assert "install gcc (or set CC), or rerun with --compile=False" in machine.compile_failure(e)
    assert machine.compile_failure(ValueError("a bug of ours")) is None  # not compilation's: re-raised


def test_a_graph_from_a_stale_compile_cache_is_one_line_naming_the_cache_to_move(monkeypatch, tmp_path):
    """The AttributeError AOTAutograd's generated subclass wrapper raised where the cache had served a graph
    compiled for fp8 all-gather weights to plain DTensor weights (reproduced with two processes sharing a
    TORCHINDUCTOR_CACHE_DIR; docs/troubleshooting.md). Here it is raised from code under that file name."""
    import torch._functorch._aot_autograd.subclass_codegen as codegen
    wrapper = {}
    exec(compile("def inner_fn(t):\n    return t._tensor\n", f"{codegen.__file__}:codegen(subclass_wrapper)", "exec"),
         wrapper)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    with pytest.raises(AttributeError) as stale:
        wrapper["inner_fn"](torch.ones(1))
    line = machine.compile_failure(stale.value)
    assert line.startswith("a compiled graph from torch's cache does not fit this run's tensors ('Tensor' object "
                           "has no attribute '_tensor'")
    assert line.endswith(f"mv {tmp_path}/aotautograd {tmp_path}/aotautograd.stale, and rerun") and "\n" not in line
    with pytest.raises(AttributeError) as ours:  # the same error from any other code is not the cache's
        torch.ones(1)._tensor
    assert machine.compile_failure(ours.value) is None
