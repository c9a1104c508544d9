"""Where the model comes from: a local folder in the Hub layout, or a Hub repo id.

Downloads go through huggingface_hub into the app's own data folder (platformdirs), resume after a
cancel or a restart (files already downloaded are kept; huggingface_hub 2.x starts a partly downloaded
file over), and report progress in bytes.
Before anything is loaded, a folder is checked and every missing or broken file is named.
"""

from __future__ import annotations

import json
import math
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from engine import paths
from engine.errors import DownloadCancelled, ModelFilesError, ModelNotFoundError, Problem
from engine.protocol import Progress
from engine.constants import MODEL_REPO_ID as DEFAULT_REPO_ID

MIMI_CHECKPOINT = "tokenizer-e351c8d8-checkpoint125.safetensors"
# The files of a model repository the app reads (check_model_folder, liquid-audio's from_pretrained and
# transformers' AutoTokenizer); a download fetches only these, not the repository's demo media or README.
# The Mimi checkpoint is the fallback audio decoder: fetched only when the repository has no detokenizer.
MODEL_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "audio_detokenizer/config.json",
    "audio_detokenizer/model.safetensors",
)
_REQUIRED_CONFIG_KEYS = ("codebooks", "interleaved_n_text", "interleaved_n_audio", "preprocessor", "encoder", "lfm", "depthformer")

ProgressCallback = Callable[[Progress], None]


def default_model_source() -> str:
    return DEFAULT_REPO_ID


def models_dir() -> Path:
    """The Hugging Face cache the app downloads into (kept by the uninstaller unless the user agrees)."""
    return paths.models_dir()


def looks_like_repo_id(source: str) -> bool:
    parts = source.split("/")
    return len(parts) == 2 and all(parts) and not Path(source).expanduser().exists() and "\\" not in source


# --------------------------------------------------------------------------- checking a folder


def check_model_folder(folder: str | Path) -> list[Problem]:
    """Name every missing or broken file; an empty list means the folder can be loaded."""
    folder = Path(folder)
    if not folder.is_dir():
        return [Problem("{folder} is not a folder", folder=folder)]
    problems: list[Problem] = []
    config = _check_config(folder / "config.json", problems)
    _check_weights(folder, config, problems)
    if not ((folder / "tokenizer.json").is_file() or (folder / "tokenizer.model").is_file()):
        problems.append(Problem("{file} is missing", file="tokenizer.json"))
    elif (folder / "tokenizer.json").is_file():
        _check_json_object(folder / "tokenizer.json", "tokenizer.json", problems)
    if not (folder / "tokenizer_config.json").is_file():
        problems.append(Problem("{file} is missing", file="tokenizer_config.json"))
    else:
        _check_json_object(folder / "tokenizer_config.json", "tokenizer_config.json", problems)
    _check_audio_decoder(folder, problems)
    return problems


def _check_json_object(path: Path, label: str, problems: list[Problem]) -> None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        problems.append(Problem("{file} is not valid JSON ({error})", file=label, error=error))
        return
    if not isinstance(data, dict):
        problems.append(Problem("{file} does not hold a JSON object", file=label))


def _check_config(path: Path, problems: list[Problem]) -> dict[str, Any] | None:
    if not path.is_file():
        problems.append(Problem("{file} is missing", file="config.json"))
        return None
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
        problems.append(Problem("{file} is not valid JSON ({error})", file="config.json", error=error))
        return None
    if not isinstance(config, dict):
        problems.append(Problem("{file} does not hold a JSON object", file="config.json"))
        return None
    missing = [key for key in _REQUIRED_CONFIG_KEYS if key not in config]
    if missing:
        problems.append(Problem("{file} lacks {keys}", file="config.json", keys=", ".join(missing)))
        return None
    nested = check_model_config(config)
    if nested:
        problems.extend(nested)
        return None
    return config


