"""LoRA voices merged into the weights, switched in place.

A voice is a PEFT adapter folder (adapter_config.json + adapter_model.safetensors, as
`PeftModel.save_pretrained` writes it for LFM2AudioModel: any linear layers, the depthformer's and the tied
codebook heads included). Merging it into the weights costs nothing per step. Switching voices rewrites the
SAME weight tensors in place from the pristine weights (read back from the checkpoint, engine/model/
pristine.py, never copied on the GPU), so the tensors' storage never moves and CUDA graphs captured at
start-up stay valid across voice switches.

An adapter is checked completely before any weight is written; if it does not fit, nothing
changes and the previous voice stays.
"""

from __future__ import annotations

import json
import logging
import math
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from engine.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from engine.errors import LoraError
from engine.model.checkpoint import CheckpointTensors
from engine.model.pristine import PristineRows, RowChunk
from engine.model.quantized import QuantizedLinear, quantize_rows, row_chunks
from engine.model.row_reads import SLOT_BYTES, RowReader

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
    peaks: dict[int, float] = {}  # largest |value| of each tensor (one pass: NaN and infinity show in it)
    for key, tensor in tensors.items():
        match = _KEY.match(key)
        if match is None:
            raise LoraError.of("{voice} holds a tensor that is not a LoRA weight: {key}.", voice=folder.name, key=key)
        if tensor.dim() != 2 or not tensor.is_floating_point():
            raise LoraError.of(
                "{voice}: {key} is not a matrix of numbers ({shape}, {dtype}).",
                voice=folder.name, key=key, shape=tuple(tensor.shape), dtype=str(tensor.dtype).removeprefix("torch."),
            )
        low, high = torch.aminmax(tensor) if tensor.numel() else (torch.zeros(()), torch.zeros(()))
        peaks[id(tensor)] = max(-float(low), float(high))
        if not math.isfinite(float(low)) or not math.isfinite(float(high)):
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
        bound = abs(scale) * peaks[id(pair["A"])] * peaks[id(pair["B"])] * r
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


# Voices kept after reading (their adapters in host memory: ~40 MB for a rank-16 all-linear voice of the full-size model).
RECENT_VOICES = 3
# Rows merged at once, at most (and at most a reader slot's bytes of pristine rows): the merge's float32
# temporaries on the GPU stay a few tens of MB whatever the matrix.
MERGE_CHUNK_ELEMENTS = 1 << 23


@dataclass
class _Target:
    """One weight a voice writes: the linear layer that writes it, and every delta on it (tied layers that a
    voice adapts both share one weight: their deltas are summed into it)."""

    name: str  # the weight's one name (PristineRows.canonical)
    module: nn.Module
    deltas: list[LoraDelta]


