"""precision.kernel_problem: the start-up probe of the fp8 recipe's torch._scaled_mm, refused in one line."""
import torch

from trainer import precision


def test_the_cpu_kernels_pass_the_probe():
    assert precision.kernel_problem("tensorwise", "cpu") is None
    assert precision.kernel_problem("rowwise", "cpu") is None


def test_a_failing_kernel_is_refused_in_one_line_naming_recipe_device_and_versions(monkeypatch):
    calls = []

    def no_kernel(a, b, scale_a, scale_b, out_dtype):
        calls.append((a.dtype, b.dtype, tuple(scale_a.shape), tuple(scale_b.shape), out_dtype))
        raise RuntimeError("CUDA error: HIPBLAS_STATUS_NOT_SUPPORTED when calling hipblasLtMatmul\nmore lines")
    monkeypatch.setattr(torch, "_scaled_mm", no_kernel)
    problem = precision.kernel_problem("rowwise", "cpu")
    assert calls == [(torch.float8_e4m3fn, torch.float8_e4m3fn, (16, 1), (1, 16), torch.bfloat16)]  # rowwise's types
    assert "\n" not in problem and problem.startswith("fp8='rowwise': its torch._scaled_mm (torch.float8_e4m3fn, per-row")
    assert f"torch {torch.__version__}" in problem and "device=cpu" in problem and "HIPBLAS_STATUS_NOT_SUPPORTED" in problem
    assert problem.endswith("Use --fp8=tensorwise or --fp8='' (bf16)")
    calls.clear()
    assert precision.kernel_problem("tensorwise", "cpu").endswith("Use --fp8='' (bf16)")
    assert calls[0][2:4] == ((), ())  # one scale per tensor


def test_rowwise_is_refused_where_only_its_tensor_wide_call_fails(monkeypatch):
    """torchao's rowwise backward runs the tensor-wide kernel and scales after it (no fast accumulation there), so a
    build whose per-row kernel works but whose tensor-wide one does not would fail at the first backward."""
    real = torch._scaled_mm

    def no_tensor_wide_kernel(a, b, scale_a, scale_b, out_dtype):
        if scale_a.dim() == 0:
            raise RuntimeError("no tensor-wide fp8 kernel for this type")
        return real(a, b, scale_a=scale_a, scale_b=scale_b, out_dtype=out_dtype)
    monkeypatch.setattr(torch, "_scaled_mm", no_tensor_wide_kernel)
    problem = precision.kernel_problem("rowwise", "cpu")
    assert problem.startswith("fp8='rowwise': its torch._scaled_mm (torch.float8_e4m3fn, one scale a tensor")
    assert problem.endswith("no tensor-wide fp8 kernel for this type. Use --fp8='' (bf16)")  # tensorwise makes it too
