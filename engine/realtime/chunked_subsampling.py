"""The conformer's convolutional subsampling, computed a stretch of time at a time.

liquid-audio's `MaskedConvSequential` (the "dw_striding" subsampling: a 3×3 convolution and two
depthwise-separable ones, each with stride 2 in time and frequency, a mask before every layer) runs over the
whole take at once. Its first stage holds the take at half the frame rate with 256 channels: for a 60 s take
(1, 256, 3001, 64) in bf16, 98 MB, and masked copies of it beside it. That one moment (211 MB of live
tensors, the rest of the conformer's forward needs a fraction of it) set the size of the CUDA graph pool that
every step graph and encoder rung shares: ~0.22 GB of a 6 GB card, for good (issue 25).

Every layer only mixes neighbouring frames, so each stretch of output rows can be computed from the input
rows it sees, with the layers' time padding made explicit: rows outside the take's stage are zero (what the
convolutions pad with), and rows past a stage's valid length are zero (the mask liquid-audio applies before
each layer). `ChunkedMaskedConvSequential.forward` does that for stretches of `ROWS_PER_CHUNK` output rows
into one output tensor. The values are the same sums over the same products (tests/test_chunked_subsampling.py
compares against liquid-audio's forward); the first stage holds ~17 MB at a time.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from liquid_audio.model.conformer.subsampling import MaskedConvSequential, calculate_conv_output_size
from torch import nn

# Output rows (80 ms each) per stretch: 10.24 s of a take. Takes up to that length are one stretch, as
# before; a 60 s take is 6, each holding (1, 256, ~515, 64) bf16 = 17 MB at its first stage.
ROWS_PER_CHUNK = 128


def _time_geometry(layer: nn.Module) -> tuple[int, int, int] | None:
    """(kernel, stride, padding) in time of a layer that mixes frames; None for one that works frame by frame
    (for layers `_can_chunk` accepts)."""
    if isinstance(layer, nn.Conv2d):
        return layer.kernel_size[0], layer.stride[0], int(layer.padding[0])
    return None


def _can_chunk(layers: list[nn.Module]) -> bool:
    """Plain 2-D convolutions with symmetric zero padding (the non-causal subsamplings), and element-wise
    activations between them: what `forward` knows how to split. A subclass of Conv2d (NeMo's CausalConv2D pads
    in its own forward) is not plain: `forward` calls F.conv2d with the layer's parameters, not the layer."""
    for layer in layers:
        if type(layer) is nn.Conv2d:
            if layer.padding_mode != "zeros" or isinstance(layer.padding, str) or layer.dilation != (1, 1):
                return False
        elif not isinstance(layer, (nn.ReLU, nn.SiLU, nn.GELU, nn.Identity)):
            return False
    return True


class ChunkedMaskedConvSequential(MaskedConvSequential):
    """`MaskedConvSequential` with the same layers, parameters and names, computed `ROWS_PER_CHUNK` output
    rows at a time (`chunk_subsampling` swaps a loaded conformer's module to this class in place)."""

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        layers = list(self)
        if not _can_chunk(layers):
            return MaskedConvSequential.forward(self, x, lengths)
        sizes = [x.shape[1]]  # time rows at each layer's input, and at the end
        for layer in layers:
            geometry = _time_geometry(layer)
            sizes.append(sizes[-1] if geometry is None else (sizes[-1] + 2 * geometry[2] - geometry[0]) // geometry[1] + 1)
        if sizes[-1] <= ROWS_PER_CHUNK:
            return MaskedConvSequential.forward(self, x, lengths)

        # The valid rows before each layer and at the end, counted as liquid-audio counts them.
        current = lengths.clone().float()
        valid: list[torch.Tensor] = []
        for layer in layers:
            valid.append(current.long())
            geometry = _time_geometry(layer)
            if geometry is not None and geometry[1] != 1:
                current = calculate_conv_output_size(current, geometry[0], geometry[1], (geometry[2], geometry[2]))
        valid.append(current.long())

        x = x.unsqueeze(1)  # (batch, 1, time, features)
        out: torch.Tensor | None = None
        for first in range(0, sizes[-1], ROWS_PER_CHUNK):
            # The rows each layer's input must hold for output rows [first, last), walked back from the end.
            spans = [(first, min(first + ROWS_PER_CHUNK, sizes[-1]))]
            for layer in reversed(layers):
                geometry = _time_geometry(layer)
                start, stop = spans[0]
                if geometry is not None:
                    kernel, stride, padding = geometry
                    start, stop = start * stride - padding, (stop - 1) * stride - padding + kernel
                spans.insert(0, (start, stop))
            start, stop = spans[0]
            piece = x[:, :, max(start, 0): min(stop, sizes[0])]
            piece = F.pad(piece, (0, 0, max(0, -start), max(0, stop - sizes[0])))  # the padding's zero rows
            for index, layer in enumerate(layers):
                piece = piece * _row_mask(spans[index], valid[index], piece)
                if isinstance(layer, nn.Conv2d):  # its time padding is in the rows already
                    piece = F.conv2d(piece, layer.weight, layer.bias, layer.stride, (0, layer.padding[1]), layer.dilation, layer.groups)
                else:
                    piece = layer(piece)
            piece = piece * _row_mask(spans[-1], valid[-1], piece)
            if out is None:
                out = piece.new_empty((piece.shape[0], piece.shape[1], sizes[-1], piece.shape[3]))
            out[:, :, spans[-1][0]: spans[-1][1]] = piece
        assert out is not None
        return out, current.long()


def _row_mask(span: tuple[int, int], valid: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """(batch, 1, rows, 1) ones for the rows of `span` that are inside the stage and before its valid length."""
    rows = torch.arange(span[0], span[1], device=like.device)
    keep = (rows >= 0) & (rows < valid.to(like.device).unsqueeze(1))
    return keep.to(like.dtype)[:, None, :, None]


def chunk_subsampling(conformer: nn.Module) -> None:
    """Make a loaded conformer's subsampling compute `ROWS_PER_CHUNK` output rows at a time (same module,
    same parameters and names; a subsampling of another kind is left as it is)."""
    convolutions = getattr(getattr(conformer, "pre_encode", None), "conv", None)
    if type(convolutions) is MaskedConvSequential:
        convolutions.__class__ = ChunkedMaskedConvSequential