class VoiceSwitcher:
    """Owns the merged state of one model's weights.

    The device holds the merged weights and nothing else: a switch streams the pristine rows of each weight it
    rewrites (engine/model/pristine.py: from the checkpoint, through reader threads and pinned slots, the copies
    overlapped with the merge), adds the voice's B @ A in float32 a chunk of rows at a time on the device, and
    rounds once into the weight (or quantizes once into its int8 rows), in place; a weight the new voice leaves
    alone gets its pristine rows back, copied straight into place. So switching any voice in or out leaves the
    device's memory where it was, and a weight's value depends only on the voice, never on the voices merged
    before it. No host-device sync inside a switch but the one at its end.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        model_id: str | None = None,
        checkpoint: CheckpointTensors | None = None,
        reader: RowReader | None = None,
    ) -> None:
        self.model = model
        self.model_id = model_id
        self.voice: LoraVoice | None = None
        self.pristine = PristineRows(model, checkpoint, reader)
        self._merged: dict[str, nn.Module] = {}  # weights that differ from the pristine ones, by name, with their writer
        self.last_switch: dict[str, float] = {}  # the last switch's figures (bytes, chunks, seconds)
        self._recent: dict[tuple, LoraVoice] = {}  # the last RECENT_VOICES voices read, by folder and files' state

    def load(self, folder: str | Path) -> LoraVoice:
        """`load_voice(folder)`, or the voice read from it before while its files are as they were then (size,
        modification and change times, inode): going back to a voice used a moment ago skips reading and checking it
        again. A voice trained into the same folder again is read again."""
        folder = Path(folder)
        try:
            states = [f.stat() for f in (folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS)]
            key = (str(folder.resolve()), *((st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino) for st in states))
        except OSError:
            return load_voice(folder)  # a missing file: load_voice names it
        voice = self._recent.pop(key, None) or load_voice(folder)
        self._recent[key] = voice  # the most recent last
        while len(self._recent) > RECENT_VOICES:
            del self._recent[next(iter(self._recent))]
        return voice

    @property
    def voice_name(self) -> str | None:
        return self.voice.name if self.voice else None

    @property
    def host_bytes(self) -> int:
        """Host memory kept for switches: host copies of weights (a model built in memory), the reader's slots, and the
        recent voices' adapters."""
        reader = self.pristine.reader
        adapters = {id(d.a): d.a.nbytes for v in self._recent.values() for d in v.deltas} | {
            id(d.b): d.b.nbytes for v in self._recent.values() for d in v.deltas}
        return self.pristine.host_bytes + (reader.host_bytes if reader is not None else 0) + sum(adapters.values())

    def _check(self, voice: LoraVoice) -> list[_Target]:
        """Everything about `voice` that can fail, checked before a weight is written."""
        if voice.base_model and self.model_id and not _same_base(voice.base_model, self.model_id):
            raise LoraError.of(
                "The voice {voice} was trained for {base}, not for the loaded model {model}.",
                voice=voice.name, base=voice.base_model, model=self.model_id,
            )
        modules = dict(self.model.named_modules())
        targets: dict[str, _Target] = {}
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
            if not self.pristine.available(delta.module):  # an int8 layer of a model quantized in memory
                raise LoraError.of("The voice needs the model's bf16 weights for {module}, which are not available.", module=delta.module)
            name = self.pristine.canonical(delta.module)
            targets.setdefault(name, _Target(name, module, [])).deltas.append(delta)
        return list(targets.values())

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
        except OSError as error:  # the model file changed or went away under the app
            try:
                self._merge(self._check(self.voice) if self.voice is not None else [])
            except OSError:
                log.exception("the previous voice could not be merged back either")
            raise LoraError.of("{file} is unreadable ({error}).", file=error.filename or "model.safetensors", error=error) from error
        self.voice = voice

    @torch.no_grad()
    def _merge(self, planned: list[_Target]) -> None:
        started = time.perf_counter()
        device = next(self.model.parameters()).device
        writing = {target.name for target in planned}
        restored = [(name, module) for name, module in self._merged.items() if name not in writing]
        for target in planned:
            self.pristine.remember(target.name)
            self._merged[target.name] = target.module  # before its first write: a failure half-way restores it
        factors = iter(_upload([t for target in planned for d in target.deltas for t in (d.a, d.b)], device))
        products = {target.name: [(next(factors), next(factors), delta.scale) for delta in target.deltas] for target in planned}
        jobs: list[tuple[RowChunk, nn.Module, list | None]] = []
        for name, module in restored:
            dtype = self.pristine.source_dtype(name)
            for start, stop in _row_chunks(module, dtype):
                jobs.append((RowChunk(name, start, stop, _in_place(module, start, stop, dtype)), module, None))
        for target in planned:
            for start, stop in _row_chunks(target.module, self.pristine.source_dtype(target.name)):
                jobs.append((RowChunk(target.name, start, stop), target.module, products[target.name]))
        moved = 0
        for batch in _by_source(jobs, self.pristine):
            chunks = [chunk for chunk, _, _ in batch]
            for (chunk, module, deltas), rows in zip(batch, self.pristine.stream(chunks, device), strict=True):
                moved += rows.numel() * rows.element_size()
                if deltas is None:
                    if chunk.destination is None:  # a restore that is not a plain copy: a cast, or int8 rows
                        _write_rows(module, chunk.start, chunk.stop, rows)
                    continue
                # In float32, then rounded once into the weight's dtype (or quantized once into its int8 rows),
                # in place (the graphs keep their storage).
                merged = rows.float() if rows.dtype != torch.float32 else rows.clone()
                for a, b, scale in deltas:
                    merged.addmm_(b[chunk.start : chunk.stop], a, alpha=scale)
                _write_rows(module, chunk.start, chunk.stop, merged)
        for name, _ in restored:
            del self._merged[name]
        if device.type == "cuda":
            torch.cuda.current_stream(device).synchronize()
        self.last_switch = {"bytes_read": moved, "chunks": len(jobs), "weights_written": len(planned) + len(restored),
                            "seconds": time.perf_counter() - started}


