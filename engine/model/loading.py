"""Load LFM2-Audio as liquid-audio's own `from_pretrained` paths build it, on CUDA or on the CPU.

The model and the audio detokenizer are constructed by liquid-audio's classes exactly as its loaders do,
but their parameters are made on the meta device and filled straight from the checkpoint files
(engine/model/checkpoint.py): no float32 copy of the model, no random initialisation that the weights
overwrite. The processor (tokenizer, log-mel preprocessor) comes from liquid-audio's own
`LFM2AudioProcessor.from_pretrained`.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from engine.errors import GpuMemoryError, ModelFilesError, Problem
from engine.model.checkpoint import (
    CheckpointTensors,
    MissingWeights,
    fill_from_checkpoint,
    materialize_parameters,
    parameters_on_meta,
)
from engine.model.quantized import Precision, quantize_model, quantized_module_names
from engine.model.row_reads import RowReader
from engine.model.store import build_model_from_config, check_model_folder

if TYPE_CHECKING:
    from liquid_audio import LFM2AudioModel, LFM2AudioProcessor

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A loaded model with everything the generation code needs to know about it."""

    model: LFM2AudioModel
    processor: LFM2AudioProcessor
    folder: Path
    name: str
    device: torch.device
    dtype: torch.dtype
    interleaved_n_text: int
    interleaved_n_audio: int
    codebooks: int
    # The memory-mapped checkpoint the weights were loaded from: where a voice switch reads the pristine
    # weights back. None for a model built in memory (the benchmark's random model).
    weights: CheckpointTensors | None = None
    # The threads and pinned slots that read it (engine/model/row_reads.py): kept for the voice switches.
    reader: RowReader | None = None
    # "int8": the large matrices are int8 with per-row scales (engine/model/quantized.py), and the audio
    # detokenizer's transformer is bfloat16 (`detokenizer_dtype`).
    precision: Precision = "bf16"

    @property
    def uses_mimi(self) -> bool:
        """True when the folder has no LFM2 detokenizer and audio is decoded with Mimi instead."""
        return self.processor.detokenizer_path is None


def default_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def use_expandable_cuda_segments() -> bool:
    """Let PyTorch's caching allocator grow and shrink its segments in pages (expandable segments).

    With whole-allocation segments, every freed weight smaller than a segment (the projections that
    the real-time engine fuses into one matrix, the loader's temporaries) leaves a hole that no
    later allocation fits and `empty_cache()` cannot return: measured on the H200, ~0.9 GB held
    but unused after loading the full-size model. Applies to segments made from now on, so call it
    before the model is loaded. A setting the user gave in PYTORCH_CUDA_ALLOC_CONF wins. Returns
    whether the setting is on."""
    import os

    if not torch.cuda.is_available() or os.environ.get("PYTORCH_CUDA_ALLOC_CONF"):
        return False
    try:
        torch.cuda.memory._set_allocator_settings("expandable_segments:True")
    except (AttributeError, RuntimeError) as error:  # an older torch, or a platform without them
        log.info("expandable CUDA segments not available: %s", error)
        return False
    return True


def default_dtype(device: torch.device) -> torch.dtype:
    # bf16 is what the model was trained in and what the GPU path is built for; CPUs get float32,
    # which is both faster there and the precision the reference tests compare in.
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def load_model(
    folder: str | Path,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
    name: str | None = None,
    precision: Precision = "bf16",
) -> LoadedModel:
    """Load model, processor and audio decoder from a checked folder in the Hub layout.

    Raises ModelFilesError naming what is missing or broken, and GpuMemoryError when the GPU is
    too small; the caller keeps running in both cases.
    """
    folder = Path(folder)
    device = torch.device(device) if device is not None else default_device()
    dtype = dtype or default_dtype(device)
    problems = check_model_folder(folder)
    if problems:
        raise ModelFilesError(folder, problems)

    reader = RowReader(device)  # kept for the voice switches (LoadedModel.reader)
    try:
        model, weights, processor = _load_parts(folder, device=device, dtype=dtype, precision=precision, reader=reader)
    except BaseException:
        reader.close()
        raise

    with (folder / "config.json").open() as f:
        config = json.load(f)
    return LoadedModel(
        model=model,
        processor=processor,
        folder=folder,
        name=name or folder.name,
        device=device,
        dtype=dtype,
        interleaved_n_text=int(config["interleaved_n_text"]),
        interleaved_n_audio=int(config["interleaved_n_audio"]),
        codebooks=int(config["codebooks"]),
        weights=weights,
        reader=reader,
        precision=precision,
    )


