"""int8 weights (W8A16): the model's large matrices as int8 rows with one float32 scale per row.

On the GeForce cards users own, a batch-1 step is bound by the bytes it reads, so halving the bytes of
every matrix the decode path reads (the backbone's products and its tied token table, the depthformer's
layers, its input projection and its tied heads) is the only lever left. Activations stay bf16 and the
products accumulate in float32: the engine's kernels dequantize in registers
(engine/realtime/kernels/matvec.cu, depthformer.cu).

Quantization is symmetric, per output row (absmax / 127), computed in float32 from the bf16 rows. The
scales are float32, not bf16: q · scale is then exact in float32, so "the plain dequantized product" a
kernel is checked against is one well-defined function; they cost 4 bytes per row (0.2 % of a
2048-wide row). Quantizing is deterministic: the same bf16 rows always give the same int8 rows, so a
voice switched out again leaves exactly what loading left.

The quantized modules keep liquid-audio's module interface (forward, `.weight` as a dequantized bf16
copy for eager code), so every path that calls the modules still runs; the real-time engine reads
`values` and `scales` directly. A matrix is quantized from the checkpoint a chunk of rows at a time,
so the device never holds its bf16 copy whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Precision = Literal["bf16", "int8"]  # the choices themselves: engine.validation.PRECISIONS

# Rows quantized at once: the float32 temporaries stay a few MB whatever the matrix.
QUANTIZE_CHUNK_ELEMENTS = 1 << 22


def quantize_rows(rows: torch.Tensor, values: torch.Tensor, scales: torch.Tensor) -> None:
    """rows (n, k) any float dtype → values (n, k) int8 and scales (n,) float32, written in place:
    q = round(w / s) with s = max|w| / 127 per row (a zero row gets s = 1 and q = 0; s is at least float32's
    smallest normal number, so a row of subnormal weights becomes zeros instead of dividing by zero)."""
    w = rows.to(device=values.device, dtype=torch.float32)
    peak = w.abs().amax(dim=1)
    scale = torch.where(peak > 0, peak / 127.0, torch.ones_like(peak)).clamp_min(torch.finfo(torch.float32).tiny)
    values.copy_(torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8))
    scales.copy_(scale)


def dequantize(values: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The rows as the engine's products see them: q · s in float32 (exact), rounded once to `dtype`, as one
    elementwise op (the real-time engine's prefill uses a vectorized kernel of the same rounding:
    engine/realtime/kernels/dequantize.cu)."""
    out = torch.empty(values.shape, dtype=dtype, device=values.device)
    return torch.mul(values, scales.float()[:, None], out=out)