def _upload(tensors: list[torch.Tensor], device: torch.device) -> list[torch.Tensor]:
    """The adapter's matrices on `device` in float32, in one copy per dtype (not one blocking copy each: a
    blocking copy waits for the stream, which would stall the merges queued before it). Before any of the
    switch's work is queued, so its wait costs nothing."""
    out: list[torch.Tensor | None] = [None] * len(tensors)
    for dtype in {t.dtype for t in tensors}:
        picked = [i for i, t in enumerate(tensors) if t.dtype == dtype]
        packed = torch.cat([tensors[i].reshape(-1) for i in picked])
        on_device = packed.to(device).float()
        for i, part in zip(picked, on_device.split([tensors[i].numel() for i in picked]), strict=True):
            out[i] = part.view(tensors[i].shape)
    return out  # type: ignore[return-value]


def _by_source(jobs: list, pristine: PristineRows) -> list[list]:
    """The jobs in two streams: rows from the checkpoint, then rows from host copies (a model built in memory)."""
    from_file = [job for job in jobs if pristine.stored_name(job[0].name) is not None]
    from_host = [job for job in jobs if pristine.stored_name(job[0].name) is None]
    return [batch for batch in (from_file, from_host) if batch]


def _in_place(module: nn.Module, start: int, stop: int, dtype: torch.dtype) -> torch.Tensor | None:
    """The bytes of a bf16 layer's rows start:stop, where pristine rows of `dtype` can be copied as they are."""
    if isinstance(module, QuantizedLinear) or module.weight.dtype != dtype:
        return None
    rows = module.weight[start:stop]
    return rows.view(-1).view(torch.uint8) if rows.is_contiguous() else None


def _write_rows(module: nn.Module, start: int, stop: int, rows: torch.Tensor) -> None:
    """Rows start:stop of a layer's weight := rows (rounded to its dtype, or quantized for an int8 layer)."""
    if isinstance(module, QuantizedLinear):
        quantize_rows(rows, module.values[start:stop], module.scales[start:stop])
    else:
        module.weight[start:stop].copy_(rows)


def _row_chunks(module: nn.Module, source_dtype: torch.dtype) -> Iterator[tuple[int, int]]:
    """A layer's rows in chunks of at most MERGE_CHUNK_ELEMENTS, and at most a reader slot's bytes of `source_dtype`."""
    elements = min(MERGE_CHUNK_ELEMENTS, SLOT_BYTES // source_dtype.itemsize)
    return row_chunks(module.out_features, module.in_features, elements)


def _same_base(adapter_base: str, model_id: str) -> bool:
    """Compare Hub ids (or folder names) case-insensitively, ignoring a local path's parents."""
    def norm(value: str) -> str:
        return value.replace("\\", "/").rstrip("/").lower()

    a, b = norm(adapter_base), norm(model_id)
    return a == b or a.endswith("/" + b.split("/")[-1]) and b.split("/")[-1] == a.split("/")[-1]
