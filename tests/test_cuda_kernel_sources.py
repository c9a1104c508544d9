"""The NVRTC kernel sources compile for every RTX generation the app targets, without a GPU.

NVRTC ships with PyTorch's CUDA wheels; compiling to PTX needs no device. What the kernels compute
is tested on the GPU (tests/test_gpu_kernels.py); here a source error or an intrinsic missing on an
older architecture fails on any machine.
"""

from __future__ import annotations

import pytest

from engine.realtime import cuda_kernels

# Turing (RTX 20), Ampere (RTX 30), Ada (RTX 40), Hopper (the benchmark's H200), Blackwell (RTX 50).
ARCHITECTURES = ["75", "86", "89", "90", "120"]


def _nvrtc_compile():
    try:
        from torch.cuda._utils import _get_nvrtc_library, _nvrtc_compile

        _get_nvrtc_library()
    except Exception as error:  # a CPU-only PyTorch build has no NVRTC
        pytest.skip(f"NVRTC is not available: {error}")
    return _nvrtc_compile


@pytest.mark.parametrize("architecture", ARCHITECTURES)
@pytest.mark.parametrize("kernel", sorted(cuda_kernels._SOURCES))
def test_kernel_source_compiles(kernel: str, architecture: str) -> None:
    compile_to_ptx = _nvrtc_compile()
    ptx = compile_to_ptx(cuda_kernels._SOURCES[kernel], kernel, architecture)
    text = ptx.decode() if isinstance(ptx, bytes) else str(ptx)
    assert f".entry {kernel}(" in text and f".target sm_{architecture}" in text


def test_the_start_up_check_rejects_a_sampler_kernel_that_disagrees() -> None:
    """The check that guards the fused sampler, run with stand-ins for the kernel (no GPU needed)."""
    import torch

    from engine.realtime.sampling import DeviceSampling

    sampling = DeviceSampling(torch.device("cpu"))
    cpu = torch.device("cpu")
    sampling.fused = lambda logits, noise, inv_t, k_index, out: sampling.choose_reference(logits, noise, out=out)
    assert sampling._fused_agrees(cpu)
    sampling.fused = lambda logits, noise, inv_t, k_index, out: torch.argmax(logits, dim=-1, keepdim=True, out=out)
    assert not sampling._fused_agrees(cpu)  # ignores the noise: right for greedy only


def test_kernel_status_names_why_each_kernel_is_unavailable_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the kernels compile there (tests/test_gpu_kernels.py)")
    status = cuda_kernels.kernel_status()
    assert set(status) == {*cuda_kernels._SOURCES, "swiglu"}
    # Each compiled kernel says why it is missing (here: no GPU/driver, or no NVRTC in this build).
    assert all(value != "ready" and len(value) > len("Error: ") for value in status.values()), status
    assert all(status[name].split(":")[0].endswith("Error") for name in cuda_kernels._SOURCES), status


def test_float_arguments_travel_as_their_float32_bits() -> None:
    import numpy as np

    from engine.realtime.cuda_kernels import float_bits

    for value in (1e-5, 1e-6, 0.0, -2.5, 3.0e38):
        assert float_bits(value) == int(np.float32(value).view(np.int32))