def _load_parts(
    folder: Path, *, device: torch.device, dtype: torch.dtype, precision: Precision, reader: RowReader
) -> tuple[LFM2AudioModel, CheckpointTensors, LFM2AudioProcessor]:
    """The model, its checkpoint and the processor with its detokenizer; every failure as the error the user sees."""
    from liquid_audio import LFM2AudioProcessor

    # The tokenizer and the log-mel preprocessor (Python and tokenizers' own code) are built on a helper thread while
    # the weights are read (reader threads and DMA: this thread mostly waits).
    built: dict[str, object] = {}

    def build_processor() -> None:
        try:
            built["processor"] = LFM2AudioProcessor.from_pretrained(folder, device=device).eval()
        except BaseException as error:  # noqa: BLE001 - raised on the loading thread below
            built["error"] = error

    helper = threading.Thread(target=build_processor, name="processor", daemon=True)
    helper.start()
    try:
        try:
            model, weights = load_weights(folder, device=device, dtype=dtype, precision=precision, reader=reader)
        finally:
            helper.join()
        error = built.get("error")
        if isinstance(error, torch.OutOfMemoryError):
            raise error
        if error is not None:
            raise ModelFilesError(folder, [_tokenizer_problem(folder, error)]) from error  # type: ignore[arg-type]
        processor = built["processor"]
        if processor.detokenizer_path is not None:  # type: ignore[attr-defined]
            # Built now (not lazily mid-conversation), in the precision's dtypes (`detokenizer_dtype`).
            processor._audio_detokenizer = load_detokenizer(Path(processor.detokenizer_path), device=device,  # type: ignore[attr-defined]
                                                            precision=precision, reader=reader)
    except torch.OutOfMemoryError as error:
        _free_cuda_memory()
        raise GpuMemoryError.of(
            "The GPU ran out of memory while loading the model ({memory}). "
            "Close other programs that use the GPU, or use a GPU with more memory.",
            memory=_memory_summary(device),
        ) from error
    except ModelFilesError:
        raise
    except MissingWeights as error:
        raise ModelFilesError(folder, [Problem("{file} lacks {count} tensors (e.g. {names})", file="model.safetensors",
                                               count=len(error.names), names=", ".join(error.names[:3]))]) from error
    except Exception as error:  # the folder passed the check, so whatever fails here is a broken file
        raise ModelFilesError(folder, [Problem("loading failed: {error}", error=error)]) from error
    return model, weights, processor


def load_weights(
    folder: Path, *, device: torch.device, dtype: torch.dtype, precision: Precision = "bf16", reader: RowReader | None = None
) -> tuple[LFM2AudioModel, CheckpointTensors]:
    """liquid-audio's `LFM2AudioModel.from_pretrained`, less its float32 copy of the model: built as it
    builds it (buffers computed on the device), but with every parameter allocated once, in `dtype`, and
    filled straight from the memory-mapped checkpoint (engine/model/checkpoint.py). With "int8" the
    matrices `quantized_module_names` lists are never allocated in `dtype`: each is quantized from the
    checkpoint a chunk of rows at a time, straight into its int8 storage. `reader`: the threads and pinned slots
    that read the file (engine/model/row_reads.py; by default a reader of its own, closed afterwards)."""
    from liquid_audio.utils import module_exists

    with (folder / "config.json").open() as f:
        config = json.load(f)
    def left_on_meta(model: nn.Module) -> list[str]:  # what is never allocated in `dtype`
        names = [UNUSED_AUDIO_HEAD] if _audio_head_is_unused(model) else []
        return names + ([f"{name}.weight" for name in quantized_module_names(model)] if precision == "int8" else [])

    model = build_model_from_config(config, device=device, dtype=dtype, empty_parameters=True, left_on_meta=left_on_meta)
    dropped = drop_unused_audio_head(model)
    # As from_pretrained chooses it.
    model.lfm.set_attn_implementation("flash_attention_2" if module_exists("flash_attn") else "sdpa")
    weights = CheckpointTensors(folder / "model.safetensors")
    skip: tuple[str, ...] = (UNUSED_AUDIO_HEAD,) if dropped else ()
    own_reader = reader is None
    reader = reader or RowReader(device)
    try:
        if precision == "int8":
            names = {name: _stored_name(weights, f"{name}.weight") for name in quantized_module_names(model)}
            aliases = [alias for alias in _tied_aliases(model) if alias in weights]
            quantize_model(model, device=device, rows=lambda chunks: _checkpoint_rows(weights, reader, names, chunks))
            skip = (*skip, *names.values(), *aliases)
        fill_from_checkpoint(model, weights, skip=skip, reader=reader)
    finally:
        if own_reader:
            reader.close()
    return model.eval(), weights


