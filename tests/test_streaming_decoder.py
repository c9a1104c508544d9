"""Streaming audio decoder: streamed chunks + flush must reproduce the whole-utterance decode.

The LFM2 tests build a real `LFM2AudioDetokenizer` from an `Lfm2Config` (hidden size 512, since
FusedEmbedding and the output Linear hard-code it) with random weights and compare against its own
`forward`. CPU tests run a 4-layer model in float32; `gpu` tests run the full-size layout (8 layers,
5 conv + 3 attention, 16/8 heads, FFN 2304) and are skipped without CUDA.

Bound (float32, CPU): max |streamed - whole| <= 1e-4 * RMS(whole). Both sides compute the same
float32 math in a different order (fused q|k|v projection, rotary as a matmul, conv as unfold-sum,
residual fused into the gemm, irfft as a float32 DFT matmul, overlap-add as one reduction), so the
expected difference is float32 rounding amplified by the network, measured ~1e-5 of RMS with these
random weights; 1e-4 leaves margin for other BLAS builds while a real mistake (window off by one,
wrong rotary position, lost conv state, wrong envelope) is >= 1e-2 (see the negative control test).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from engine.realtime.streaming_decoder import (
    FIRST_CHUNK_SAMPLES,
    FLUSH_SAMPLES,
    FRAME_SAMPLES,
    MimiStreamingDecoder,
    StreamingAudioDecoder,
    StreamingDetokenizer,
    count_step_kernels,
    make_streaming_decoder,
)

torch.set_num_threads(1)

FP32_BOUND = 1e-4  # max abs error relative to the reference RMS (see module docstring)

gpu = pytest.mark.gpu
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


# --------------------------------------------------------------------------- helpers


def _liquid_layer_types(types: list[str]) -> list[str]:
    """The rename `LFM2AudioProcessor.audio_detokenizer` applies (it masks the window itself)."""
    return ["full_attention" if t == "sliding_attention" else t for t in types]


def build_detokenizer(
    layer_types: list[str],
    intermediate_size: int,
    seed: int,
    device: str = "cpu",
    conv_bias: bool = False,
) -> nn.Module:
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from transformers import Lfm2Config

    cfg = Lfm2Config(
        hidden_size=512,
        num_hidden_layers=len(layer_types),
        num_attention_heads=16,
        num_key_value_heads=8,
        layer_types=_liquid_layer_types(layer_types),
        intermediate_size=intermediate_size,
        block_auto_adjust_ff_dim=False,
        vocab_size=16,  # Lfm2Model's unused token embedding
        max_position_embeddings=4096,
        norm_eps=1e-5,
        conv_bias=conv_bias,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )
    cfg.sliding_window = 30
    torch.manual_seed(seed)
    detok = LFM2AudioDetokenizer(cfg).eval()
    # transformers' init (std 0.02 weights, unit norms) makes a nearly linear, near-silent network in
    # which q/k weights or norm weights could be swapped unnoticed; use O(1)-gain random weights and
    # non-trivial norm weights and biases instead.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in detok.named_parameters():
            r = torch.randn(p.shape, generator=gen)
            if "norm" in name:
                p.copy_(1.0 + 0.3 * r)
            elif p.dim() == 1:
                p.copy_(0.3 * r)  # biases
            elif name.startswith("emb."):
                p.copy_(r)
            elif name.endswith("conv.conv.weight"):
                p.copy_(0.5 * r)
            else:
                p.copy_(r / p.shape[-1] ** 0.5)
    return detok.to(device)


def random_codes(frames: int, seed: int, device: str = "cpu") -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 2048, (8, frames), generator=gen).to(device)


@torch.no_grad()
def whole_decode(detok: nn.Module, codes: Tensor) -> Tensor:
    return detok(codes[None])[0]


def stream(dec: StreamingAudioDecoder, codes: Tensor) -> list[Tensor]:
    chunks = [dec.step(codes[:, i]).clone() for i in range(codes.shape[1])]
    chunks.append(dec.flush().clone())
    return chunks


def rel_max_err(out: Tensor, ref: Tensor) -> float:
    return ((out.float() - ref.float()).abs().max() / ref.float().pow(2).mean().sqrt()).item()


def rel_rms_err(out: Tensor, ref: Tensor) -> float:
    ref = ref.float()
    return ((out.float() - ref).pow(2).mean().sqrt() / ref.pow(2).mean().sqrt()).item()


TINY_TYPES = ["conv", "sliding_attention", "conv", "sliding_attention"]
FULL_TYPES = ["conv", "conv", "sliding_attention", "conv", "sliding_attention", "conv", "sliding_attention", "conv"]


@pytest.fixture(scope="module")
def tiny() -> nn.Module:
    return build_detokenizer(TINY_TYPES, intermediate_size=256, seed=0)


# --------------------------------------------------------------------------- CPU, float32


def test_streamed_chunks_equal_whole_utterance(tiny: nn.Module) -> None:
    codes = random_codes(20, seed=1)  # 120 positions: the 30-position window slides 90 times
    ref = whole_decode(tiny, codes)
    dec = StreamingDetokenizer(tiny)
    chunks = stream(dec, codes)

    assert [c.numel() for c in chunks] == [FIRST_CHUNK_SAMPLES] + [FRAME_SAMPLES] * 19 + [FLUSH_SAMPLES]
    out = torch.cat(chunks)
    assert out.shape == ref.shape == (20 * FRAME_SAMPLES,)
    assert ref.pow(2).mean().sqrt() > 1e-2  # a real waveform, not silence
    assert torch.isfinite(out).all()
    err = rel_max_err(out, ref)
    print(f"float32 streamed vs whole: max abs err / RMS = {err:.2e}")
    assert err < FP32_BOUND
    # Every chunk on its own matches its slice (a misplaced-but-compensating chunk would not).
    pos = 0
    for c in chunks:
        assert rel_max_err(c, ref[pos : pos + c.numel()]) < 10 * FP32_BOUND
        pos += c.numel()


def test_negative_control_window_and_state_matter(tiny: nn.Module) -> None:
    """The bound has power: decodes that differ only in window size or in carried state fail it."""
    codes = random_codes(20, seed=1)
    streamed = torch.cat(stream(StreamingDetokenizer(tiny), codes))
    wider = copy.copy(tiny)  # shallow copy shares the weights
    wider.sliding_window_size = 31
    wrong_window = rel_max_err(streamed, whole_decode(wider, codes))
    # Decoding frames 10.. as their own utterance (no carried state) differs from the continuation.
    ref = whole_decode(tiny, codes)
    alone = whole_decode(tiny, codes[:, 10:])
    no_state = rel_max_err(alone[2000:4000], ref[10 * FRAME_SAMPLES + 2000 : 10 * FRAME_SAMPLES + 4000])
    print(f"window 31 instead of 30: {wrong_window:.2e}; state dropped: {no_state:.2e}")
    assert wrong_window > 100 * FP32_BOUND and no_state > 100 * FP32_BOUND


def test_reset_and_flush_start_new_utterances(tiny: nn.Module) -> None:
    dec = StreamingDetokenizer(tiny)
    first = random_codes(7, seed=2)
    for i in range(7):  # abandoned mid-utterance (barge-in)
        dec.step(first[:, i])
    dec.reset()
    second = random_codes(13, seed=3)
    out2 = torch.cat(stream(dec, second))  # flush() resets too
    assert rel_max_err(out2, whole_decode(tiny, second)) < FP32_BOUND
    third = random_codes(3, seed=4)  # shorter than the attention window
    chunks3 = stream(dec, third)
    assert [c.numel() for c in chunks3] == [FIRST_CHUNK_SAMPLES, FRAME_SAMPLES, FRAME_SAMPLES, FLUSH_SAMPLES]
    assert rel_max_err(torch.cat(chunks3), whole_decode(tiny, third)) < FP32_BOUND


def test_single_frame_and_empty_utterance(tiny: nn.Module) -> None:
    dec = StreamingDetokenizer(tiny)
    assert dec.flush().numel() == 0
    codes = random_codes(1, seed=5)  # both ISTFT edges (start and end envelope) in one frame
    out = torch.cat(stream(dec, codes))
    assert out.numel() == FRAME_SAMPLES
    assert rel_max_err(out, whole_decode(tiny, codes)) < FP32_BOUND


def test_static_buffers_and_valid_count(tiny: nn.Module) -> None:
    dec = StreamingDetokenizer(tiny)
    codes = random_codes(10, seed=6)
    pcm_ptr = dec.pcm_buffer.data_ptr()
    first = 0
    for frames, expected in [(1, FIRST_CHUNK_SAMPLES), (1, FRAME_SAMPLES), (3, 3 * FRAME_SAMPLES), (4, 4 * FRAME_SAMPLES)]:
        dec.codes_buffer[:frames].copy_(codes[:, first : first + frames].t())  # in place, as a caller's graph would
        chunk = dec.step(frames=frames)
        first += frames
        assert int(dec.valid_samples) == expected == chunk.numel()
        assert torch.equal(chunk, dec.pcm_buffer[FRAME_SAMPLES * frames - expected : FRAME_SAMPLES * frames])
        assert chunk.data_ptr() >= pcm_ptr and dec.pcm_buffer.data_ptr() == pcm_ptr
    assert dec.frames_done == 9
    dec.reset()
    assert int(dec.step(codes[:, :4]).numel()) == int(dec.valid_samples) == 4 * FRAME_SAMPLES - FLUSH_SAMPLES


def test_a_step_decodes_one_to_max_frames(tiny: nn.Module) -> None:
    dec = StreamingDetokenizer(tiny, max_frames=2)
    codes = random_codes(3, seed=16)
    with pytest.raises(ValueError, match="1 to 2 frames, not 3"):
        dec.step(codes)
    with pytest.raises(ValueError, match="not 0"):
        dec.step(frames=0)
    with pytest.raises(ValueError):
        StreamingDetokenizer(tiny, max_frames=0)
    assert dec.frames_done == 0  # refused before anything ran


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.integers(1, 8), min_size=1, max_size=6), seed=st.integers(0, 2**16))
def test_steps_of_several_frames_equal_the_whole_utterance(tiny: nn.Module, steps: list[int], seed: int) -> None:
    """Any split of an utterance into steps of 1-8 frames decodes it as the whole-utterance decode does, each
    step's samples in their place (steps of several frames carry the same state as steps of one)."""
    codes = random_codes(sum(steps), seed=seed)
    dec = StreamingDetokenizer(tiny)
    chunks, first = [], 0
    for frames in steps:
        chunks.append(dec.step(codes[:, first : first + frames]).clone())
        first += frames
    chunks.append(dec.flush().clone())
    expected = [FRAME_SAMPLES * steps[0] - FLUSH_SAMPLES] + [FRAME_SAMPLES * n for n in steps[1:]] + [FLUSH_SAMPLES]
    assert [c.numel() for c in chunks] == expected
    ref = whole_decode(tiny, codes)
    assert rel_max_err(torch.cat(chunks), ref) < FP32_BOUND
    pos = 0
    for c in chunks:
        assert rel_max_err(c, ref[pos : pos + c.numel()]) < 10 * FP32_BOUND
        pos += c.numel()


