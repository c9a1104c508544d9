"""LoRA voices merged into the weights, switched in place.

A voice is a PEFT adapter folder (adapter_config.json + adapter_model.safetensors, as
`PeftModel.save_pretrained` writes it for LFM2AudioModel). Merging it into the weights costs
nothing per step. Switching voices rewrites the SAME weight tensors in place from the pristine
weights (read back from the memory-mapped checkpoint, never copied on the GPU), so the tensors'
storage never moves and CUDA graphs captured at start-up stay valid across voice switches.

An adapter is checked completely before any weight is written; if it does not fit, nothing
changes and the previous voice stays.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from engine.errors import LoraError
from engine.model.checkpoint import CheckpointTensors
from engine.model.quantized import QuantizedLinear, quantize_rows, row_chunks

log = logging.getLogger(__name__)

_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[^.]+)?\.weight$")


@dataclass(frozen=True)
class LoraDelta:
    """One module's low-rank update: W += scale · B @ A."""

    module: str
    a: torch.Tensor  # (r, in_features)
    b: torch.Tensor  # (out_features, r)
    scale: float


@dataclass(frozen=True)
class LoraVoice:
    name: str
    folder: Path
    base_model: str | None
    deltas: tuple[LoraDelta, ...]


def load_voice(folder: str | Path) -> LoraVoice:
    """Read a PEFT LoRA adapter folder; raises LoraError with a specific message if it is unusable."""
    folder = Path(folder)
    config_path = folder / ADAPTER_CONFIG
    weights_path = folder / ADAPTER_WEIGHTS
    if not folder.is_dir():
        raise LoraError.of("The voice folder {folder} does not exist.", folder=folder)
    if not config_path.is_file():
        raise LoraError.of("The voice folder {folder} has no {file}.", folder=folder, file=ADAPTER_CONFIG)
    if not weights_path.is_file():
        raise LoraError.of("The voice folder {folder} has no {file}.", folder=folder, file=ADAPTER_WEIGHTS)
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        raise LoraError.of("{file} is not valid JSON ({error}).", file=config_path, error=error) from error
    if not isinstance(config, dict):
        raise LoraError.of("{file} does not hold a JSON object.", file=config_path)
    peft_type = config.get("peft_type", "LORA")
    if not isinstance(peft_type, str) or peft_type.upper() != "LORA":
        raise LoraError.of("{voice} is a {kind} adapter; only LoRA voices are supported.", voice=folder.name, kind=peft_type)
    if config.get("use_dora"):
        raise LoraError.of("{voice} is a DoRA adapter; only plain LoRA voices are supported.", voice=folder.name)
    if config.get("modules_to_save"):
        raise LoraError.of(
            "{voice} also replaces whole modules ({modules}); only LoRA weights are supported.",
            voice=folder.name, modules=config["modules_to_save"],
        )
    for option in _UNSUPPORTED_OPTIONS:
        if config.get(option):
            raise LoraError.of(
                "{voice} uses {option}, which a plain LoRA merge does not support.", voice=folder.name, option=option
            )
    default_r = _rank(config.get("r", 8), folder.name, "r")
    default_alpha = _alpha(config.get("lora_alpha", default_r), folder.name, "lora_alpha")
    use_rslora = config.get("use_rslora", False)
    if not isinstance(use_rslora, bool):
        raise _bad_field(
            folder.name, "use_rslora", use_rslora,
            "{voice}: {field} in adapter_config.json "
            "must be true or false (it is {value}).",
        )
    base_model = config.get("base_model_name_or_path")
    if base_model is not None and not isinstance(base_model, str):
        raise _bad_field(
            folder.name, "base_model_name_or_path", base_model,
            "{voice}: {field} in adapter_config.json "
            "must be a model name (it is {value}).",
        )
    rank_pattern = _pattern(config.get("rank_pattern"), folder.name, "rank_pattern", _rank)
    alpha_pattern = _pattern(config.get("alpha_pattern"), folder.name, "alpha_pattern", _alpha)

    try:
        from safetensors.torch import load_file

        tensors = load_file(str(weights_path))
    except Exception as error:  # safetensors' own error types for corrupt files
        raise LoraError.of("{file} is unreadable ({error}).", file=weights_path, error=error) from error

    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise LoraError.of("{voice} holds a tensor that is not a LoRA weight: {key}.", voice=folder.name, key=key)
        if tensor.dim() != 2 or not tensor.is_floating_point():
            raise LoraError.of(
                "{voice}: {key} is not a matrix of numbers ({shape}, {dtype}).",
                voice=folder.name, key=key, shape=tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."),
            )
        if not bool(torch.isfinite(tensor).all()):
            raise LoraError.of("{voice}: {key} holds NaN or infinite values; the voice is damaged.", voice=folder.name, key=key)
        pairs.setdefault(match["module"], {})[match["which"]] = tensor
    if not pairs:
        raise LoraError.of("{voice} holds no LoRA weights.", voice=folder.name)

    deltas = []
    for module, pair in sorted(pairs.items()):
        if set(pair) != {"A", "B"}:
            raise LoraError.of(
                "{voice}: module {module} has {weight} missing.", voice=folder.name, module=module, weight="lora_A" if "A" not in pair else "lora_B"
            )
        r = int(_pattern_value(rank_pattern, module, default_r))
        alpha = float(_pattern_value(alpha_pattern, module, default_alpha))
        if pair["A"].shape[0] != r or pair["B"].shape[1] != r:
            raise LoraError.of(
                "{voice}: module {module} has rank {rank} in adapter_config.json, but its lora_A is {a_shape} "
                "and lora_B is {b_shape}.",
                voice=folder.name, module=module, rank=r, a_shape=tuple(pair["A"].shape), b_shape=tuple(pair["B"].shape),
            )
        scale = alpha / math.sqrt(r) if use_rslora else alpha / r
        # An upper bound of the largest change to one weight: a trained voice changes weights by far
        # less than 1; this refuses an alpha or weights that would wreck (or overflow) the model.
        bound = abs(scale) * float(pair["A"].abs().max()) * float(pair["B"].abs().max()) * r
        if not bound <= MAX_WEIGHT_CHANGE:
            raise LoraError.of(
                "{voice} would change {module} by up to {bound}, far beyond what a trained voice does; "
                "check lora_alpha and the weights.",
                voice=folder.name, module=module, bound=f"{bound:.3g}",
            )
        deltas.append(LoraDelta(module, pair["A"], pair["B"], scale))
    return LoraVoice(folder.name, folder, base_model, tuple(deltas))