def _check_weights(folder: Path, config: dict[str, Any] | None, problems: list[Problem]) -> None:
    path = folder / "model.safetensors"
    if not path.is_file():
        problems.append(Problem("{file} (the weights) is missing", file="model.safetensors"))
        return
    header = _read_safetensors_header(path, "model.safetensors", problems)
    if header is None or config is None:
        return
    expected = _expected_weight_shapes(config, problems)
    if expected is None:
        return
    missing = sorted(name for name in expected if name not in header.shapes and not _stored_as_tied(name, header))
    wrong = sorted(
        f"{name} {list(header.shapes[name])} (expected {list(shape)})"
        for name, shape in expected.items()
        if name in header.shapes and tuple(header.shapes[name]) != tuple(shape)
    )
    if missing:
        problems.append(
            Problem("{file} lacks {count} tensors (e.g. {names})", file="model.safetensors", count=len(missing), names=", ".join(missing[:3]))
        )
    if wrong:
        problems.append(
            Problem("{file} has tensors of the wrong shape for config.json: {tensors}", file="model.safetensors", tensors=", ".join(wrong[:3]))
        )


class _Header:
    def __init__(self, shapes: dict[str, tuple[int, ...]], metadata: dict[str, str]) -> None:
        self.shapes = shapes
        self.metadata = metadata


def _read_safetensors_header(path: Path, label: str, problems: list[Problem]) -> _Header | None:
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            metadata = f.metadata() or {}
            shapes = {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}
    except Exception as error:  # safetensors raises its own error types for truncated/corrupt files
        problems.append(Problem("{file} is unreadable (truncated or corrupt: {error})", file=label, error=error))
        return None
    if metadata.get("format") != "pt":
        problems.append(Problem('{file} lacks the {{"format": "pt"}} metadata that the loader requires', file=label))
    expected_size = _safetensors_payload_end(path)
    if expected_size is not None and path.stat().st_size < expected_size:
        problems.append(Problem("{file} is truncated ({size} of {expected} bytes)", file=label, size=path.stat().st_size, expected=expected_size))
    return _Header(shapes, metadata)


def _safetensors_payload_end(path: Path) -> int | None:
    """The file size the header promises (8-byte length + header + the last tensor's end offset)."""
    from engine.model.checkpoint import read_safetensors_header

    try:
        data_start, entries = read_safetensors_header(path)
    except (OSError, ValueError):
        return None
    return data_start + max((entry["data_offsets"][1] for entry in entries.values()), default=0)


_EXPECTED_CACHE: dict[str, dict[str, tuple[int, ...]]] = {}


def _buffers_to(model: Any, device: Any, dtype: Any) -> Any:
    """`model.to(device, dtype)` for a model some of whose parameters are still on meta (which `.to` cannot
    move): the same conversion `Module.to` applies, to every tensor but those."""

    def convert(t: Any) -> Any:
        return t if t.is_meta else t.to(device, dtype if t.is_floating_point() or t.is_complex() else None)

    return model._apply(convert)


def _stored_as_tied(name: str, header: _Header) -> bool:
    """liquid-audio's SharedEmbedding ties `to_logits.weight` to `embedding.weight`; checkpoints store it once."""
    if not name.endswith("to_logits.weight"):
        return False
    sibling = name.removesuffix("to_logits.weight") + "embedding.weight"
    return sibling in header.shapes


def _expected_weight_shapes(config: dict[str, Any], problems: list[Problem]) -> dict[str, tuple[int, ...]] | None:
    """Build the model on the meta device (no memory, no time) and list the tensors it expects."""
    key = json.dumps(config, sort_keys=True)
    if key in _EXPECTED_CACHE:
        return _EXPECTED_CACHE[key]
    try:
        import torch

        model = build_model_from_config(config, device=torch.device("meta"))
    except Exception as error:  # a config liquid-audio cannot build a model from
        problems.append(Problem("{file} does not describe a model liquid-audio can build ({error})", file="config.json", error=error))
        return None
    shapes = {name: tuple(tensor.shape) for name, tensor in model.state_dict(keep_vars=True).items()}
    _EXPECTED_CACHE[key] = shapes
    return shapes


