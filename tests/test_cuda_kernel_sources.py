"""The NVRTC kernels (engine/realtime/kernels/*.cu) compile for every RTX generation the app targets,
without a GPU, and what they compile to is cached on disk and checked when it is read back.

NVRTC ships with PyTorch's CUDA wheels; compiling needs no device. What the kernels compute is tested on
the GPU (tests/test_gpu_kernels.py); here a source error or an intrinsic missing on an older architecture
fails on any machine.
"""

from __future__ import annotations

import ctypes

import pytest

from engine.realtime import kernels
from engine.realtime.kernels import runtime, sources

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
@pytest.mark.parametrize("kernel", sorted(sources.KERNELS))
def test_kernel_source_compiles(kernel: str, architecture: str) -> None:
    _nvrtc_compile()
    binary, mangled = runtime.nvrtc_compile(sources.source(kernel), kernel, architecture)
    assert mangled == kernel and len(binary) > 1000
    if binary.startswith(b"\x7fELF"):  # a cubin (PyTorch >= 2.9): the kernel's own section, for this GPU
        assert f".text.{kernel}".encode() in binary
        assert binary[4] == 2  # ELFCLASS64; e_flags hold the architecture, checked by the loader on the GPU
    else:  # PTX
        text = binary.decode()
        assert f".entry {kernel}(" in text and f".target sm_{architecture}" in text


def test_every_cuda_file_is_compiled_or_given_to_the_jiterator() -> None:
    """No stray CUDA file: each .cu is some kernel's (or the jiterator's swiglu.cu), each header some kernel's,
    and each kernel's NVRTC input is its generated #defines and its file with its headers written in, once each
    (no #include left)."""
    used = {kernel.file for kernel in sources.KERNELS.values()} | {"swiglu.cu"}
    names = {path.name for path in sources.files()}
    assert names == used | {"common.cuh", "top_k.cuh"}
    for name, kernel in sources.KERNELS.items():
        text = sources.source(name)
        assert "\n#include" not in text and text.count("VOICECHAT_COMMON_CUH") == 3  # the header, once
        assert text.count("VOICECHAT_TOP_K_CUH") == (3 if kernel.file in ("sampler.cu", "depthformer.cu") else 0)
        assert text.startswith(sources.defines(kernel.defines))
        assert f"\n{name}(" in text or f" {name}(" in text or name in kernel.defines.values()  # a family's name define


def test_the_jiterator_gets_swiglu_cu_as_the_template_it_parses() -> None:
    from torch.cuda.jiterator import _CodeParser

    from engine.realtime.kernels.swiglu import jiterator_source

    assert _CodeParser(jiterator_source()).function_name == "swiglu"


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
    status = kernels.kernel_status()
    assert set(status) == {*sources.KERNELS, "swiglu"}
    # Each compiled kernel says why it is missing (here: no GPU/driver, or no NVRTC in this build).
    assert all(value != "ready" and len(value) > len("Error: ") for value in status.values()), status
    assert all(status[name].split(":")[0].endswith("Error") for name in sources.KERNELS), status


def test_float_arguments_travel_as_their_float32_bits() -> None:
    import numpy as np

    from engine.realtime.kernels import float_bits

    for value in (1e-5, 1e-6, 0.0, -2.5, 3.0e38):
        assert float_bits(value) == int(np.float32(value).view(np.int32))


def test_matvec_split_is_the_fewest_warps_per_row_that_fit() -> None:
    """Matvec.split (no GPU needed): the fewest warps per row (a power of two, at most one block's) that
    each take at most MATVEC_DEPTH 16-byte chunks per lane, the row dividing evenly among them; None where
    that split does not divide the row or is too wide (a larger split never divides where a smaller one
    does not), which keeps such products on cuBLAS."""
    from hypothesis import given, strategies as st

    from engine.realtime.kernels import Matvec
    from engine.realtime.kernels.sources import MATVEC_DEPTH, MATVEC_MAX_K, MATVEC_MAX_SPLIT

    @given(st.integers(min_value=1, max_value=3 * MATVEC_MAX_K))
    def check(columns: int) -> None:
        fewest = 1
        while columns > 256 * MATVEC_DEPTH * fewest:
            fewest *= 2
        usable = fewest <= MATVEC_MAX_SPLIT and columns <= MATVEC_MAX_K and columns % (256 * fewest) == 0
        assert Matvec.split(columns) == (fewest if usable else None), columns

    check()
    assert [Matvec.split(k) for k in (256, 2048, 4096, 6144, 8192, 300, 4352, 8448)] == [1, 1, 2, 4, 4, None, None, None]


def test_the_dependent_launch_structures_have_the_driver_layout() -> None:
    """cuLaunchKernelEx reads CUlaunchConfig and CUlaunchAttribute by offset (cuda.h, 64-bit Linux and
    Windows alike): a field out of place would launch the wrong grid or read a wrong attribute."""
    config, attribute = runtime._LaunchConfig, runtime._LaunchAttribute
    assert ctypes.sizeof(attribute) == 72 and attribute.value.offset == 8
    assert ctypes.sizeof(config) == 56
    assert (config.block.offset, config.shared_mem_bytes.offset, config.stream.offset) == (12, 24, 32)
    assert (config.attrs.offset, config.num_attrs.offset) == (40, 48)
