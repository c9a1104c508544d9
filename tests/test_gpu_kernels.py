"""The NVRTC-compiled kernels (engine.realtime.cuda_kernels) against the plain PyTorch ops they replace.

Exact where the math is exact: the sampler must choose the very same index as the plain ops for the
same logits and noise (greedy and sampled, k from 1 to 64, with ties at the threshold and signed
zeros), and the conv step must leave the very same state. Marked `gpu`: NVRTC needs CUDA.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def device() -> torch.device:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    return torch.device("cuda")


@pytest.mark.parametrize("vocab", [2049, 65536])
def test_fused_sampler_chooses_exactly_what_the_plain_ops_choose(device, vocab: int) -> None:
    from engine.realtime.sampling import DeviceSampling

    sampling = DeviceSampling(device)
    assert sampling.fused is not None, "the fused sampler did not compile on this GPU"
    generator = torch.Generator(device=device).manual_seed(vocab)
    noise = torch.empty(vocab, device=device, dtype=torch.float32)
    fused_out = torch.empty(1, dtype=torch.long, device=device)
    reference_out = torch.empty(1, dtype=torch.long, device=device)
    checked = 0
    for trial in range(120):
        greedy = trial % 3 == 0
        top_k = (1, 2, 4, 7, 50, 64)[trial % 6]
        sampling.set(greedy=greedy, temperature=(0.7, 1.0, 1.3)[trial % 3], top_k=top_k)
        logits = torch.randn(vocab, device=device, generator=generator) * 3
        if trial % 4 == 1:  # few distinct values: many ties, also at the top-k threshold
            logits = logits.round()
        if trial % 4 == 2:  # signed zeros among the largest values
            logits = torch.where(logits > 0, torch.zeros_like(logits), logits)
            even = torch.arange(vocab, device=device) % 2 == 0
            logits = torch.where((logits == 0) & even, torch.full_like(logits, -0.0), logits)
        if trial % 10 == 5:  # a NaN counts as the largest value, as in torch.argmax
            logits[(trial * 7919) % vocab] = float("nan")
        logits = logits.to(torch.bfloat16)
        sampling.noise_for(noise)
        sampling.fused(logits, noise, sampling.inv_temperature, sampling.top_k_index, fused_out)
        sampling.choose_reference(logits, noise, out=reference_out)
        assert fused_out.item() == reference_out.item(), (trial, greedy, top_k)
        checked += 1
    assert checked == 120


def test_fused_sampler_draws_from_the_top_k_only(device) -> None:
    from engine.realtime.sampling import DeviceSampling

    sampling = DeviceSampling(device)
    sampling.set(greedy=False, temperature=1.0, top_k=4)
    logits = torch.full((2049,), -4.0, device=device)
    logits[2040:] = torch.arange(9, device=device) * 0.25  # distinct in bf16; the top 4 are ids 2045..2048
    logits = logits.to(torch.bfloat16)
    noise = torch.empty(2049, device=device)
    out = torch.empty(1, dtype=torch.long, device=device)
    seen = set()
    for _ in range(400):
        seen.add(int(sampling.choose(logits, sampling.noise_for(noise), out=out)))
    assert seen == {2045, 2046, 2047, 2048}


def test_fused_short_conv_step_equals_the_plain_ops(device) -> None:
    from engine.realtime.cuda_kernels import ShortConvStep, short_conv_step_reference

    hidden, taps = 2048, 3
    step = ShortConvStep.create(hidden, taps, device, torch.bfloat16)
    assert step is not None, "the fused conv kernel did not compile on this GPU"
    generator = torch.Generator(device=device).manual_seed(1)
    state = torch.randn((hidden, taps), device=device, generator=generator).to(torch.bfloat16)
    weight = torch.randn((hidden, taps), device=device, generator=generator).to(torch.bfloat16)
    reference_state = state.clone()
    for _ in range(5):  # the state carries from step to step
        bcu = torch.randn((1, 3 * hidden), device=device, generator=generator).to(torch.bfloat16)
        expected = short_conv_step_reference(bcu, reference_state, weight)
        got = step(bcu, state, weight)
        assert torch.equal(state, reference_state)
        # Same products; only the order of the three float additions may differ from cuBLAS.
        torch.testing.assert_close(got.float(), expected.float(), rtol=1.6e-2, atol=1e-2)


def test_fused_swiglu_equals_silu_times_up(device) -> None:
    from engine.realtime.cuda_kernels import swiglu

    generator = torch.Generator(device=device).manual_seed(2)
    gate_up = (torch.randn((1, 2 * 5632), device=device, generator=generator) * 4).to(torch.bfloat16)
    gate, up = gate_up.chunk(2, dim=-1)
    expected = F.silu(gate.float()) * up.float()
    torch.testing.assert_close(swiglu(gate, up).float(), expected, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize(
    ("rows", "columns"), [(1536, 1024), (2049, 1024), (1024, 2816), (6144, 2048)]  # depthformer q|k|v, head, w2; backbone in-proj
)
def test_fused_matrix_vector_kernels_match_float64(device, rows: int, columns: int) -> None:
    from engine.realtime.cuda_kernels import FusedGemv

    gemv = FusedGemv.create(device, torch.bfloat16)
    assert gemv is not None, "the fused matrix-vector kernels did not compile on this GPU"
    generator = torch.Generator(device=device).manual_seed(rows + columns)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(shape, device=device, generator=generator).to(torch.bfloat16)

    x, norm, weight, w13, residual = randn(1, columns), randn(columns), randn(rows, columns), randn(2 * rows, columns), randn(1, rows)
    assert FusedGemv.supports(weight) and FusedGemv.supports(w13)
    x64, weight64, w13_64 = x.double(), weight.double(), w13.double()
    normed64 = F.rms_norm(x.float(), (columns,), norm.float(), 1e-5).to(torch.bfloat16).double()  # F.rms_norm's own rounding

    def relative(got: torch.Tensor, expected: torch.Tensor) -> float:
        return float((got.double() - expected).norm() / expected.norm())

    out = torch.full((1, rows), float("nan"), device=device, dtype=torch.bfloat16)
    assert relative(gemv.norm(x, norm, 1e-5, weight, out=out), normed64 @ weight64.T) < 4e-3
    out.fill_(float("nan"))
    assert torch.equal(gemv.norm(torch.zeros_like(x), norm, 1e-5, weight, out=out), torch.zeros_like(out))  # eps reaches the kernel
    stream = residual.clone()  # in place, as the depthformer updates its residual stream
    assert relative(gemv.residual(x, weight, stream, out=stream), residual.double() + x64 @ weight64.T) < 4e-3
    gate, up = (normed64 @ w13_64.T).chunk(2, dim=-1)
    out.fill_(float("nan"))
    assert relative(gemv.norm_swiglu(x, norm, 1e-5, w13, out=out), F.silu(gate) * up) < 6e-3