def _expected_detokenizer_shapes(config: dict[str, Any], problems: list[Problem]) -> dict[str, tuple[int, ...]] | None:
    key = "detokenizer:" + json.dumps(config, sort_keys=True)
    if key in _EXPECTED_CACHE:
        return _EXPECTED_CACHE[key]
    try:
        model = build_detokenizer_from_config(config, device="meta")
    except Exception as error:  # a config liquid-audio cannot build its detokenizer from
        problems.append(Problem("{file} does not describe a model liquid-audio can build ({error})",
                                file="audio_detokenizer/config.json", error=error))
        return None
    shapes = {name: tuple(tensor.shape) for name, tensor in model.named_parameters()}
    _EXPECTED_CACHE[key] = shapes
    return shapes


def build_model_from_config(
    config: dict[str, Any], *, device: Any, dtype: Any = None, empty_parameters: bool = False, left_on_meta: Any = None
) -> Any:
    """Construct `LFM2AudioModel` from a config.json dict exactly as liquid-audio's from_pretrained does.

    With `empty_parameters` the parameters are allocated once, uninitialised, in `dtype` (the caller fills
    them from a checkpoint) instead of initialised in float32 and cast: the buffers are the same.
    `left_on_meta` (with `empty_parameters`): model → names of parameters that stay on meta (the caller
    replaces their modules, e.g. with int8 ones)."""
    import copy

    import torch
    from accelerate import init_on_device
    from liquid_audio.model.conformer.encoder import ConformerEncoderConfig
    from liquid_audio.model.lfm2_audio import DepthformerConfig, LFM2AudioConfig, LFM2AudioModel
    from transformers import Lfm2Config

    raw = copy.deepcopy(config)
    raw.pop("audio_detokenizer", None)  # lives in audio_detokenizer/config.json in the real repository
    conf = LFM2AudioConfig(
        lfm=Lfm2Config(**raw.pop("lfm")),
        encoder=ConformerEncoderConfig(**raw.pop("encoder")),
        depthformer=DepthformerConfig(**raw.pop("depthformer")),
        **raw,
    )
    device = torch.device(device)
    if empty_parameters:
        from engine.model.checkpoint import materialize_parameters, parameters_on_meta

        with init_on_device(device, include_buffers=True), parameters_on_meta():
            model = LFM2AudioModel(conf)
        skip = set(left_on_meta(model)) if left_on_meta is not None else set()
        materialize_parameters(model, device=device, dtype=dtype or torch.float32, skip=skip)
        # The conformer computes its positional encodings on its parameters' device (meta above): again, now
        # that they are real (float32 then cast, as from_pretrained gets them).
        del model.conformer.pos_enc.pe  # (extend_pe keeps an encoding that is long enough, real or not)
        model.conformer.set_max_audio_length(model.conformer.pos_emb_max_len)
        unset = [name for name, buffer in model.named_buffers() if buffer.is_meta]
        if unset:
            raise RuntimeError(f"buffers computed from the parameters' device were left on meta: {unset}")
        # The buffers, as from_pretrained moves and casts them; the parameters are already in place (or on meta).
        return model.to(device=device, dtype=dtype) if not skip else _buffers_to(model, device, dtype)
    # On the meta device only parameters go there: liquid-audio computes some buffers with .item().
    with init_on_device(device, include_buffers=device.type != "meta"):
        model = LFM2AudioModel(conf)
    if device.type != "meta":
        # Like liquid-audio's from_pretrained: some tensors are made with legacy constructors on the CPU.
        model = model.to(device=device)
    if dtype is not None:
        model = model.to(dtype=dtype)
    return model