def test_out_of_range_codes_are_clamped_not_fatal(tiny: nn.Module) -> None:
    codes = random_codes(2, seed=7)
    codes[0, 0] = 2048  # the end-of-audio token must never crash the decoder
    codes[3, 1] = -1
    out = torch.cat(stream(StreamingDetokenizer(tiny), codes))
    assert rel_max_err(out, whole_decode(tiny, codes.clamp(0, 2047))) < FP32_BOUND


def test_conv_bias_variant() -> None:
    detok = build_detokenizer(["conv", "sliding_attention"], intermediate_size=128, seed=10, conv_bias=True)
    codes = random_codes(8, seed=11)
    out = torch.cat(stream(StreamingDetokenizer(detok), codes))
    assert rel_max_err(out, whole_decode(detok, codes)) < FP32_BOUND


def test_bfloat16_transformer_cpu(tiny: nn.Module) -> None:
    """bf16 transformer (head stays float32): within bf16 noise of the float32 decode.

    The reference module cannot run in bf16 at all (torch.polar has no bf16 kernel), so the bound is
    relative to float32 and to the error bf16 alone causes in a whole-utterance decode.
    """
    codes = random_codes(12, seed=8)
    ref = whole_decode(tiny, codes)
    tiny_bf16 = copy.deepcopy(tiny).to(torch.bfloat16)
    out = torch.cat(stream(StreamingDetokenizer(tiny_bf16), codes))
    bf16_whole = _whole_decode_bf16_transformer(tiny_bf16, tiny, codes)
    err, base = rel_rms_err(out, ref), rel_rms_err(bf16_whole, ref)
    print(f"bf16 streamed rel RMS err {err:.3e}, bf16 whole-utterance rel RMS err {base:.3e}")
    assert err < 0.1 and err < 2.0 * base + 1e-3


