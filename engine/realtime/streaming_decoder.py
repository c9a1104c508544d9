"""Streaming audio decoders: 8-codebook audio codes -> 24 kHz PCM, one or a few 80 ms code frames at a time.

`StreamingDetokenizer` re-implements liquid-audio's `LFM2AudioDetokenizer.forward` (FusedEmbedding -> x6
nearest upsample -> Lfm2Model with a 30-position sliding-window mask -> Linear(512, 1282) ->
log-magnitude/angle -> "same"-padded ISTFT) as a streaming decoder whose whole step, of n = 1 ..
`max_frames` code frames (6 n positions), is plain PyTorch ops on preallocated, static-shape buffers. That
makes each step size capturable as ONE `torch.cuda.CUDAGraph` (no torch.compile / Triton: the product
ships on Windows), and it makes the streamed output equal to the whole-utterance decode up to float
rounding, whatever sizes the steps have.

Why several frames a step: at batch 1 the step is bound by its ~120 launches, not by its work, so a step of
4 frames costs about what a step of 1 does, and it reads the decoder's weights once instead of 4 times.
Beside the engine's steps on the GPU, every decoder step also slows them down by about its own length (H200:
a frame's backbone step and depthformer took 0.19 ms longer with a one-frame step beside them, bench run 90's
grid timings). `PipelinedDecoder` (engine/chat/audio_decoding.py) decodes a turn's first frame alone, for
the first sound, and then frames in growing groups. Graphs are captured for the step sizes that are powers of
two (`graph_sizes`); a step of another size runs eagerly (PipelinedDecoder splits what is left at the end
of an answer into powers of two).

Why the step looks the way it does: at batch 1 a step is bound by the number of kernels it launches
(~2.7 us each on an H200), not by arithmetic, so the layouts below are chosen so that projections write
straight into the state buffers and no transpose/contiguous copies are needed.

State layout (all device tensors, updated in place by the step; U = 6 * max_frames positions, a step of
n frames uses the first u = 6 n of them):

* ``_conv_hist`` (n_conv, L-1 + U, L * H) in the model dtype, L = conv_L_cache (3): slot s holds time
  ``p - (L-1) + s``, as the L products ``w_k * B * x`` (k = 0..L-1) of the depthwise conv taps. The conv
  weights are folded into a fused in_proj copy ([w_0*B | .. | w_{L-1}*B | C | x]), so one multiply
  writes all taps of the u new slots and the causal conv is one reduction over a strided view
  (tap k of output t lives at slot t + k); one copy moves the last L-1 slots of the step to the front.
* ``_arena`` (n_attn + 1, PAST + U, (n_rep + 2) * n_kv * head_dim) in the model dtype, PAST = window - 1
  (29). Slot s holds transformer position ``p - PAST + s`` where p is the first position of the current
  step, so the u new positions are always slots PAST..PAST+u-1 (static addresses) and one shift of the
  whole arena by u slots per step (2 copies through ``_arena_tmp``: overlapping ranges cannot be
  copied in one kernel) advances every attention layer at once.
  - attention layer l: ``_arena[l, s]`` is laid out as [q_r0 | ... | q_r{n_rep-1} | k | v], each
    (n_kv, head_dim); the fused q|k|v projection writes the whole row of the new slots, and the rotary
    bmm writes roped q and k back in place. Because the row is exactly (n_rep + 2) * n_kv * head_dim
    wide, (slot, block) merge into one stride, so SDPA sees queries as (1, n_kv, 6 * (n_rep + 2), hd)
    with no copy: the k and v blocks of the new slots ride along as extra "query" rows whose outputs
    are ignored (and the mask keeps every row causal, so a step of n frames is n steps of one). That is
    how grouped-query attention runs without repeat_kv. Keys and values are
    already roped at their absolute positions.
  - the last block, column 0: additive validity of each slot (-inf for slots before the utterance
    start, 0 after); it shifts with the keys, so the sliding-window mask is the static band
    ``key pos in (q - window, q]`` plus this row.
* ``_frames`` (2, 3 + U, 1280) float32: plane 0 = window-multiplied ISTFT frames, plane 1 = the
  window-envelope contribution (window**2) of the same frames. Rows 0..2 are the previous step's
  last 3 STFT frames (the overlap-add tail, zero at the utterance start), rows 3.. the current u. A
  strided view of this buffer sums the overlap-add of the u output hops in one reduction for both
  planes, so the envelope is carried exactly like the signal and the utterance start is handled by
  the same code (no first-frame branch).
* ``_pos`` (U + 1,) int64: positions p..p+U-1 from the current step's first, then a counter that gives
  the number of valid samples (1440 for the first frame, 1920 after) through one clamp.

Emission: after code frame m, every sample that no later frame can change is final: output samples
[1920 m - 480, 1920 m + 1440) (the first 480 are the ISTFT "same" padding and are dropped), i.e.
1440 samples for the first frame, 1920 for every later one, and `flush()` returns the last 480.
After a step of n frames the valid samples are the LAST ``valid`` of the first 1920 n samples of the
static PCM buffer.

Measured on an H200 (torch 2.11, full-size random weights, one code frame, graph replay): bfloat16
transformer 113 kernels / ~390 us; float32 128 kernels / ~500 us (cuBLAS picks split-K SIMT kernels
for the M=6 float32 GEMMs, 17 of the 128 are split-K reductions). Eager: ~2.7-3 ms (launch-bound).
Either is < 1 % of the 80 ms a frame lasts. `count_step_kernels` re-measures.

Fused weight copies (made once; `refresh_weights()` redoes them in place): q|k|v projection with q
heads reordered per kv group, out_proj with its input columns reordered to match, w1|w3, the q/k head
norm weights expanded to one (heads, head_dim) table, and the output Linear with its rows interleaved
(log-magnitude, angle) in float32, and in_proj of the conv layers with the conv taps folded in. The irfft is a float32 matrix product with a precomputed real DFT
matrix that also applies the synthesis window. Everything else references the module's parameters.
"""