def _check_audio_decoder(folder: Path, problems: list[Problem]) -> None:
    detok = folder / "audio_detokenizer"
    if detok.is_dir():
        config: dict[str, Any] | None = None
        if not (detok / "config.json").is_file():
            problems.append(Problem("{file} is missing", file="audio_detokenizer/config.json"))
        else:
            try:
                config = json.loads((detok / "config.json").read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as error:
                problems.append(Problem("{file} is not valid JSON ({error})", file="audio_detokenizer/config.json", error=error))
            else:
                config_problems = check_detokenizer_config(config)
                problems.extend(config_problems)
                if config_problems:
                    config = None
        weights = detok / "model.safetensors"
        if not weights.is_file():
            problems.append(Problem("{file} is missing", file="audio_detokenizer/model.safetensors"))
            return
        label = "audio_detokenizer/model.safetensors"
        header = _read_safetensors_header(weights, label, problems)
        if header is None or config is None:
            return
        expected = _expected_detokenizer_shapes(config, problems)
        if expected is None:
            return
        missing = sorted(name for name in expected if name not in header.shapes)
        wrong = sorted(
            f"{name} {list(header.shapes[name])} (expected {list(shape)})"
            for name, shape in expected.items()
            if name in header.shapes and tuple(header.shapes[name]) != tuple(shape)
        )
        if missing:
            problems.append(Problem("{file} lacks {count} tensors (e.g. {names})", file=label, count=len(missing), names=", ".join(missing[:3])))
        if wrong:
            problems.append(Problem("{file} has tensors of the wrong shape for config.json: {tensors}", file=label, tensors=", ".join(wrong[:3])))
    elif not (folder / MIMI_CHECKPOINT).is_file():
        problems.append(Problem("the audio decoder is missing (neither audio_detokenizer/ nor {file})", file=MIMI_CHECKPOINT))


# --------------------------------------------------------------------------- checking config.json
# The loader builds liquid-audio's config dataclasses and transformers' Lfm2Config from these
# dicts, and some values size buffers computed while the model is built (even on the meta device).
# So each nested value is checked against the type those classes declare and a generous range,
# before anything is built from it.

_INT_LIMIT = 1 << 20
# (low, high) for the keys whose size decides memory or time while the model is built.
_CONFIG_RANGES: dict[str, tuple[float, float]] = {
    "codebooks": (1, 64),
    "interleaved_n_text": (1, 64),
    "interleaved_n_audio": (1, 64),
    "preprocessor.sample_rate": (16000, 16000),  # the app records at 16 kHz and feeds that rate as it is
    "preprocessor.n_fft": (16, 8192),
    "preprocessor.features": (1, 1024),
    "preprocessor.window_size": (1e-3, 1.0),
    "preprocessor.window_stride": (1e-3, 1.0),
    "preprocessor.frame_splicing": (1, 16),
    "preprocessor.dither": (0.0, 1.0),
    "preprocessor.pad_to": (0, 1024),
    "encoder.n_layers": (1, 256),
    "encoder.d_model": (1, 16384),
    "encoder.n_heads": (1, 1024),
    "encoder.pos_emb_max_len": (1, 100_000),
    "encoder.subsampling_factor": (1, 64),
    "encoder.subsampling_conv_channels": (1, 16384),
    "encoder.ff_expansion_factor": (1, 64),
    "encoder.conv_kernel_size": (1, 1024),
    "encoder.reduction_factor": (1, 64),
    "lfm.num_hidden_layers": (1, 256),
    "lfm.hidden_size": (1, 65536),
    "lfm.intermediate_size": (1, 262144),
    "lfm.num_attention_heads": (1, 1024),
    "lfm.num_key_value_heads": (1, 1024),
    "lfm.vocab_size": (1, _INT_LIMIT),
    "lfm.max_position_embeddings": (1, _INT_LIMIT),
    "lfm.conv_L_cache": (1, 1024),
    "lfm.rope_theta": (1.0, 1e12),
    "depthformer.layers": (1, 64),
    "depthformer.dim": (32, 16384),
}
for _name in ("dropout", "dropout_pre_encoder", "dropout_emb", "dropout_att"):
    _CONFIG_RANGES[f"encoder.{_name}"] = (0.0, 1.0)
_DETOKENIZER_RANGES: dict[str, tuple[float, float]] = {
    "num_hidden_layers": (1, 256),
    "hidden_size": (512, 512),  # liquid-audio's detokenizer is 512 wide around the backbone
    "intermediate_size": (1, 262144),
    "num_attention_heads": (1, 1024),
    "num_key_value_heads": (1, 1024),
    "vocab_size": (1, _INT_LIMIT),
    "max_position_embeddings": (1, _INT_LIMIT),
    "conv_L_cache": (1, 1024),
    "sliding_window": (1, 65536),  # sizes a mask built on every decode
}
_LAYER_TYPES = ("conv", "full_attention")
_WINDOWS = ("hann", "hamming", "blackman", "bartlett")
_NORMALIZATIONS = ("per_feature", "all_features")
_DETOKENIZER_LAYER_TYPES = ("conv", "full_attention", "sliding_attention")


def _describe(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)[:60]


def _check_value(file: str, key: str, value: Any, kind: Any, ranges: dict[str, tuple[float, float]], short: str,
                 problems: list[Problem]) -> None:
    """One value against the type its config class declares (`kind`) and its range."""
    import types
    import typing

    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if value is None:
            return
        kind = options[0] if len(options) == 1 else Any
        origin = typing.get_origin(kind)
    if origin is typing.Literal:
        if value not in typing.get_args(kind):
            choices = ", ".join(str(c) for c in typing.get_args(kind))
            problems.append(Problem("{file}: {key} must be one of {choices} (it is {value})", file=file, key=key,
                                    choices=choices, value=_describe(value)))
        return
    if kind is bool:
        if not isinstance(value, bool):
            problems.append(Problem("{file}: {key} must be true or false (it is {value})", file=file, key=key, value=_describe(value)))
        return
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(Problem("{file}: {key} must be a whole number (it is {value})", file=file, key=key, value=_describe(value)))
            return
    elif kind is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            problems.append(Problem("{file}: {key} must be a number (it is {value})", file=file, key=key, value=_describe(value)))
            return
    elif kind is str:
        if not isinstance(value, str):
            problems.append(Problem("{file}: {key} must be text (it is {value})", file=file, key=key, value=_describe(value)))
        return
    elif origin is list or kind is list:
        if not isinstance(value, list):
            problems.append(Problem("{file}: {key} must be a list (it is {value})", file=file, key=key, value=_describe(value)))
        elif any(isinstance(item, (int, float)) and not isinstance(item, bool) and abs(item) > _INT_LIMIT for item in _flatten(value)):
            problems.append(Problem("{file}: {key} must be from {low} to {high} (it is {value})", file=file, key=key,
                                    low=-_INT_LIMIT, high=_INT_LIMIT, value=_describe(value)))
        return
    else:
        return
    low, high = ranges.get(short, (-_INT_LIMIT, _INT_LIMIT) if kind is int else (-1e12, 1e12))
    if not low <= value <= high:
        problems.append(Problem("{file}: {key} must be from {low} to {high} (it is {value})", file=file, key=key,
                                low=f"{low:g}", high=f"{high:g}", value=_describe(value)))


def _flatten(value: Any) -> list[Any]:
    if isinstance(value, list):
        return [item for part in value for item in _flatten(part)]
    return [value]


def _check_section(file: str, prefix: str, section: Any, declared: dict[str, Any], required: bool,
                   ranges: dict[str, tuple[float, float]], problems: list[Problem]) -> None:
    """Every declared field of one config class: present (when it has no default) and well typed."""
    for name, kind in declared.items():
        key = f"{prefix}{name}"
        if name not in section:
            if required:
                problems.append(Problem("{file} lacks {keys}", file=file, keys=key))
            continue
        _check_value(file, key, section[name], kind, ranges, key if file == "config.json" else name, problems)


def _dataclass_fields(cls: type) -> dict[str, Any]:
    import dataclasses
    import typing

    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _lfm2_fields(section: dict[str, Any]) -> dict[str, Any]:
    """transformers' Lfm2Config declares its types through its defaults: the type of each default."""
    from transformers import Lfm2Config

    defaults = Lfm2Config().to_dict()
    fields: dict[str, Any] = {}
    for name, default in defaults.items():
        if name not in section or default is None:
            continue
        fields[name] = bool if isinstance(default, bool) else int if isinstance(default, int) else (
            float if isinstance(default, float) else str if isinstance(default, str) else list if isinstance(default, list) else None)
    return {k: v for k, v in fields.items() if v is not None}


def check_model_config(config: dict[str, Any]) -> list[Problem]:
    """Everything the loader relies on in config.json, down to the nested keys; [] when it can be built."""
    from liquid_audio.model.conformer.encoder import ConformerEncoderConfig
    from liquid_audio.model.lfm2_audio import DepthformerConfig
    from liquid_audio.processor import PreprocessorConfig

    file = "config.json"
    problems: list[Problem] = []
    top = {"codebooks": int, "interleaved_n_text": int, "interleaved_n_audio": int}
    _check_section(file, "", config, top, True, _CONFIG_RANGES, problems)
    sections = {"preprocessor": PreprocessorConfig, "encoder": ConformerEncoderConfig, "depthformer": DepthformerConfig}
    for name in ("preprocessor", "encoder", "lfm", "depthformer"):
        section = config.get(name)
        if not isinstance(section, dict):
            problems.append(Problem("{file}: {key} must be an object (it is {value})", file=file, key=name, value=_describe(section)))
            continue
        if name == "lfm":
            fields = _lfm2_fields(section)
            for key in _CONFIG_RANGES:
                if key.startswith("lfm.") and key[4:] in section:
                    fields.setdefault(key[4:], float if isinstance(_CONFIG_RANGES[key][0], float) else int)
            _check_section(file, "lfm.", section, fields, False, _CONFIG_RANGES, problems)
            _check_layer_types(file, "lfm.", section, _LAYER_TYPES, problems)
        else:
            _check_section(file, f"{name}.", section, _dataclass_fields(sections[name]), True, _CONFIG_RANGES, problems)
    if problems:
        return problems
    # liquid-audio builds no window for another name (and fails mid-turn), and skips the normalisation
    # the model was trained with for another normalisation name.
    for key, choices in (("window", _WINDOWS), ("normalize", _NORMALIZATIONS)):
        if config["preprocessor"][key] not in choices:
            problems.append(Problem("{file}: {key} must be one of {choices} (it is {value})", file=file,
                                    key=f"preprocessor.{key}", choices=", ".join(choices),
                                    value=_describe(config["preprocessor"][key])))
    if problems:
        return problems
    if config["preprocessor"]["features"] != config["encoder"]["feat_in"]:
        problems.append(Problem("{file}: {key} must be {expected} (it is {value})", file=file, key="preprocessor.features",
                                expected=config["encoder"]["feat_in"], value=config["preprocessor"]["features"]))
        return problems
    try:
        _build_preprocessor(config["preprocessor"])
    except Exception as error:  # the mel front end refuses a value (unknown window, normalisation...)
        problems.append(Problem("{file} does not describe a model liquid-audio can build ({error})", file=file, error=f"preprocessor: {error}"))
    return problems


def _check_layer_types(file: str, prefix: str, section: dict[str, Any], allowed: tuple[str, ...], problems: list[Problem]) -> None:
    layer_types = section.get("layer_types")
    if layer_types is None:
        return
    if not isinstance(layer_types, list) or any(t not in allowed for t in layer_types):
        problems.append(Problem("{file}: {key} must be one of {choices} (it is {value})", file=file, key=f"{prefix}layer_types",
                                choices=", ".join(allowed), value=_describe(layer_types)))
    elif isinstance(section.get("num_hidden_layers"), int) and len(layer_types) != section["num_hidden_layers"]:
        problems.append(Problem("{file}: {key} has {count} entries, but {layers_key} is {layers}", file=file,
                                key=f"{prefix}layer_types", count=len(layer_types), layers_key=f"{prefix}num_hidden_layers",
                                layers=section["num_hidden_layers"]))


_PREPROCESSOR_CACHE: set[str] = set()


def _build_preprocessor(section: dict[str, Any]) -> None:
    """Build liquid-audio's own mel front end from the section (as LFM2AudioProcessor does), once per config."""
    from dataclasses import asdict

    from liquid_audio.model.conformer.processor import AudioToMelSpectrogramPreprocessor
    from liquid_audio.processor import PreprocessorConfig

    key = json.dumps(section, sort_keys=True)
    if key in _PREPROCESSOR_CACHE:
        return
    AudioToMelSpectrogramPreprocessor(**asdict(PreprocessorConfig(**section)))
    _PREPROCESSOR_CACHE.add(key)


def check_detokenizer_config(config: Any, file: str = "audio_detokenizer/config.json") -> list[Problem]:
    if not isinstance(config, dict):
        return [Problem("{file} does not hold a JSON object", file=file)]
    problems: list[Problem] = []
    fields = _lfm2_fields(config)
    for name in _DETOKENIZER_RANGES:  # keys whose default is None declare no type: they are counts
        if name in config:
            fields.setdefault(name, int)
    _check_section(file, "", config, fields, False, _DETOKENIZER_RANGES, problems)
    _check_layer_types(file, "", config, _DETOKENIZER_LAYER_TYPES, problems)
    return problems


def build_detokenizer_from_config(config: dict[str, Any], *, device: Any) -> Any:
    """liquid-audio's audio detokenizer built from its config.json dict, as its processor does."""
    import torch
    from accelerate import init_on_device
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from transformers import Lfm2Config

    conf = Lfm2Config(**config)
    conf.layer_types = ["full_attention" if t == "sliding_attention" else t for t in conf.layer_types]
    device = torch.device(device)
    with init_on_device(device, include_buffers=device.type != "meta"):
        return LFM2AudioDetokenizer(conf)


# --------------------------------------------------------------------------- Hub


def is_offline(timeout_s: float = 1.5) -> bool:
    """True when the Hub cannot be reached (HF_HUB_OFFLINE set, or no connection)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return True
    try:
        endpoint = urlsplit(constants.ENDPOINT)
        host = endpoint.hostname
        port = endpoint.port or (80 if endpoint.scheme == "http" else 443)
    except ValueError:  # a malformed HF_ENDPOINT (e.g. a port that is not a number)
        return True
    if not host:
        return True
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return False
    except OSError:
        return True


def cached_snapshot(repo_id: str, revision: str | None = None, cache_dir: Path | None = None) -> Path | None:
    """The snapshot folder huggingface_hub has cached for `repo_id` (in the app's store unless `cache_dir`
    is given), or None when it has none. The one way the app looks a downloaded model up."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        # The same files as `download` fetches (huggingface_hub checks them against its cached file list).
        return Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir or models_dir(),
                                      local_files_only=True, allow_patterns=list(MODEL_FILES)))
    except (LocalEntryNotFoundError, OSError, ValueError):
        return None