@torch.no_grad()
def _whole_decode_bf16_transformer(detok_bf16: Any, detok_fp32: Any, codes: Tensor) -> Tensor:
    """`LFM2AudioDetokenizer.forward` with the transformer in bf16 and the head in float32."""
    x = detok_bf16.emb(codes[None])
    x = nn.functional.interpolate(x.mT, 6 * x.shape[1], mode="nearest-exact").mT
    idx = torch.arange(x.shape[1], device=x.device)
    d = idx - idx[:, None]
    mask = ((d <= 0) & (d > -detok_bf16.sliding_window_size))[None, None]
    x = detok_bf16.lfm(inputs_embeds=x, attention_mask=mask, use_cache=False).last_hidden_state
    x = detok_fp32.lin(x.float())
    log_abs, angle = torch.chunk(x.mT.contiguous(), 2, 1)
    return detok_fp32.istft(torch.polar(log_abs.exp(), angle))[0]


def test_count_step_kernels_restores_state(tiny: nn.Module) -> None:
    codes = random_codes(4, seed=9)
    dec = StreamingDetokenizer(tiny)
    chunks = [dec.step(codes[:, 0]).clone(), dec.step(codes[:, 1]).clone()]
    count = count_step_kernels(dec)  # mid-utterance: must not disturb the stream
    assert count.device == "cpu" and count.total == sum(count.by_name.values()) > 0
    assert count.by_name.get("mm", 0) + count.by_name.get("addmm", 0) + count.by_name.get("addmm_", 0) > 0
    chunks += [dec.step(codes[:, 2]).clone(), dec.step(codes[:, 3]).clone(), dec.flush()]
    assert rel_max_err(torch.cat(chunks), whole_decode(tiny, codes)) < FP32_BOUND