from __future__ import annotations

import abc
import contextlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.realtime import graphs
from engine.realtime.streaming import StreamingState
from engine.constants import ANSWER_SAMPLE_RATE as SAMPLE_RATE

if TYPE_CHECKING:  # imported lazily: liquid-audio pulls in a lot at import time
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from liquid_audio.moshi.models.compression import MimiModel

__all__ = [
    "CODEBOOK_SIZE",
    "FIRST_CHUNK_SAMPLES",
    "FLUSH_SAMPLES",
    "FRAME_SAMPLES",
    "NUM_CODEBOOKS",
    "SAMPLE_RATE",
    "MAX_STEP_FRAMES",
    "KernelCount",
    "MimiStreamingDecoder",
    "StreamingAudioDecoder",
    "StreamingDetokenizer",
    "count_step_kernels",
    "make_streaming_decoder",
]

NUM_CODEBOOKS = 8
CODEBOOK_SIZE = 2048
UPSAMPLE = 6  # transformer positions (= STFT frames) per code frame
# Code frames one step decodes at most (PipelinedDecoder's groups after a turn's first frame): a step of 4
# frames costs about what a step of 1 does (launch-bound; H200, bf16 transformer: 0.384 and 0.408 ms).
MAX_STEP_FRAMES = 8
N_FFT = 1280
HOP = 320
WIN = 1280
FRAME_SAMPLES = UPSAMPLE * HOP  # 1920 samples = 80 ms per code frame
ISTFT_PAD = (WIN - HOP) // 2  # 480: "same" padding trimmed at each end of the utterance
FIRST_CHUNK_SAMPLES = FRAME_SAMPLES - ISTFT_PAD  # 1440
FLUSH_SAMPLES = ISTFT_PAD  # 480
_SEGMENTS = WIN // HOP  # 4 hops per STFT frame
_TAIL_FRAMES = _SEGMENTS - 1  # 3 STFT frames of a code frame still overlap the next code frame
_FFT_BINS = N_FFT // 2 + 1  # 641
_HEAD_OUT = 2 * _FFT_BINS  # 1282
_HIDDEN = 512  # FusedEmbedding and the output Linear hard-code 512
# Added to window**2 at sample 0 of every STFT frame in the envelope plane. It only matters where the
# envelope is exactly 0 (the very first padded sample, trimmed anyway): 0/0 would put a NaN into the
# static PCM buffer. Everywhere else the envelope is >= ~0.02 and adding 1e-30 is a no-op in float32.
_ENV_FLOOR = 1e-30

_SDPA_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]

assert WIN % HOP == 0 and _TAIL_FRAMES <= UPSAMPLE and ISTFT_PAD < FRAME_SAMPLES


class StreamingAudioDecoder(abc.ABC):
    """Common interface of the streaming decoders: codes of 80 ms frames in, final PCM out.

    `step` returns a 1-D float tensor on the decoder's device holding only final samples; it may be a
    view of a static buffer that the next `step`/`flush`/`reset` overwrites, so consume or copy it
    first. `flush` returns whatever is still held back at the end of an utterance and starts a new
    one; `reset` drops the current utterance (barge-in, cancel) and starts a new one.
    """

    sample_rate: int = SAMPLE_RATE
    frame_samples: int = FRAME_SAMPLES
    max_frames: int = 1  # code frames one `step` may decode together

    @abc.abstractmethod
    def step(self, codes: Tensor) -> Tensor:
        """Decode code frames: `codes` int64 of shape (8,) (one frame) or (8, n) with n <= `max_frames`,
        values in [0, 2048)."""

    @abc.abstractmethod
    def flush(self) -> Tensor:
        """End the utterance: return the samples still held back, then reset."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Start a new utterance in place (keeps buffers and any captured CUDA graph)."""


# --------------------------------------------------------------------------- LFM2 detokenizer


def _real_dft_synthesis_matrix(window: Tensor) -> Tensor:
    """(1282, 1280) float32 matrix M with ``irfft(X, 1280) * window == view_as_real(X).reshape(1282) @ M``.

    Rows are interleaved (Re X_k, Im X_k), matching the interleaved output Linear so the complex
    spectrum never needs a reshuffle. irfft ignores the imaginary part of the DC and Nyquist bins,
    so those rows are zero. Built in float64 with the phase reduced modulo N exactly (integers) so
    the float32 matrix is correctly rounded.
    """
    n = torch.arange(N_FFT, dtype=torch.int64)
    k = torch.arange(_FFT_BINS, dtype=torch.int64)
    phase = (k[:, None] * n[None, :]) % N_FFT  # exact integer phase index
    theta = phase.to(torch.float64) * (2.0 * math.pi / N_FFT)
    scale = torch.full((_FFT_BINS, 1), 2.0 / N_FFT, dtype=torch.float64)
    scale[0] = scale[-1] = 1.0 / N_FFT  # DC and Nyquist appear once in the Hermitian sum
    re = scale * torch.cos(theta)
    im = -scale * torch.sin(theta)
    im[0] = 0.0
    im[-1] = 0.0
    m = torch.stack([re, im], dim=1).reshape(_HEAD_OUT, N_FFT)
    return (m * window.to(torch.float64)[None, :]).to(torch.float32)


