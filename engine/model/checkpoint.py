"""The model's weights straight from the memory-mapped safetensors file into place, and back again.

liquid-audio's `from_pretrained` builds the whole model in float32 on the GPU, casts it, then reads the
checkpoint into it: 6.2 GB allocated at peak for 3.3 GB of bf16 weights, more than a 6 GB card has.
Here the model is built the same way (its buffers on the target device, as liquid-audio computes them)
except that every parameter is created on the meta device, then each one is allocated in its final
dtype and filled from the checkpoint, one tensor at a time: the device never holds more than the
weights, and the host never holds more than one tensor.

The same file is where a voice switch finds the pristine weights (`CheckpointTensors.row_range`, read by
engine/model/row_reads.py): the checkpoint is what was loaded, so restoring from it is exact, and no copy
of the touched weights has to be kept on the GPU.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
import torch
from torch import nn

from engine.model.row_reads import ByteRange, RowReader

log = logging.getLogger(__name__)


# safetensors' dtype names, for tensors read straight into place.
_DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}


def read_safetensors_header(path: Path) -> tuple[int, dict[str, dict]]:
    """Where a safetensors file's tensor bytes start, and its header's entries by tensor name (dtype, shape,
    data_offsets), the metadata left out. Raises OSError or ValueError for a file that is not one."""
    with Path(path).open("rb") as f:
        length = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the safetensors header is not a JSON object")
    return 8 + length, {name: entry for name, entry in header.items() if name != "__metadata__"}


class CheckpointTensors:
    """One safetensors file: its header, and tensors (or row ranges of them) read on demand."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = Path(path)
        self._file = safe_open(str(self.path), framework="pt", device="cpu")
        self.names: frozenset[str] = frozenset(self._file.keys())
        self._data_start, entries = read_safetensors_header(self.path)
        # name -> (dtype name, first byte, end byte) within the data section
        self._spans = {name: (e["dtype"], *e["data_offsets"]) for name, e in entries.items()}
        self._shapes = {name: tuple(int(size) for size in e["shape"]) for name, e in entries.items()}

    def in_file_order(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=lambda name: self._spans[name][1])

    def __contains__(self, name: object) -> bool:
        return name in self.names

    def dtype(self, name: str) -> torch.dtype | None:
        """The tensor's dtype as stored (None for one torch has no dtype of)."""
        return _DTYPES.get(self._spans[name][0])

    def shape(self, name: str) -> tuple[int, ...]:
        return self._shapes[name]

    def nbytes(self, name: str) -> int:
        _, begin, end = self._spans[name]
        return end - begin

    def byte_range(self, name: str, start: int, stop: int, destination: torch.Tensor | None = None) -> ByteRange:
        """Bytes start:stop of the tensor's data (`destination`: where they are to land, see ByteRange)."""
        _, begin, end = self._spans[name]
        if not 0 <= start <= stop <= end - begin:
            raise ValueError(f"bytes {start}:{stop} are outside {name} ({end - begin} bytes)")
        return ByteRange(self.path, self._data_start + begin + start, stop - start, destination)

    def row_range(self, name: str, start: int, stop: int) -> ByteRange:
        """Rows start:stop of a 2-D tensor, as a ByteRange (no destination)."""
        rows, columns = self._shapes[name]
        if not 0 <= start <= stop <= rows:
            raise ValueError(f"rows {start}:{stop} are outside {name} ({rows} rows)")
        row = columns * self.dtype(name).itemsize  # type: ignore[union-attr]
        return self.byte_range(name, start * row, stop * row)

    def read_into(self, name: str, target: torch.Tensor, reads: list[ByteRange], chunk_bytes: int) -> None:
        """Plan the tensor's bytes straight into `target` (same dtype, contiguous): appended to `reads` in
        pieces of at most `chunk_bytes`, for a RowReader of the target's device; otherwise (a cast) it is
        copied now, as `copy_` casts (as load_state_dict does)."""
        if self.dtype(name) != target.dtype or not target.is_contiguous() or self.nbytes(name) != target.nbytes:
            target.copy_(self.tensor(name))
            return
        destination = target.view(-1).view(torch.uint8)
        reads += [self.byte_range(name, start, min(start + chunk_bytes, target.nbytes), destination[start : start + chunk_bytes])
                  for start in range(0, target.nbytes, chunk_bytes)]

    def tensor(self, name: str) -> torch.Tensor:
        return self._file.get_tensor(name)

    def rows(self, name: str, start: int, stop: int) -> torch.Tensor:
        """Rows start:stop of a tensor, reading only those bytes of the file."""
        return self._file.get_slice(name)[start:stop]