def interrupted_downloads(repo_id: str, cache_dir: Path | None = None) -> int:
    """How many partly downloaded files huggingface_hub left for `repo_id`; the next download resumes them."""
    from huggingface_hub.file_download import repo_folder_name

    blobs = (cache_dir or models_dir()) / repo_folder_name(repo_id=repo_id, repo_type="model") / "blobs"
    return len(list(blobs.glob("*.incomplete"))) if blobs.is_dir() else 0


def find_local_model(source: str, revision: str | None = None) -> Path | None:
    """The folder for `source` if it is a local folder or already fully downloaded, else None."""
    path = Path(source).expanduser()
    if path.is_dir():
        return path
    if not looks_like_repo_id(source):
        return None
    folder = cached_snapshot(source, revision)
    # check_model_folder also checks the audio decoder (the detokenizer, or Mimi's checkpoint).
    return folder if folder is not None and not check_model_folder(folder) else None


def download(
    source: str,
    revision: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
) -> Path:
    """Download a Hub repo into the app's model store, reporting bytes; files finished before a cancel are kept."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    # hf_xet reads this when huggingface_hub creates its session (on the first download): its logs
    # and caches then stay in the app's folder, which the uninstaller can remove. A user's own wins.
    os.environ.setdefault("HF_XET_CACHE", str(paths.hub_xet_cache_dir()))
    if is_offline():
        raise ModelNotFoundError.of(
            "{source} is not downloaded and there is no network connection. "
            "Connect to the internet, choose a local model folder, or use the demo model.",
            source=source,
        )
    try:
        folder = snapshot_download(
            source,
            revision=revision,
            cache_dir=models_dir(),
            tqdm_class=_byte_progress_class(progress, cancel),
            allow_patterns=list(MODEL_FILES),
        )
        if not (Path(folder) / "audio_detokenizer").is_dir():  # an older layout: Mimi decodes the audio
            folder = snapshot_download(
                source,
                revision=Path(folder).name,  # the commit just downloaded, even if the branch moved since
                cache_dir=models_dir(),
                tqdm_class=_byte_progress_class(progress, cancel),
                allow_patterns=[MIMI_CHECKPOINT],
            )
    except DownloadCancelled:
        raise
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as error:
        raise ModelNotFoundError.of("Downloading {source} failed: {error}", source=source, error=error) from error
    folder_path = Path(folder)
    problems = check_model_folder(folder_path)
    if problems:
        raise ModelFilesError(folder_path, problems)
    return folder_path


def fetch_audio_tokenizer(
    source: str, folder: Path, progress: ProgressCallback | None = None, cancel: threading.Event | None = None
) -> Path:
    """Make sure the audio tokenizer's checkpoint (Mimi) is in `folder`, the model `source` resolved to: training a
    voice encodes speech with it. A Hub model gets the file downloaded into its snapshot (the same commit); a
    local folder without it is refused by the caller. Returns the folder that holds it."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    if (folder / MIMI_CHECKPOINT).is_file() or not looks_like_repo_id(source) or Path(source).expanduser().exists():
        return folder
    os.environ.setdefault("HF_XET_CACHE", str(paths.hub_xet_cache_dir()))
    try:
        fetched = snapshot_download(source, revision=folder.name, cache_dir=models_dir(),
                                    tqdm_class=_byte_progress_class(progress, cancel), allow_patterns=[MIMI_CHECKPOINT])
    except DownloadCancelled:
        raise
    except (HfHubHTTPError, LocalEntryNotFoundError, OSError) as error:
        raise ModelNotFoundError.of("Downloading {file} of {source} failed: {error}", file=MIMI_CHECKPOINT, source=source,
                                    error=error) from error
    return Path(fetched)


