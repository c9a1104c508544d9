"""Where a voice switch finds a weight's rows as the model had them before any voice, and how they reach the device.

A weight is found by its storage, not its name: liquid-audio ties each codebook's logits head
(`depth_embeddings.N.to_logits`) to its embedding table, the checkpoint stores such a weight once (under the
table's name), and in int8 the head and the table share one int8 matrix. So every name that shares a weight's
storage is tried in the checkpoint, and a voice that adapts the head (as community "all-linear" voices do) finds
its rows in bf16 and in int8 alike.

Sources, best first:
- the checkpoint the weights were loaded from: exact, nothing kept anywhere; its rows reach the device through
  engine/model/row_reads.py (reader threads, pinned slots, copies overlapped with the merge);
- for a model built in memory, a copy of the weight in host memory (pinned on CUDA), made before a voice
  first writes it: the one thing kept, and `host_bytes` counts it;
- none: an int8 layer of a model quantized in memory keeps no bf16 rows; a voice that needs them is refused
  before anything is written (`available`).
Never a copy on the GPU.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from engine.model.checkpoint import CheckpointTensors
from engine.model.quantized import QuantizedEmbedding, QuantizedLinear
from engine.model.row_reads import ByteRange, RowReader


def weight_of(module: nn.Module) -> torch.Tensor | None:
    """The tensor that holds a linear layer's or a table's matrix (an int8 one's values), or None."""
    if isinstance(module, (QuantizedLinear, QuantizedEmbedding)):
        return module.values
    if isinstance(module, (nn.Linear, nn.Embedding)):
        return module.weight
    return None


def _storage_key(tensor: torch.Tensor) -> tuple[str, int, tuple[int, ...]]:
    return (str(tensor.device), tensor.data_ptr(), tuple(tensor.shape))


@dataclass(frozen=True)
class RowChunk:
    """Rows start:stop of the weight of module `name` (a linear layer); `destination`: its own rows, where the
    pristine bytes can land as they are (same dtype as the source, contiguous), or None (the caller gets them)."""

    name: str
    start: int
    stop: int
    destination: torch.Tensor | None = None


class PristineRows:
    """The pristine rows of a model's linear layers: which name a weight goes by in the checkpoint, whether its
    rows can be had, and a stream of them onto the device."""

    def __init__(self, model: nn.Module, checkpoint: CheckpointTensors | None, reader: RowReader | None) -> None:
        self._checkpoint = checkpoint
        self._reader = reader
        self._modules = {name: m for name, m in model.named_modules() if weight_of(m) is not None}
        sharing: dict[tuple[str, int, tuple[int, ...]], list[str]] = {}
        for name, module in self._modules.items():
            weight = weight_of(module)
            if weight.numel() and not weight.is_meta:  # type: ignore[union-attr]
                sharing.setdefault(_storage_key(weight), []).append(name)  # type: ignore[arg-type]
        self._sharing = {name: names for names in sharing.values() for name in names}
        self._host: dict[str, torch.Tensor] = {}  # copies of weights a model built in memory has nowhere else
        self._stored: dict[str, str | None] = {}

    def canonical(self, module: str) -> str:
        """The one name of the weight `module` writes: the first module (in the model's order) that shares it."""
        return self._sharing.get(module, [module])[0]

    def stored_name(self, module: str) -> str | None:
        """The checkpoint's name for `module`'s weight (its own, or that of a module tied to it), or None."""
        if self._checkpoint is None:
            return None
        if module not in self._stored:
            names = self._sharing.get(module, [module])
            self._stored[module] = next((f"{name}.weight" for name in names if f"{name}.weight" in self._checkpoint), None)
        return self._stored[module]

    def _plain_weight(self, module: str) -> torch.Tensor | None:
        """The floating weight `module` shares (not an int8 one), if any: what a host copy is made of."""
        for name in self._sharing.get(module, [module]):
            candidate = self._modules.get(name)
            if isinstance(candidate, (nn.Linear, nn.Embedding)):
                return candidate.weight
        return None

    def available(self, module: str) -> bool:
        """Whether the pristine rows of `module`'s weight can be had (else a voice must not write it)."""
        return module in self._host or self.stored_name(module) is not None or self._plain_weight(module) is not None

    def source_dtype(self, module: str) -> torch.dtype:
        """The dtype the pristine rows come in (the checkpoint's, or the model's own)."""
        stored = self.stored_name(module)
        if stored is not None:
            return self._checkpoint.dtype(stored)  # type: ignore[union-attr, return-value]
        return self._host[module].dtype if module in self._host else self._plain_weight(module).dtype  # type: ignore[union-attr]

    def remember(self, module: str) -> None:
        """Call before the first write to `module`'s weight: a model built in memory keeps a host copy of it."""
        if module in self._host or self.stored_name(module) is not None:
            return
        weight = self._plain_weight(module)
        if weight is None:
            raise KeyError(module)  # `available` said no: the caller checked before writing anything
        weight = weight.detach()
        copy = torch.empty(weight.shape, dtype=weight.dtype, pin_memory=weight.is_cuda)
        copy.copy_(weight)
        self._host[module] = copy

    @property
    def host_bytes(self) -> int:
        """Host memory held for copies of weights (a model built in memory)."""
        return sum(t.numel() * t.element_size() for t in self._host.values())

    def stream(self, chunks: Sequence[RowChunk], device: torch.device) -> Iterator[torch.Tensor]:
        """Each chunk's pristine rows, in order, as (stop - start, columns) in `source_dtype`: in its destination
        when it has one (then the bytes are already in place), else in a buffer valid until the next item. On
        CUDA they are ready on the current stream."""
        from_file = [chunk for chunk in chunks if chunk.name not in self._host]
        if len(from_file) != len(chunks) and from_file:
            raise ValueError("a stream takes its rows from the checkpoint or from host copies, not both")
        if not from_file:
            yield from self._from_host(chunks, device)
            return
        reader = self._reader
        if reader is None:
            reader = self._reader = RowReader(device)
        reads = []
        for chunk in chunks:
            stored = self.stored_name(chunk.name)
            if stored is None:
                raise KeyError(chunk.name)
            span = self._checkpoint.row_range(stored, chunk.start, chunk.stop)  # type: ignore[union-attr]
            reads.append(ByteRange(span.path, span.offset, span.nbytes, chunk.destination))
        for chunk, data in zip(chunks, reader.stream(reads), strict=True):
            yield data.view(self.source_dtype(chunk.name)).view(chunk.stop - chunk.start, -1)

    def _from_host(self, chunks: Sequence[RowChunk], device: torch.device) -> Iterator[torch.Tensor]:
        for chunk in chunks:
            rows = self._host[chunk.name][chunk.start : chunk.stop]
            if chunk.destination is not None:
                chunk.destination.copy_(rows.view(-1).view(torch.uint8), non_blocking=True)
                yield chunk.destination.view(rows.dtype).view(rows.shape)
            else:
                yield rows.to(device, non_blocking=True)

    @property
    def reader(self) -> RowReader | None:
        return self._reader
