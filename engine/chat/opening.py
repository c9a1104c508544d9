"""Opening a chat session: from a model folder (or Hub id) to the first take it can answer.

What a first turn needs is made before "ready"; the rest follows behind it (issue 45):
- before: the weights (read by several threads through pinned memory, engine/model/row_reads.py), the step
  and prefill graphs, the audio decoder's graphs and the depthformer grid fitted beside it, the audio
  encoder's static buffers, a warm-up turn, the system prompt prefilled;
- behind (engine/realtime/lazy_capture.py): the audio encoder's rungs, queued and captured one at a time between
  turns on the thread that runs them (`ChatSession.capture_behind_ready`, the engine thread's idle tick) while
  the window already says "ready"; a take no rung holds yet is encoded eagerly, in real time.
Imports that only the opening needs (librosa and numba through liquid-audio's preprocessor, the real-time
engine, the streaming decoder) start on a helper thread at once and load while the weights are read, and
the NVRTC kernels start compiling before the folder is even checked.

`ChatSession.open` (engine/chat/session.py) is `open_session(ChatSession, ...)`.
"""

from __future__ import annotations

import importlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from engine import paths
from engine.chat.audio_decoding import PipelinedDecoder, make_audio_decoder
from engine.chat.generation import EagerBackend, StepBackend
from engine.errors import GpuMemoryError, LoraError, Message, ModelNotFoundError
from engine.model.loading import LoadedModel, default_device, load_model, use_expandable_cuda_segments
from engine.model.memory import check_room, free_bytes, model_need
from engine.model.quantized import Precision
from engine.model.store import check_model_folder, resolve_model
from engine.model.tiny_checkpoint import write_tiny_checkpoint
from engine.protocol import Progress
from engine.realtime import graphs
from engine.realtime.encoder_graphs import EncoderGraphs
from engine.realtime.kernels import compile_in_background

log = logging.getLogger(__name__)

ProgressCallback = Callable[[Progress], None]

# Takes up to this long replay a captured encoder graph; longer ones are encoded eagerly. The ladder
# reaches the longest take the app accepts (every 10 s past 30 s: 15 rungs in all).
ENCODER_GRAPH_SECONDS = 60.0
# Modules the opening imports on its way that nothing imported before it: loaded on a helper thread while the
# weights are read (liquid-audio's preprocessor pulls in librosa and numba, ~1 s of imports).
OPENING_IMPORTS = (
    "liquid_audio.model.conformer.processor",
    "liquid_audio.detokenizer",
    "engine.realtime.backend",
    "engine.realtime.streaming_decoder",
)


def demo_model_folder() -> Path:
    return paths.demo_model_dir()


def ensure_demo_model(folder: Path | None = None) -> Path:
    """The tiny random model used by demo mode, written on first use (about a second)."""
    folder = folder or demo_model_folder()
    if check_model_folder(folder):
        write_tiny_checkpoint(folder)
    return folder


def prefetch_imports(names: tuple[str, ...] = OPENING_IMPORTS) -> threading.Thread:
    """Import `names` on a daemon thread (Python's import locks make a later import on another thread wait for
    the one in progress, never run it twice); a module that fails to import fails again where it is used."""

    def run() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception as error:  # noqa: BLE001 - reported where the module is really needed
                log.info("prefetching %s failed: %s", name, error)

    thread = threading.Thread(target=run, name="opening-imports", daemon=True)
    thread.start()
    return thread