def _checkpoint_rows(
    weights: CheckpointTensors, reader: RowReader, names: dict[str, str], chunks: Sequence[tuple[str, int, int]]
) -> Iterator[torch.Tensor]:
    """quantize_model's rows: each chunk of each module's weight (stored as `names` says) as it is in the file,
    read onto the device by `reader`."""
    reads = [weights.row_range(names[name], start, stop) for name, start, stop in chunks]
    for (name, start, stop), data in zip(chunks, reader.stream(reads), strict=True):
        yield data.view(weights.dtype(names[name])).view(stop - start, -1)


def _stored_name(weights: CheckpointTensors, name: str) -> str:
    """The name a weight has in the checkpoint: its own, or for a tied codebook table its logits head's."""
    alias = name.removesuffix("embedding.weight") + "to_logits.weight" if name.endswith(".embedding.weight") else name
    for candidate in (name, alias):
        if candidate in weights:
            return candidate
    raise MissingWeights([name])


def _tied_aliases(model: nn.Module) -> list[str]:
    """The other name a tied codebook table has in a checkpoint (its logits head's)."""
    return [f"depth_embeddings.{i}.to_logits.weight" for i in range(len(model.depth_embeddings))]


def load_detokenizer(folder: Path, *, device: torch.device, precision: Precision = "bf16", reader: RowReader | None = None) -> nn.Module:
    """The audio detokenizer as liquid-audio's `LFM2AudioProcessor.audio_detokenizer` builds it (its buffers
    computed on the CPU, then moved), less the random initialisation of its parameters on the CPU: they are
    made on meta, allocated once in the dtype `precision` gives them (`detokenizer_dtype`: all float32 for
    "bf16", as liquid-audio keeps it; the transformer in bfloat16 for "int8") and filled straight from
    audio_detokenizer/model.safetensors (a float32 tensor is cast on the host on its way, so no float32 copy
    of a bf16 parameter is ever made on the device), and the backbone's token table, which it never reads,
    is never made at all (`drop_unused_token_table`)."""
    from liquid_audio.detokenizer import LFM2AudioDetokenizer
    from transformers import Lfm2Config

    config = Lfm2Config.from_pretrained(folder / "config.json")
    config.layer_types = ["full_attention" if kind == "sliding_attention" else kind for kind in config.layer_types]
    with parameters_on_meta():
        detokenizer = LFM2AudioDetokenizer(config).eval()
    drop_unused_token_table(detokenizer)
    float32 = {name for name, _ in detokenizer.named_parameters() if name.startswith(DETOKENIZER_FLOAT32)}
    materialize_parameters(detokenizer, device=device, dtype=detokenizer_dtype(precision), skip=float32)
    materialize_parameters(detokenizer, device=device, dtype=torch.float32)  # what the first call left on meta
    detokenizer.to(device)  # the buffers, as liquid-audio's `.cuda()` moves them
    fill_from_checkpoint(detokenizer, CheckpointTensors(folder / "model.safetensors"), skip=(UNUSED_TOKEN_TABLE,), reader=reader)
    return set_detokenizer_precision(detokenizer, precision)


# What stays float32 in the detokenizer whatever the precision (names in its state dict): the output Linear
# (its log-magnitudes go through exp(), where a bf16 rounding would be a ~0.4 % error of every magnitude; it
# is 2.6 MB) and the ISTFT's window. The other buffers (the rotary inverse frequencies) are never cast either:
# `set_detokenizer_precision` casts parameters only.
DETOKENIZER_FLOAT32 = ("lin.", "istft.")