@dataclass
class _ConvLayer:
    slot: int  # block index in the arena
    op_norm_w: Tensor
    eps: float
    in_w: Tensor  # fused copy: [w_0 * W_B | ... | w_{L-1} * W_B | W_C | W_x], (L + 2) * H rows
    in_b: Tensor | None  # fused copy of the bias the same way
    conv_b: Tensor | None
    out_w: Tensor
    out_b: Tensor | None
    ffn_norm_w: Tensor
    w13: Tensor  # fused copy: cat(w1, w3)
    w2: Tensor
    src: nn.Module = field(repr=False)


@dataclass
class _AttnLayer:
    slot: int
    op_norm_w: Tensor
    eps: float
    qk_eps: float
    scaling: float
    wqkv: Tensor  # fused copy: [q heads ordered (rep, kv group) | k | v]
    qk_norm_w: Tensor  # fused copy: (n_rep + 1, n_kv, head_dim), q_layernorm then k_layernorm weights
    wo: Tensor  # fused copy: out_proj with input columns ordered (rep, kv group, dim)
    ffn_norm_w: Tensor
    w13: Tensor
    w2: Tensor
    src: nn.Module = field(repr=False)  # the decoder layer, for refresh_weights()


class StreamingDetokenizer(StreamingAudioDecoder, StreamingState):
    """Streaming `LFM2AudioDetokenizer` with explicit state and optional CUDA graphs (one per step size).

    Usage::

        dec = StreamingDetokenizer(processor.audio_detokenizer)
        dec.capture_graph()            # CUDA only, optional
        for codes in frames:           # codes: int64 (8,) on any device, or (8, n) for n frames at once
            pcm = dec.step(codes)      # 1440 samples first, then 1920 a frame (a view: copy it)
        tail = dec.flush()             # the last 480 samples; the decoder is reset

    For use inside a larger graph: write n frames' codes into `codes_buffer[:n]`, run
    `step_graphable(n)` (or `step(frames=n)`), then read `pcm_buffer[FRAME_SAMPLES * n - valid_samples :
    FRAME_SAMPLES * n]`; `valid_samples` is a device int64 scalar.

    The transformer runs in the module's dtype (float32, or bfloat16 as the int8 precision loads it:
    engine/model/loading.py `detokenizer_dtype`); the output Linear, the spectrum
    and the ISTFT always run in float32 (exp() of a bf16 log-magnitude would be off by ~0.4 %, and
    complex bf16 does not exist).
    """

    def __init__(self, detokenizer: LFM2AudioDetokenizer, max_frames: int = MAX_STEP_FRAMES) -> None:
        if max_frames < 1:
            raise ValueError("a step decodes at least one frame")
        self.max_frames = max_frames
        self._module = detokenizer
        layers = self._read_geometry(detokenizer)
        self._make_layer_specs(layers)
        self._make_output_head(detokenizer)
        self.refresh_weights()  # the fused copies of the layers and the head
        self._make_rotary(detokenizer.lfm.rotary_emb)
        self._make_mask()
        self._allocate_state(window=detokenizer.istft.window, n_attn=len(layers) - self._n_conv)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}  # frames per step -> its graph
        # The step sizes `capture_graph` captures: the powers of two up to max_frames.
        self.graph_sizes: tuple[int, ...] = tuple(1 << k for k in range(max_frames.bit_length()))
        self._frames_done = 0
        self.reset()

    # ------------------------------------------------------------------ construction, step by step

    def _read_geometry(self, detokenizer: LFM2AudioDetokenizer) -> list[nn.Module]:
        """Device, dtype and the sizes the layouts are built from (checked against what the step assumes);
        returns the decoder layers."""
        lfm = detokenizer.lfm
        cfg = lfm.config
        emb_w = detokenizer.emb.emb.weight
        self.device: torch.device = emb_w.device
        self.dtype: torch.dtype = emb_w.dtype
        hidden = int(cfg.hidden_size)
        if hidden != _HIDDEN or detokenizer.emb.codeboooks != NUM_CODEBOOKS:
            raise ValueError(f"expected hidden size {_HIDDEN} and {NUM_CODEBOOKS} codebooks")
        if detokenizer.lin.out_features != _HEAD_OUT:
            raise ValueError(f"expected a {_HEAD_OUT}-wide output Linear")
        rope = lfm.rotary_emb
        if "dynamic" in str(getattr(rope, "rope_type", "default")):
            raise ValueError("dynamic RoPE depends on the sequence length and cannot be streamed")
        self._hidden = hidden
        self._window = int(detokenizer.sliding_window_size)
        self._l_cache = int(cfg.conv_L_cache)

        layers = list(lfm.layers[: cfg.num_hidden_layers])
        attn = [layer.self_attn for layer in layers if layer.is_attention_layer]
        if attn:
            a0 = attn[0]
            self._head_dim = int(a0.head_dim)
            self._n_kv = int(a0.k_proj.out_features) // self._head_dim
            self._n_rep = int(a0.num_key_value_groups)
        else:
            self._head_dim, self._n_kv, self._n_rep = 2, 1, 1
        hd, n_kv, n_rep = self._head_dim, self._n_kv, self._n_rep
        self._blocks = n_rep + 2  # row blocks of an attention slot: n_rep query groups, k, v
        attn_width = self._blocks * n_kv * hd if attn else 0
        self._past = self._window - 1
        self._positions = UPSAMPLE * self.max_frames  # U: the positions of the largest step
        self._slots = self._past + self._positions
        if not 1 <= self._l_cache <= UPSAMPLE + 1:
            raise ValueError("conv_L_cache must be in 1..7 (the state shift assumes L - 1 <= 6)")
        self._attn_width = attn_width
        self._n_conv = len(layers) - len(attn)
        return layers

    def _make_layer_specs(self, layers: list[nn.Module]) -> None:
        """Per-layer weights: references, plus the fused copies listed in the module docstring (filled by
        `refresh_weights`)."""
        hidden, attn_width = self._hidden, self._attn_width
        hd, n_kv, n_rep = self._head_dim, self._n_kv, self._n_rep
        dev, dt = self.device, self.dtype
        self._layers: list[_ConvLayer | _AttnLayer] = []
        for layer in layers:
            if layer.is_attention_layer:
                sa = layer.self_attn
                self._layers.append(
                    _AttnLayer(
                        slot=sum(isinstance(x, _AttnLayer) for x in self._layers),
                        op_norm_w=layer.operator_norm.weight,
                        eps=float(layer.operator_norm.variance_epsilon),
                        qk_eps=float(sa.q_layernorm.variance_epsilon),
                        scaling=float(sa.scaling),
                        wqkv=torch.empty(attn_width, hidden, device=dev, dtype=dt),
                        qk_norm_w=torch.empty(n_rep + 1, n_kv, hd, device=dev, dtype=dt),
                        wo=torch.empty(hidden, n_rep * n_kv * hd, device=dev, dtype=dt),
                        ffn_norm_w=layer.ffn_norm.weight,
                        w13=torch.empty(2 * layer.feed_forward.w1.out_features, hidden, device=dev, dtype=dt),
                        w2=layer.feed_forward.w2.weight,
                        src=layer,
                    )
                )
                if sa.k_layernorm.variance_epsilon != sa.q_layernorm.variance_epsilon:
                    raise ValueError("q and k layernorm eps differ; one fused head norm assumes they match")
            else:
                conv = layer.conv
                if conv.conv.weight.shape[-1] != self._l_cache:
                    raise ValueError("conv kernel size differs from conv_L_cache")
                rows_in = (self._l_cache + 2) * hidden
                self._layers.append(
                    _ConvLayer(
                        slot=sum(isinstance(x, _ConvLayer) for x in self._layers),
                        op_norm_w=layer.operator_norm.weight,
                        eps=float(layer.operator_norm.variance_epsilon),
                        in_w=torch.empty(rows_in, hidden, device=dev, dtype=dt),
                        in_b=None if conv.in_proj.bias is None else torch.empty(rows_in, device=dev, dtype=dt),
                        conv_b=conv.conv.bias,
                        out_w=conv.out_proj.weight,
                        out_b=conv.out_proj.bias,
                        ffn_norm_w=layer.ffn_norm.weight,
                        w13=torch.empty(2 * layer.feed_forward.w1.out_features, hidden, device=dev, dtype=dt),
                        w2=layer.feed_forward.w2.weight,
                        src=layer,
                    )
                )
        self._layer_modules = layers

    def _make_output_head(self, detokenizer: LFM2AudioDetokenizer) -> None:
        """The final norm, the codebook embeddings, the output Linear's fused copy and the ISTFT matrix."""
        lfm, hidden, dev = detokenizer.lfm, self._hidden, self.device
        emb_w = detokenizer.emb.emb.weight
        self._final_norm_w = lfm.embedding_norm.weight
        self._final_eps = float(lfm.embedding_norm.variance_epsilon)
        self._emb3 = emb_w.view(NUM_CODEBOOKS, CODEBOOK_SIZE, hidden)
        self._lin_w = torch.empty(_HEAD_OUT, hidden, device=dev, dtype=torch.float32)
        self._lin_b = torch.zeros(_HEAD_OUT, device=dev, dtype=torch.float32)
        window = detokenizer.istft.window.detach().to(device=dev, dtype=torch.float32)
        if detokenizer.istft.padding != "same" or window.numel() != WIN:
            raise ValueError("expected the 'same'-padded ISTFT with a 1280-sample window")
        self._dft = _real_dft_synthesis_matrix(window.cpu()).to(dev)

    def _make_rotary(self, rope: nn.Module) -> None:
        """RT[t] (head_dim x head_dim) so that roped = x @ RT[t]; the step builds it once per frame."""
        hd, dev, dt = self._head_dim, self.device, self.dtype
        half = hd // 2
        inv_freq = rope.inv_freq.detach().to(device=dev, dtype=torch.float32)
        if inv_freq.numel() != half:
            raise ValueError("partial rotary embeddings are not supported")
        scaling = float(getattr(rope, "attention_scaling", 1.0))
        pc = torch.eye(hd, dtype=torch.float32) * scaling
        ps = torch.zeros(hd, hd, dtype=torch.float32)
        a = torch.arange(half)
        ps[a + half, a] = -scaling  # rotate_half: out[a] -= x[a + half] * sin  (a < half)
        ps[a, a + half] = scaling  # out[a + half] += x[a] * sin
        self._inv_freq = inv_freq
        self._pc = pc.view(hd, 2, half).to(dev)
        self._ps = ps.view(hd, 2, half).to(dev)
        self._ones = torch.ones(self._positions, half, device=dev, dtype=torch.float32)
        self._ang = torch.empty(self._positions, half, device=dev, dtype=torch.float32)
        self._rt = torch.empty(self._positions, hd, hd, device=dev, dtype=dt)

    def _make_mask(self) -> None:
        """Per step size: the sliding-window mask, a static band in slot coordinates (+ the validity row of
        the arena), causal within the step."""
        dev, dt = self.device, self.dtype
        self._bands: dict[int, Tensor] = {}
        self._masks: dict[int, Tensor] = {}
        for frames in range(1, self.max_frames + 1):
            u = UPSAMPLE * frames
            slots = self._past + u
            t = torch.arange(u)[:, None]
            s = torch.arange(slots)[None, :]
            rel = (s - self._past) - t  # key position - query position
            band = torch.where((rel <= 0) & (rel > -self._window), 0.0, float("-inf"))
            self._bands[frames] = band.repeat_interleave(self._blocks, dim=0).to(device=dev, dtype=dt)
            # The memory-efficient SDPA kernel wants every non-last mask stride 16-aligned, else torch pads
            # (= extra kernels) on every call.
            padded = -(-slots // 16) * 16
            self._masks[frames] = torch.zeros(u * self._blocks, padded, device=dev, dtype=dt)[:, :slots]

    def _allocate_state(self, *, window: Tensor, n_attn: int) -> None:
        """The state buffers of the module docstring, and the step's static inputs and outputs."""
        hidden, attn_width, n_conv = self._hidden, self._attn_width, self._n_conv
        dev, dt = self.device, self.dtype
        window = window.detach().to(device=dev, dtype=torch.float32)
        # Attention arena (+ validity block); a 1-wide dummy when there is no attention layer.
        self._arena = torch.zeros(n_attn + 1, self._slots, max(attn_width, 1), device=dev, dtype=dt)
        self._arena_tmp = torch.empty(n_attn + 1, self._past, max(attn_width, 1), device=dev, dtype=dt)
        self._validity = self._arena[-1, :, 0]
        lc, positions, sizes = self._l_cache, self._positions, range(1, self.max_frames + 1)
        self._conv_hist = torch.zeros(n_conv, lc - 1 + positions, lc * hidden, device=dev, dtype=dt)
        cs_ = self._conv_hist.stride()
        # taps[n][i][t, c, k] = w_k * B * x at slot t + k of conv layer i, in a step of n frames (see the
        # module docstring)
        self._conv_taps = {
            n: [self._conv_hist[i].as_strided((UPSAMPLE * n, hidden, lc), (cs_[1], 1, cs_[1] + hidden)) for i in range(n_conv)]
            for n in sizes
        }
        self._frames = torch.zeros(2, _TAIL_FRAMES + positions, WIN, device=dev, dtype=torch.float32)
        env = window.square().clone()
        env[0] += _ENV_FLOOR
        self._frames[1, _TAIL_FRAMES:] = env  # static: window**2 of every new frame
        # OLA view: out[plane, b, q', s] = frames[plane, b + q', HOP * (SEG - 1 - q') + s]; summing q'
        # gives the overlap-add of hop b including the previous step's tail rows.
        fs = self._frames.stride()
        self._ola = {
            n: self._frames.as_strided(
                (2, UPSAMPLE * n, _SEGMENTS, HOP),
                (fs[0], WIN, WIN - HOP, 1),
                self._frames.storage_offset() + HOP * (_SEGMENTS - 1),
            )
            for n in sizes
        }
        self._pos_init = torch.tensor([*range(positions), FIRST_CHUNK_SAMPLES], device=dev, dtype=torch.int64)
        self._pos_step = {
            n: torch.tensor([UPSAMPLE * n] * positions + [ISTFT_PAD], device=dev, dtype=torch.int64) for n in sizes
        }
        self._pos = self._pos_init.clone()
        self._h = torch.empty(positions, hidden, device=dev, dtype=dt)
        self._cb_index = torch.arange(NUM_CODEBOOKS, device=dev)
        # (max_frames, 8): frame-major, so one frame's codes are one contiguous row.
        self.codes_buffer: Tensor = torch.zeros(self.max_frames, NUM_CODEBOOKS, device=dev, dtype=torch.int64)
        self._codes_clamped = torch.zeros(self.max_frames, NUM_CODEBOOKS, device=dev, dtype=torch.int64)
        self.pcm_buffer: Tensor = torch.zeros(FRAME_SAMPLES * self.max_frames, device=dev, dtype=torch.float32)
        self.valid_samples: Tensor = torch.zeros((), device=dev, dtype=torch.int64)


    # ------------------------------------------------------------------ weights

    @torch.no_grad()
    def refresh_weights(self) -> None:
        """Recompute the fused weight copies from the module, in place (a captured graph stays valid)."""
        hd, n_kv, n_rep = self._head_dim, self._n_kv, self._n_rep
        for spec, layer in zip(self._layers, self._layer_modules, strict=True):
            ff = layer.feed_forward
            spec.w13.copy_(torch.cat([ff.w1.weight, ff.w3.weight], dim=0))
            if isinstance(spec, _ConvLayer):
                conv, hidden = layer.conv, self._hidden
                w_b, w_c, w_x = conv.in_proj.weight.split(hidden, dim=0)
                taps = conv.conv.weight[:, 0, :]  # (H, L)
                # w_k * (W_B h + b_B) == (w_k[:, None] * W_B) h + w_k * b_B: the taps ride on the projection.
                spec.in_w.copy_(torch.cat([taps[:, k, None] * w_b for k in range(self._l_cache)] + [w_c, w_x]))
                if spec.in_b is not None:
                    b_b, b_c, b_x = conv.in_proj.bias.split(hidden)
                    spec.in_b.copy_(torch.cat([taps[:, k] * b_b for k in range(self._l_cache)] + [b_c, b_x]))
            else:
                sa = layer.self_attn
                # q head h = g * n_rep + r (repeat_kv order) is stored at (r, g) so that each kv group's
                # queries are n_rep blocks of one row (see the arena layout).
                q = sa.q_proj.weight.view(n_kv, n_rep, hd, -1).transpose(0, 1).reshape(n_rep * n_kv * hd, -1)
                spec.wqkv.copy_(torch.cat([q, sa.k_proj.weight, sa.v_proj.weight], dim=0))
                spec.qk_norm_w[:n_rep].copy_(sa.q_layernorm.weight.expand(n_rep, n_kv, hd))
                spec.qk_norm_w[n_rep].copy_(sa.k_layernorm.weight.expand(n_kv, hd))
                wo = sa.out_proj.weight.view(-1, n_kv, n_rep, hd).transpose(1, 2).reshape(self._hidden, -1)
                spec.wo.copy_(wo)
        lin = self._module.lin
        half = _FFT_BINS
        il_w = torch.stack([lin.weight[:half], lin.weight[half:]], dim=1).reshape(_HEAD_OUT, -1)
        self._lin_w.copy_(il_w)
        if lin.bias is not None:
            self._lin_b.copy_(torch.stack([lin.bias[:half], lin.bias[half:]], dim=1).reshape(-1))

    # ------------------------------------------------------------------ public API

    @property
    def frames_done(self) -> int:
        """Code frames decoded since the last reset (host-side bookkeeping, no sync)."""
        return self._frames_done

    @property
    def graph_captured(self) -> bool:
        return bool(self._graphs)

    @torch.no_grad()
    def reset(self) -> None:
        self._arena.zero_()
        self._conv_hist.zero_()  # the reference's causal conv zero-pads the start
        self._validity[: self._past].fill_(float("-inf"))  # slots before the utterance start
        self._frames[:, :_TAIL_FRAMES].zero_()  # no overlap-add tail, no envelope tail
        self._pos.copy_(self._pos_init)
        self.valid_samples.zero_()
        self.pcm_buffer.zero_()
        self._frames_done = 0

    @torch.no_grad()
    def step(self, codes: Tensor | None = None, *, frames: int = 1) -> Tensor:
        """Decode code frames; returns their final samples (a view of `pcm_buffer`).

        `codes`, int64 (8,) for one frame or (8, n) for n frames (liquid-audio's layout), is copied into
        `codes_buffer[:n]`; None decodes the `frames` frames `codes_buffer` already holds.
        """
        if codes is not None:
            codes = codes.reshape(NUM_CODEBOOKS, -1)
            frames = codes.shape[1]
        if not 1 <= frames <= self.max_frames:
            raise ValueError(f"a step decodes 1 to {self.max_frames} frames, not {frames}")
        if codes is not None:
            self.codes_buffer[:frames].copy_(codes.t(), non_blocking=True)
        graph = self._graphs.get(frames)
        if graph is not None:
            graph.replay()
        else:
            self.step_graphable(frames)
        first = self._frames_done == 0
        self._frames_done += frames
        return self.pcm_buffer[ISTFT_PAD if first else 0 : FRAME_SAMPLES * frames]

    @torch.no_grad()
    def flush(self) -> Tensor:
        """Return the last 480 samples of the utterance (none if no frame was decoded), then reset."""
        if self._frames_done == 0:
            out = self.pcm_buffer.new_empty(0)
        else:
            # Frames rows 0..2 now hold the last 3 STFT frames (and their window**2). Their overlap-add
            # over the first 480 samples after the last emitted one, divided by their envelope,
            # is exactly the end of the reference's trimmed ISTFT.
            acc = self._frames.new_zeros(2, HOP * _TAIL_FRAMES)
            for r in range(_TAIL_FRAMES):
                start = HOP * (_TAIL_FRAMES - r)
                acc[:, : WIN - start] += self._frames[:, r, start:]
            out = (acc[0, :FLUSH_SAMPLES] / acc[1, :FLUSH_SAMPLES]).clone()
        self.reset()
        return out

    def capture_graph(self, pool: Any = None) -> None:
        """Capture `step_graphable(n)` as one CUDA graph per step size n in `graph_sizes`; `step` replays
        them from then on. They share one memory pool (`pool`, or a new one): they never run at the same
        time, and each writes only the static buffers.

        Warm-up runs on a side stream (as PyTorch's CUDA-graph docs require, so cuBLAS/SDPA set up
        their workspaces outside the capture). Warm-up mutates the state, so it is snapshotted and
        restored: capturing mid-utterance is safe.
        """
        if self.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        sizes = self.graph_sizes
        if pool is None:
            pool = torch.cuda.graph_pool_handle()
        with torch.no_grad():
            saved = self.snapshot()

            def run_each_size() -> None:
                for frames in [*sizes, *sizes]:
                    self.step_graphable(frames)

            graphs.warm_up(self.device, run_each_size)
            captured = {n: graphs.capture(lambda n=n: self.step_graphable(n), pool=pool)[0] for n in sizes}
            self.restore(saved)
        self._graphs = captured

    # ------------------------------------------------------------------ the step

    def state_tensors(self) -> list[Tensor]:
        """What a step carries to the next (the `StreamingState` protocol); `frames_done` is host-side."""
        return [self._arena, self._conv_hist, self._frames, self._pos, self.valid_samples, self.pcm_buffer]

    @torch.no_grad()
    def step_graphable(self, frames: int = 1) -> None:
        """`frames` code frames: `codes_buffer[:frames]` -> `pcm_buffer` / `valid_samples`, state advanced.

        Only static-shape ops on preallocated buffers, no host sync, no branching on tensor values:
        this is the body that `capture_graph` records (and that a caller may record inside its own
        graph). Python-side bookkeeping (`frames_done`) is left to `step`.
        """
        n, hd = frames, self._head_dim
        u = UPSAMPLE * n
        # Embedding. Clamp first: an out-of-range code (e.g. the 2048 end-of-audio token) would be a
        # device-side assert that kills the CUDA context; one tiny kernel is cheaper than that risk.
        clamped = self._codes_clamped[:n]
        torch.clamp(self.codes_buffer[:n], 0, CODEBOOK_SIZE - 1, out=clamped)
        rows = self._emb3[self._cb_index, clamped]  # (n, 8, H): one gather
        # Mean of each frame's 8 codebook embeddings, broadcast to its 6 upsampled positions
        # (nearest-exact x6 is plain repetition), in one reduction.
        h = self._h[:u]
        torch.mean(rows[:, None].expand(n, UPSAMPLE, -1, -1), dim=2, out=h.view(n, UPSAMPLE, -1))

        if self._attn_width:
            # Rotary matrices at the absolute positions p..p+u-1 (float32 angles, as transformers does).
            angles = self._ang[:u]
            torch.mul(self._pos[:u, None], self._inv_freq, out=angles)
            cs = torch.view_as_real(torch.polar(self._ones[:u], angles))  # cos, sin in one kernel
            rt = self._rt[:u].view(u, hd, 2, hd // 2)
            torch.mul(self._pc, cs[:, None, None, :, 0], out=rt)
            rt.addcmul_(self._ps, cs[:, None, None, :, 1])
            torch.add(self._bands[n], self._validity[: self._past + u], out=self._masks[n])

        for spec in self._layers:
            if isinstance(spec, _AttnLayer):
                self._attention(spec, h, n)
            else:
                self._conv(spec, h, n)
            hn = F.rms_norm(h, (self._hidden,), spec.ffn_norm_w, spec.eps)
            ab = torch.mm(hn, spec.w13.t())
            inter = ab.shape[1] // 2
            h.addmm_(F.silu(ab[:, :inter]) * ab[:, inter:], spec.w2.t())  # residual fused into the gemm

        hn = F.rms_norm(h, (self._hidden,), self._final_norm_w, self._final_eps)
        if hn.dtype != torch.float32:
            hn = hn.float()
        spec_ri = torch.addmm(self._lin_b, hn, self._lin_w.t())  # (u, 1282): (log|X|, angle) pairs
        # exp(log|X| + i angle) == polar(exp(log|X|), angle), one kernel.
        spectrum = torch.exp(torch.view_as_complex(spec_ri.view(u, _FFT_BINS, 2)))
        # irfft * window as one gemm, written straight into the overlap-add buffer.
        torch.mm(torch.view_as_real(spectrum).view(u, _HEAD_OUT), self._dft, out=self._frames[0, _TAIL_FRAMES : _TAIL_FRAMES + u])
        acc = self._ola[n].sum(dim=2)  # (2, u, 320): overlap-added signal and envelope
        torch.div(acc[0], acc[1], out=self.pcm_buffer[: FRAME_SAMPLES * n].view(u, HOP))

        # Advance the state. Valid samples: the first step's 1440 (then 1920) for its first frame, 1920 for
        # each other.
        if n == 1:
            torch.clamp(self._pos[-1], max=FRAME_SAMPLES, out=self.valid_samples)
        else:
            torch.clamp(self._pos[-1] + FRAME_SAMPLES * (n - 1), max=FRAME_SAMPLES * n, out=self.valid_samples)
        self._pos.add_(self._pos_step[n])
        self._frames[:, :_TAIL_FRAMES].copy_(self._frames[:, u : u + _TAIL_FRAMES])
        if self._attn_width:
            self._arena_tmp.copy_(self._arena[:, u : u + self._past])
            self._arena[:, : self._past].copy_(self._arena_tmp)
        if self._conv_hist.shape[0] and self._l_cache > 1:
            self._conv_hist[:, : self._l_cache - 1].copy_(self._conv_hist[:, u : u + self._l_cache - 1])

    def _conv(self, spec: _ConvLayer, h: Tensor, frames: int) -> None:
        hidden, u, lc = self._hidden, UPSAMPLE * frames, self._l_cache
        hn = F.rms_norm(h, (hidden,), spec.op_norm_w, spec.eps)
        proj = F.linear(hn, spec.in_w, spec.in_b)  # (u, (L + 2) H) = [w_0 B | .. | w_{L-1} B | C | x]
        x = proj[:, (lc + 1) * hidden :]
        new = self._conv_hist[spec.slot, lc - 1 : lc - 1 + u].view(u, lc, hidden)
        torch.mul(proj[:, : lc * hidden].view(u, lc, hidden), x[:, None, :], out=new)  # every tap of B*x
        conv = self._conv_taps[frames][spec.slot].sum(-1)  # causal depthwise conv = sum of the taps
        if spec.conv_b is not None:
            conv = conv + spec.conv_b
        y = proj[:, lc * hidden : (lc + 1) * hidden] * conv
        h.addmm_(y, spec.out_w.t())
        if spec.out_b is not None:
            h.add_(spec.out_b)

    def _attention(self, spec: _AttnLayer, h: Tensor, frames: int) -> None:
        u, hd, n_kv, blocks, past = UPSAMPLE * frames, self._head_dim, self._n_kv, self._blocks, self._past
        hn = F.rms_norm(h, (self._hidden,), spec.op_norm_w, spec.eps)
        block = self._arena[spec.slot, : past + u, : self._attn_width]  # (past + u, blocks * n_kv * hd)
        new = block[past:]
        torch.mm(hn, spec.wqkv.t(), out=new)
        heads = new.view(u, blocks, n_kv, hd)
        # Per-head RMSNorm of the whole row (contiguous; the normalised v is never read), then the q/k
        # norm weights, then rotary as one batched matmul that writes roped q and k back in place.
        normed = F.rms_norm(heads, (hd,), None, spec.qk_eps)
        qk = normed[:, : blocks - 1] * spec.qk_norm_w
        torch.bmm(qk.view(u, (blocks - 1) * n_kv, hd), self._rt[:u], out=heads[:, : blocks - 1].view(u, -1, hd))
        q = heads.permute(2, 0, 1, 3).reshape(1, n_kv, u * blocks, hd)  # a view: (slot, block) merge
        kv = block.view(past + u, blocks, n_kv, hd)
        k = kv[:, blocks - 2].permute(1, 0, 2).unsqueeze(0)
        v = kv[:, blocks - 1].permute(1, 0, 2).unsqueeze(0)
        # Memory-efficient kernel (or CPU flash): one launch. torch >= 2.10 would otherwise pick cuDNN
        # attention here, which adds a memset per call.
        with sdpa_kernel(_SDPA_BACKENDS):
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=self._masks[frames], scale=spec.scaling)
        # (1, n_kv, (t, block), hd) -> (t, block, n_kv * hd); keep the n_rep query blocks.
        o = o[0].transpose(0, 1).reshape(u, blocks, n_kv * hd)[:, : self._n_rep].reshape(u, -1)
        h.addmm_(o, spec.wo.t())


# --------------------------------------------------------------------------- Mimi fallback


class MimiStreamingDecoder(StreamingAudioDecoder):
    """Mimi's own streaming decoder behind the same interface (for models that ship Mimi weights).

    Mimi is causal at the frame level: each frame's 1920 samples are final as soon as it is decoded,
    so `flush` has nothing to add. The streaming context is entered once and kept open (moshi's
    `streaming` context manager), `reset` clears its state in place.
    """

    def __init__(self, mimi: MimiModel) -> None:
        self.mimi = mimi
        self.device: torch.device = next(mimi.parameters()).device
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(mimi.streaming(1))

    @torch.no_grad()
    def step(self, codes: Tensor) -> Tensor:
        codes = codes.reshape(1, -1, 1).to(self.device, torch.int64)
        return self.mimi.decode(codes)[0, 0]

    @torch.no_grad()
    def flush(self) -> Tensor:
        self.reset()
        return torch.empty(0, device=self.device)

    def reset(self) -> None:
        self.mimi.reset_streaming()

    def close(self) -> None:
        """Leave Mimi's streaming mode (the module is usable for batch decode again)."""
        self._stack.close()


def make_streaming_decoder(processor: Any) -> StreamingAudioDecoder:
    """Pick the decoder the model folder ships: the LFM2 detokenizer if present, else Mimi.

    `processor` is a `liquid_audio.LFM2AudioProcessor` (duck-typed: `detokenizer_path`,
    `audio_detokenizer`, `mimi_weights_path`, `mimi`).
    """
    if getattr(processor, "detokenizer_path", None) is not None:
        return StreamingDetokenizer(processor.audio_detokenizer)
    if getattr(processor, "mimi_weights_path", None) is not None:
        return MimiStreamingDecoder(processor.mimi)
    raise ValueError("the model provides neither an audio detokenizer nor Mimi weights")


# --------------------------------------------------------------------------- kernel counting


@dataclass(frozen=True)
class KernelCount:
    """What one eager `step_graphable` launches: `total` device kernels (CUDA) or compute ops (CPU)."""

    device: str
    total: int
    by_name: dict[str, int]


def count_step_kernels(decoder: StreamingDetokenizer, frames: int = 1) -> KernelCount:
    """Count what one eager `step_graphable(frames)` launches; the decoder's state is restored afterwards.

    On CUDA: device kernels seen by torch.profiler (memcpy/memset included), i.e. the nodes a captured
    graph replays. On CPU: the aten ops that reach the dispatcher, less pure view/metadata ops — a
    proxy for the CUDA count (composite ops such as CPU rms_norm show up decomposed, and one CPU op can
    be more than one CUDA kernel, e.g. cuBLAS split-K). Nothing is timed.
    """
    from torch.profiler import ProfilerActivity, profile
    from torch.utils._python_dispatch import TorchDispatchMode

    names: Counter[str] = Counter()

    class _OpCounter(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if not func._schema.is_mutable and any(r.alias_info is not None for r in func._schema.returns):
                pass  # a view: no work
            elif func.__name__.split(".")[0] not in ("empty", "empty_strided", "lift_fresh"):
                names[func.__name__.split(".")[0]] += 1
            return func(*args, **(kwargs or {}))

    cuda = decoder.device.type == "cuda"
    with torch.no_grad():
        saved = decoder.snapshot()
        decoder.step_graphable(frames)  # warm-up (lazy init) outside the count
        if cuda:
            torch.cuda.synchronize(decoder.device)
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                decoder.step_graphable(frames)
                torch.cuda.synchronize(decoder.device)
            for ev in prof.events():
                if ev.device_type == torch.autograd.DeviceType.CUDA:
                    names[ev.name] += 1
        else:
            with _OpCounter():
                decoder.step_graphable(frames)
        decoder.restore(saved)
    return KernelCount("cuda" if cuda else "cpu", sum(names.values()), dict(names))

