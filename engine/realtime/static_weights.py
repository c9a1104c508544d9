"""The static model's parameter layout: the weights as its steps read them (the backbone's in static_model.py,
the depthformer's in static_depthformer.py), each stored once.

- fused projections: q|k|v and w1|w3 are each one matrix, so a batch-1 step runs one matrix-vector product
  where the modules run two or three (every kernel costs at least ~1-2 µs). The fused matrices are the ONLY
  copy: the modules' own parameters are re-pointed to views into them, so a LoRA merge that writes the
  parameters in place updates what the graphs read, and no weight is stored twice;
- every other matrix, and every table, is the module's own parameter (`layer_weight`), never a copy.

With an int8 model (engine/model/quantized.py) every matrix here is an `Int8Matrix`: the decode step's
products and the text head run the int8 matrix-vector kernels, the depthformer its int8 kernel, a short
prefill span the tensor-core kernel (static_model.span_product), and the plain paths (longer prefill spans,
the CPU, a kernel that failed its check) multiply by the dequantized matrix (`plain`); a table lookup
dequantizes only the rows it looks up (`lookup`).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from engine.model.quantized import Int8Matrix, QuantizedEmbedding, QuantizedLinear
from engine.realtime.kernels import Dequantize


Weight = torch.Tensor | Int8Matrix  # a matrix as the steps read it: bf16, or int8 with its row scales


def fuse_linear_weights(linears: list[nn.Module]) -> Weight:
    """Concatenate the weights of `linears` (rows) and make each parameter a view into the result (for
    int8 layers their values and scales: the fused matrix is the only copy either way)."""
    if all(isinstance(linear, QuantizedLinear) for linear in linears):
        fused_int8 = Int8Matrix.concatenated([linear.matrix for linear in linears])
        start = 0
        for linear in linears:
            linear.point_at(fused_int8.rows(start, start + linear.out_features))
            start += linear.out_features
        return fused_int8
    fused = torch.cat([linear.weight.detach() for linear in linears], dim=0).contiguous()
    start = 0
    for linear in linears:
        rows = linear.weight.shape[0]
        linear.weight.data = fused[start : start + rows]
        start += rows
    return fused


def layer_weight(module: nn.Module) -> Weight:
    """A linear layer's or a table's matrix as the steps read it (never a dequantized copy)."""
    return module.matrix if isinstance(module, (QuantizedLinear, QuantizedEmbedding)) else module.weight


def plain(weight: Weight, dtype: torch.dtype) -> torch.Tensor:
    """The matrix for the plain PyTorch ops: itself, or dequantized (a temporary the size of the matrix; on
    CUDA by the vectorized kernel, dequantize.cu)."""
    if not isinstance(weight, Int8Matrix):
        return weight
    kernel = _dequantize_kernel(weight.device) if dtype == torch.bfloat16 else None
    if kernel is not None and kernel.supports(weight.values):
        return kernel(weight.values, weight.scales)
    return weight.dequantized(dtype)


@functools.cache
def _dequantize_kernel(device: torch.device) -> Dequantize | None:
    return Dequantize.create(device)


def lookup(ids: torch.Tensor, table: Weight, dtype: torch.dtype) -> torch.Tensor:
    """F.embedding of `ids` in `table`, int8 rows dequantized (only the rows looked up)."""
    if isinstance(table, Int8Matrix):
        return Int8Matrix(table.values.index_select(0, ids), table.scales.index_select(0, ids)).dequantized(dtype)
    return F.embedding(ids, table)
