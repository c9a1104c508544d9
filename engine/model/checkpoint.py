"""The model's weights straight from the memory-mapped safetensors file into place, and back again.

liquid-audio's `from_pretrained` builds the whole model in float32 on the GPU, casts it, then reads the
checkpoint into it: 6.2 GB allocated at peak for 3.3 GB of bf16 weights, more than a 6 GB card has.
Here the model is built the same way (its buffers on the target device, as liquid-audio computes them)
except that every parameter is created on the meta device, then each one is allocated in its final
dtype and filled from the checkpoint, one tensor at a time: the device never holds more than the
weights, and the host never holds more than one tensor.

The same open file is where a voice switch finds the pristine weights (`CheckpointTensors.rows`):
the checkpoint is what was loaded, so restoring from it is exact, and no copy of the touched weights
has to be kept on the GPU or in host memory.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import torch
from torch import nn

log = logging.getLogger(__name__)


# safetensors' dtype names, for tensors read straight into place.
_DTYPES = {
    "BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool,
}
# Bytes a staging buffer holds: two of them alternate, one filled from the file while the other is copied to
# the device.
STAGING_BYTES = 64 << 20


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
    """One safetensors file, memory-mapped: tensors (or row ranges of them) are read on demand."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = Path(path)
        self._file = safe_open(str(self.path), framework="pt", device="cpu")
        self.names: frozenset[str] = frozenset(self._file.keys())
        self._data_start, entries = read_safetensors_header(self.path)
        # name -> (dtype name, first byte, end byte) within the data section
        self._spans = {name: (e["dtype"], *e["data_offsets"]) for name, e in entries.items()}

    def in_file_order(self, names: Iterable[str]) -> list[str]:
        return sorted(names, key=lambda name: self._spans[name][1])

    def read_into(self, name: str, target: torch.Tensor, staging: "_Staging | None") -> None:
        """The tensor's bytes straight from the file into `target` (same dtype, contiguous): on the CPU into
        its memory, on a GPU through the pinned staging buffers; otherwise (a cast) as `copy_` does."""
        kind, begin, end = self._spans[name]
        if _DTYPES.get(kind) != target.dtype or not target.is_contiguous() or end - begin != target.nbytes:
            target.copy_(self.tensor(name))
            return
        destination = target.view(-1).view(torch.uint8)
        with self.path.open("rb", buffering=0) as f:
            f.seek(self._data_start + begin)
            if target.device.type == "cpu":
                _read_exactly(f, memoryview(destination.numpy()))
            else:
                assert staging is not None
                staging.copy(f, destination)

    def __contains__(self, name: object) -> bool:
        return name in self.names

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


class _Staging:
    """Two pinned host buffers that alternate: the file is read into one while the other's bytes are copied to
    the device (asynchronously, on the current stream), so disk, memory and bus work at once."""

    def __init__(self, device: torch.device) -> None:
        self.buffers = [torch.empty(STAGING_BYTES, dtype=torch.uint8, pin_memory=True) for _ in range(2)]
        self.done = [torch.cuda.Event() for _ in range(2)]
        self.stream = torch.cuda.current_stream(device)
        self.turn = 0

    def copy(self, source: BinaryIO, destination: torch.Tensor) -> None:
        for start in range(0, destination.numel(), STAGING_BYTES):
            size = min(STAGING_BYTES, destination.numel() - start)
            buffer, done = self.buffers[self.turn], self.done[self.turn]
            done.synchronize()  # this buffer's previous copy to the device has finished
            _read_exactly(source, memoryview(buffer.numpy())[:size])
            destination[start : start + size].copy_(buffer[:size], non_blocking=True)
            done.record(self.stream)
            self.turn ^= 1

    def finish(self) -> None:
        self.stream.synchronize()
        self.buffers.clear()
        torch._C._host_emptyCache()  # PyTorch keeps freed pinned memory for reuse: give it back to the system


def _read_exactly(source: BinaryIO, into: memoryview) -> None:
    done = 0
    while done < len(into):
        got = source.readinto(into[done:])
        if not got:
            raise ValueError("the checkpoint ends before its tensors do (truncated file)")
        done += got


@torch.no_grad()
def fill_from_checkpoint(model: nn.Module, checkpoint: CheckpointTensors, *, skip: tuple[str, ...] = ()) -> None:
    """Copy every tensor of the checkpoint (but `skip`) into the model's parameter or buffer of that name
    (cast to its dtype, as `load_state_dict` does); raises MissingWeights if a parameter was not in the
    checkpoint. Names the model does not have are skipped, as liquid-audio's loader (accelerate,
    non-strict) does. Tensors are read in file order, each straight into place."""
    state = model.state_dict(keep_vars=True)
    filled: set[int] = set()
    unexpected = []
    devices = {t.device for t in state.values() if t.device.type == "cuda"}
    staging = _Staging(next(iter(devices))) if devices else None
    for name in checkpoint.in_file_order(checkpoint.names - set(skip)):
        target = state.get(name)
        if target is None:
            unexpected.append(name)
            continue
        checkpoint.read_into(name, target.data, staging)
        filled.add(id(target))
    if staging is not None:
        staging.finish()
    filled.update(id(state[name]) for name in skip if name in state)
    if unexpected:
        log.warning("checkpoint tensors the model does not use: %s", ", ".join(unexpected[:5]))
    missing = [name for name, param in model.named_parameters(remove_duplicate=False) if id(param) not in filled]
    if missing:
        raise MissingWeights(missing)
