"""A chat session: one loaded model, its voice, the conversation and its cache.

`ChatSession.respond()` takes a finished user take (16 kHz mono float32) and yields the answer as
it is generated: text pieces, PCM chunks (24 kHz) and, last, the turn's timings. The engine thread
(`engine.worker`) and the one-shot CLI (`engine.oneshot`) both drive it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import platformdirs
import torch

from engine.audio_decoding import PipelinedDecoder, make_audio_decoder
from engine.conversation import AudioOutPiece, Conversation, PrefillInputs, TextPiece, Turn
from engine.errors import AudioInputError, GpuMemoryError, LoraError, ModelNotFoundError
from engine.generation import (
    EagerBackend,
    GeneratedFrame,
    GeneratedText,
    Schedule,
    StepBackend,
    TurnEnd,
    interleaved_decode,
)
from engine.loading import LoadedModel, default_device, load_model
from engine.lora import VoiceSwitcher, load_voice
from engine.model_store import APP_NAME, check_model_folder, resolve_model
from engine.protocol import EngineInfo, Progress, SamplingSettings
from engine.realtime.encoder_graphs import EncoderGraphs
from engine.tiny_checkpoint import write_tiny_checkpoint

if TYPE_CHECKING:
    from engine.history.context import RestorePlan

log = logging.getLogger(__name__)

DEFAULT_SYSTEM_PROMPT = "Respond with interleaved text and audio."
SAMPLE_RATE_IN = 16_000
SAMPLE_RATE_OUT = 24_000
FRAME_SECONDS = 0.08  # one audio frame is 1920 samples at 24 kHz
MIN_TAKE_SECONDS = 0.1
DEFAULT_MAX_TAKE_SECONDS = 60.0
# When a turn does not fit, the oldest exchanges are dropped until this share of the context is free
# beyond the new turn and its answer. A trim rebuilds the cache (the kept history is re-embedded and
# prefilled again), so dropping only just enough would rebuild on nearly every turn once the context
# is full; with a quarter kept free, the next several turns fit as they are.
TRIM_HEADROOM = 0.25

ProgressCallback = Callable[[Progress], None]


@dataclass
class TextPieceOut:
    text: str


@dataclass
class AudioPieceOut:
    pcm: np.ndarray  # float32, mono, 24 kHz
    frames: int


@dataclass
class ContextTrimmedInfo:
    dropped_turns: int


@dataclass
class TurnStats:
    """Seconds since respond() was called (the take being available), per stage."""

    audio_encoded_s: float
    prefill_done_s: float
    first_text_s: float | None = None
    first_audio_frame_s: float | None = None
    first_pcm_s: float | None = None
    generation_s: float = 0.0
    decode_s: float = 0.0  # host time spent decoding audio (on CUDA: launching it; it overlaps generation)
    frames: int = 0
    audio_seconds: float = 0.0
    text: str = ""
    cancelled: bool = False
    end_reason: str = ""
    token_ids: list[int] = field(default_factory=list)

    @property
    def rtf(self) -> float | None:
        """Wall time from prefill done to the last PCM chunk, over the audio produced."""
        return self.generation_s / self.audio_seconds if self.audio_seconds else None


@dataclass
class TurnDone:
    stats: TurnStats


TurnOutput = TextPieceOut | AudioPieceOut | ContextTrimmedInfo | TurnDone


class IncrementalDetokenizer:
    """Text deltas from a growing token list, decoding only the last few tokens each time.

    A byte-level tokenizer can split one character over several tokens, so a delta is released only
    once it no longer ends in U+FFFD (vLLM's prefix/read offsets). Per-token cost stays constant
    however long the answer gets.
    """

    def __init__(self, tokenizer: object) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self._prefix = 0
        self._read = 0
        self._emitted = 0  # characters handed out so far

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]

    def add(self, token: int) -> str:
        self.ids.append(token)
        before = self._decode(self.ids[self._prefix : self._read])
        after = self._decode(self.ids[self._prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self._prefix, self._read = self._read, len(self.ids)
        delta = after[len(before) :]
        self._emitted += len(delta)
        return delta

    def text(self) -> str:
        return self._decode(self.ids)

    def flush(self) -> str:
        """What was held back at the end (an incomplete character decodes as U+FFFD)."""
        rest = self.text()[self._emitted :]
        self._emitted += len(rest)
        return rest


def demo_model_folder() -> Path:
    return Path(platformdirs.user_data_dir(APP_NAME, APP_NAME)) / "demo-model"


def ensure_demo_model(folder: Path | None = None) -> Path:
    """The tiny random model used by demo mode, written on first use (about a second)."""
    folder = folder or demo_model_folder()
    if check_model_folder(folder):
        write_tiny_checkpoint(folder)
    return folder


def check_take(wave: np.ndarray, sample_rate: int, max_seconds: float = DEFAULT_MAX_TAKE_SECONDS) -> None:
    """Raise AudioInputError for a take the model cannot use (all-silence is fine)."""
    seconds = wave.shape[-1] / sample_rate if wave.size else 0.0
    if wave.size == 0:
        raise AudioInputError("The recording is empty.")
    if seconds < MIN_TAKE_SECONDS:
        raise AudioInputError(f"The recording is too short ({seconds:.2f} s; at least {MIN_TAKE_SECONDS} s is needed).")
    if seconds > max_seconds:
        raise AudioInputError(f"The recording is too long ({seconds:.1f} s; at most {max_seconds:g} s).")
    if not np.all(np.isfinite(wave)):
        raise AudioInputError("The recording contains invalid samples (NaN or infinity).")


class SessionBusy(RuntimeError):
    """A change to the conversation or the cache was asked for while a turn holds the session (a bug in
    the caller: engine/worker/table.py makes such changes wait for the turn or cancel it first)."""


class ChatSession:
    def __init__(
        self,
        loaded: LoadedModel,
        backend: StepBackend,
        decoder: PipelinedDecoder,
        *,
        context_tokens: int,
        fallback_reason: str | None,
        graphs_ready: bool,
        model_id: str | None,
        encoder_graphs: EncoderGraphs | None = None,
    ) -> None:
        self.loaded = loaded
        self.encoder_graphs = encoder_graphs
        self.backend = backend
        self.decoder = decoder
        self.context_capacity = context_tokens
        self.voices = VoiceSwitcher(loaded.model, model_id=model_id)
        self.schedule = Schedule(loaded.interleaved_n_text, loaded.interleaved_n_audio)
        self.system_prompt = DEFAULT_SYSTEM_PROMPT
        self.conversation = self._new_conversation()
        self._graphs_ready = graphs_ready
        self._fallback_reason = fallback_reason
        self._lock = threading.Lock()  # one turn at a time; held by respond() from the take to its last piece

    # ------------------------------------------------------------------ construction

    @classmethod
    def open(
        cls,
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
    ) -> "ChatSession":
        report = progress or (lambda _p: None)
        if demo:
            folder, model_id = ensure_demo_model(), None
        else:
            if not source:
                raise ModelNotFoundError.of("No model was given: choose a model folder or a Hub repo id.")
            folder = resolve_model(source, revision=revision, progress=progress, cancel=cancel)
            model_id = source if not Path(source).expanduser().exists() else None
        torch_device = torch.device(device) if device else default_device()
        report(Progress("load_weights", None, str(folder)))
        loaded = load_model(folder, device=torch_device, name="demo (random weights)" if demo else (model_id or folder.name))
        fallback_reason: str | None = None
        graphs_ready = False
        backend: StepBackend
        if torch_device.type != "cuda":
            fallback_reason = "No CUDA GPU: running eagerly on the CPU (much slower than real time)."
            backend = EagerBackend(loaded.model)
        elif not use_cuda_graphs:
            fallback_reason = "CUDA graphs disabled: running eagerly on the GPU."
            backend = EagerBackend(loaded.model)
        else:
            backend, fallback_reason = _graphed_backend_or_fallback(loaded, context_tokens, report)
            graphs_ready = fallback_reason is None
        decoder = make_audio_decoder(loaded, use_cuda_graphs=graphs_ready)
        session = cls(
            loaded,
            backend,
            decoder,
            context_tokens=context_tokens,
            fallback_reason=fallback_reason,
            graphs_ready=graphs_ready,
            model_id=model_id,
            encoder_graphs=_encoder_graphs_or_none(loaded) if graphs_ready else None,
        )
        if lora:
            report(Progress("merge_voice", None, lora))
            session.switch_voice(lora)
        if torch_device.type == "cuda":
            report(Progress("warm_up", None))
            session.warm_up()
        report(Progress("ready", 1.0))
        return session

    def embed(self, span: PrefillInputs) -> torch.Tensor:
        """liquid-audio's own prefill embeddings of a span; its audio encoder replays a graph if it can."""
        with self.encoder_graphs.installed(self.loaded.model) if self.encoder_graphs else contextlib.nullcontext():
            return self.loaded.model._prefill(**span.as_kwargs())

    def warm_up(self) -> None:
        """One short silent turn through the whole pipeline, then forgotten.

        The first real turn then pays no one-time cost: measured on the H200, the first audio
        encoding of a process took ~320 ms (kernel loading, cuDNN and cuBLAS set-up) against ~21 ms
        afterwards. Afterwards the conversation, the cache and the decoder are reset in place.
        """
        silence = np.zeros(SAMPLE_RATE_IN, dtype=np.float32)
        for _ in self.respond(silence, SamplingSettings(), max_new_tokens=self.schedule.n_text + 2):
            pass
        self.reset()

    def _new_conversation(self) -> Conversation:
        conversation = Conversation(self.loaded.processor.text, codebooks=self.loaded.codebooks)
        conversation.add_text_turn("system", self.system_prompt)
        return conversation

    # ------------------------------------------------------------------ info

    @property
    def info(self) -> EngineInfo:
        device = self.loaded.device
        if device.type == "cuda":
            name = torch.cuda.get_device_name(device)
            vram = int(torch.cuda.memory_reserved(device))
        else:
            name, vram = "CPU", None
        return EngineInfo(
            device_name=name,
            vram_used_bytes=vram,
            graphs_ready=self._graphs_ready,
            fallback_reason=self._fallback_reason,
            model_name=self.loaded.name,
            voice_name=self.voices.voice_name,
            context_tokens=self.context_capacity,
        )

    @property
    def context_used(self) -> int:
        return self.conversation.positions

    # ------------------------------------------------------------------ state changes

    @contextlib.contextmanager
    def _exclusive(self, what: str) -> Iterator[None]:
        """The session's lock for a change, or SessionBusy at once: waiting for it on the thread that
        runs the turn (which holds it across its yields) would wait forever."""
        if not self._lock.acquire(blocking=False):
            raise SessionBusy(f"{what} while a turn is being generated")
        try:
            yield
        finally:
            self._lock.release()

    def switch_voice(self, lora: str | None) -> None:
        """Merge another voice in place; on LoraError the previous voice stays."""
        with self._exclusive("switch_voice"):
            voice = load_voice(lora) if lora else None
            self.voices.apply(voice)
            refresh = getattr(self.backend, "refresh_weights", None)
            if refresh is not None:
                refresh()

    def set_system_prompt(self, prompt: str) -> None:
        """A new system prompt starts a new conversation (the old prompt is baked into the cache)."""
        if prompt != self.system_prompt:
            self.system_prompt = prompt
            self.reset()

    def reset(self) -> None:
        with self._exclusive("reset"):
            self.conversation = self._new_conversation()
            self.backend.reset()
            self.decoder.reset()

    def close(self) -> None:
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        self.encoder_graphs = None  # its graphs and their memory pool go with it

    def restore(self, plan: "RestorePlan") -> int:
        """Continue a saved conversation: lay its exchanges out again as the live turns were (the takes
        re-embedded by `features`, the answers from their saved tokens and codes), dropping the oldest
        exchanges so that TRIM_HEADROOM of the context stays free, and empty the cache. The next
        `respond()` prefills the whole restored history with its new take, through the same path a
        live turn takes after a trim. Returns how many turns were dropped to fit."""
        from engine.history.context import pieces_of_tokens

        with self._exclusive("restore"):
            # The saved prompt heads the restored context; the session's own prompt (what a reset starts
            # with) stays the one the settings gave.
            conversation = Conversation(self.loaded.processor.text, codebooks=self.loaded.codebooks)
            conversation.add_text_turn("system", plan.system_prompt)
            for exchange in plan.exchanges:
                conversation.add_audio_turn("user", self.features(exchange.take_16k))
                conversation.open_assistant_turn().pieces.extend(pieces_of_tokens(exchange.answer))
                conversation.close_assistant_turn()
            dropped = conversation.drop_oldest_turns(0, int(self.context_capacity * (1 - TRIM_HEADROOM)))
            self.conversation = conversation
            self.backend.reset()
            self.decoder.reset()
            return dropped

    @property
    def text_vocabulary(self) -> int:
        return int(self.loaded.model.lfm.get_input_embeddings().num_embeddings)

    @torch.inference_mode()
    def features(self, wave_16k: np.ndarray) -> torch.Tensor:
        """A take's log-mel features (128, T) as the model sees them, on the model's device."""
        device = self.loaded.device
        wave = torch.from_numpy(np.ascontiguousarray(wave_16k, dtype=np.float32))[None].to(device)
        mel, _ = self.loaded.processor.audio(wave, torch.tensor([wave.shape[1]], device=device))
        return mel[0].float()

    # ------------------------------------------------------------------ a turn

    def max_new_tokens_for(self, max_answer_seconds: float) -> int:
        frames = max(1, math.ceil(max_answer_seconds / FRAME_SECONDS))
        # Text and audio alternate until the text ends, so allow the text positions on top.
        return frames + math.ceil(frames * self.schedule.n_text / self.schedule.n_audio) + self.schedule.n_text

    @torch.inference_mode()
    def respond(
        self,
        wave_16k: np.ndarray,
        sampling: SamplingSettings,
        *,
        max_answer_seconds: float = 30.0,
        max_take_seconds: float = DEFAULT_MAX_TAKE_SECONDS,
        cancel: threading.Event | None = None,
        max_new_tokens: int | None = None,
    ) -> Iterator[TurnOutput]:
        check_take(wave_16k, SAMPLE_RATE_IN, max_take_seconds)
        with self._lock:
            yield from self._respond(wave_16k, sampling, max_answer_seconds, cancel, max_new_tokens)

    def _respond(
        self,
        wave_16k: np.ndarray,
        sampling: SamplingSettings,
        max_answer_seconds: float,
        cancel: threading.Event | None,
        max_new_tokens: int | None,
    ) -> Iterator[TurnOutput]:
        started = time.perf_counter()
        budget = max_new_tokens if max_new_tokens is not None else self.max_new_tokens_for(max_answer_seconds)
        turn = self._encode(wave_16k)
        budget, dropped = self._make_room(budget)
        if dropped:
            yield ContextTrimmedInfo(dropped)
        stats = self._prefill(started)
        yield from self._stream(turn, sampling, budget, cancel, stats, started)
        yield TurnDone(stats)

    def _encode(self, wave_16k: np.ndarray) -> Turn:
        """The take as log-mel features in the conversation, and the (open) assistant turn after it."""
        self.conversation.add_audio_turn("user", self.features(wave_16k))
        return self.conversation.open_assistant_turn()

    def _make_room(self, budget: int) -> tuple[int, int]:
        """Keep room for the answer: drop the oldest whole turns if it would not fit, and then some
        (TRIM_HEADROOM), so that the next turns need no rebuild. Returns the answer's token budget (cut
        to what fits) and how many turns were dropped; after a drop the cache is rebuilt by the prefill."""
        conversation = self.conversation
        reserve = budget + 2
        if conversation.positions + reserve <= self.context_capacity:
            return budget, 0
        user_turn_and_prompt = conversation.turns[-2:]
        del conversation.turns[-2:]
        dropped = conversation.drop_oldest_turns(
            sum(t.positions for t in user_turn_and_prompt) + reserve,
            int(self.context_capacity * (1 - TRIM_HEADROOM)),
        )
        conversation.turns.extend(user_turn_and_prompt)
        self.backend.reset()
        return max(1, min(budget, self.context_capacity - conversation.positions - 2)), dropped

    def _prefill(self, started: float) -> TurnStats:
        """Embed and prefill what the cache does not hold yet (the backend owns the position)."""
        device = self.loaded.device
        embeddings = self.embed(self.conversation.span(self.backend.positions, device))
        _sync(device)
        stats = TurnStats(audio_encoded_s=time.perf_counter() - started, prefill_done_s=0.0)
        try:
            self.backend.prefill(embeddings)
        except torch.OutOfMemoryError as error:
            raise GpuMemoryError.of("The GPU ran out of memory during the prefill; try a shorter context.") from error
        _sync(device)
        stats.prefill_done_s = time.perf_counter() - started
        return stats

    def _stream(
        self,
        turn: Turn,
        sampling: SamplingSettings,
        budget: int,
        cancel: threading.Event | None,
        stats: TurnStats,
        started: float,
    ) -> Iterator[TextPieceOut | AudioPieceOut]:
        """Generate the answer: text deltas and PCM chunks as they come; the turn is closed at the end."""
        prefill_done = started + stats.prefill_done_s
        text = IncrementalDetokenizer(self.loaded.processor.text)
        self.decoder.reset()
        end: TurnEnd | None = None

        def audio_out(chunks: list[np.ndarray]) -> Iterator[AudioPieceOut]:
            for pcm in chunks:
                if stats.first_pcm_s is None:
                    stats.first_pcm_s = time.perf_counter() - started
                stats.audio_seconds += pcm.size / SAMPLE_RATE_OUT
                yield AudioPieceOut(pcm, 1)

        for event in interleaved_decode(self.backend, self.schedule, sampling, max_new_tokens=budget, cancel=cancel):
            if isinstance(event, GeneratedText):
                turn.pieces.append(TextPiece([event.token]))
                stats.token_ids.append(event.token)
                if stats.first_text_s is None:
                    stats.first_text_s = time.perf_counter() - started
                delta = text.add(event.token)
                if delta:
                    yield TextPieceOut(delta)
            elif isinstance(event, GeneratedFrame):
                turn.pieces.append(AudioOutPiece(event.codes))
                if event.is_end_of_audio:
                    continue
                if stats.first_audio_frame_s is None:
                    stats.first_audio_frame_s = time.perf_counter() - started
                decode_started = time.perf_counter()
                self.decoder.submit(event.device_codes if event.device_codes is not None else event.codes)
                stats.decode_s += time.perf_counter() - decode_started
                stats.frames += 1
            else:
                end = event
            if stats.first_pcm_s is None and stats.frames:
                # The first chunk is worth a short wait (~0.5 ms, once per turn): it is what the user
                # waits for. Later chunks are picked up without blocking as they arrive.
                self.decoder.wait_oldest()
            yield from audio_out(self.decoder.poll())
        decode_started = time.perf_counter()
        tail = self.decoder.drain()
        stats.decode_s += time.perf_counter() - decode_started
        yield from audio_out(tail)
        rest = text.flush()
        if rest:
            yield TextPieceOut(rest)
        self.conversation.close_assistant_turn()
        stats.generation_s = time.perf_counter() - prefill_done
        stats.text = text.text()
        stats.cancelled = end is not None and end.reason == "cancelled"
        stats.end_reason = end.reason if end else ""


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# Takes up to this long replay a captured encoder graph; longer ones (rare) are encoded eagerly. Each
# rung costs ~0.1 s of start-up, so the ladder stops where ordinary spoken turns end.
ENCODER_GRAPH_SECONDS = 20.0


def _encoder_graphs_or_none(loaded: LoadedModel) -> EncoderGraphs | None:
    """The audio encoder's graphs; without them it runs eagerly (slower to the first audio, same output)."""
    try:
        return EncoderGraphs(loaded.model.conformer, max_seconds=ENCODER_GRAPH_SECONDS, dtype=loaded.dtype, device=loaded.device)
    except Exception as error:  # an optional speed-up: whatever went wrong, encode eagerly as before
        torch.cuda.empty_cache()
        log.warning("audio encoder graphs not captured, encoding eagerly: %s", error)
        return None


def _graphed_backend_or_fallback(
    loaded: LoadedModel, context_tokens: int, report: ProgressCallback
) -> tuple[StepBackend, str | None]:
    """The CUDA-graph engine, or the eager GPU backend with the reason it could not be used."""
    try:
        from engine.realtime.backend import GraphedBackend

        report(Progress("capture_graphs", None))
        return GraphedBackend(loaded, context_tokens=context_tokens), None
    except torch.OutOfMemoryError as error:
        torch.cuda.empty_cache()
        return EagerBackend(loaded.model), f"CUDA graph capture ran out of GPU memory ({error}); running eagerly."
    except (ImportError, RuntimeError) as error:
        return EagerBackend(loaded.model), f"CUDA graph capture failed ({error}); running eagerly on the GPU."


__all__ = [
    "AudioPieceOut",
    "ChatSession",
    "ContextTrimmedInfo",
    "LoraError",
    "TextPieceOut",
    "TurnDone",
    "TurnOutput",
    "TurnStats",
]
