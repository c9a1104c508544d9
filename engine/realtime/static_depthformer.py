"""The depthformer's audio frame (every codebook's code of one frame, with sampling) over fixed buffers:
one CUDA kernel, or the same math in plain PyTorch ops.

Same weights as liquid-audio's depthformer (laid out by static_weights.py: w1|w3 fused, the only copy), same
math, rewritten for batch-1 decoding. Everything a frame needs is preallocated, so `torch.cuda.CUDAGraph` can
capture it unchanged (the backend's `audio_head` graph). The backbone's steps are static_model.py.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.quantized import Int8Matrix, QuantizedLinear
from engine.realtime.kernels import DEPTH_TABLE_FIELDS, DepthformerFrame, Matvec, swiglu
from engine.realtime import graphs
from engine.realtime.kernels.runtime import float_bits
from engine.realtime.sampling import DeviceSampling
from engine.realtime.static_weights import Weight, fuse_linear_weights, layer_weight, lookup, plain
from engine.constants import END_OF_AUDIO

log = logging.getLogger(__name__)


class StaticDepthformer:
    """liquid-audio's depthformer frame (all codebooks, with sampling) over fixed buffers.

    On CUDA the whole frame is ONE kernel (`engine.realtime.kernels.DepthformerFrame`: per codebook its
    input, all layers, its logits head and the choice of its code, the blocks handing each other every
    phase's vector): 1 launch per frame instead of ~380 (and of 16 with a kernel per codebook and one per
    choice). Elsewhere, or if that kernel is unavailable or fails its start-up check against the plain ops
    on the model's own weights, the same math runs as plain PyTorch ops (11 kernels per layer) and the
    sampler's kernel. Per position the cache keeps q|k|v as projected (v is the value cache) and q|k normed
    and roped (k is the key cache). The sampling noise for all codebooks is drawn once per frame.
    """

    def __init__(self, model: nn.Module, sampling: DeviceSampling) -> None:
        self.model = model
        self.sampling = sampling
        self.codebooks = model.codebooks
        self.dim = model.depthformer_dim
        first = model.depthformer.layers[0].operator
        self.heads = first.num_heads
        self.kv_heads = first.gqa_dim
        self.head_dim = first.head_dim
        weight = model.audio_embedding.embedding.weight
        device, dtype = weight.device, weight.dtype
        self.device, self.dtype = device, dtype
        self.int8 = isinstance(model.depth_linear, QuantizedLinear)
        self.depth_linear = layer_weight(model.depth_linear)
        self.depth_bias = model.depth_linear.bias
        qk_heads = self.heads + self.kv_heads
        qkv_width = (self.heads + 2 * self.kv_heads) * self.head_dim
        # liquid-audio's rotary: interleaved pairs (2j, 2j+1) rotated by freqs_cis[position].
        freqs = first.freqs_cis[: self.codebooks].to(device)
        rotations = torch.zeros((self.codebooks, self.head_dim, self.head_dim), dtype=torch.float32, device=device)
        pairs = torch.arange(self.head_dim // 2, device=device)
        cos, sin = freqs.real.float(), freqs.imag.float()  # (codebooks, head_dim / 2)
        rotations[:, 2 * pairs, 2 * pairs] = cos
        rotations[:, 2 * pairs + 1, 2 * pairs] = -sin
        rotations[:, 2 * pairs, 2 * pairs + 1] = sin
        rotations[:, 2 * pairs + 1, 2 * pairs + 1] = cos
        self.layers = []
        for block in model.depthformer.layers:
            op = block.operator
            if op.head_style != "gqa" or not op.bounded_attention.qk_layernorm:
                raise RuntimeError("only the grouped-query, qk-normed depthformer is supported")
            attention = op.bounded_attention
            glu = block.feed_forward
            head_norms = torch.cat(
                (
                    attention.q_layernorm.weight.detach().float().expand(self.heads, -1),
                    attention.k_layernorm.weight.detach().float().expand(self.kv_heads, -1),
                )
            )
            # (codebook position, q|k head, d, d): row vector n @ M = rotary(g ⊙ n) at that position.
            rope = (head_norms[None, :, :, None] * rotations[:, None, :, :]).to(dtype)
            self.layers.append(
                {
                    "norm": block.operator_norm.weight,
                    "norm_eps": block.operator_norm.eps,
                    "qkv": layer_weight(op.qkv_proj),
                    "qk_eps": attention.q_layernorm.eps,
                    "rope": rope,
                    "out": layer_weight(op.out_proj),
                    "ffn_norm": block.ffn_norm.weight,
                    "ffn_eps": block.ffn_norm.eps,
                    "w13": fuse_linear_weights([glu.w1, glu.w3]),
                    "w2": layer_weight(glu.w2),
                    # Per position: q|k|v as projected (v is read from here as the value cache) ...
                    "qkv_rows": torch.zeros((self.codebooks, qkv_width), device=device, dtype=dtype),
                    # ... and q|k normed and roped (k is read from here as the key cache).
                    "qk_rows": torch.zeros((self.codebooks, qk_heads, self.head_dim), device=device, dtype=dtype),
                }
            )
        # Norm weights stay tied to the modules (norms are not LoRA targets; see engine.model.lora).
        self.heads_out = [
            (e.embedding_norm.weight, e.embedding_norm.eps, layer_weight(e.to_logits), layer_weight(e.embedding))
            for e in model.depth_embeddings
        ]
        self.audio_embedding = model.audio_embedding.embedding.weight
        self.offsets = model.codebook_offsets.to(device)
        self.frame = torch.zeros((self.codebooks,), dtype=torch.long, device=device)
        vocab = self.heads_out[0][2].shape[0]
        self._noise = torch.zeros((self.codebooks, vocab), dtype=torch.float32, device=device)
        self.ff = self.layers[0]["w13"].shape[0] // 2
        words = DepthformerFrame.exchange_words(dim=self.dim, kv_heads=self.kv_heads, ff=self.ff, layers=len(self.layers))
        self._exchange = torch.zeros((self.codebooks * words,), device=device, dtype=torch.int32)  # the fused frame's vectors between blocks
        self._logits = torch.zeros((self.codebooks, vocab), device=device, dtype=dtype)  # the fused frame's, every codebook's
        self._forced_frame = torch.zeros_like(self.frame)  # what a teacher-forced frame writes (the codes it was given)
        self.grid_timings_ms: dict[str, dict[int, float]] = {}  # ms per frame by grid, per way it was timed
        self.input_product = self._int8_input_product()
        self.fused = self._fused_step()

    def _table_entry(self, layer: dict, name: str) -> torch.Tensor:
        """What the kernel's layer table points at for `name`: a tensor, an int8 matrix's values, or (the
        "_scales" fields) its row scales; for bf16 matrices the scales fields point at the matrix (unread)."""
        field = layer[name.removesuffix("_scales")]
        if isinstance(field, Int8Matrix):
            return field.scales if name.endswith("_scales") else field.values
        return field

    def _fused_step(self) -> DepthformerFrame | None:
        """The one-launch frame kernel, if it compiles, fits this model and agrees with the plain ops."""
        if self.sampling.fused is None:  # the frame's blocks choose the codes with the sampler kernel's code (top_k.cuh)
            log.warning("the sampler kernel is not in use here, so neither is the one-launch depthformer frame")
            return None
        step = DepthformerFrame.create(self.device, self.dtype, int8=self.int8)
        tensors = [self._table_entry(layer, name) for layer in self.layers for name in DEPTH_TABLE_FIELDS]
        for _, _, to_logits, embedding in self.heads_out:
            for table in (to_logits, embedding):
                tensors += [table.values, table.scales] if isinstance(table, Int8Matrix) else [table]
        vocab = self._logits.shape[1]
        if step is None or not DepthformerFrame.supports(
            dim=self.dim, heads=self.heads, kv_heads=self.kv_heads, ff=self.ff, positions=self.codebooks, vocab=vocab, weights=tensors
        ):
            return None
        # Weights are addressed by pointer: a LoRA merge writes them in place, so the table stays valid.
        self._table = torch.tensor(
            [[self._table_entry(layer, name).data_ptr() for name in DEPTH_TABLE_FIELDS] for layer in self.layers],
            dtype=torch.int64, device=self.device,
        )  # fmt: skip
        self._eps = torch.tensor(
            [[layer["norm_eps"], layer["qk_eps"], layer["ffn_eps"]] for layer in self.layers], dtype=torch.float32, device=self.device
        )
        # Per codebook (depthformer.cu's HEAD_* fields): its head norm, the norm's epsilon (float bits), its logits
        # table and that table's row scales, the embedding table of its code and that table's row scales (int8;
        # for bf16 tables the scales fields point at the table, unread).
        def parts(table: Weight) -> tuple[int, int]:
            return (table.values.data_ptr(), table.scales.data_ptr()) if isinstance(table, Int8Matrix) else (table.data_ptr(),) * 2

        self._heads_table = torch.tensor(
            [[norm.data_ptr(), float_bits(eps), *parts(to_logits), *parts(embedding)] for norm, eps, to_logits, embedding in self.heads_out],
            dtype=torch.int64, device=self.device,
        )  # fmt: skip
        self.fused = step
        problem = self._fused_disagreement()
        if problem:
            log.warning("fused depthformer kernel failed its start-up check (%s); using plain PyTorch ops", problem)
            return None
        self.choose_grid()
        return step

    def _int8_input_product(self) -> Matvec | None:
        """The int8 matrix-vector kernel for depth_linear (bias as its residual), if it runs and agrees."""
        weight = self.depth_linear
        matvec = Matvec.create(self.device, self.dtype) if isinstance(weight, Int8Matrix) else None
        if matvec is None or not matvec.supports(weight.shape[1], int8=True) or not weight.is_aligned():
            return None
        generator = torch.Generator(device=self.device).manual_seed(0)
        hidden = torch.randn((1, weight.shape[1]), device=self.device, generator=generator).to(self.dtype)
        expected = torch.addmm(self.depth_bias, hidden, plain(weight, self.dtype).t())
        error = float((matvec(hidden, weight, self.depth_bias).float() - expected.float()).norm() / expected.float().norm())
        if not error < 1e-2:
            log.warning("int8 matrix-vector kernel disagrees for the depthformer's input (relative error %.3g); not used", error)
            return None
        return matvec

    def grid_candidates(self) -> list[int]:
        """The fused kernel's grids worth timing: a block on every SM, on 3/4, 1/2 and 1/3 of them."""
        sms = self.fused.sms if self.fused is not None else 1
        return sorted({max(1, sms * share // 12) for share in (12, 9, 6, 4)}, reverse=True)

    @torch.no_grad()
    def choose_grid(self) -> None:
        """Give the fused kernel the grid that runs a frame fastest alone on this GPU (~30 ms). The results
        do not depend on the grid (the GPU tests check it bit for bit); the speed does: fewer blocks mean
        fewer to wait for but more rows per warp. In a turn the streaming decoder runs beside the frame,
        which can change the winner: `GraphedBackend.fit_depthformer_grid` times it that way."""
        step = self.fused
        if step is None:
            return
        inputs = self._inputs(torch.zeros((1, self.depth_linear.shape[1]), device=self.device, dtype=self.dtype))
        codes = torch.zeros((self.codebooks,), dtype=torch.long, device=self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        timings: dict[int, float] = {}
        for blocks in self.grid_candidates():
            step.blocks = blocks
            for repeat in range(2):  # the first round warms up
                start.record()
                for _ in range(3):
                    self._fused_frame(inputs, self._noise, forced_codes=codes)
                end.record()
                end.synchronize()
            timings[blocks] = start.elapsed_time(end) / 3
        step.blocks = min(timings, key=timings.__getitem__)
        self.grid_timings_ms["frame_alone"] = timings

    @torch.no_grad()
    def _fused_disagreement(self) -> str | None:
        """Teacher-forced logits of the fused kernel against the plain ops on random inputs (start-up)."""
        generator = torch.Generator(device=self.device).manual_seed(0)
        hidden_size = self.depth_linear.shape[1]
        hidden = torch.randn((1, hidden_size), device=self.device, generator=generator).to(self.dtype)
        codes = torch.randint(0, self.heads_out[0][3].shape[0], (self.codebooks,), device=self.device, generator=generator)
        fused = self.teacher_forced_logits(hidden, codes)
        step, self.fused = self.fused, None
        try:
            plain = self.teacher_forced_logits(hidden, codes)
        finally:
            self.fused = step
        for i in range(self.codebooks):
            error = float((fused[i].float() - plain[i].float()).norm() / plain[i].float().norm())
            if not error < 2e-2:
                return f"codebook {i}: relative error {error:.3g}"
        return None

    def _fused_frame(self, inputs: torch.Tensor, noise: torch.Tensor, *, forced_codes: torch.Tensor | None = None) -> torch.Tensor:
        """The fused kernel's frame: every codebook's logits into `self._logits` (returned) and its code, chosen
        with `noise` (into `self.frame`) or given (`forced_codes`, teacher forcing: into a buffer of its own)."""
        sampling = self.sampling
        return self.fused(
            table=self._table, heads_table=self._heads_table, eps=self._eps, layers=len(self.layers),
            dims=(self.dim, self.heads, self.kv_heads, self.ff), inputs=inputs, exchange=self._exchange, logits=self._logits,
            noise=noise, inv_temperature=sampling.inv_temperature, top_k_index=sampling.top_k_index,
            frame=self.frame if forced_codes is None else self._forced_frame, end_of_audio=END_OF_AUDIO, forced_codes=forced_codes,
        )  # fmt: skip

    def _codebook_logits(self, i: int, inputs: torch.Tensor, previous_code: torch.Tensor | None) -> torch.Tensor:
        """Codebook i's logits (1, vocab) by the plain ops: its input is inputs[i] plus, after the first, the
        embedding of the previous codebook's code (a (1,) device tensor); writes position i's cache rows."""
        embedding = self.heads_out[i - 1][3] if i else self.heads_out[0][3]
        norm_w, norm_eps, to_logits, _ = self.heads_out[i]
        x = inputs[i : i + 1]
        if previous_code is not None:
            x = x + lookup(previous_code, embedding, self.dtype)
        dtype = self.dtype
        for layer in self.layers:
            h = F.rms_norm(x, (self.dim,), layer["norm"], layer["norm_eps"])
            torch.mm(h, plain(layer["qkv"], dtype).t(), out=layer["qkv_rows"][i : i + 1])
            x = torch.addmm(x[0], self._attend(i, layer), plain(layer["out"], dtype).t())
            g = F.rms_norm(x, (self.dim,), layer["ffn_norm"], layer["ffn_eps"])
            gate, up = torch.mm(g, plain(layer["w13"], dtype).t()).chunk(2, dim=-1)
            x = torch.addmm(x[0], swiglu(gate, up), plain(layer["w2"], dtype).t())
        return torch.mm(F.rms_norm(x, (self.dim,), norm_w, norm_eps), plain(to_logits, dtype).t())

    def _attend(self, i: int, layer: dict) -> torch.Tensor:
        """Position i's attention over positions 0..i, from the normed and roped cache rows: (1, dim)."""
        qk_heads = self.heads + self.kv_heads
        qkv_rows, qk_rows = layer["qkv_rows"], layer["qk_rows"]
        n = F.rms_norm(qkv_rows[i, : qk_heads * self.head_dim].view(qk_heads, 1, self.head_dim), (self.head_dim,), eps=layer["qk_eps"])
        torch.bmm(n, layer["rope"][i], out=qk_rows[i].view(qk_heads, 1, self.head_dim))
        # One query row per head (grouped-query attention inside SDPA): the output is then already
        # in head order, so the out-projection reads it without a reshape copy.
        query = qk_rows[i, : self.heads].view(1, self.heads, 1, self.head_dim)
        keys = qk_rows[: i + 1, self.heads :].permute(1, 0, 2).unsqueeze(0)
        values = qkv_rows[: i + 1, qk_heads * self.head_dim :].view(i + 1, self.kv_heads, self.head_dim).permute(1, 0, 2).unsqueeze(0)
        return F.scaled_dot_product_attention(query, keys, values, enable_gqa=True).reshape(1, self.dim)

    def _inputs(self, hidden: torch.Tensor) -> torch.Tensor:
        """The codebooks' inputs (codebooks, dim): depth_linear(hidden), the int8 product's kernel with the
        bias as its residual where it runs."""
        weight = self.depth_linear
        if isinstance(weight, Int8Matrix) and self.input_product is not None:
            return self.input_product(hidden, weight, self.depth_bias).view(self.codebooks, self.dim)
        return torch.addmm(self.depth_bias, hidden, plain(weight, self.dtype).t()).view(self.codebooks, self.dim)

    def frame_step(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden (1, backbone hidden) → sampled codes (codebooks,), written into `self.frame`.

        Applies liquid-audio's end-of-audio rule (a first code of 2048 makes the whole frame 2048)
        and returns the next backbone input embedding (1, backbone hidden).
        """
        # The noise is drawn beside the codebooks' input product (its kernels off the frame's path).
        negative_log_noise = self._noise
        inputs = graphs.beside(self.device, lambda: self.sampling.noise_for(negative_log_noise), lambda: self._inputs(hidden))
        if self.fused is not None:  # the choices, and the end-of-audio rule, inside the one launch
            self._fused_frame(inputs, negative_log_noise)
            return self.frame_embedding(self.frame)
        for i in range(self.codebooks):
            previous = self.frame[i - 1 : i] if i else None
            logits = self._codebook_logits(i, inputs, previous)[0]
            self.sampling.choose(logits, negative_log_noise[i], out=self.frame[i : i + 1])
        self.frame.masked_fill_(self.frame[0] == END_OF_AUDIO, END_OF_AUDIO)
        return self.frame_embedding(self.frame)

    def frame_embedding(self, codes: torch.Tensor) -> torch.Tensor:
        """The backbone input of an audio frame (codebooks,): its codes' audio embeddings summed (1, hidden)."""
        return F.embedding(codes + self.offsets, self.audio_embedding).sum(0, keepdim=True)

    def teacher_forced_logits(self, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
        """Logits (codebooks, vocab) of every codebook given the previous codebooks' true codes."""
        inputs = self._inputs(hidden)
        if self.fused is not None:
            return self._fused_frame(inputs, self._noise, forced_codes=codes).clone()  # (its buffer is reused)
        return torch.cat([self._codebook_logits(i, inputs, codes[i - 1 : i] if i else None) for i in range(self.codebooks)])