@contextlib.contextmanager
def parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside goes to the meta device (no memory, no initialisation cost);
    buffers and everything else stay where the surrounding device context puts them."""
    register = nn.Module.register_parameter

    def register_on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = register_on_meta  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def materialize_parameters(model: nn.Module, *, device: torch.device, dtype: torch.dtype, skip: set[str] | None = None) -> None:
    """Give every meta parameter uninitialised storage on `device` (floating ones in `dtype`), keeping ties:
    a parameter shared by two modules stays one parameter. Parameters named in `skip` (or tied to one)
    stay on meta."""
    made: dict[int, nn.Parameter] = {}
    left = {id(param) for name, param in model.named_parameters(remove_duplicate=False) if name in (skip or ())}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta or id(param) in left:
                continue
            real = made.get(id(param))
            if real is None:
                target = dtype if param.is_floating_point() else param.dtype
                real = nn.Parameter(torch.empty(param.shape, dtype=target, device=device), requires_grad=param.requires_grad)
                made[id(param)] = real
            module._parameters[name] = real


class MissingWeights(ValueError):
    """The checkpoint does not hold every parameter of the model."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(f"{len(names)} tensors are missing (e.g. {', '.join(names[:3])})")
        self.names = names


@torch.no_grad()
def fill_from_checkpoint(
    model: nn.Module, checkpoint: CheckpointTensors, *, skip: tuple[str, ...] = (), reader: RowReader | None = None
) -> None:
    """Copy every tensor of the checkpoint (but `skip`) into the model's parameter or buffer of that name
    (cast to its dtype, as `load_state_dict` does); raises MissingWeights if a parameter was not in the
    checkpoint. Names the model does not have are skipped, as liquid-audio's loader (accelerate,
    non-strict) does. Tensors are read in file order, each straight into place, by `reader` (engine/model/
    row_reads.py: several threads through pinned memory; by default one of its own for this call), a
    slot's worth at a time; a tensor whose dtype differs from the file's is read whole and cast on the host."""
    state = model.state_dict(keep_vars=True)
    filled: set[int] = set()
    unexpected = []
    own_reader = reader is None
    if reader is None:
        devices = {t.device for t in state.values() if not t.is_meta}
        reader = RowReader(next((d for d in devices if d.type == "cuda"), torch.device("cpu")))
    reads: list[ByteRange] = []
    try:
        for name in checkpoint.in_file_order(checkpoint.names - set(skip)):
            target = state.get(name)
            if target is None:
                unexpected.append(name)
                continue
            filled.add(id(target))
            if target.device.type != reader.device.type:
                target.data.copy_(checkpoint.tensor(name))
                continue
            checkpoint.read_into(name, target.data, reads, reader.slot_bytes)
        for _ in reader.stream(reads):
            pass
        if reader.device.type == "cuda":
            torch.cuda.current_stream(reader.device).synchronize()
    finally:
        if own_reader:
            reader.close()
    filled.update(id(state[name]) for name in skip if name in state)
    if unexpected:
        log.warning("checkpoint tensors the model does not use: %s", ", ".join(unexpected[:5]))
    missing = [name for name, param in model.named_parameters(remove_duplicate=False) if id(param) not in filled]
    if missing:
        raise MissingWeights(missing)
