"""The backbone's steps in plain PyTorch ops over fixed buffers: the decode step and the prefill.

Same weights as liquid-audio's modules (laid out by static_weights.py), same math, rewritten for batch-1
decoding. Inside a CUDA graph the gap between kernels is small (~0.6 µs on the H200), but every kernel costs
at least ~1-2 µs and a batch-1 matrix-vector product 4-20 µs, so the step time is the sum of its kernels:
- fused projections: q|k|v and w1|w3 are each one matrix (static_weights.py: the only copy, which the
  modules' parameters are views into, so a LoRA merge in place reaches the graphs);
- the backbone's keys/values and conv states live in buffers allocated once for the whole
  context; the position is a device tensor that the step reads and advances itself;
- residual adds ride on the projections (addmm's bias), silu(gate) * up is one kernel, and the
  rotary tables (with the q/k norm weights folded in) are precomputed.
Everything a step needs is preallocated, so `torch.cuda.CUDAGraph` can capture it unchanged. The other
step the graphs run, the depthformer's audio frame, is static_depthformer.py; the text head is the
backend's (backend.py).
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from engine.model.quantized import Int8Matrix
from engine.realtime.kernels import (
    BackboneAttention,
    Matvec,
    PrefillInt8Product,
    RmsNormRow,
    ShortConvStep,
    short_conv_step_reference,
    swiglu,
)
from engine.realtime import graphs
from engine.realtime.static_weights import Weight, fuse_linear_weights, layer_weight, plain
from engine.realtime.streaming import StreamingState

log = logging.getLogger(__name__)


# Prefill (eager, a new length every turn) is pinned to the memory-efficient kernel: left to
# choose, torch 2.11 picks cuDNN attention on Hopper, which builds a plan for every new shape
# (~50 ms on the first prefill of each length, measured on the H200). The backbone decode step does
# not use SDPA (see decode_step); the depthformer's SDPA shapes are fixed, so their plans are built
# once, before capture.
ATTENTION_BACKENDS = [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


# The longest span whose int8 products run on the tensor-core kernel (prefill_product.cu); longer ones dequantize
# each matrix for cuBLAS, whose bf16 products (wgmma, on Hopper) outrun the kernel's mma.sync once the span is
# long enough to repay the copy. H200, the whole prefill graph, kernel / dequantized (bench/results/run-78-
# prefill-layouts): 32 rows 1651 / 2696 µs, 64 rows 1859 / 2745, 128 rows 2554 / 2924, 256 rows 3790 / 3331.
INT8_TENSOR_CORE_MAX_ROWS = 128


def span_product(h: torch.Tensor, weight: Weight, dtype: torch.dtype) -> torch.Tensor:
    """h (rows, K) @ weight.T for a prefill span: cuBLAS on a bf16 matrix; an int8 one on the tensor cores
    without a bf16 copy (prefill_product.cu) where that kernel runs and the span is short enough, else
    dequantized for cuBLAS."""
    if isinstance(weight, Int8Matrix) and dtype == torch.bfloat16 and h.shape[0] <= INT8_TENSOR_CORE_MAX_ROWS:
        kernel = _prefill_int8_kernel(weight.device)
        if kernel is not None and kernel.supports(h, weight):
            return kernel(h, weight)
    return F.linear(h, plain(weight, dtype))


@functools.cache
def _prefill_int8_kernel(device: torch.device) -> PrefillInt8Product | None:
    return PrefillInt8Product.create(device)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


@dataclass
class _AttentionLayer:
    norm: torch.Tensor
    qkv: Weight
    q_norm: torch.Tensor
    k_norm: torch.Tensor
    out: Weight
    keys: torch.Tensor  # (1, kv_heads, max_positions, head_dim)
    values: torch.Tensor
    ffn_norm: torch.Tensor
    w13: Weight
    w2: Weight


@dataclass
class _ConvLayer:
    norm: torch.Tensor
    in_proj: Weight
    conv: torch.Tensor  # (hidden, kernel)
    out: Weight
    state: torch.Tensor  # (hidden, kernel): the last `kernel` gated inputs
    ffn_norm: torch.Tensor
    w13: Weight
    w2: Weight


# A decode product: (rows, columns, with a residual, of a norm, gated, int8 weights).
ProductKey = tuple[int, int, bool, bool, bool, bool]


def product_label(shape: ProductKey) -> str:
    """A decode product's name in `matvec_timings_us`, from its `_decode_products` key, e.g. "norm, 16384x2048, SwiGLU"."""
    rows, columns, with_residual, with_norm, gated, int8 = shape
    return (
        f"{'norm, ' if with_norm else ''}{rows}x{columns}{' + residual' if with_residual else ''}"
        f"{', SwiGLU' if gated else ''}{', int8' if int8 else ''}"
    )