def row_chunks(rows: int, columns: int, elements: int | None = None) -> Iterator[tuple[int, int]]:
    """(start, stop) of consecutive row ranges of about `elements` (default QUANTIZE_CHUNK_ELEMENTS) each."""
    step = max(1, (elements or QUANTIZE_CHUNK_ELEMENTS) // max(1, columns))
    for start in range(0, rows, step):
        yield start, min(rows, start + step)


@dataclass
class Int8Matrix:
    """An int8 matrix (rows, columns) with its per-row float32 scales: what the engine's products read."""

    values: torch.Tensor  # (rows, columns) int8
    scales: torch.Tensor  # (rows,) float32

    @property
    def shape(self) -> torch.Size:
        return self.values.shape

    @property
    def device(self) -> torch.device:
        return self.values.device

    def dequantized(self, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return dequantize(self.values, self.scales, dtype)

    def rows(self, start: int, stop: int) -> "Int8Matrix":
        return Int8Matrix(self.values[start:stop], self.scales[start:stop])

    def is_aligned(self) -> bool:
        return self.values.is_contiguous() and self.values.data_ptr() % 16 == 0 and self.scales.is_contiguous()

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.scales.nbytes

    @staticmethod
    def empty(rows: int, columns: int, device: torch.device | str) -> "Int8Matrix":
        return Int8Matrix(
            torch.empty((rows, columns), dtype=torch.int8, device=device), torch.empty((rows,), dtype=torch.float32, device=device)
        )

    @staticmethod
    def concatenated(parts: list["Int8Matrix"]) -> "Int8Matrix":
        return Int8Matrix(torch.cat([p.values for p in parts]).contiguous(), torch.cat([p.scales for p in parts]).contiguous())


class QuantizedLinear(nn.Module):
    """nn.Linear with int8 weights (buffers `values`, `scales`; a bf16 `bias` parameter if the layer has
    one). Its forward dequantizes the whole matrix: for the eager paths and tests, not the engine."""

    def __init__(self, matrix: Int8Matrix, bias: nn.Parameter | None, dtype: torch.dtype) -> None:
        super().__init__()
        self.out_features, self.in_features = matrix.shape
        self.register_buffer("values", matrix.values)
        self.register_buffer("scales", matrix.scales)
        self.bias = bias
        self.compute_dtype = dtype

    @property
    def matrix(self) -> Int8Matrix:
        return Int8Matrix(self.values, self.scales)

    def point_at(self, matrix: Int8Matrix) -> None:
        """Make this layer's buffers `matrix` (views into a fused matrix: one copy of the weights)."""
        self.values, self.scales = matrix.values, matrix.scales

    @property
    def weight(self) -> torch.Tensor:
        return dequantize(self.values, self.scales, self.compute_dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        bias = None if self.bias is None else self.bias.to(x.dtype)
        if torch.is_grad_enabled() and x.requires_grad:  # training a voice on the int8 base (engine/voices)
            return _Int8Product.apply(x, self.values, self.scales, bias, self.compute_dtype)
        return F.linear(x, self.weight.to(x.dtype), bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


class _Int8Product(torch.autograd.Function):
    """x @ Wᵀ (+ bias) with W the frozen int8 rows, as QuantizedLinear's forward computes it, but keeping only
    the int8 rows for the backward (which dequantizes them again for the input's gradient): F.linear would
    keep the dequantized bf16 copy of every layer alive until the backward, the whole bf16 model that int8
    exists to avoid."""

    @staticmethod
    def forward(ctx, x, values, scales, bias, compute_dtype):  # type: ignore[override]
        ctx.save_for_backward(values, scales)
        ctx.compute_dtype = compute_dtype
        ctx.bias_shape = None if bias is None else bias.shape
        return F.linear(x, dequantize(values, scales, compute_dtype).to(x.dtype), bias)

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        values, scales = ctx.saved_tensors
        grad_x = grad @ dequantize(values, scales, ctx.compute_dtype).to(grad.dtype)
        grad_bias = grad.reshape(-1, grad.shape[-1]).sum(0) if ctx.bias_shape is not None and ctx.needs_input_grad[3] else None
        return grad_x, None, None, grad_bias, None


class QuantizedEmbedding(nn.Module):
    """nn.Embedding with int8 rows: a lookup dequantizes only the rows it returns. Tied to a
    QuantizedLinear head when the model ties them (the same buffers)."""

    def __init__(self, matrix: Int8Matrix, dtype: torch.dtype) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim = matrix.shape
        self.register_buffer("values", matrix.values)
        self.register_buffer("scales", matrix.scales)
        self.compute_dtype = dtype

    @property
    def matrix(self) -> Int8Matrix:
        return Int8Matrix(self.values, self.scales)

    @property
    def weight(self) -> torch.Tensor:
        return dequantize(self.values, self.scales, self.compute_dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = dequantize(self.values.index_select(0, flat), self.scales.index_select(0, flat), self.compute_dtype)
        return rows.view(*ids.shape, self.embedding_dim)


def quantized_module_names(model: nn.Module) -> list[str]:
    """The modules of an LFM2AudioModel whose weights go int8: every linear layer of the backbone's layers and
    of the depthformer's, the depthformer's input projection, and the tied tables (the backbone's token
    table, which is also its text head, and each codebook's embedding, which is also its logits head).
    The audio encoder, the audio embeddings and the detokenizer are not quantized: prefill and decoding
    read them once per take or frame, not once per step (the int8 precision holds the detokenizer's transformer
    in bfloat16 instead: engine/model/loading.py, `detokenizer_dtype`)."""
    names = []
    for name, module in model.named_modules():
        in_layers = name.startswith("lfm.layers.") or name.startswith("depthformer.layers.")
        if in_layers and isinstance(module, (nn.Linear, QuantizedLinear)):
            names.append(name)
    names.append("depth_linear")
    names.append("lfm.embed_tokens")
    names += [f"depth_embeddings.{i}.embedding" for i in range(len(model.depth_embeddings))]
    return names


_QUANTIZED_PREFIXES = ("lfm.layers.", "depthformer.layers.")
_QUANTIZED_TABLES = re.compile(r"^(lfm\.embed_tokens|depth_linear|depth_embeddings\.\d+\.(embedding|to_logits))\.weight$")


def is_quantized_tensor(name: str, shape: list[int] | tuple[int, ...]) -> bool:
    """Whether the checkpoint tensor `name` is loaded as int8 (the weights of `quantized_module_names`),
    from its name and shape alone (the memory check reads only the file's header)."""
    if len(shape) != 2:
        return False
    return bool(_QUANTIZED_TABLES.match(name)) or (name.startswith(_QUANTIZED_PREFIXES) and name.endswith(".weight"))


def _set_module(model: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


RowStream = Callable[[Sequence[tuple[str, int, int]]], Iterator[torch.Tensor]]
"""(module name, first row, end row) for each chunk → those bf16 rows, in order (on the device: e.g. read from
the checkpoint by engine/model/row_reads.py, each valid until the next is asked for)."""


@torch.no_grad()
def quantize_model(model: nn.Module, *, device: torch.device, rows: RowStream | None = None) -> int:
    """Replace the modules `quantized_module_names` lists with their int8 versions, in place, freeing their
    bf16 weights. Each matrix is quantized a chunk of rows at a time from `rows` (the checkpoint's rows), or
    from the module's own weight when `rows` is None (a model built in memory; its weight may be on meta only
    if `rows` is given). Tied heads share their table's buffers. Returns the bytes of int8 weights and scales made."""
    dtype = model.audio_embedding.embedding.weight.dtype
    names = quantized_module_names(model)
    matrices = {name: Int8Matrix.empty(*model.get_submodule(name).weight.shape, device) for name in names}
    chunks = [(name, start, stop) for name in names for start, stop in row_chunks(*matrices[name].shape)]
    source = rows(chunks) if rows is not None else (model.get_submodule(name).weight[start:stop] for name, start, stop in chunks)
    last_chunk = {name: i for i, (name, _, _) in enumerate(chunks)}
    tied = {id(e.embedding.weight): e for e in model.depth_embeddings if e.to_logits.weight is e.embedding.weight}
    made = 0
    for i, ((name, start, stop), chunk) in enumerate(zip(chunks, source, strict=True)):
        matrix = matrices[name]
        quantize_rows(chunk, matrix.values[start:stop], matrix.scales[start:stop])
        if last_chunk[name] != i:
            continue
        module = model.get_submodule(name)  # its last rows are in: the module goes int8, its weight is freed
        made += matrix.nbytes
        if isinstance(module, nn.Embedding):
            replacement: nn.Module = QuantizedEmbedding(matrix, dtype)
            owner = tied.get(id(module.weight))
            if owner is not None:  # the codebook's logits head is this table
                owner.to_logits = QuantizedLinear(matrix, None, dtype)
        else:
            replacement = QuantizedLinear(matrix, module.bias, dtype)
        _set_module(model, name, replacement)
        del module
    return made


def is_quantized(model: nn.Module) -> bool:
    return isinstance(model.lfm.embed_tokens, QuantizedEmbedding)


def weight_bytes(model: nn.Module) -> int:
    """Bytes of every parameter and buffer the model holds on its devices (ties and views counted once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for tensor in [*model.parameters(), *model.buffers()]:
        storage = tensor.untyped_storage()
        key = (storage.data_ptr(), storage.nbytes())
        if tensor.is_meta or key in seen:
            continue
        seen.add(key)
        total += storage.nbytes()
    return total
