"""The NVRTC-compiled kernels (engine/realtime/kernels/) against the plain PyTorch ops they replace.

Exact where the math is exact: the sampler must choose the very same index as the plain ops for the
same logits and noise (greedy and sampled, k from 1 to 64, with ties at the threshold and signed
zeros), and the conv step must leave the very same state. Marked `gpu`: NVRTC needs CUDA.
"""

from __future__ import annotations

from dataclasses import replace

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


@pytest.mark.parametrize("vocab", [65536, 3 * 4096 + 17])
def test_the_sampler_over_blocks_replayed_in_a_graph_chooses_what_the_plain_ops_choose(device, vocab: int) -> None:
    """The text-length row runs over blocks whose last one resets their arrival counter: replays of one
    captured launch (new logits, noise and k each time, ties that overflow a slice's candidate slots among
    them) each choose the plain ops' index."""
    from engine.realtime import graphs
    from engine.realtime.kernels.sources import SAMPLER_GRID_SLICE
    from engine.realtime.sampling import DeviceSampling

    assert vocab > SAMPLER_GRID_SLICE  # the blocks' kernel, not the one-block one
    sampling = DeviceSampling(device)
    assert sampling.fused is not None and sampling.fused.grid_kernel is not None
    generator = torch.Generator(device=device).manual_seed(7)
    logits = torch.zeros(vocab, device=device, dtype=torch.bfloat16)
    noise = torch.zeros(vocab, device=device)
    out = torch.empty(1, dtype=torch.long, device=device)
    reference = torch.empty(1, dtype=torch.long, device=device)

    def choose() -> None:
        sampling.fused(logits, noise, sampling.inv_temperature, sampling.top_k_index, out)

    graphs.warm_up(device, choose)
    graph, _ = graphs.capture(choose)
    for trial in range(40):
        sampling.set(greedy=trial % 5 == 0, temperature=1.0, top_k=(1, 4, 13, 64)[trial % 4])
        values = torch.randn(vocab, device=device, generator=generator) * 3
        if trial % 3 == 1:  # a few distinct values: more ties at a slice's k-th key than it has slots
            values = values.round()
        logits.copy_(values.to(torch.bfloat16))
        sampling.noise_for(noise)
        graph.replay()
        sampling.choose_reference(logits, noise, out=reference)
        assert out.item() == reference.item(), trial


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
    from engine.realtime.kernels import ShortConvStep, short_conv_step_reference

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
    from engine.realtime.kernels import swiglu

    generator = torch.Generator(device=device).manual_seed(2)
    gate_up = (torch.randn((1, 2 * 5632), device=device, generator=generator) * 4).to(torch.bfloat16)
    gate, up = gate_up.chunk(2, dim=-1)
    expected = F.silu(gate.float()) * up.float()
    torch.testing.assert_close(swiglu(gate, up).float(), expected, rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("hidden", [2048, 1024, 256])
def test_fused_rms_norm_row_matches_f_rms_norm(device, hidden: int) -> None:
    """Rows of many scales (tiny to large, with zeros): at most one bf16 rounding step from F.rms_norm
    (only the order of the float sum differs), and nearly always the very same bits."""
    from engine.realtime.kernels import RmsNormRow

    norm = RmsNormRow.create(hidden, device, torch.bfloat16)
    assert norm is not None
    generator = torch.Generator(device=device).manual_seed(3)
    same = total = 0
    for scale in (1e-3, 0.1, 1.0, 30.0, 1e3):
        for _ in range(8):
            x = (torch.randn((1, hidden), device=device, generator=generator) * scale).to(torch.bfloat16)
            x[0, :: max(1, hidden // 7)] = 0
            weight = torch.randn((hidden,), device=device, generator=generator).to(torch.bfloat16)
            expected = F.rms_norm(x, (hidden,), weight, 1e-5)
            got = norm(x, weight, 1e-5)
            assert got.shape == x.shape and got.dtype == torch.bfloat16
            step = expected.float().abs() * 2**-7 + 1e-30  # one bf16 rounding step (8 significant bits)
            assert bool(((got.float() - expected.float()).abs() <= step).all()), scale
            same += int((got == expected).sum())
            total += hidden
    assert same >= 0.98 * total


def test_kernels_compiled_in_background_are_the_ones_used(device) -> None:
    """ChatSession.open's path in a fresh process: every kernel compiles in its background thread, and
    `compiled` hands out those very kernels (none is compiled twice, none falls back)."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from engine.realtime.kernels.sources import KERNELS

    script = (
        "import torch\n"
        "from engine.realtime.kernels import runtime as k\n"
        "k.compile_in_background(torch.device('cuda'))\n"
        "futures = {name: f.result() for name, f in k._compiling.items()}\n"
        "assert set(futures) == set(k.KERNELS), futures\n"
        "assert all(k.compiled(name) is futures[name] for name in k.KERNELS)\n"
        "assert not k._compile_errors, k._compile_errors\n"
        "print('ok', len(futures))\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", script], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == f"ok {len(KERNELS)}"


@torch.inference_mode()
def test_a_branch_beside_the_work_is_a_graph_branch_joined_before_what_follows(device) -> None:
    """graphs.beside inside a capture: the branch (on the side stream) and the work both run at every replay,
    and what follows the join sees both (a head's noise beside its product, then its choice)."""
    from engine.realtime import graphs

    noise, product, choice = (torch.zeros(1 << 22, device=device) for _ in range(3))

    def head() -> None:
        graphs.beside(device, lambda: noise.add_(1.0), lambda: product.add_(2.0))
        torch.add(noise, product, out=choice)

    head()  # warm-up, then the capture (which runs nothing)
    graph, _ = graphs.capture(head)
    for replays in range(1, 4):
        graph.replay()
        torch.cuda.synchronize()
        assert choice.eq(3.0 * (replays + 1)).all(), replays


@pytest.fixture(scope="module")
def full_size():
    from engine.bench.random_model import random_full_size_model

    torch.backends.cuda.matmul.allow_tf32 = False
    return random_full_size_model(stop_tokens=True)


def _relative(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.double() - expected.double()).norm() / expected.double().norm())


@torch.inference_mode()
def test_one_launch_depthformer_frame_matches_the_plain_ops_and_any_grid_size(device, full_size) -> None:
    """The one-launch frame kernel against the plain ops on the full-size depthformer, teacher-forced
    over random inputs; and bit for bit the same logits whatever the number of blocks that hand each
    other its phases' vectors (a block reading a word before its writer would show as a difference)."""
    from engine.realtime.sampling import DeviceSampling
    from engine.realtime.static_depthformer import StaticDepthformer

    depthformer = StaticDepthformer(full_size.model, DeviceSampling(device))
    step = depthformer.fused
    assert step is not None, "the one-launch depthformer kernel did not compile or failed its start-up check"
    generator = torch.Generator(device=device).manual_seed(7)
    hidden_size = full_size.model.lfm.config.hidden_size
    first_launch = step.sync[0].item()
    for trial in range(6):
        hidden = torch.randn((1, hidden_size), device=device, generator=generator).to(torch.bfloat16)
        codes = torch.randint(0, 2048, (8,), device=device, generator=generator)
        fused = depthformer.teacher_forced_logits(hidden, codes)
        depthformer.fused = None
        plain = depthformer.teacher_forced_logits(hidden, codes)
        depthformer.fused = step
        for i in range(8):
            assert _relative(fused[i], plain[i]) < 2e-2, (trial, i)  # two bf16 roundings apart, 6 layers deep
        blocks = step.blocks
        for grid in (1, 3, 17, blocks):
            step.blocks = grid
            assert torch.equal(depthformer.teacher_forced_logits(hidden, codes), fused), (trial, grid)
        step.blocks = blocks
    # Every launch was counted (its words' tags all differ from the launch before) and every block of it
    # read its number: the readers reset, 6 trials x 5 frames (mod 65535) on.
    launches, readers = step.sync[:2].tolist()
    assert readers == 0 and launches == (first_launch + 6 * 5) % 65535
    # Across the counter's wrap (tag 65535, then 1 again) the words and the barrier's arrivals still tell
    # launches apart.
    step.sync[0] = 65533
    for _ in range(4):
        assert torch.equal(depthformer.teacher_forced_logits(hidden, codes), fused)
    assert step.sync[:2].tolist() == [(65533 + 4) % 65535, 0]


@torch.inference_mode()
def test_one_launch_frame_chooses_each_code_as_the_sampler_kernel_does(device, full_size) -> None:
    """The frame kernel's own choices (every block choosing from a codebook's logits past the grid barrier, then
    going on with that code) against the sampler's kernel on the same logits and noise: a frame is sampled, then
    teacher-forced with the codes it chose, whose logits are then bitwise those the choices were made from.
    Greedy and sampled (k 4 at T 1, k 64 at T 0.7); a first code of end-of-audio ends the whole frame."""
    from engine.constants import END_OF_AUDIO
    from engine.realtime.sampling import DeviceSampling
    from engine.realtime.static_depthformer import StaticDepthformer

    depthformer = StaticDepthformer(full_size.model, DeviceSampling(device))
    sampling = depthformer.sampling
    assert depthformer.fused is not None and sampling.fused is not None
    generator = torch.Generator(device=device).manual_seed(11)
    hidden_size = full_size.model.lfm.config.hidden_size
    expected = torch.empty((1,), dtype=torch.long, device=device)
    checked = 0
    for greedy, temperature, top_k in ((True, 1.0, None), (False, 1.0, 4), (False, 0.7, 64)):
        sampling.set(greedy=greedy, temperature=temperature, top_k=top_k)
        chosen: set[int] = set()
        for trial in range(4):
            hidden = (torch.randn((1, hidden_size), device=device, generator=generator) * 4).to(torch.bfloat16)
            depthformer.frame_step(hidden)  # draws this frame's noise (beside its input product) into depthformer._noise
            codes, noise = depthformer.frame.clone(), depthformer._noise.clone()
            if codes[0] == END_OF_AUDIO:
                assert (codes == END_OF_AUDIO).all()
                continue
            logits = depthformer.teacher_forced_logits(hidden, codes)
            for i in range(depthformer.codebooks):
                sampling.fused(logits[i], noise[i], sampling.inv_temperature, sampling.top_k_index, expected)
                assert int(codes[i]) == int(expected), (greedy, top_k, trial, i)
                checked += 1
            chosen.update(codes.tolist())
        assert len(chosen) > 8  # the codes differ between codebooks and frames: the choice is not stuck
    assert checked >= 64


@torch.inference_mode()
def test_fused_backbone_attention_matches_exact_attention_at_every_split_boundary(device, full_size) -> None:
    """The one-kernel attention layer step against float64 attention over the plain ops' q and keys, at
    positions on both sides of its key-chunk boundaries and at the cache's end; it writes only slot
    `position` (k within one bf16 rounding of the plain ops, v exactly), gives bit for bit the same
    output when run again (the merge of the splits does not depend on which block finishes last),
    and leaves its counters at 0 for the next launch."""
    from engine.realtime.kernels.sources import ATTENTION_CHUNK
    from engine.realtime.static_model import StaticBackbone, _AttentionLayer

    slots = 4096
    backbone = StaticBackbone(full_size.model.lfm, max_positions=slots)
    kernel = backbone.attention_step
    assert kernel is not None, "the fused backbone attention did not compile or failed its start-up check"
    layer = next(layer for layer in backbone.layers if isinstance(layer, _AttentionLayer))
    generator = torch.Generator(device=device).manual_seed(8)
    keys0, values0 = (torch.randn(layer.keys.shape, device=device, generator=generator).to(torch.bfloat16) for _ in range(2))
    width, group = layer.qkv.shape[0], backbone.heads // backbone.kv_heads
    chunk = ATTENTION_CHUNK
    cases = ((0, 3.0), (1, 3.0), (chunk - 1, 3.0), (chunk, 3.0), (chunk + 1, 3.0), (700, 3.0), (slots - 1, 3.0), (5, 1e-3))
    for position, scale in cases:  # scale 1e-3: the norm's eps matters
        backbone.position.fill_(position)
        qkv = (torch.randn((1, width), device=device, generator=generator) * scale).to(torch.bfloat16)
        keys, values = keys0.clone(), values0.clone()
        args = (layer.q_norm, layer.k_norm, backbone.eps, backbone.scale, backbone.cos, backbone.sin, backbone.position)
        got = kernel(qkv, *args, keys, values).clone()
        again = kernel(qkv, *args, keys.clone(), values.clone())
        assert torch.equal(got, again), position
        assert kernel.counters.sum().item() == 0, position
        cos = backbone.cos.index_select(0, backbone.position)
        sin = backbone.sin.index_select(0, backbone.position)
        q_ref, k_ref, v_ref = backbone._qkv(layer, qkv, cos, sin)
        assert _relative(keys[0, :, position], k_ref[0]) < 1e-2, position
        assert torch.equal(values[0, :, position], v_ref[0]), position
        others = torch.arange(slots, device=device) != position
        assert torch.equal(keys[0][:, others], keys0[0][:, others]), position  # only its own slot is written
        assert torch.equal(values[0][:, others], values0[0][:, others]), position
        # Exact attention over the kernel's own keys (its k at `position`), float64, q from the plain ops.
        q = q_ref[0].double().view(backbone.kv_heads, group, backbone.head_dim)
        k, v = keys[0, :, : position + 1].double(), values[0, :, : position + 1].double()
        weights = torch.softmax(torch.einsum("hgd,hpd->hgp", q, k) * backbone.scale, dim=-1)
        exact = torch.einsum("hgp,hpd->hgd", weights, v).reshape(1, -1)
        assert _relative(got, exact) < 1e-2, position  # q itself is one bf16 rounding from the kernel's
        backbone.attention_step = None
        try:
            plain = backbone._decode_attention(replace(layer, keys=keys0.clone(), values=values0.clone()), qkv, write_mask=True)
        finally:
            backbone.attention_step = kernel
        assert _relative(got, plain) < 2e-2, position


@pytest.mark.parametrize(
    "rows, columns", [(2048, 2048), (3072, 2048), (16384, 2048), (2048, 8192), (1001, 256), (1006, 256), (5000, 512), (96, 6144)]
)
def test_matvec_kernel_matches_the_exact_product(device, rows: int, columns: int) -> None:
    """The matrix-vector kernel against the float64 product, with and without the residual it adds, and
    bit for bit the same output when run again (each output is one fixed-order sum). The shapes cover
    one and several warps per row, and row counts that leave the last block part-empty."""
    from engine.realtime.kernels import Matvec

    matvec = Matvec.create(device, torch.bfloat16)
    assert matvec is not None and Matvec.split(columns) is not None
    generator = torch.Generator(device=device).manual_seed(rows + columns)
    weight = torch.randn((rows, columns), device=device, generator=generator).to(torch.bfloat16)
    x = torch.randn((1, columns), device=device, generator=generator).to(torch.bfloat16)
    residual = (torch.randn((rows,), device=device, generator=generator) * 30).to(torch.bfloat16)
    exact = x.double() @ weight.double().t()
    for extra in (None, residual):
        got = matvec(x, weight, extra)
        expected = exact if extra is None else exact + extra.double()
        assert got.shape == (1, rows) and got.dtype == torch.bfloat16
        assert _relative(got, expected) < 4e-3  # the bf16 rounding of the output, nothing more
        assert ((got.double() - expected).abs() <= expected.abs() * 2**-7 + 1e-3 * columns**0.5).all()
        assert torch.equal(got, matvec(x, weight, extra))
    # Of x's RMS norm (the kernel normalizes its own copy): against the product of F.rms_norm's bf16 output.
    gain = torch.randn((columns,), device=device, generator=generator).to(torch.bfloat16)
    for scale, eps in ((3.0, 1e-5), (1e-3, 1e-5), (1.0, 0.5)):  # small x or a large eps: eps matters
        xs = (x.float() * scale).to(torch.bfloat16)
        normed = F.rms_norm(xs, (columns,), gain, eps)
        for extra in (None, residual):
            got = matvec(xs, weight, extra, gain, eps)
            expected = normed.double() @ weight.double().t() + (0 if extra is None else extra.double())
            assert _relative(got, expected) < 1e-2, (scale, eps)
            assert torch.equal(got, matvec(xs, weight, extra, gain, eps))
    # Gated (w1|w3 with the SwiGLU as the epilogue): the same sums as the plain product, so its gate and up
    # are the plain kernel's bf16 outputs, and out = silu(gate) * up of them, rounded once.
    if rows % 2:
        return
    assert matvec.supports(columns, gated=True)
    for xs, norm, eps in ((x, None, 0.0), ((x.float() * 3).to(torch.bfloat16), gain, 1e-5)):
        gate, up = matvec(xs, weight, None, norm, eps).double().chunk(2, dim=-1)
        expected = gate / (1 + torch.exp(-gate)) * up
        got = matvec(xs, weight, None, norm, eps, gated=True)
        assert got.shape == (1, rows // 2) and got.dtype == torch.bfloat16
        assert ((got.double() - expected).abs() <= expected.abs() * 2**-7 + 1e-30).all()  # one bf16 step (exp(-g) = inf: 0)
        assert torch.equal(got, matvec(xs, weight, None, norm, eps, gated=True))


def _int8(rows: int, columns: int, generator: torch.Generator, device):
    from engine.model.quantized import Int8Matrix, quantize_rows

    matrix = Int8Matrix.empty(rows, columns, device)
    weight = torch.randn((rows, columns), device=device, generator=generator) * torch.rand((rows, 1), device=device, generator=generator)
    quantize_rows(weight, matrix.values, matrix.scales)
    return matrix


@pytest.mark.parametrize(
    "rows, columns", [(2048, 2048), (6144, 2048), (16384, 2048), (2048, 8192), (65536, 2048), (8192, 2048), (1001, 512), (96, 6144)]
)
def test_int8_matvec_kernel_matches_the_dequantized_product(device, rows: int, columns: int) -> None:
    """The int8-weight kernels (W8A16) against the float64 product with the dequantized matrix (q · scale,
    exact in float32): within one bf16 step of the output, with and without the residual and the norm,
    gated, and bit for bit again when run again."""
    from engine.realtime.kernels import Matvec

    matvec = Matvec.create(device, torch.bfloat16)
    assert matvec is not None and matvec.supports(columns, int8=True)
    generator = torch.Generator(device=device).manual_seed(rows * 7 + columns)
    weight = _int8(rows, columns, generator, device)
    dequantized = weight.values.double() * weight.scales.double()[:, None]
    x = torch.randn((1, columns), device=device, generator=generator).to(torch.bfloat16)
    residual = (torch.randn((rows,), device=device, generator=generator) * 30).to(torch.bfloat16)
    gain = torch.randn((columns,), device=device, generator=generator).to(torch.bfloat16)
    normed = F.rms_norm((x.float() * 3).to(torch.bfloat16), (columns,), gain, 1e-5)
    for h, norm in ((x, None), ((x.float() * 3).to(torch.bfloat16), gain)):
        exact = (x if norm is None else normed).double() @ dequantized.t()
        slack = 1e-5 * (exact.abs().max() + 1)  # float32 sums of up to 8192 terms
        for extra in (None, residual):
            got = matvec(h, weight, extra, norm, 1e-5)
            expected = exact if extra is None else exact + extra.double()
            assert got.shape == (1, rows) and got.dtype == torch.bfloat16
            if norm is None:  # the kernel's own norm may round an element of h differently from F.rms_norm
                assert ((got.double() - expected).abs() <= expected.abs() * 2**-7 + slack).all(), extra is None
            assert _relative(got, expected) < (4e-3 if norm is None else 1e-2)
            assert torch.equal(got, matvec(h, weight, extra, norm, 1e-5))
    if rows % 2:
        return
    assert matvec.supports(columns, gated=True, int8=True)
    for h, norm in ((x, None), ((x.float() * 3).to(torch.bfloat16), gain)):
        gate, up = matvec(h, weight, None, norm, 1e-5).double().chunk(2, dim=-1)  # the plain kernel's bf16 outputs
        expected = gate / (1 + torch.exp(-gate)) * up
        got = matvec(h, weight, None, norm, 1e-5, gated=True)
        assert got.shape == (1, rows // 2)
        assert ((got.double() - expected).abs() <= expected.abs() * 2**-7 + 1e-30).all()
        assert torch.equal(got, matvec(h, weight, None, norm, 1e-5, gated=True))


@pytest.mark.parametrize("channels, columns", [(2048, 2048), (1001, 2048), (64, 4096), (37, 512)])
def test_int8_conv_epilogue_is_bitwise_the_product_then_the_conv_step(device, channels: int, columns: int) -> None:
    """matvec_conv_int8 (the conv layers' int8 in-projection with the conv step as its epilogue) against the int8
    product followed by short_conv_step: the same output and the same updated state, bit for bit, with and
    without the norm, over several steps (the state shifting through every tap); shapes with a partial last tile,
    a row split over two groups (4096 columns: 2 channels a tile) and more tiles than walking blocks."""
    from engine.realtime.kernels import Matvec, ShortConvStep

    matvec = Matvec.create(device, torch.bfloat16)
    assert matvec is not None and matvec.supports(columns, int8=True, conv=True)
    taps = 3
    step = ShortConvStep.create(channels, taps, device, torch.bfloat16)
    assert step is not None
    generator = torch.Generator(device=device).manual_seed(channels + columns)
    weight = _int8(3 * channels, columns, generator, device)
    conv_weight = torch.randn((channels, taps), device=device, generator=generator).to(torch.bfloat16)
    gain = torch.randn((columns,), device=device, generator=generator).to(torch.bfloat16)
    for norm in (None, gain):
        state = torch.randn((channels, taps), device=device, generator=generator).to(torch.bfloat16)
        fused_state, separate_state = state.clone(), state.clone()
        for _ in range(taps + 1):
            x = (torch.randn((1, columns), device=device, generator=generator) * 3).to(torch.bfloat16)
            expected = step(matvec(x, weight, None, norm, 1e-5), separate_state, conv_weight).clone()
            got = matvec(x, weight, None, norm, 1e-5, conv=(fused_state, conv_weight))
            assert got.shape == (1, channels)
            assert torch.equal(got, expected) and torch.equal(fused_state, separate_state), norm is None
        assert not torch.equal(fused_state, state)


def test_int8_walking_products_are_bitwise_the_one_tile_per_block_kernels(device) -> None:
    """The int8 kernels' walking blocks (matvec.cu's PIPELINE 1: a few blocks per SM each take every
    gridDim-th tile, the next one's loads in flight) against the same source built with one tile per block
    (run 66's kernels): bit for bit the same outputs, plain (with the norm and the residual) and gated, for
    tile counts that leave the blocks an odd number of tiles, a grid's last block short and a partial last
    tile, fewer tiles than walking blocks, and a row split over several groups (8192 columns)."""
    from engine.realtime.kernels import Matvec, sources

    walking = Matvec.create(device, torch.bfloat16)
    assert walking is not None and walking.walkers_per_sm["int8"] > 0 and sources.MATVEC_PIPELINE["int8"]
    one_tile = []
    for name in ("matvec_int8", "matvec_gated_int8"):
        kernel = sources.KERNELS[name]
        text = sources.defines({**kernel.defines, "PIPELINE": 0, "MATVEC_MIN_BLOCKS": 4}) + sources.read(kernel.file)
        one_tile.append(torch.cuda._compile_kernel(text, name))
    plain = Matvec(walking.kernel, walking.gated_kernel, int8=one_tile[0], gated_int8=one_tile[1], sm_count=walking.sm_count,
                   walkers_per_sm={"bf16": 0, "int8": 0})
    walkers = walking.walkers_per_sm["int8"] * walking.sm_count
    rows_per_tile = sources.MATVEC_WARPS * 32 // sources.MATVEC_GROUP_LANES["int8"]
    generator = torch.Generator(device=device).manual_seed(29)
    cases = [(walkers * 2 + 1, 2048), (walkers * 3 - 5, 2048), (walkers - 1, 2048), (walkers * 5 + 3, 8192)]
    for tiles, columns in cases:
        split = Matvec.split(columns, int8=True)
        rows = tiles * rows_per_tile // split
        assert walking.blocks(tiles, int8=True) < tiles or tiles < walkers
        weight = _int8(rows - 3, columns, generator, device)  # a partial last tile
        x = torch.randn((1, columns), device=device, generator=generator).to(torch.bfloat16)
        gain = torch.randn((columns,), device=device, generator=generator).to(torch.bfloat16)
        residual = torch.randn((rows,), device=device, generator=generator).to(torch.bfloat16)
        for extra, norm in ((None, None), (residual[: rows - 3], gain)):
            assert torch.equal(walking(x, weight, extra, norm, 1e-5), plain(x, weight, extra, norm, 1e-5)), (tiles, columns)
        if columns == 2048:
            gated = _int8(rows, columns, generator, device)
            for norm in (None, gain):
                got = walking(x, gated, None, norm, 1e-5, gated=True)
                assert torch.equal(got, plain(x, gated, None, norm, 1e-5, gated=True)), (tiles, "gated")


@torch.inference_mode()
def test_int8_products_that_trigger_their_dependents_early_are_read_only_when_written(device) -> None:
    """The walking int8 products let the next kernel launch right after their own wait (matvec.cu,
    launch_dependents): a chain of products, each reading the one before it (and its residual the one before
    that), gives in every one of 20 graph replays and eagerly exactly what it gives with the device
    synchronized after every product (a dependent reading before its input was written would differ)."""
    from engine.realtime import graphs
    from engine.realtime.kernels import Matvec

    matvec = Matvec.create(device, torch.bfloat16)
    assert matvec is not None and matvec.walkers_per_sm["int8"] > 0
    generator = torch.Generator(device=device).manual_seed(41)
    shapes = [(2048, 2048), (6144, 2048), (2048, 6144), (16384, 2048), (2048, 8192)] * 3
    weights = [_int8(rows, columns, generator, device) for rows, columns in shapes]
    gain = torch.randn((2048,), device=device, generator=generator).to(torch.bfloat16)
    start = torch.randn((1, 2048), device=device, generator=generator).to(torch.bfloat16)

    def chain(synchronize: bool) -> torch.Tensor:
        x, before = start, start
        for weight, (rows, columns) in zip(weights, shapes):
            if rows == 16384:
                y = matvec(x, weight, None, gain, 1e-5, gated=True)
            elif rows == 2048:
                y = matvec(x, weight, before[0], None, 1e-5)
            else:
                y = matvec(x, weight, None, gain if columns == 2048 else None, 1e-5)
            if synchronize:
                torch.cuda.synchronize()
            before, x = x if x.shape[1] == 2048 else before, y
        return x

    expected = chain(synchronize=True).clone()
    assert torch.equal(chain(synchronize=False), expected)
    graphs.warm_up(device, lambda: chain(synchronize=False))
    graph, out = graphs.capture(lambda: chain(synchronize=False))
    for _ in range(20):
        out.zero_()
        graph.replay()
        assert torch.equal(out, expected)


@pytest.mark.parametrize("rows, columns", [(16384, 2048), (2048, 8192), (3, 16), (1001, 2816)])
def test_dequantize_kernel_rounds_exactly_as_the_plain_ops(device, rows: int, columns: int) -> None:
    from engine.model.quantized import dequantize
    from engine.realtime.kernels import Dequantize

    kernel = Dequantize.create(device)
    assert kernel is not None
    matrix = _int8(rows, columns, torch.Generator(device=device).manual_seed(rows), device)
    assert torch.equal(kernel(matrix.values, matrix.scales), dequantize(matrix.values, matrix.scales, torch.bfloat16))


@pytest.mark.parametrize(
    "rows, columns", [(16384, 2048), (2048, 8192), (6144, 2048), (3072, 2048), (2048, 2048), (1001, 512), (96, 6144)]
)
@torch.inference_mode()
def test_int8_prefill_product_matches_the_dequantized_product_and_replays_bitwise(device, rows: int, columns: int) -> None:
    """The tensor-core int8 product of a prefill span (prefill_product.cu) against the float64 product with the
    dequantized matrix: span lengths that fill each block size and that do not, several blocks of positions,
    one slice of k and several (each matrix's own), rows past the last full block; and a graph replay equals the
    eager launch bit for bit."""
    from engine.realtime import graphs
    from engine.realtime.kernels import PrefillInt8Product

    kernel = PrefillInt8Product.create(device)
    assert kernel is not None, "the int8 prefill product did not compile or failed its start-up check"
    generator = torch.Generator(device=device).manual_seed(rows + columns)
    matrix = _int8(rows, columns, generator, device)
    dequantized = matrix.values.double() * matrix.scales.double()[:, None]
    for positions in (1, 20, 32, 33, 64, 82, 128, 300):
        x = torch.randn((positions, columns), device=device, generator=generator).to(torch.bfloat16)
        got = kernel(x, matrix)
        exact = x.double() @ dequantized.t()
        assert got.shape == (positions, rows) and got.dtype == torch.bfloat16
        # Sums in float32, rounded once to bf16: within a bf16 step of the exact product, row by row.
        assert _relative(got, exact) < 4e-3, (positions, kernel.slices(rows, columns))
        torch.testing.assert_close(got.double(), exact, rtol=1e-2, atol=1e-2 * float(exact.abs().max()))
    graph, out = graphs.capture(lambda: kernel(x, matrix))
    eager = kernel(x, matrix)
    for _ in range(3):
        graph.replay()
        assert torch.equal(out, eager)


@torch.inference_mode()
def test_int8_depthformer_kernel_matches_the_plain_dequantized_ops_and_any_grid_size(device, full_size) -> None:
    """The int8 one-launch frame kernel against the plain ops over the same int8 weights (dequantized),
    teacher-forced, and bit for bit the same whatever the grid."""
    import copy

    from engine.model.quantized import quantize_model
    from engine.realtime.sampling import DeviceSampling
    from engine.realtime.static_depthformer import StaticDepthformer

    model = copy.deepcopy(full_size.model)
    quantize_model(model, device=device)
    depthformer = StaticDepthformer(model, DeviceSampling(device))
    step = depthformer.fused
    assert step is not None and step.int8, "the int8 depthformer kernel did not compile or failed its start-up check"
    assert depthformer.input_product is not None
    generator = torch.Generator(device=device).manual_seed(8)
    for trial in range(4):
        hidden = torch.randn((1, model.lfm.config.hidden_size), device=device, generator=generator).to(torch.bfloat16)
        codes = torch.randint(0, 2048, (8,), device=device, generator=generator)
        fused = depthformer.teacher_forced_logits(hidden, codes)
        depthformer.fused = None
        plain = depthformer.teacher_forced_logits(hidden, codes)
        depthformer.fused = step
        for i in range(8):
            assert _relative(fused[i], plain[i]) < 2e-2, (trial, i)
        for grid in (1, 5, step.blocks):
            blocks, step.blocks = step.blocks, grid
            assert torch.equal(depthformer.teacher_forced_logits(hidden, codes), fused), (trial, grid)
            step.blocks = blocks
    del depthformer, model
    torch.cuda.empty_cache()


@torch.inference_mode()
def test_dependent_launches_are_made_and_wait_for_the_kernels_before_them(device) -> None:
    """On Hopper the backbone's kernels are programmatic dependent launches (no launch was refused) that
    wait inside for what the kernel ahead wrote: a chain of a PyTorch kernel, products with a residual,
    norms and a product of a norm, each reading what the one before wrote, gives in every graph replay
    (10) what it gives eagerly, and that within bf16 rounding of the plain ops."""
    from engine.realtime import graphs
    from engine.realtime.kernels import Matvec, RmsNormRow, runtime

    matvec = Matvec.create(device, torch.bfloat16)
    norm = RmsNormRow.create(2048, device, torch.bfloat16)
    assert matvec is not None and norm is not None
    if torch.cuda.get_device_capability(device)[0] >= 9:
        assert runtime._dependent_launch(torch.cuda.current_device()) is not None
    generator = torch.Generator(device=device).manual_seed(11)
    x = torch.randn((1, 2048), device=device, generator=generator).to(torch.bfloat16)
    weights = [(torch.randn((2048, 2048), device=device, generator=generator) / 45).to(torch.bfloat16) for _ in range(3)]
    gain = torch.randn((2048,), device=device, generator=generator).to(torch.bfloat16)

    def chain(plain: bool) -> torch.Tensor:
        h = x * 3  # a PyTorch kernel writes the first input
        for weight in weights:
            h = h + F.linear(h, weight) if plain else matvec(h, weight, h[0])  # + residual: reads h twice
            h = F.rms_norm(h, (2048,), gain, 1e-5) if plain else norm(h, gain, 1e-5)
        return F.linear(F.rms_norm(h, (2048,), gain, 1e-5), weights[0]) if plain else matvec(h, weights[0], None, gain, 1e-5)

    eager = chain(plain=False)
    graphs.warm_up(device, lambda: chain(plain=False))
    graph, out = graphs.capture(lambda: chain(plain=False))
    for _ in range(10):
        out.zero_()
        graph.replay()
        assert torch.equal(out, eager)
    expected = chain(plain=True).double()
    assert _relative(eager, expected) < 5e-2  # bf16 roundings through 7 kernels
    assert not runtime._dependent_launch_failed


@torch.inference_mode()
def test_backbone_times_the_matvec_kernel_against_cublas_for_every_decode_product(device, full_size) -> None:
    from engine.realtime.static_model import StaticBackbone

    backbone = StaticBackbone(full_size.model.lfm, max_positions=256)
    shapes = backbone._decode_products()
    # q|k|v, conv in-projection, out-projections (+ residual), w1|w3, w2 (+ residual), w1|w3 with its SwiGLU
    assert len(shapes) == 6 and [shape[4] for shape in shapes] == [False] * 5 + [True] and not any(shape[5] for shape in shapes)
    assert len(backbone.matvec_timings_us) == len(shapes)
    for label, times in backbone.matvec_timings_us.items():
        assert times["kernel"] > 0 and times["separate" if label.endswith("SwiGLU") else "cublas"] > 0
    assert backbone.matvec_shapes <= set(shapes)