class _NullWriter:
    """A text stream that drops what tqdm writes."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


def _byte_progress_class(progress: ProgressCallback | None, cancel: threading.Event | None) -> type:
    """A tqdm class that forwards huggingface_hub's byte counters to `progress` and honours `cancel`."""
    from tqdm.auto import tqdm

    class ByteProgress(tqdm):  # type: ignore[misc, valid-type]
        monitor_interval = 0  # no tqdm monitor thread for bars nobody sees

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            # No console output, but not `disable=True`: a disabled tqdm never counts (`n` stays 0) and
            # lacks `desc` and the timing state that huggingface_hub reads (`format_dict`, Xet downloads).
            kwargs["disable"] = False
            kwargs["file"] = _NullWriter()
            super().__init__(*args, **kwargs)
            self._is_bytes = kwargs.get("unit") == "B"

        def update(self, n: float | None = 1) -> bool | None:
            if cancel is not None and cancel.is_set():
                raise DownloadCancelled()
            result = super().update(n)
            if progress is not None and self._is_bytes:
                total = int(self.total) if self.total else None
                done = int(self.n)
                progress(
                    Progress(
                        stage="download",
                        fraction=(done / total) if total else None,
                        detail=str(self.desc or ""),
                        done_bytes=done,
                        total_bytes=total,
                    )
                )
            return result

    return ByteProgress


def resolve_model(
    source: str,
    *,
    revision: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    allow_download: bool = True,
) -> Path:
    """A checked local folder for `source` (a folder or a Hub repo id), downloading it if allowed."""
    path = Path(source).expanduser()
    if path.exists() or os.sep in source and not looks_like_repo_id(source):
        if revision is not None:
            raise ModelNotFoundError("A revision can only be pinned for a Hub repo id, not for a folder.")
        problems = check_model_folder(path)
        if problems:
            raise ModelFilesError(path, problems)
        return path
    if not looks_like_repo_id(source):
        raise ModelNotFoundError.of("{source} is neither a model folder nor a Hub repo id like {example}.",
                                    source=source, example=DEFAULT_REPO_ID)
    local = find_local_model(source, revision)
    if local is not None:
        return local
    if not allow_download:
        raise ModelNotFoundError.of("{source} is not downloaded yet.", source=source)
    return download(source, revision, progress, cancel)