class StaticBackbone(StreamingState):
    """transformers' Lfm2Model as a fixed-buffer decoder: prefill spans and single decode steps."""

    def __init__(self, lfm: nn.Module, max_positions: int) -> None:
        config = lfm.config
        self.lfm = lfm
        self.hidden = config.hidden_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = self.hidden // self.heads
        self.eps = config.norm_eps
        self.scale = self.head_dim**-0.5  # SDPA's default softmax scale
        self.max_positions = max_positions
        device, dtype = lfm.layers[0].operator_norm.weight.device, lfm.layers[0].operator_norm.weight.dtype
        self.device, self.dtype = device, dtype
        if any(layer.conv.conv.bias is not None for layer in lfm.layers if not layer.is_attention_layer):
            raise RuntimeError("conv layers with a bias are not supported by the static decoder")

        self.layers: list[_AttentionLayer | _ConvLayer] = []
        for layer in lfm.layers:
            mlp = layer.feed_forward
            w13 = fuse_linear_weights([mlp.w1, mlp.w3])
            if layer.is_attention_layer:
                attn = layer.self_attn
                self.layers.append(
                    _AttentionLayer(
                        norm=layer.operator_norm.weight,
                        qkv=fuse_linear_weights([attn.q_proj, attn.k_proj, attn.v_proj]),
                        q_norm=attn.q_layernorm.weight,
                        k_norm=attn.k_layernorm.weight,
                        out=layer_weight(attn.out_proj),
                        keys=torch.zeros((1, self.kv_heads, max_positions, self.head_dim), device=device, dtype=dtype),
                        values=torch.zeros((1, self.kv_heads, max_positions, self.head_dim), device=device, dtype=dtype),
                        ffn_norm=layer.ffn_norm.weight,
                        w13=w13,
                        w2=layer_weight(mlp.w2),
                    )
                )
            else:
                conv = layer.conv
                self.layers.append(
                    _ConvLayer(
                        norm=layer.operator_norm.weight,
                        in_proj=layer_weight(conv.in_proj),
                        conv=conv.conv.weight[:, 0, :],
                        out=layer_weight(conv.out_proj),
                        state=torch.zeros((self.hidden, conv.conv_kernel_size), device=device, dtype=dtype),
                        ffn_norm=layer.ffn_norm.weight,
                        w13=w13,
                        w2=layer_weight(mlp.w2),
                    )
                )
        self.final_norm = lfm.embedding_norm.weight
        conv_layers = [layer for layer in self.layers if isinstance(layer, _ConvLayer)]
        self.short_conv = (
            ShortConvStep.create(self.hidden, conv_layers[0].conv.shape[1], device, dtype)
            if conv_layers and all(layer.conv.is_contiguous() for layer in conv_layers)
            else None
        )

        # Rotary tables exactly as Lfm2RotaryEmbedding computes them (float32, then cast).
        inv_freq = lfm.rotary_emb.inv_freq.to(device=device, dtype=torch.float32)
        positions = torch.arange(max_positions, device=device, dtype=torch.float32)
        freqs = positions[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        scaling = float(getattr(lfm.rotary_emb, "attention_scaling", 1.0))
        self.cos = (emb.cos() * scaling).to(dtype)
        self.sin = (emb.sin() * scaling).to(dtype)
        self.key_index = torch.arange(max_positions, device=device)
        self.position = torch.zeros((1,), dtype=torch.long, device=device)  # next position to write
        self.span_length = torch.zeros((1,), dtype=torch.long, device=device)  # real rows of a padded prefill
        self._mask = torch.zeros((1, 1, max_positions), device=device, dtype=dtype)  # additive, this step
        # On CUDA each attention layer of the decode step is one kernel (q|k norm + rotary, cache write,
        # attention; plain ops elsewhere), and so is each RMS norm.
        self.attention_step = self._fused_attention()
        self.row_norm = RmsNormRow.create(self.hidden, device, dtype)
        self.matvec = Matvec.create(device, dtype)
        # The products the kernel runs, by `_decode_products` key: empty as the timing starts (every product
        # on cuBLAS), filled as it chooses, so that a gated product is timed against its plain product's choice.
        self.matvec_shapes: set[ProductKey] = set()
        self.matvec_shapes = self._choose_matvec_shapes()
        self.conv_epilogue = self._conv_epilogue_agrees()  # the int8 in-projections run the conv step themselves
        self.flash_prefill = self._flash_agrees()  # the prefill graphs' attention (see _attend_flash)
        self.positions = 0  # host mirror, updated by the caller's bookkeeping

    # ------------------------------------------------------------------ state

    def reset(self) -> None:
        """Forget everything, in place (the buffers' addresses never change)."""
        for layer in self.layers:
            if isinstance(layer, _AttentionLayer):
                layer.keys.zero_()
                layer.values.zero_()
            else:
                layer.state.zero_()
        self.position.zero_()
        self.positions = 0

    def state_tensors(self) -> list[torch.Tensor]:
        """The position, then per layer its keys and values (attention) or its conv state."""
        state = [self.position]
        for layer in self.layers:
            if isinstance(layer, _AttentionLayer):
                state += [layer.keys, layer.values]
            else:
                state.append(layer.state)
        return state

    # ------------------------------------------------------------------ math shared by both paths

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """F.rms_norm over the hidden size; one row (a decode step) through the fused kernel if there is one."""
        if self.row_norm is not None and x.shape[0] == 1:
            return self.row_norm(x, weight, self.eps)
        return F.rms_norm(x, (self.hidden,), weight, self.eps)

    def _mlp(self, layer: _AttentionLayer | _ConvLayer, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 1:  # decode
            return self._product(self._product(x, layer.w13, norm=layer.ffn_norm, gated=True), layer.w2, residual=x[0])
        gate, up = span_product(self._norm(x, layer.ffn_norm), layer.w13, self.dtype).chunk(2, dim=-1)
        return x + span_product(swiglu(gate, up), layer.w2, self.dtype)

    def _product(
        self,
        x: torch.Tensor,
        weight: Weight,
        *,
        residual: torch.Tensor | None = None,
        norm: torch.Tensor | None = None,
        gated: bool = False,
    ) -> torch.Tensor:
        """A decode step's h @ weight.T (+ residual (N,)), h = x (1, K) or, given `norm`, its RMS norm, and
        with `gated` the SwiGLU of the product's halves (gate, up): the matrix-vector kernel (with the norm
        inside, the SwiGLU as its epilogue) for the products where it beat cuBLAS (and the norm and SwiGLU
        kernels) in the start-up timing (`matvec_timings_us`), cuBLAS otherwise; with a residual, the add
        rides on the product (addmm's bias, or the kernel's)."""
        int8 = isinstance(weight, Int8Matrix)
        if (weight.shape[0], weight.shape[1], residual is not None, norm is not None, gated, int8) in self.matvec_shapes:
            return self.matvec(x, weight, residual, norm, self.eps, gated=gated)
        if gated:
            return swiglu(*self._product(x, weight, residual=residual, norm=norm).chunk(2, dim=-1))
        h = self._norm(x, norm) if norm is not None else x
        if residual is None:
            return F.linear(h, plain(weight, self.dtype))
        return torch.addmm(residual, h, plain(weight, self.dtype).t())

    def _decode_products(self) -> dict[ProductKey, tuple[Weight, torch.Tensor | None]]:
        """The decode step's matrix-vector products by `ProductKey`, with one weight (and norm weight) of
        each; the gated ones (w1|w3 with its SwiGLU) last."""
        products: dict[ProductKey, tuple[Weight, torch.Tensor | None]] = {}

        def key(weight: Weight, residual: bool, norm: bool, gated: bool) -> ProductKey:
            return (weight.shape[0], weight.shape[1], residual, norm, gated, isinstance(weight, Int8Matrix))

        for layer in self.layers:
            first = layer.qkv if isinstance(layer, _AttentionLayer) else layer.in_proj
            for weight, residual, norm in ((first, False, layer.norm), (layer.out, True, None), (layer.w13, False, layer.ffn_norm), (layer.w2, True, None)):
                products.setdefault(key(weight, residual, norm is not None, False), (weight, norm))
        for layer in self.layers:
            products.setdefault(key(layer.w13, False, True, True), (layer.w13, layer.ffn_norm))
        return products

    @torch.no_grad()
    def _choose_matvec_shapes(self) -> set[ProductKey]:
        """The products for which the matrix-vector kernel is faster than cuBLAS (with the norm kernel
        before it, where the product is of a norm) here, each timed as a CUDA graph of 20 products on the
        model's own weights (start-up, ~0.1 s), and checked against them first. At batch 1 cuBLAS runs
        5-18 µs per product; which wins depends on the shape and the GPU (H200:
        bench/results/run-33-frame-probes/3-matvec-and-beside-timing/probe_frame.json). A gated product
        (w1|w3 with the SwiGLU as the kernel's epilogue) is timed last, against what runs without it:
        the product as just chosen, then the SwiGLU kernel. An int8 product has nothing to be timed against
        (cuBLAS has no int8-weight product, and dequantizing first reads the matrix three times): the
        kernel runs it whenever it agrees with the plain dequantized product."""
        self.matvec_timings_us: dict[str, dict[str, float]] = {}
        chosen = self.matvec_shapes  # grows as products are chosen: a gated one's plain path uses them
        if self.matvec is None:
            return chosen
        generator = torch.Generator(device=self.device).manual_seed(0)
        # One warm-up stream for all (graphs.side_stream): a new stream per shape held ~170 MB of VRAM for
        # good (H200 bench run 34).
        side = graphs.side_stream(self.device)
        for shape, (weight, norm) in self._decode_products().items():
            rows, columns, with_residual, _, gated, int8 = shape
            matrix = weight.values if isinstance(weight, Int8Matrix) else weight
            aligned = all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (matrix, *([norm] if norm is not None else [])))
            if not aligned or not self.matvec.supports(columns, gated=gated, int8=int8):
                continue
            x = (torch.randn((1, columns), device=self.device, generator=generator) * 3).to(self.dtype)
            residual = torch.randn((rows,), device=self.device, generator=generator).to(self.dtype) if with_residual else None
            plain = self._product(x, weight, residual=residual, norm=norm, gated=gated)
            got = self.matvec(x, weight, residual, norm, self.eps, gated=gated)
            error = float((got.float() - plain.float()).norm() / plain.float().norm())
            if not error < 1e-2:
                log.warning("matrix-vector kernel disagrees with cuBLAS for %s (relative error %.3g); not used", shape, error)
                continue
            if int8:
                chosen.add(shape)
                continue
            baseline = "separate" if gated else "cublas"  # what runs without the kernel
            times = {
                name: graphs.per_call_us(self.device, functools.partial(product, x, weight, residual=residual, norm=norm), side=side)
                for name, product in ((baseline, functools.partial(self._product, gated=gated)), ("kernel", functools.partial(self.matvec, eps=self.eps, gated=gated)))
            }  # fmt: skip
            self.matvec_timings_us[product_label(shape)] = times
            if times["kernel"] < times[baseline]:
                chosen.add(shape)
        return chosen

    def _qkv(self, layer: _AttentionLayer, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Projected q|k|v rows (n, ...) → q, k normed and roped at their positions' cos / sin, and v."""
        n = qkv.shape[0]
        q, k, v = qkv.split(
            [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1
        )
        q = F.rms_norm(q.view(n, self.heads, self.head_dim), (self.head_dim,), layer.q_norm, self.eps)
        k = F.rms_norm(k.view(n, self.kv_heads, self.head_dim), (self.head_dim,), layer.k_norm, self.eps)
        cos, sin = cos[:, None, :], sin[:, None, :]
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        return q, k, v.view(n, self.kv_heads, self.head_dim)

    def _group_rows(self, q: torch.Tensor) -> torch.Tensor:
        """q (n, heads, d) → (kv_heads, n·group, d): the heads of a group become extra query rows of
        their kv head, query-major (row i·group + g is query i, head g of the group)."""
        n = q.shape[0]
        group = self.heads // self.kv_heads
        return q.view(n, self.kv_heads, group, self.head_dim).permute(1, 0, 2, 3).reshape(self.kv_heads, n * group, self.head_dim)

    def _ungroup_rows(self, out: torch.Tensor, n: int) -> torch.Tensor:
        """(kv_heads, n·group, d) → (n, heads·d), the inverse of `_group_rows`."""
        group = self.heads // self.kv_heads
        return out.reshape(self.kv_heads, n, group, self.head_dim).permute(1, 0, 2, 3).reshape(n, self.heads * self.head_dim)

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q (n, heads, d) → (n, heads·d); mask (1, 1, n·group, keys), boolean, in `_group_rows` order."""
        with sdpa_kernel(ATTENTION_BACKENDS):
            out = F.scaled_dot_product_attention(self._group_rows(q)[None], keys, values, attn_mask=mask)
        return self._ungroup_rows(out[0], q.shape[0])

    def _attend_matmul(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """`_attend` as two batched matmuls; mask additive, (1, n·group, keys)."""
        scores = torch.baddbmm(mask, self._group_rows(q), keys[0].transpose(1, 2), alpha=self.scale)
        return self._ungroup_rows(torch.bmm(torch.softmax(scores, dim=-1), values[0]), q.shape[0])

    def _attend_flash(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """`_attend` of the rows at positions `position`.. over the whole cache with FlashAttention: the
        cache's first position + n slots are used (a device count, so graphs can capture it), causal
        from the bottom right, so row i sees keys 0 .. position + i, as the mask does. It skips the
        key blocks past each row instead of computing them masked: the memory-efficient kernel ran
        one block per 64 rows along all 4096 slots (prefill_256: 1.5 ms of its 3.5, H200 run 26)."""
        n = q.shape[0]
        ends = self.key_index[:2].to(torch.int32)  # [0, 1]
        out = torch.ops.aten._flash_attention_forward(
            q, keys[0].transpose(0, 1), values[0].transpose(0, 1),  # (slots, kv_heads, d): GQA as is
            ends * n, ends * self.max_positions, n, self.max_positions, 0.0, True, False,
            scale=self.scale, seqused_k=(self.position + n).to(torch.int32),
        )[0]  # fmt: skip
        return out.reshape(n, self.heads * self.head_dim)

    def _flash_agrees(self) -> bool:
        """Whether FlashAttention runs here and gives `_attend`'s rows (start-up, on random data)."""
        device, dtype = self.position.device, self.cos.dtype
        if device.type != "cuda" or dtype not in (torch.bfloat16, torch.float16):
            return False
        rows = min(64, self.max_positions)
        generator = torch.Generator(device=device).manual_seed(0)
        shape = (1, self.kv_heads, self.max_positions, self.head_dim)
        keys, values = (torch.randn(shape, device=device, generator=generator).to(dtype) for _ in range(2))
        q = torch.randn((rows, self.heads, self.head_dim), device=device, generator=generator).to(dtype)
        saved = self.position.clone()
        try:
            self.position.fill_(self.max_positions - rows)
            expected = self._attend(q, keys, values, self._prefill_mask(rows, self.max_positions, matmul=False))
            got = self._attend_flash(q, keys, values)
            error = float((got.float() - expected.float()).norm() / expected.float().norm())
        except Exception as failure:  # no flash kernel for this GPU or build: the memory-efficient one
            log.warning("FlashAttention unavailable for the prefill graphs: %s", failure)
            return False
        finally:
            self.position.copy_(saved)
        if not error < 1e-2:
            log.warning("FlashAttention disagrees with the masked attention (relative error %.3g); not used", error)
        return error < 1e-2

    # ------------------------------------------------------------------ decode (graph-capturable)

    def decode_step(self, x: torch.Tensor) -> torch.Tensor:
        """One position: x (1, hidden) → final-normed hidden (1, hidden); advances `position`.

        On CUDA 5 kernels per layer, attention or conv, where the matrix-vector kernel wins every start-up
        timing (`_product`): the q|k|v or conv in-projection of the RMS norm, the attention (with its q|k
        norm, rotary and cache write) or the conv step, the out-projection plus the residual, the w1|w3
        product of the FFN's norm with the SwiGLU as its epilogue, and w2 plus the residual; a product that
        loses to cuBLAS runs there, after the norm kernel or before the SwiGLU kernel. On Hopper and later
        the NVRTC kernels are programmatic dependent launches, each starting as the blocks of the kernel
        ahead of it exit. H200: 116 kernels and 0.83 ms per step with cuBLAS for w1|w3 (bench/results/
        run-42-dependent-launch), 84 kernels and 0.75 ms with the 64-register products and the SwiGLU
        epilogue (run-45-matvec-registers). With int8 weights a conv layer's in-projection runs its conv
        step as the epilogue (`conv_epilogue`): 74 kernels, 0.545 ms against 0.548 (run-83-step-overlap).
        """
        first_attention = True
        for layer in self.layers:
            if isinstance(layer, _AttentionLayer):
                qkv = self._product(x, layer.qkv, norm=layer.norm)
                attn = self._decode_attention(layer, qkv, write_mask=first_attention)
                first_attention = False
                x = self._product(attn, layer.out, residual=x[0])
            elif self.conv_epilogue:
                conv = self.matvec(x, layer.in_proj, None, layer.norm, self.eps, conv=(layer.state, layer.conv))
                x = self._product(conv, layer.out, residual=x[0])
            else:
                conv = self._conv_step(layer, self._product(x, layer.in_proj, norm=layer.norm))
                x = self._product(conv, layer.out, residual=x[0])
            x = self._mlp(layer, x)
        self.position.add_(1)
        return self._norm(x, self.final_norm)

    @torch.no_grad()
    def _conv_epilogue_agrees(self) -> bool:
        """Whether every conv layer's in-projection is an int8 product of the kernel that can take the conv step
        as its epilogue (matvec_conv_int8: one kernel a conv layer fewer), and that kernel gives bit for bit
        what the product and the conv step kernel give, output and state, on the first conv layer's weights
        and random data (start-up)."""
        conv_layers = [layer for layer in self.layers if isinstance(layer, _ConvLayer)]
        if self.matvec is None or self.short_conv is None or not conv_layers:
            return False
        for layer in conv_layers:
            weight = layer.in_proj
            key = (weight.shape[0], weight.shape[1], False, True, False, True)
            if key not in self.matvec_shapes or not self.matvec.supports(weight.shape[1], int8=True, conv=True):
                return False
            if not (layer.state.is_contiguous() and layer.conv.is_contiguous()):
                return False
        layer = conv_layers[0]
        generator = torch.Generator(device=self.device).manual_seed(0)
        x = (torch.randn((1, self.hidden), device=self.device, generator=generator) * 3).to(self.dtype)
        state = torch.randn(layer.state.shape, device=self.device, generator=generator).to(self.dtype)
        separate_state, fused_state = state.clone(), state.clone()
        separate = self.short_conv(self.matvec(x, layer.in_proj, None, layer.norm, self.eps), separate_state, layer.conv).clone()
        fused = self.matvec(x, layer.in_proj, None, layer.norm, self.eps, conv=(fused_state, layer.conv))
        if torch.equal(fused, separate) and torch.equal(fused_state, separate_state):
            return True
        log.warning("the int8 in-projection with the conv step disagrees with the two kernels; not used")
        return False

    def _conv_step(self, layer: _ConvLayer, bcu: torch.Tensor) -> torch.Tensor:
        if self.short_conv is not None:
            return self.short_conv(bcu, layer.state, layer.conv)
        return short_conv_step_reference(bcu, layer.state, layer.conv)

    def _decode_attention(self, layer: _AttentionLayer, qkv: torch.Tensor, *, write_mask: bool) -> torch.Tensor:
        """q|k|v (1, ...) of this position → attention output (1, hidden); writes k and v into the cache
        (and, on the plain path, for the step's first attention layer, the step's mask: 0 up to
        `position`, -inf after)."""
        position = self.position
        if self.attention_step is not None:
            return self.attention_step(
                qkv, layer.q_norm, layer.k_norm, self.eps, self.scale, self.cos, self.sin, position, layer.keys, layer.values
            )
        if write_mask:
            self._mask.copy_(torch.zeros((), dtype=self.dtype, device=self.device).masked_fill(self.key_index > position, float("-inf")))
        q, k, v = self._qkv(layer, qkv, self.cos.index_select(0, position), self.sin.index_select(0, position))
        layer.keys.index_copy_(2, position, k.view(1, self.kv_heads, 1, self.head_dim))
        layer.values.index_copy_(2, position, v.view(1, self.kv_heads, 1, self.head_dim))
        # Attention as two batched matmuls over the whole cache, masked past `position`: one query
        # row per head, grouped under its kv head. At 4 query rows per kv head the fused SDPA
        # kernels run one block per head along 4096 keys (61 µs per layer on the H200); cuBLAS
        # spreads the keys over the whole GPU (~15 µs for all three kernels).
        rows = q[0].view(self.kv_heads, self.heads // self.kv_heads, self.head_dim)
        scores = torch.baddbmm(self._mask, rows, layer.keys[0].transpose(1, 2), alpha=self.scale)
        attn = torch.bmm(torch.softmax(scores, dim=-1), layer.values[0])  # (kv, group, d): head order
        return attn.view(1, self.hidden)

    def _fused_attention(self) -> BackboneAttention | None:
        """The one-kernel attention layer step, if it compiles, fits and agrees with the plain ops at a few
        positions on random data (start-up; the cache is left as it was)."""
        step = BackboneAttention.create(
            heads=self.heads, kv_heads=self.kv_heads, head_dim=self.head_dim, max_positions=self.max_positions,
            device=self.device, dtype=self.dtype,
        )  # fmt: skip
        layer = next((layer for layer in self.layers if isinstance(layer, _AttentionLayer)), None)
        if step is None or layer is None:
            return None
        generator = torch.Generator(device=self.device).manual_seed(0)
        keys, values = (torch.randn(layer.keys.shape, device=self.device, generator=generator).to(self.dtype) for _ in range(2))
        qkv = (torch.randn((1, layer.qkv.shape[0]), device=self.device, generator=generator) * 3).to(self.dtype)
        saved = self.position.clone()
        self.attention_step = None
        try:
            for position in sorted({p for p in (0, 1, 70, self.max_positions - 1) if p < self.max_positions}):
                self.position.fill_(position)
                plain_keys, plain_values = keys.clone(), values.clone()
                plain = self._decode_attention(replace(layer, keys=plain_keys, values=plain_values), qkv, write_mask=True)
                fused_keys, fused_values = keys.clone(), values.clone()
                self.attention_step = step
                got = self._decode_attention(replace(layer, keys=fused_keys, values=fused_values), qkv, write_mask=False)
                self.attention_step = None
                error = float((got.float() - plain.float()).norm() / plain.float().norm())
                if not (error < 2e-2 and torch.equal(fused_values, plain_values) and torch.allclose(fused_keys.float(), plain_keys.float(), rtol=1e-2, atol=1e-2)):
                    log.warning("fused backbone attention failed its self-check at position %d (relative error %.3g); using plain ops", position, error)
                    return None
        finally:
            self.position.copy_(saved)
        return step

    # ------------------------------------------------------------------ prefill

    def prefill(self, x: torch.Tensor) -> torch.Tensor:
        """Eager, any length: x (n, hidden) are positions [positions, positions + n) → the final-normed
        hidden state of the last one (1, hidden)."""
        n = x.shape[0]
        end = self.positions + n
        if end > self.max_positions:
            raise ValueError(f"the context holds {self.max_positions} positions; {end} were asked for")
        self.span_length.fill_(n)
        hidden = self.prefill_rows(x, keys=end)
        self.positions = end
        return hidden

    def _prefill_mask(self, rows: int, keys: int, *, matmul: bool) -> torch.Tensor:
        """The prefill's attention mask for rows at positions `position`..: query row i (absolute position
        + i) sees keys 0 .. position + i. Rows of a grouped query are consecutive (see _attend): each
        query's mask row repeats once per head of its group. Boolean (1, 1, rows·group, keys), or for
        `matmul` additive (1, rows·group, keys)."""
        positions = self.position + self.key_index[:rows]
        group = self.heads // self.kv_heads
        mask = (self.key_index[:keys][None, None, :] <= positions[:, None, None]).expand(rows, group, keys)
        mask = mask.reshape(1, 1, rows * group, keys)
        if matmul:  # additive, broadcast over the kv heads by baddbmm
            return torch.zeros((), dtype=self.dtype, device=self.device).masked_fill(~mask[0], float("-inf"))
        return mask

    def prefill_rows(self, x: torch.Tensor, keys: int, *, attention: str = "masked") -> torch.Tensor:
        """Graph-capturable prefill of a padded span: the first `span_length` rows of x (rows, hidden)
        are positions [position, position + span_length); the rows after them are padding.

        Padding is exact by causality: a real row attends only to keys at or before its own position
        and the conv looks only backwards, so no padded row reaches a real one. Padded rows do write
        their keys and values into the slots after the span; nothing reads those slots before a later
        step overwrites them (every step writes its own slot before attending, masked past itself).
        The caller guarantees position + rows <= max_positions. `keys` bounds the attention: the
        cache's first `keys` slots (the whole cache when captured, the span's end when eager).
        `attention`: "masked" (SDPA's memory-efficient kernel with the mask), "matmul" (baddbmm + softmax
        + bmm, which materializes the scores (heads × rows × keys) but spreads the keys over the whole
        GPU; the memory-efficient kernel runs one block per 64 query rows along all the keys: over a
        4096-slot cache it took 257 µs per layer whatever the row count, H200 bench run 19), or "flash"
        (`_attend_flash`, over the whole cache: `keys` must be max_positions).
        Returns the final-normed hidden state of the last real row (1, hidden); advances `position`.
        """
        rows = x.shape[0]
        positions = self.position + self.key_index[:rows]
        cos, sin = self.cos.index_select(0, positions), self.sin.index_select(0, positions)
        if attention == "flash":
            if keys != self.max_positions:
                raise ValueError("flash attention runs over the whole cache")

            def attend(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, _mask: None) -> torch.Tensor:
                return self._attend_flash(q, keys, values)

            mask = None
        else:
            mask = self._prefill_mask(rows, keys, matmul=attention == "matmul")
            attend = self._attend_matmul if attention == "matmul" else self._attend
        for layer in self.layers:
            h = F.rms_norm(x, (self.hidden,), layer.norm, self.eps)
            if isinstance(layer, _AttentionLayer):
                q, k, v = self._qkv(layer, span_product(h, layer.qkv, self.dtype), cos, sin)
                layer.keys[0].index_copy_(1, positions, k.transpose(0, 1))
                layer.values[0].index_copy_(1, positions, v.transpose(0, 1))
                y = span_product(attend(q, layer.keys[:, :, :keys], layer.values[:, :, :keys], mask), layer.out, self.dtype)
            else:
                b, c, u = span_product(h, layer.in_proj, self.dtype).chunk(3, dim=-1)
                full = torch.cat((layer.state, (b * u).transpose(0, 1)), dim=1)  # (hidden, kernel + rows)
                kernel = layer.conv.shape[1]
                conv = F.conv1d(full[None], layer.conv[:, None, :], groups=self.hidden)[0, :, -rows:]
                # The new state is the last `kernel` columns of the real inputs: columns n .. n + kernel - 1.
                layer.state.copy_(full.index_select(1, self.span_length + self.key_index[:kernel]))
                y = span_product(c * conv.transpose(0, 1), layer.out, self.dtype)
            x = self._mlp(layer, x + y)
        last = x.index_select(0, self.span_length - 1)
        self.position.add_(self.span_length)
        return F.rms_norm(last, (self.hidden,), self.final_norm, self.eps)