def detokenizer_dtype(precision: Precision) -> torch.dtype:
    """The dtype of the detokenizer's transformer (the codebook embeddings it averages, the LFM2 layers and
    their final norm) in `precision`. "bf16" keeps liquid-audio's float32 detokenizer as it is; "int8" (the
    user chose less memory and more speed, and the check compares its decoder with float32:
    engine/chat/precision_check.py) holds it in bfloat16: a decoded frame of the full-size model reads 74 MB
    of weights instead of 146, and the weights and the streaming decoder's fused copies of them take half the
    memory (89 and 56 MB less). `StreamingDetokenizer` runs its transformer in that dtype and its output head,
    spectrum and ISTFT in float32."""
    return torch.bfloat16 if precision == "int8" else torch.float32


def detokenizer_tensor_dtype(name: str, precision: Precision) -> torch.dtype:
    """The dtype the detokenizer's floating tensor `name` (a state-dict or checkpoint name) has in `precision`."""
    return torch.float32 if name.startswith(DETOKENIZER_FLOAT32) else detokenizer_dtype(precision)


@torch.no_grad()
def set_detokenizer_precision(detokenizer: nn.Module, precision: Precision) -> nn.Module:
    """Give a detokenizer's parameters the dtypes of `precision` (in place; a parameter already in its dtype
    is kept as it is, so after `load_detokenizer` this casts nothing) and returns it. With a bfloat16
    transformer, liquid-audio's own whole-utterance `forward` (`processor.decode`) still runs: the output
    Linear takes its bfloat16 input in float32."""
    for module_name, module in detokenizer.named_modules():
        for leaf, param in list(module._parameters.items()):
            if param is None or not param.is_floating_point():
                continue
            dtype = detokenizer_tensor_dtype(f"{module_name}.{leaf}" if module_name else leaf, precision)
            if param.dtype != dtype:
                module._parameters[leaf] = nn.Parameter(param.to(dtype), requires_grad=param.requires_grad)
    if detokenizer_dtype(precision) != torch.float32 and not getattr(detokenizer.lin, "_takes_float32", False):
        detokenizer.lin.register_forward_pre_hook(_input_in_float32)
        detokenizer.lin._takes_float32 = True
    return detokenizer


def _input_in_float32(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
    return (args[0].float(), *args[1:])


UNUSED_TOKEN_TABLE = "lfm.embed_tokens.weight"
# The audio embedding's own output head: liquid-audio's SharedEmbedding gives it one, untied in this model
# (tie_audio_embeddings false: 8 codebooks × 2049 × 2048, 67 MB in bf16), but every audio logit comes from the
# depthformer's per-codebook heads: nothing reads it.
UNUSED_AUDIO_HEAD = "audio_embedding.to_logits.weight"


def _audio_head_is_unused(model: nn.Module) -> bool:
    head = model.audio_embedding
    return head.to_logits.weight is not head.embedding.weight


def drop_unused_audio_head(model: nn.Module) -> bool:
    """Replace the audio embedding's unread output head by an empty one (when it is not tied to the
    embedding, which is read); returns whether it was dropped. Voices that target it are skipped
    (engine/model/lora.py): nothing reads its output."""
    if not _audio_head_is_unused(model):
        return False
    linear = model.audio_embedding.to_logits
    device = model.audio_embedding.embedding.weight.device
    linear.weight = nn.Parameter(torch.empty((0, linear.in_features), dtype=model.audio_embedding.embedding.weight.dtype, device=device),
                                 requires_grad=False)
    return True


def drop_unused_token_table(detokenizer: nn.Module) -> None:
    """liquid-audio's detokenizer gives its LFM2 backbone embeddings (`inputs_embeds`), never token ids, so
    the backbone's own token table (65,536 × 512 in float32: 134 MB of the card) is never read: it is
    replaced by an empty one."""
    table = detokenizer.lfm.embed_tokens
    table.weight = nn.Parameter(table.weight.new_empty((0, table.embedding_dim)), requires_grad=False)


def _tokenizer_problem(folder: Path, error: Exception) -> Problem:
    """The processor failed to load: name the tokenizer's files when they are what is broken."""
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(folder)
    except Exception as tokenizer_error:  # noqa: BLE001 - the tokenizer library's own error types
        files = ", ".join(name for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
                          if (folder / name).is_file())
        return Problem("the tokenizer ({files}) cannot be loaded: {error}", files=files, error=tokenizer_error)
    return Problem("loading failed: {error}", error=error)


def _free_cuda_memory() -> None:
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _memory_summary(device: torch.device) -> str:
    if device.type != "cuda":
        return "no GPU"
    free, total = torch.cuda.mem_get_info(device)
    return f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