def test_refresh_weights_follows_module_changes() -> None:
    detok = build_detokenizer(["conv", "sliding_attention"], intermediate_size=128, seed=14)
    dec = StreamingDetokenizer(detok)
    codes = random_codes(6, seed=15)
    with torch.no_grad():  # e.g. a new checkpoint loaded in place: fused copies must follow
        for p in detok.parameters():
            p.mul_(0.9).add_(0.05)
    stale = torch.cat(stream(dec, codes))
    dec.refresh_weights()
    fresh = torch.cat(stream(dec, codes))
    ref = whole_decode(detok, codes)
    assert rel_max_err(stale, ref) > 100 * FP32_BOUND  # copies are snapshots, as documented
    assert rel_max_err(fresh, ref) < FP32_BOUND


def test_capture_graph_refuses_cpu(tiny: nn.Module) -> None:
    with pytest.raises(RuntimeError):
        StreamingDetokenizer(tiny).capture_graph()


# --------------------------------------------------------------------------- Mimi fallback


@pytest.fixture(scope="module")
def mimi() -> Any:
    from liquid_audio.moshi.models.loaders import get_mimi

    torch.manual_seed(0)
    return get_mimi(None, device="cpu")  # the real Mimi architecture, random weights


def test_mimi_streaming_matches_batch_decode(mimi: Any) -> None:
    codes = random_codes(5, seed=12)
    with torch.no_grad():
        ref = mimi.decode(codes[None])[0, 0]  # non-streaming decode of the whole utterance
    dec = MimiStreamingDecoder(mimi)
    try:
        dec.step(random_codes(1, seed=13)[:, 0])  # junk from an abandoned utterance
        dec.reset()
        chunks = stream(dec, codes)
        assert [c.numel() for c in chunks] == [FRAME_SAMPLES] * 5 + [0]
        assert rel_max_err(torch.cat(chunks), ref) < FP32_BOUND
        chunks = stream(dec, codes)  # flush() reset the state: same codes, same audio
        assert rel_max_err(torch.cat(chunks), ref) < FP32_BOUND
    finally:
        dec.close()
    assert not mimi.is_streaming  # close() left streaming mode


def test_factory_picks_detokenizer_or_mimi(tiny: nn.Module, mimi: Any) -> None:
    with_detok = SimpleNamespace(detokenizer_path="x", audio_detokenizer=tiny, mimi_weights_path=None)
    assert isinstance(make_streaming_decoder(with_detok), StreamingDetokenizer)
    with_mimi = SimpleNamespace(detokenizer_path=None, mimi_weights_path="m", mimi=mimi)
    dec = make_streaming_decoder(with_mimi)
    assert isinstance(dec, MimiStreamingDecoder)
    dec.close()
    with pytest.raises(ValueError):
        make_streaming_decoder(SimpleNamespace(detokenizer_path=None, mimi_weights_path=None))


# --------------------------------------------------------------------------- CUDA (H200)


@pytest.fixture(scope="module")
def full_cuda() -> nn.Module:
    return build_detokenizer(FULL_TYPES, intermediate_size=2304, seed=20, device="cuda")