class StartupClock:
    """Seconds from the call to each stage of the opening (`ChatSession.startup`, for the benchmark)."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.stages: dict[str, float] = {}

    def mark(self, stage: str) -> None:
        self.stages[stage] = time.perf_counter() - self.started


def open_session(
    cls: Any,
    source: str | None,
    *,
    lora: str | None = None,
    demo: bool = False,
    revision: str | None = None,
    context_tokens: int = 4096,
    device: str | None = None,
    use_cuda_graphs: bool = True,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    precision: Precision = "bf16",
) -> Any:
    """`cls` (engine.chat.session.ChatSession, which imports this module) opened: see `ChatSession.open`."""
    clock = StartupClock()
    report = progress or (lambda _p: None)
    torch_device = torch.device(device) if device else default_device()
    if torch_device.type == "cuda":
        use_expandable_cuda_segments()  # before the first allocation
        compile_in_background(torch_device)  # the fused kernels compile while the folder is checked and the weights load
    prefetch_imports()
    if demo:
        folder, model_id = ensure_demo_model(), None
    else:
        if not source:
            raise ModelNotFoundError.of("No model was given: choose a model folder or a Hub repo id.")
        folder = resolve_model(source, revision=revision, progress=progress, cancel=cancel)
        model_id = source if not Path(source).expanduser().exists() else None
    if torch_device.type == "cuda":
        check_room(folder, torch_device, context_tokens=context_tokens, precision=precision)  # before loading, not after
    clock.mark("checked")
    report(Progress("load_weights", None, str(folder)))
    loaded = load_model(
        folder, device=torch_device, name=Message("demo (random weights)") if demo else (model_id or folder.name), precision=precision
    )
    clock.mark("loaded")
    fallback_reason: str | None = None
    graphs_ready = False
    backend: StepBackend
    if torch_device.type != "cuda":
        fallback_reason = Message("No CUDA GPU: running eagerly on the CPU (much slower than real time).")
        backend = EagerBackend(loaded.model)
    elif not use_cuda_graphs:
        fallback_reason = Message("CUDA graphs disabled: running eagerly on the GPU.")
        backend = EagerBackend(loaded.model)
    else:
        backend, fallback_reason = _graphed_backend_or_fallback(loaded, context_tokens, report)
        graphs_ready = fallback_reason is None
    clock.mark("step_graphs")
    decoder = make_audio_decoder(loaded, use_cuda_graphs=graphs_ready)
    if graphs_ready:
        fit_depthformer_to_decoder(backend, decoder)
    clock.mark("decoder_graphs")
    session = cls(
        loaded,
        backend,
        decoder,
        context_tokens=context_tokens,
        fallback_reason=fallback_reason,
        graphs_ready=graphs_ready,
        model_id=model_id,
        # Its rungs are captured behind "ready" (queue_lazy_capture); its buffers and positional table now.
        encoder_graphs=_encoder_graphs_or_none(loaded, pool=backend.graph_pool, defer=True) if graphs_ready else None,
    )
    clock.mark("encoder_buffers")
    if lora:
        report(Progress("merge_voice", None, lora))
        try:
            session.switch_voice(lora)
        except LoraError as error:
            # A broken voice never costs the model: the session opens with the model's own voice
            # and keeps the reason for the caller to show.
            log.warning("voice %s not merged: %s", lora, error.message)
            session.voice_problem = error
        clock.mark("voice")
    if torch_device.type == "cuda":
        report(Progress("warm_up", None))
        session.warm_up()
        # Capture and warm-up leave blocks in the caching allocator that no turn reuses (eager runs at
        # every captured shape); handing them back keeps the reserved VRAM near what turns need.
        graphs.empty_cache()
        session.note_ready_memory()
    session._prefill_ahead()  # the system prompt (on a GPU the warm-up's reset has done it)
    clock.mark("ready")
    session.startup = clock.stages
    session.queue_lazy_capture()
    report(Progress("ready", 1.0))
    return session


def _encoder_graphs_or_none(loaded: LoadedModel, *, pool: object | None = None, defer: bool = False) -> EncoderGraphs | None:
    """The audio encoder's graphs; without them it runs eagerly (slower to the first audio, same output).
    `pool`: the step graphs' memory pool (a take is encoded before its prefill, never beside a step), which
    its rungs' temporaries then share instead of holding a second pool (~0.2 GB for the 60 s rung).
    `defer`: only the buffers now; the rungs are captured by their jobs (`EncoderGraphs.jobs`)."""
    try:
        return EncoderGraphs(
            loaded.model, loaded.processor.audio, max_seconds=ENCODER_GRAPH_SECONDS, dtype=loaded.dtype, device=loaded.device,
            pool=pool, defer=defer,
        )
    except Exception as error:  # an optional speed-up: whatever went wrong, encode eagerly as before
        graphs.empty_cache()
        log.warning("audio encoder graphs not captured, encoding eagerly: %s", error)
        return None


def fit_depthformer_to_decoder(backend: StepBackend, decoder: PipelinedDecoder) -> None:
    """Time the depthformer kernel's grid with the decoder's frame beside it, as the two run in a turn
    (start-up, after both are captured); the decoder is reset afterwards."""
    from engine.realtime.backend import GraphedBackend

    step = decoder.timing_step()
    if isinstance(backend, GraphedBackend) and step is not None:
        backend.fit_depthformer_grid(step, frames=decoder.group_frames[-1])  # rounds of a whole group
        decoder.reset()


def _graphed_backend_or_fallback(
    loaded: LoadedModel, context_tokens: int, report: ProgressCallback
) -> tuple[StepBackend, str | None]:
    """The CUDA-graph engine, or the eager GPU backend with the reason it could not be used."""
    try:
        from engine.realtime.backend import GraphedBackend

        report(Progress("capture_graphs", None))
        return GraphedBackend(loaded, context_tokens=context_tokens), None
    except torch.OutOfMemoryError as error:
        # Not a silent fallback: eager steps are ~50x slower than real time. The user is told what is needed.
        graphs.empty_cache()
        need = model_need(loaded.folder, context_tokens=context_tokens)
        raise GpuMemoryError.of(
            "The GPU ran out of memory while preparing the model for real time (it needs about {needed} GB, "
            "{free} GB are still free). Close programs that use the GPU, or use a GPU with more memory.",
            needed=f"{need.total / 1e9:.1f}", free=f"{free_bytes(loaded.device) / 1e9:.1f}",
        ) from error
    except (ImportError, RuntimeError) as error:
        return EagerBackend(loaded.model), Message("CUDA graph capture failed ({error}); running eagerly on the GPU.",
                                                   error=error)


__all__ = ["ENCODER_GRAPH_SECONDS", "demo_model_folder", "ensure_demo_model", "open_session", "prefetch_imports"]