# adapter_config.json options that make an adapter something other than W += scale * B @ A on the
# modules its tensors name; a voice that sets any of them is refused rather than merged wrongly.
_UNSUPPORTED_OPTIONS = (
    "fan_in_fan_out", "lora_bias", "layer_replication", "target_parameters", "trainable_token_indices",
    "use_qalora", "alora_invocation_tokens", "use_bdlora",
)
MAX_RANK = 4096
MAX_WEIGHT_CHANGE = 1000.0


def _bad_field(voice: str, field: str, value: object, template: str, **extra: object) -> LoraError:
    """`template` is the whole message, with {voice}, {field} and {value} (the value as JSON, shortened)."""
    return LoraError.of(template, voice=voice, field=field, value=json.dumps(value, ensure_ascii=False)[:80], **extra)


def _rank(value: object, voice: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RANK:
        raise _bad_field(
            voice, field, value,
            "{voice}: {field} in adapter_config.json "
            "must be a whole number from 1 to {high} (it is {value}).", high=MAX_RANK
        )
    return value


def _alpha(value: object, voice: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad_field(
            voice, field, value,
            "{voice}: {field} in adapter_config.json "
            "must be a finite number (it is {value}).",
        )
    return float(value)


def _pattern(value: object, voice: str, field: str, check: object) -> dict[str, float]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad_field(
            voice, field, value,
            "{voice}: {field} in adapter_config.json "
            "must be an object of module names and numbers (it is {value}).",
        )
    return {str(key): check(item, voice, f"{field}.{key}") for key, item in value.items()}  # type: ignore[operator]


def _pattern_value(pattern: dict[str, float] | dict[str, int], module: str, default: float) -> float:
    # PEFT matches pattern keys against the end of the module name.
    for key, value in pattern.items():
        if module == key or module.endswith("." + key):
            return value
    return default


class PristineWeights:
    """Where a voice switch finds the weights as the model had them before any voice: the memory-mapped
    checkpoint they were loaded from (exact, and nothing kept anywhere), or, for a model built in memory,
    copies in host memory made the first time a voice touches a weight. Never a copy on the GPU."""

    def __init__(self, model: nn.Module, checkpoint: CheckpointTensors | None = None) -> None:
        self._weights = {name: module.weight for name, module in model.named_modules() if isinstance(module, nn.Linear)}
        self._checkpoint = checkpoint
        self._host: dict[str, torch.Tensor] = {}

    def remember(self, module: str) -> None:
        """Call before the first write to `module`'s weight."""
        if module in self._host or self._in_checkpoint(module):
            return
        if module not in self._weights:  # an int8 layer: its bf16 rows exist only in the checkpoint
            raise LoraError.of("The voice needs the model's bf16 weights for {module}, which are not available.", module=module)
        self._host[module] = self._weights[module].detach().to("cpu", copy=True)

    def rows(self, module: str, start: int, stop: int) -> torch.Tensor:
        """Rows start:stop of the pristine weight, on the host (in the checkpoint's dtype)."""
        if self._in_checkpoint(module):
            return self._checkpoint.rows(f"{module}.weight", start, stop)  # type: ignore[union-attr]
        return self._host[module][start:stop]

    def _in_checkpoint(self, module: str) -> bool:
        return self._checkpoint is not None and f"{module}.weight" in self._checkpoint

    @property
    def host_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self._host.values())


# Rows merged at once: the merge's float32 temporaries on the GPU stay a few MB whatever the matrix.
MERGE_CHUNK_ELEMENTS = 1 << 22


class VoiceSwitcher:
    """Owns the merged state of one model's weights.

    The device holds the merged weights and nothing else: a switch streams the pristine rows of each
    weight it rewrites from the host (PristineWeights), adds the voice's B @ A in float32 a chunk of rows
    at a time, and rounds once into the weight, in place. So switching any voice in or out leaves the
    device's memory where it was, and a weight's value depends only on the voice, never on the voices
    merged before it.
    """

    def __init__(self, model: nn.Module, *, model_id: str | None = None, checkpoint: CheckpointTensors | None = None) -> None:
        self.model = model
        self.model_id = model_id
        self.voice: LoraVoice | None = None
        self.pristine = PristineWeights(model, checkpoint)
        self._merged: set[str] = set()  # modules whose weight differs from the pristine one

    @property
    def voice_name(self) -> str | None:
        return self.voice.name if self.voice else None

    def _check(self, voice: LoraVoice) -> list[tuple[nn.Linear, LoraDelta]]:
        if voice.base_model and self.model_id and not _same_base(voice.base_model, self.model_id):
            raise LoraError.of(
                "The voice {voice} was trained for {base}, not for the loaded model {model}.",
                voice=voice.name, base=voice.base_model, model=self.model_id,
            )
        modules = dict(self.model.named_modules())
        planned = []
        for delta in voice.deltas:
            module = modules.get(delta.module)
            if module is None:
                raise LoraError.of(
                    "The voice {voice} does not fit this model: it targets {module}, which the model does not have.",
                    voice=voice.name, module=delta.module,
                )
            if not isinstance(module, (nn.Linear, QuantizedLinear)):
                raise LoraError.of(
                    "The voice {voice} targets {module}, a {kind}; only linear layers are supported.",
                    voice=voice.name, module=delta.module, kind=type(module).__name__,
                )
            if isinstance(module, nn.Linear) and module.weight.numel() == 0 and module.out_features:
                log.info("voice %s: %s is not loaded (nothing reads it); its adapter is skipped", voice.name, delta.module)
                continue
            out_features, in_features = module.out_features, module.in_features
            r = delta.a.shape[0]
            if delta.a.shape != (r, in_features) or delta.b.shape != (out_features, r):
                raise LoraError.of(
                    "The voice {voice} does not fit this model: {module} is {rows}×{columns}, "
                    "but the adapter's lora_A is {a_shape} and lora_B is {b_shape}.",
                    voice=voice.name, module=delta.module, rows=out_features, columns=in_features,
                    a_shape=tuple(delta.a.shape), b_shape=tuple(delta.b.shape),
                )
            planned.append((module, delta))
        return planned

    def apply(self, voice: LoraVoice | None) -> None:
        """Make `voice` (or none) the merged voice. On LoraError nothing has changed: a voice the GPU has no
        room to merge is undone again, and the previous voice merged back."""
        planned = self._check(voice) if voice is not None else []
        try:
            self._merge(planned)
        except torch.OutOfMemoryError as error:
            self._merge(self._check(self.voice) if self.voice is not None else [])
            raise LoraError.of(
                "The GPU has no room to merge the voice {voice}; the previous voice stays. "
                "Close other programs that use the GPU and try again.",
                voice=voice.name if voice else "",
            ) from error
        self.voice = voice

    @torch.no_grad()
    def _merge(self, planned: list[tuple[nn.Module, LoraDelta]]) -> None:
        modules = dict(self.model.named_modules())
        touched = {delta.module for _, delta in planned}
        for name in sorted(self._merged - touched):  # what the previous voice changed and this one does not
            module = modules[name]
            for start, stop in _row_chunks(module):
                _write_rows(module, start, stop, self.pristine.rows(name, start, stop))
            self._merged.discard(name)
        for module, delta in planned:
            self.pristine.remember(delta.module)
            self._merged.add(delta.module)
            device = _device_of(module)
            a = delta.a.to(device=device, dtype=torch.float32)
            b = delta.b.to(device=device, dtype=torch.float32)
            for start, stop in _row_chunks(module):
                # In float32, then rounded once into the weight's dtype (or quantized once into its int8 rows),
                # in place (the graphs keep their storage).
                rows = self.pristine.rows(delta.module, start, stop).to(device=device, dtype=torch.float32, copy=True)
                rows.addmm_(b[start:stop], a, alpha=delta.scale)
                _write_rows(module, start, stop, rows)


def _device_of(module: nn.Module) -> torch.device:
    return module.values.device if isinstance(module, QuantizedLinear) else module.weight.device


def _write_rows(module: nn.Module, start: int, stop: int, rows: torch.Tensor) -> None:
    """Rows start:stop of a layer's weight := rows (rounded to its dtype, or quantized for an int8 layer)."""
    if isinstance(module, QuantizedLinear):
        quantize_rows(rows, module.values[start:stop], module.scales[start:stop])
    else:
        module.weight[start:stop].copy_(rows)


def _row_chunks(module: nn.Module) -> Iterator[tuple[int, int]]:
    return row_chunks(module.out_features, module.in_features, MERGE_CHUNK_ELEMENTS)


def _same_base(adapter_base: str, model_id: str) -> bool:
    """Compare Hub ids (or folder names) case-insensitively, ignoring a local path's parents."""
    def norm(value: str) -> str:
        return value.replace("\\", "/").rstrip("/").lower()

    a, b = norm(adapter_base), norm(model_id)
    return a == b or a.endswith("/" + b.split("/")[-1]) and b.split("/")[-1] == a.split("/")[-1]
