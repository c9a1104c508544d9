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
import logging
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import nn

log = logging.getLogger(__name__)


class CheckpointTensors:
    """One safetensors file, memory-mapped: tensors (or row ranges of them) are read on demand."""

    def __init__(self, path: Path) -> None:
        from safetensors import safe_open

        self.path = Path(path)
        self._file = safe_open(str(self.path), framework="pt", device="cpu")
        self.names: frozenset[str] = frozenset(self._file.keys())

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


def materialize_parameters(model: nn.Module, *, device: torch.device, dtype: torch.dtype) -> None:
    """Give every meta parameter uninitialised storage on `device` (floating ones in `dtype`), keeping ties:
    a parameter shared by two modules stays one parameter."""
    made: dict[int, nn.Parameter] = {}
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is None or not param.is_meta:
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
def fill_from_checkpoint(model: nn.Module, checkpoint: CheckpointTensors) -> None:
    """Copy every tensor of the checkpoint into the model's parameter or buffer of that name (cast to its
    dtype, as `load_state_dict` does); raises MissingWeights if a parameter was not in the checkpoint.
    Names the model does not have are skipped, as liquid-audio's loader (accelerate, non-strict) does."""
    state = model.state_dict(keep_vars=True)
    filled: set[int] = set()
    unexpected = []
    for name in sorted(checkpoint.names):
        target = state.get(name)
        if target is None:
            unexpected.append(name)
            continue
        target.data.copy_(checkpoint.tensor(name))
        filled.add(id(target))
    if unexpected:
        log.warning("checkpoint tensors the model does not use: %s", ", ".join(unexpected[:5]))
    missing = [name for name, param in model.named_parameters(remove_duplicate=False) if id(param) not in filled]
    if missing:
        raise MissingWeights(missing)
