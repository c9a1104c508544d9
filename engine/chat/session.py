"""A chat session: one loaded model, its voice, the conversation and its cache.

`ChatSession.respond()` takes a finished user take (16 kHz mono float32) and yields the answer as
it is generated: text pieces, PCM chunks (24 kHz) and, last, the turn's timings. The engine thread
(`engine.worker`) and the one-shot CLI (`engine.tools.reply`) both drive it.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import torch
from liquid_audio.utils import LFMModality, mel2emb_len

from engine.chat.audio_decoding import PipelinedDecoder
from engine.chat.conversation import AudioInPiece, AudioOutPiece, Conversation, PrefillInputs, SpanLayout, TextPiece, Turn
from engine.errors import AudioInputError, GpuMemoryError, LoraError
from engine.chat.generation import (
    GeneratedFrame,
    GeneratedText,
    Schedule,
    StepBackend,
    TurnEnd,
    interleaved_decode,
)
from engine.chat.opening import _encoder_graphs_or_none, demo_model_folder, ensure_demo_model, fit_depthformer_to_decoder
from engine.model.loading import LoadedModel
from engine.model.lora import VoiceSwitcher
from engine.model.quantized import Precision
from engine.chat.precision_check import (
    PRECISION_CHECK_QUESTION,
    PrecisionReport,
    ReferenceTurn,
    compare_with_reference,
    record_reference,
)
from engine.protocol import EngineInfo, Progress, SamplingSettings
from engine.realtime import graphs
from engine.realtime.encoder_graphs import MEL_FRAMES_PER_SECOND, EncoderGraphs
from engine.realtime.lazy_capture import LazyCapture
from engine.validation import check_system_prompt, check_system_prompt_fits
from engine.constants import ANSWER_SAMPLE_RATE as SAMPLE_RATE_OUT
from engine.constants import USER_SAMPLE_RATE as SAMPLE_RATE_IN
from engine.constants import DEFAULT_SYSTEM_PROMPT, FRAME_SAMPLES, FRAME_SECONDS

if TYPE_CHECKING:
    from engine.history.context import RestorePlan

log = logging.getLogger(__name__)

MIN_TAKE_SECONDS = 0.1
DEFAULT_MAX_TAKE_SECONDS = 60.0
# What a turn may leave cached in the allocator above the ready state before it is handed back.
RELEASE_CACHED_ABOVE_BYTES = 16 << 20
# Context trims happen ahead, after an answer has been generated (while it plays): when the next turn
# might not fit (a take as long as allowed, plus room for an answer as long as this one's budget), the
# oldest exchanges are dropped and the cache is rebuilt from the kept turns' embeddings (a prefill, no
# conformer: ~30 ms for 3000 positions on the H200), so no turn waits for a rebuild before its first
# audio. At most this share of the context is held free for the next turn, so a small context still
# keeps some history.
NEXT_TURN_MAX_SHARE = 0.5
# A turn that does not fit all the same (its answer budget or take is larger than the last turn's
# limits foresaw) trims in the turn, and then drops exchanges until this share of the context is free
# beyond the new turn and its answer, so that the next several turns fit as they are.
TRIM_HEADROOM = 0.25

ProgressCallback = Callable[[Progress], None]


@dataclass
class TextPieceOut:
    text: str


@dataclass
class AudioPieceOut:
    pcm: np.ndarray  # float32, mono, 24 kHz
    frames: int  # code frames in it (a chunk is a group of frames: engine/chat/audio_decoding.py)


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
    trimmed_ahead_turns: int = 0  # exchanges dropped after this answer, ahead of the next turn
    trim_ahead_s: float = 0.0  # that trim's rebuild of the cache (after the last PCM chunk)

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


def check_take(wave: np.ndarray, sample_rate: int, max_seconds: float = DEFAULT_MAX_TAKE_SECONDS) -> None:
    """Raise AudioInputError for a take the model cannot use (all-silence is fine)."""
    seconds = wave.shape[-1] / sample_rate if wave.size else 0.0
    if wave.size == 0:
        raise AudioInputError.of("The recording is empty.")
    if seconds < MIN_TAKE_SECONDS:
        raise AudioInputError.of(
            "The recording is too short ({seconds} s; at least {minimum} s is needed).",
            seconds=f"{seconds:.2f}", minimum=MIN_TAKE_SECONDS,
        )
    if seconds > max_seconds:
        raise AudioInputError.of(
            "The recording is too long ({seconds} s; at most {maximum} s).", seconds=f"{seconds:.1f}", maximum=f"{max_seconds:g}"
        )
    if not np.all(np.isfinite(wave)):
        raise AudioInputError.of("The recording contains invalid samples (NaN or infinity).")


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
        self.voices = VoiceSwitcher(loaded.model, model_id=model_id, checkpoint=loaded.weights, reader=loaded.reader)
        self.schedule = Schedule(loaded.interleaved_n_text, loaded.interleaved_n_audio)
        self.system_prompt = DEFAULT_SYSTEM_PROMPT
        self.conversation = self._new_conversation()
        self._graphs_ready = graphs_ready
        self._fallback_reason = fallback_reason
        self._lock = threading.Lock()  # one turn at a time; held by respond() from the take to its last piece
        # The graphs left behind "ready" (the audio encoder's rungs), captured between turns: `capture_behind_ready`.
        self.lazy_capture: LazyCapture | None = None
        self.startup: dict[str, float] = {}  # seconds from ChatSession.open's call to each stage (engine/chat/opening.py)
        # Why the voice asked for at open() was not merged (the model's own voice is used), or None.
        self.voice_problem: LoraError | None = None
        self._ready_reserved: int | None = None  # the allocator's reserved bytes once open() was done (CUDA)

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
        precision: Precision = "bf16",
    ) -> "ChatSession":
        """Load `source` (a model folder or Hub id; `demo`: the tiny random model) and return a session ready for
        its first take (engine/chat/opening.py: what the first turn needs before, the encoder's graphs behind).
        `precision`: "bf16", or "int8" for the large matrices as int8 with per-row scales (about half the
        weights' memory and of the bytes each step reads; engine/model/quantized.py) and the audio detokenizer's
        transformer in bfloat16 instead of float32 (engine/model/loading.py, `detokenizer_dtype`)."""
        from engine.chat.opening import open_session

        return open_session(cls, source, lora=lora, demo=demo, revision=revision, context_tokens=context_tokens, device=device,
                            use_cuda_graphs=use_cuda_graphs, progress=progress, cancel=cancel, precision=precision)

    def embed(self, span: PrefillInputs) -> torch.Tensor:
        """liquid-audio's own prefill embeddings of a span (the eager reference, and the encoder of takes
        that no encoder graph holds)."""
        return self.loaded.model._prefill(**span.as_kwargs())

    def encode_take(self, wave_16k: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A take → its log-mel features (128, T) on the device and, through the encoder graphs, its
        backbone input rows (None: they are made when the take is first prefilled)."""
        encoded = self.encoder_graphs.encode_wave(wave_16k) if self.encoder_graphs else None
        return encoded if encoded is not None else (self.features(wave_16k), None)

    def take_rows(self, take: AudioInPiece) -> torch.Tensor:
        """A take's backbone input rows from its kept features: an encoder graph, else liquid-audio's
        `_prefill` of the take alone."""
        rows = self.encoder_graphs.encode_mel(take.mel) if self.encoder_graphs else None
        if rows is None:
            rows = self.embed(_lone_take(take, self.conversation.codebooks, self.loaded.device))[0]
        return rows

    def embed_from(self, start: int) -> torch.Tensor:
        """Backbone inputs (1, n, hidden) for the conversation's positions from `start` on.

        Each take goes through the audio encoder once, and its rows are kept on its piece: a rebuild
        after a trim prefills them again instead of re-running the conformer over every kept take.
        """
        layout = self.conversation.layout(start)
        for take in layout.takes:
            if take.embeddings is None:
                take.embeddings = self.take_rows(take)
        return self._assemble(layout)

    def _assemble(self, layout: SpanLayout) -> torch.Tensor:
        """`LFM2AudioModel._prefill`'s assembly of a span (the same rows, by the same ops), with the takes'
        rows given and every index made on the host: no host-device sync (`_prefill` waits on the GPU for
        its boolean masks and checks, after the audio encoder, before it can lay out the rows)."""
        model = self.loaded.model
        device = self.loaded.device
        flags = np.asarray(layout.modality, dtype=np.int64)
        codes = layout.codes(model.codebooks)[: model.codebooks]
        where = [np.flatnonzero(flags == kind) for kind in (LFMModality.TEXT, LFMModality.AUDIO_IN, LFMModality.AUDIO_OUT)]
        host = torch.from_numpy(np.concatenate([np.asarray(layout.text, dtype=np.int64), *where, codes.numpy().reshape(-1)]))
        packed = host.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else host
        text, text_at, audio_in_at, audio_out_at, flat_codes = packed.split(
            [len(layout.text), *(len(w) for w in where), codes.numel()]
        )
        embed_tokens = model.lfm.embed_tokens
        out = torch.empty((layout.positions, embed_tokens.embedding_dim), dtype=self.loaded.dtype, device=device)
        if text.numel():
            out.index_copy_(0, text_at, embed_tokens(text))
        if layout.takes:
            out.index_copy_(0, audio_in_at, torch.cat([take.embeddings for take in layout.takes]).to(out.dtype))
        if codes.numel():
            offset = flat_codes.view(codes.shape) + model.codebook_offsets.unsqueeze(1)
            out.index_copy_(0, audio_out_at, model.audio_embedding(offset).sum(0, dtype=out.dtype))
        return out[None]

    def _prefill_embeddings(self, embeddings: torch.Tensor) -> None:
        """Prefill the backbone inputs of the positions the cache does not hold yet."""
        try:
            self.backend.prefill(embeddings)
        except torch.OutOfMemoryError as error:
            raise GpuMemoryError.of("The GPU ran out of memory during the prefill; try a shorter context.") from error

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

    # ------------------------------------------------------------------ the int8 check

    def check_prompt(self) -> torch.Tensor:
        """The int8 check's fixed prompt (engine/chat/precision_check.py): the system prompt, a short user
        question in text and the assistant's turn opened, as backbone inputs (1, n, hidden)."""
        conversation = self._new_conversation()
        conversation.add_text_turn("user", PRECISION_CHECK_QUESTION)
        conversation.open_assistant_turn()
        saved, self.conversation = self.conversation, conversation
        try:
            return self._assemble(conversation.layout(0))
        finally:
            self.conversation = saved

    @property
    def check_decoder(self) -> PipelinedDecoder | None:
        """The decoder the int8 check compares (this session's streaming detokenizer, whose transformer is bf16
        in int8), or None where Mimi decodes the audio: the same in both precisions."""
        return None if self.loaded.uses_mimi else self.decoder

    def record_check_reference(self) -> ReferenceTurn:
        """The bf16 side of the int8 check, on this session's engine and decoder (its cache is emptied and its
        decoder reset: call between conversations, e.g. before the session is closed for an int8 one)."""
        with self._exclusive("the int8 check"):
            return record_reference(self.backend, self.check_prompt(), self.schedule.n_text, self.schedule.n_audio,
                                    decoder=self.check_decoder)

    def compare_with_check_reference(self, reference: ReferenceTurn) -> PrecisionReport:
        """The int8 side: this session's engine fed the reference's inputs, and its decoder the reference's audio
        frames (its cache is emptied and its decoder reset after)."""
        with self._exclusive("the int8 check"):
            try:
                return compare_with_reference(self.backend, reference, decoder=self.check_decoder)
            finally:
                self.conversation = self._new_conversation()

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
            voice = self.voices.load(lora) if lora else None
            self.voices.apply(voice)
            if self.loaded.device.type == "cuda":
                graphs.empty_cache()  # the merge's chunks: the card holds what it held before the switch
            refresh = getattr(self.backend, "refresh_weights", None)
            if refresh is not None:
                refresh()
            # A voice may adapt the audio encoder too: a later rebuild encodes the kept takes afresh.
            for take in self.conversation.audio_in_pieces():
                take.embeddings = None
            if len(self.conversation.turns) == 1:  # nothing said yet: the prompt prefilled ahead, in the new voice
                self._start(self.conversation)

    def set_system_prompt(self, prompt: str) -> None:
        """A new system prompt starts a new conversation (the old prompt is baked into the cache).

        A prompt that is too long (engine.validation) raises SettingsError and the old one stays."""
        if prompt != self.system_prompt:
            check_system_prompt(prompt)
            probe = Conversation(self.loaded.processor.text, codebooks=self.loaded.codebooks)
            probe.add_text_turn("system", prompt)
            check_system_prompt_fits(probe.positions, self.context_capacity)
            self.system_prompt = prompt
            self.reset()

    def reset(self) -> None:
        """A new conversation with the session's system prompt (prefilled ahead: see `start_conversation`)."""
        with self._exclusive("reset"):
            self._start(self._new_conversation())

    def start_conversation(self, conversation: Conversation) -> None:
        """Make `conversation` the live one: the cache is emptied and then filled with everything the
        conversation holds (its system prompt, a restored history) right away, ahead of its first take."""
        with self._exclusive("start_conversation"):
            self._start(conversation)

    def _start(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.backend.reset()
        self.decoder.reset()
        self._prefill_ahead()

    @torch.inference_mode()
    def _prefill_ahead(self) -> None:
        """Prefill what the conversation holds and the cache does not, while nobody waits for it: a turn then
        prefills only its own take and markup. The first turn of a conversation used to prefill the system
        prompt with the take, which could push the span into the next larger prefill graph (the bench's
        4 s take: 82 positions instead of ~60, the 128-row graph instead of the 64-row one, ~1 ms more to
        first audio on the H200 in int8). Best effort: where it runs out of GPU memory, the turn prefills the
        rest (and reports the error, if it persists); the cache always holds a prefix of the conversation."""
        if self.conversation.positions <= self.backend.positions:
            return
        try:
            self._prefill_embeddings(self.embed_from(self.backend.positions))
        except (torch.OutOfMemoryError, GpuMemoryError) as error:
            log.warning("the conversation's start was not prefilled ahead (%s); the first turn will", error)

    # ------------------------------------------------------------------ behind "ready"

    def note_ready_memory(self) -> None:
        """What the allocator holds now counts as the session's own (see _release_cached_memory)."""
        if self.loaded.device.type == "cuda":
            self._ready_reserved = torch.cuda.memory_reserved(self.loaded.device)

    def queue_lazy_capture(self) -> None:
        """Queue what the session did not capture before "ready" (the audio encoder's rungs) for
        `capture_behind_ready` (engine/realtime/lazy_capture.py); ChatSession.open does, once it is ready."""
        jobs = self.encoder_graphs.jobs() if self.encoder_graphs is not None else []
        if jobs and self.lazy_capture is None:
            self.lazy_capture = LazyCapture(jobs, after_each=self._after_lazy_capture)

    def _after_lazy_capture(self) -> None:
        """After each graph captured behind "ready": the warm-up's blocks handed back, and the new graphs' pool
        counted as the session's own (see _release_cached_memory)."""
        if self.loaded.device.type == "cuda":
            graphs.empty_cache()
        self.note_ready_memory()

    @property
    def captures_pending(self) -> bool:
        """Whether graphs left behind "ready" are still to be captured."""
        return self.lazy_capture is not None and not self.lazy_capture.done

    def capture_behind_ready(self) -> bool:
        """Capture the next graph left behind "ready" (an encoder rung: its warm-up, capture and check, ~0.1 s on
        the H100's host), if any; whether more remain. Between turns, on the thread that runs them (the engine
        thread's idle tick: engine/worker/thread.py), so that no other CUDA work meets the capture; SessionBusy
        while a turn holds the session."""
        if not self.captures_pending:
            return False
        with self._exclusive("capture_behind_ready"):
            assert self.lazy_capture is not None
            return self.lazy_capture.run_next()

    def wait_for_graphs(self) -> None:
        """Capture now every graph still left behind "ready" (the bench, and tests that need every graph in use)."""
        if self.captures_pending:
            with self._exclusive("wait_for_graphs"):
                assert self.lazy_capture is not None
                self.lazy_capture.run_all()

    def withdraw_after(self, last_kept: object) -> None:
        """Take back the turns after `last_kept` (a turn of the conversation, read before them; None: all but the
        system prompt): a hands-free take and its half-answer, withdrawn because the user went on speaking. The
        cache is filled again with what stays (the same path as a new conversation's start)."""
        with self._exclusive("withdraw"):
            turns = self.conversation.turns
            keep = next((i + 1 for i, turn in enumerate(turns) if turn is last_kept), None)
            if keep is None:  # a trim dropped it: the take and its answer are the last two turns
                keep = len(turns) - 2 if len(turns) >= 3 and turns[-2].role == "user" else len(turns)
            if keep < len(turns):
                del turns[keep:]
                self._start(self.conversation)

    def close(self) -> None:
        if self.lazy_capture is not None:
            self.lazy_capture.drop()  # the rungs not yet in are never captured
        close = getattr(self.backend, "close", None)
        if close is not None:
            close()
        self.encoder_graphs = None  # its graphs and their memory pool go with it

    def restore(self, plan: "RestorePlan") -> int:
        """Continue a saved conversation: lay its exchanges out again as the live turns were (the takes
        encoded again by `encode_take`, the answers from their saved tokens and codes), dropping the oldest
        exchanges so that TRIM_HEADROOM of the context stays free, and fill the cache with the restored
        history (`start_conversation`: ahead of the next take, through the same path a live turn takes
        after a trim). Returns how many turns were dropped to fit."""
        from engine.history.context import pieces_of_tokens

        with self._exclusive("restore"):
            # The saved prompt heads the restored context; the session's own prompt (what a reset starts
            # with) stays the one the settings gave.
            conversation = Conversation(self.loaded.processor.text, codebooks=self.loaded.codebooks)
            conversation.add_text_turn("system", plan.system_prompt)
            for exchange in plan.exchanges:
                conversation.add_audio_turn("user", *self.encode_take(exchange.take_16k))
                conversation.open_assistant_turn().pieces.extend(pieces_of_tokens(exchange.answer))
                conversation.close_assistant_turn()
            dropped = conversation.drop_oldest_turns(0, int(self.context_capacity * (1 - TRIM_HEADROOM)))
            self._start(conversation)
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

    @staticmethod
    def max_frames_for(max_answer_seconds: float) -> int:
        """Audio frames that fit in `max_answer_seconds` (never more: the answer must not overshoot)."""
        return max(1, math.floor(max_answer_seconds / FRAME_SECONDS + 1e-6))

    def max_new_tokens_for(self, max_answer_seconds: float) -> int:
        frames = self.max_frames_for(max_answer_seconds)
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
            yield from self._respond(wave_16k, sampling, max_answer_seconds, cancel, max_new_tokens, max_take_seconds)

    def _respond(
        self,
        wave_16k: np.ndarray,
        sampling: SamplingSettings,
        max_answer_seconds: float,
        cancel: threading.Event | None,
        max_new_tokens: int | None,
        max_take_seconds: float = DEFAULT_MAX_TAKE_SECONDS,
    ) -> Iterator[TurnOutput]:
        started = time.perf_counter()
        budget = max_new_tokens if max_new_tokens is not None else self.max_new_tokens_for(max_answer_seconds)
        answer_tokens = budget  # what the next turn is expected to ask for (see _make_room_for_next_turn)
        max_frames = None if max_new_tokens is not None else self.max_frames_for(max_answer_seconds)
        turn = self._encode(wave_16k)
        budget, dropped = self._make_room(budget)
        if dropped:
            yield ContextTrimmedInfo(dropped)
        stats = self._prefill(started)
        yield from self._stream(turn, sampling, budget, max_frames, cancel, stats, started)
        dropped = self._make_room_for_next_turn(stats, answer_tokens, max_take_seconds)
        if dropped:
            yield ContextTrimmedInfo(dropped)
        self._release_cached_memory()
        yield TurnDone(stats)

    def _release_cached_memory(self) -> None:
        """Hand back to the driver what a turn left cached in the allocator beyond what the session held when
        it was ready (a long take's eager encoding, a rebuild's temporaries): without it the card's count
        crept up by ~75 MB over a long conversation (bench/results/run-56-int8-final, small_cards). After the
        answer is generated, so no turn's first audio waits for it."""
        if self.loaded.device.type != "cuda" or self._ready_reserved is None:
            return
        if torch.cuda.memory_reserved(self.loaded.device) > self._ready_reserved + RELEASE_CACHED_ABOVE_BYTES:
            graphs.empty_cache()

    def _encode(self, wave_16k: np.ndarray) -> Turn:
        """The take (its features, and rows if the encoder graphs made them) in the conversation, and the
        (open) assistant turn after it."""
        self.conversation.add_audio_turn("user", *self.encode_take(wave_16k))
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
        embeddings = self.embed_from(self.backend.positions)
        _sync(device)
        stats = TurnStats(audio_encoded_s=time.perf_counter() - started, prefill_done_s=0.0)
        self._prefill_embeddings(embeddings)
        del embeddings
        _sync(device)
        stats.prefill_done_s = time.perf_counter() - started
        return stats

    def _stream(
        self,
        turn: Turn,
        sampling: SamplingSettings,
        budget: int,
        max_frames: int | None,
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
                yield AudioPieceOut(pcm, round(pcm.size / FRAME_SAMPLES))  # a group of frames (the first: 1440 samples; the tail: none)

        for event in interleaved_decode(
            self.backend, self.schedule, sampling, max_new_tokens=budget, cancel=cancel, max_frames=max_frames
        ):
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

    def next_turn_positions(self, answer_tokens: int, max_take_seconds: float) -> int:
        """Positions the next turn may need: a take of `max_take_seconds` with its markup, and room for an
        answer of `answer_tokens`; at most NEXT_TURN_MAX_SHARE of the context."""
        conversation = self.conversation
        markup = sum(
            len(conversation.encode(text)) for text in ("<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n")
        )
        take = int(mel2emb_len(math.ceil(max_take_seconds * MEL_FRAMES_PER_SECOND) + 1)) + 1
        return min(take + markup + answer_tokens + 2, int(self.context_capacity * NEXT_TURN_MAX_SHARE))

    def _make_room_for_next_turn(self, stats: TurnStats, answer_tokens: int, max_take_seconds: float) -> int:
        """After an answer: if the next turn might not fit, drop the oldest exchanges now and rebuild the
        cache from the kept turns' embeddings (no conformer run), while the answer still plays. Returns
        how many turns were dropped."""
        conversation = self.conversation
        needed = self.next_turn_positions(answer_tokens, max_take_seconds)
        if conversation.positions + needed <= self.context_capacity:
            return 0
        trim_started = time.perf_counter()
        dropped = conversation.drop_oldest_turns(needed, self.context_capacity)
        if dropped:
            self.backend.reset()
            self._prefill_embeddings(self.embed_from(self.backend.positions))
            _sync(self.loaded.device)
            stats.trimmed_ahead_turns = dropped
            stats.trim_ahead_s = time.perf_counter() - trim_started
        return dropped


def _lone_take(take: AudioInPiece, codebooks: int, device: torch.device) -> PrefillInputs:
    """`_prefill` inputs for one take alone (its positions only)."""
    return PrefillInputs(
        text=torch.zeros((1, 0), dtype=torch.long, device=device),
        audio_in=take.mel.to(device),
        audio_in_lens=torch.tensor([take.mel.shape[1]], dtype=torch.long, device=device),
        audio_out=torch.zeros((codebooks, 0), dtype=torch.long, device=device),
        modality_flag=torch.full((1, take.positions), int(LFMModality.AUDIO_IN), dtype=torch.long, device=device),
    )


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


__all__ = [
    "_encoder_graphs_or_none",
    "demo_model_folder",
    "ensure_demo_model",
    "fit_depthformer_to_decoder",
    "AudioPieceOut",
    "ChatSession",
    "ContextTrimmedInfo",
    "LoraError",
    "TextPieceOut",
    "TurnDone",
    "TurnOutput",
    "TurnStats",
]