@gpu
@needs_cuda
def test_graph_replay_bitwise_equals_eager_step(full_cuda: nn.Module) -> None:
    codes = random_codes(40, seed=21, device="cuda")
    eager = StreamingDetokenizer(full_cuda)
    graphed = StreamingDetokenizer(full_cuda)
    for i in range(3):  # capture mid-utterance: capture must leave the state as it was
        assert torch.equal(graphed.step(codes[:, i]), eager.step(codes[:, i]))
    graphed.capture_graph()
    assert graphed.graph_captured
    first = 3
    for frames in [1, 2, 4, 8, 1, 8, 4, 2, 3, 4]:  # each graph after every other (3: eager in both)
        g = graphed.step(codes[:, first : first + frames])
        e = eager.step(codes[:, first : first + frames])
        assert torch.equal(g, e), f"frames {first}..{first + frames - 1}: graph replay differs from eager"
        assert torch.equal(graphed.valid_samples, eager.valid_samples)
        first += frames
    assert first == 40
    assert torch.equal(graphed.flush(), eager.flush())
    for i in range(5):  # the graphs survive flush/reset
        assert torch.equal(graphed.step(codes[:, i]), eager.step(codes[:, i]))
    assert torch.equal(graphed.step(codes[:, 5:9]), eager.step(codes[:, 5:9]))


@gpu
@needs_cuda
def test_cuda_float32_streamed_vs_whole(full_cuda: nn.Module) -> None:
    codes = random_codes(25, seed=22, device="cuda")
    ref = whole_decode(full_cuda, codes)
    dec = StreamingDetokenizer(full_cuda)
    dec.capture_graph()
    chunks = stream(dec, codes)
    assert [c.numel() for c in chunks] == [FIRST_CHUNK_SAMPLES] + [FRAME_SAMPLES] * 24 + [FLUSH_SAMPLES]
    err = rel_max_err(torch.cat(chunks), ref)
    # As a turn decodes: the first frame alone, then groups (PipelinedDecoder's ramp, then the rest).
    grouped = [dec.step(codes[:, a:b]).clone() for a, b in ((0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 24), (24, 25))]
    grouped_err = rel_max_err(torch.cat(grouped + [dec.flush()]), ref)
    print(f"cuda float32 streamed vs whole: max abs err / RMS = {err:.2e}, in groups of up to 8 frames {grouped_err:.2e}")
    # Slightly looser than on CPU: the reference's cuDNN conv may use TF32 (allowed by default for
    # convolutions) and the GPU reductions sum in another order.
    assert err < 2e-4 and grouped_err < 2e-4  # measured 2.6e-5 (frame by frame) on an H200


@gpu
@needs_cuda
def test_cuda_bfloat16_streamed_vs_whole(full_cuda: nn.Module) -> None:
    codes = random_codes(25, seed=23, device="cuda")
    ref = whole_decode(full_cuda, codes)
    full_bf16 = copy.deepcopy(full_cuda).to(torch.bfloat16)
    dec = StreamingDetokenizer(full_bf16)
    dec.capture_graph()
    out = torch.cat(stream(dec, codes))
    base = rel_rms_err(_whole_decode_bf16_transformer(full_bf16, full_cuda, codes), ref)
    err = rel_rms_err(out, ref)
    print(f"cuda bf16 streamed rel RMS err {err:.3e}, bf16 whole-utterance rel RMS err {base:.3e}")
    assert err < 0.1 and err < 2.0 * base + 1e-3


@gpu
@needs_cuda
def test_cuda_kernel_count_per_frame(full_cuda: nn.Module) -> None:
    """Regression guard on launches per frame (the step is launch-bound at batch 1). Not timed.

    Measured on an H200 with torch 2.11: 128 (float32, 17 of them cuBLAS split-K reductions) and 113
    (bfloat16); the margin absorbs other cuBLAS heuristics.
    """
    for model, limit in ((full_cuda, 140), (copy.deepcopy(full_cuda).to(torch.bfloat16), 122)):
        count = count_step_kernels(StreamingDetokenizer(model))
        four = count_step_kernels(StreamingDetokenizer(model), frames=4)
        eight = count_step_kernels(StreamingDetokenizer(model), frames=8)
        print(f"kernels per step ({model.lin.weight.dtype}): {count.total} for one frame, {four.total} for 4, {eight.total} for 8")
        for name, n in sorted(count.by_name.items(), key=lambda kv: -kv[1]):
            print(f"  {n:3d}  {name[:110]}")
        assert count.device == "cuda"
        # Steps of several frames: one kernel more for the valid count, and cuBLAS splits some products of 24 or
        # 48 rows (float32 4 frames: 147, run 91).
        assert count.total <= limit and four.total <= limit + 25 and eight.total <= limit + 25
