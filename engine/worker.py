"""The engine thread: reads `Command`s, drives the model, the recorder and the player, posts `Event`s.

State machine::

    NO_MODEL --Load--> LOADING --ok--> IDLE --StartTake--> RECORDING --EndTake--> THINKING
                               --fail--> NO_MODEL          IDLE <--played out-- SPEAKING <--first audio--'
    THINKING/SPEAKING --StartTake--> RECORDING (barge-in: playback flushed, generation cancelled)

Everything model-related (open, respond, switch_voice, reset) runs on this one thread, so torch state
that is thread-local (grad mode, the current stream) is always the same. The thread never stops
listening for long: while a turn is generated, the command queue is checked between output pieces
(that is how barge-in and Cancel act within a frame); a download runs in a helper thread so Cancel
and Shutdown are handled during it. Only `ChatSession.open` itself blocks the loop (it has no
cancel), and commands sent meanwhile wait in the queue.

Every exception from a command becomes an `EngineError` and the loop goes on. If the thread dies
anyway, `EngineStopped(error=...)` is posted from a `finally`.

Nothing the user made is lost: every take and every answer's PCM is kept (replay, export), also
when the model's context drops old turns.
"""

from __future__ import annotations

import collections
import json
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from engine import protocol as p
from engine.errors import UserFacingError
from engine.history import engine_commands as history_commands
from engine.history.audio import canonical_take
from engine.history.service import HistoryKeeper

log = logging.getLogger(__name__)

USER_RATE = 16_000  # what the recorder delivers and respond() takes
ANSWER_RATE = 24_000  # what the model produces and the player plays
EXPORT_GAP_S = 0.4  # silence between turns in the exported WAV, so the turns are audible as turns


@dataclass
class TurnRecord:
    """One item of the conversation as kept by the engine (for replay and export)."""

    turn_id: int
    role: str  # "user" | "assistant"
    pcm: np.ndarray  # float32 mono
    sample_rate: int
    text: str = ""
    cancelled: bool = False
    metrics: p.TurnMetrics | None = None
    greedy: bool | None = None
    started_at: float = field(default_factory=time.time)  # wall clock, for the exported timings

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / self.sample_rate


@dataclass
class _ActiveTurn:
    """The assistant turn being generated or still playing."""

    turn_id: int
    release_t: float  # push-to-talk release (monotonic)
    respond_t: float  # when respond() was called
    cancel: threading.Event
    greedy: bool
    pieces: list[np.ndarray] = field(default_factory=list)
    samples: int = 0
    frames: int = 0
    text: str = ""
    generating: bool = True
    first_output_t: float | None = None  # first piece out of respond(): prefill is done by then
    first_enqueue_t: float | None = None
    stats: Any = None  # engine.session.TurnStats once TurnDone arrived
    metrics_sent: bool = False
    cancelled: bool = False
    failed: bool = False  # respond() raised; the error is reported by the dispatcher
    last_rtf_t: float = 0.0
    utterance_id: int | None = None  # the player's utterance for this answer (None: no output device)
    underruns_before: int = 0
    sampling: p.SamplingSettings | None = None  # what this turn was generated with (saved in the history)
    played_samples: int | None = None  # set by a barge-in: how much of the answer had been heard


@dataclass(frozen=True)
class _TakeReady:
    """Internal: the recorder delivered a finished take (posted on the command queue by the recorder's
    worker thread, so the engine loop wakes at once instead of polling)."""

    take: Any  # engine.audio.capture.CapturedTake


@dataclass(frozen=True)
class _TakeNote:
    """Internal: the recorder dropped (too short) or cut (too long) a take."""

    event: p.TakeRejected


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, UserFacingError):
        return exc.kind
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "gpu_memory"
    if name in ("PortAudioError", "AudioDeviceError", "AudioError") or type(exc).__module__.startswith("engine.audio"):
        return "audio_device"
    return "internal"


def _resample(pcm: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Band-limited resampling for replay/export (user takes are 16 kHz, the player runs at 24 kHz)."""
    from engine.audio_files import resample

    return resample(np.asarray(pcm, dtype=np.float32), src, dst)


class EngineWorker:
    """Owns the engine thread. Constructed by the app with the two queues; `start()` returns at once."""

    def __init__(
        self,
        commands: "queue.Queue[p.Command]",
        events: "queue.Queue[p.Event]",
        *,
        session_opener: Callable[..., Any] | None = None,
        recorder_options: dict[str, Any] | None = None,
        player_options: dict[str, Any] | None = None,
        history_folder: Path | None = None,
    ) -> None:
        self._commands = commands
        self._events = events
        # `session_opener` lets the lead's self-test open the session its own way; by default the real
        # ChatSession is used. The option dicts tune the real recorder/player (tests shorten the tail).
        self._session_opener = session_opener
        self._recorder_options = dict(recorder_options or {})
        self._player_options = dict(player_options or {})
        self._thread = threading.Thread(target=self._run, name="voicechat-engine", daemon=True)

        self.state = p.EngineState.NO_MODEL
        self.session: Any = None
        self.recorder: Any = None
        self.player: Any = None
        self.sampling = p.SamplingSettings()
        self.system_prompt: str | None = None
        self.max_answer_seconds = 30.0
        self.input_device: str | None = None
        self.output_device: str | None = None
        self.records: list[TurnRecord] = []
        self.turn: _ActiveTurn | None = None
        self.replaying: int | None = None
        self._next_id = 1
        self._deferred: collections.deque[p.Command] = collections.deque()
        self._stopping = False
        self._take_pressed_t: float | None = None
        self._release_t: float | None = None
        self._discard_take = False  # a take cancelled while its tail was still being recorded
        self.history = HistoryKeeper(self._post, history_folder)  # saves finished turns (engine/history)

    # ------------------------------------------------------------------ thread handle

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ plumbing

    def _post(self, event: p.Event) -> None:
        self._events.put(event)

    def _set_state(self, state: p.EngineState) -> None:
        if state is not self.state:
            self.state = state
            self._post(p.StateChanged(state))

    def _report(self, exc: BaseException, kind: str | None = None) -> None:
        kind = kind or _error_kind(exc)
        if isinstance(exc, UserFacingError):
            self._post(p.EngineError.from_exception(kind, exc))
            return
        message = f"{type(exc).__name__}: {exc}"
        details = "".join(traceback.format_exception(exc))
        log.error("engine error (%s): %s", kind, details)
        self._post(p.EngineError(kind=kind, message=message, details=details))

    def _new_id(self) -> int:
        turn_id = self._next_id
        self._next_id += 1
        return turn_id

    # ------------------------------------------------------------------ main loop

    def _run(self) -> None:
        error: str | None = None
        try:
            self.history.start()
            if self.history.available:
                self.history.post_listing()
            while not self._stopping:
                command = self._next_command()
                if command is not None:
                    self._dispatch(command)
                self._tick()
        except BaseException as exc:  # noqa: BLE001 - reported to the window, which offers a restart
            error = f"{type(exc).__name__}: {exc}"
            log.exception("the engine thread died")
        finally:
            try:
                self._teardown()
            except BaseException:  # noqa: BLE001
                log.exception("engine teardown failed")
            self._post(p.EngineStopped(error=error))

    def _next_command(self) -> p.Command | None:
        if self._deferred:
            return self._deferred.popleft()
        # While something is live (recording, playing) wake up often to meter and to notice the
        # end of playback; otherwise sleep longer, nothing happens without a command.
        busy = self.state is p.EngineState.SPEAKING
        try:
            return self._commands.get(timeout=0.01 if busy else 0.1)
        except queue.Empty:
            return None

    def _dispatch(self, command: p.Command) -> None:
        handler = getattr(self, "_on_" + type(command).__name__, None)
        if handler is None and type(command) in history_commands.HANDLERS:
            history_handler = history_commands.HANDLERS[type(command)]
            handler = lambda c: history_handler(self, c)  # noqa: E731
        if handler is None:
            self._post(p.EngineError("internal", f"Unknown command {type(command).__name__}"))
            return
        try:
            handler(command)
        except Exception as exc:  # noqa: BLE001 - every failure is shown, the engine keeps running
            kind = {
                "Load": "model", "SwitchVoice": "lora", "SelectDevices": "audio_device", "StartTake": "take",
                "EndTake": "take", "Export": "export", "ApplySettings": "settings", "ExportHistory": "export",
            }.get(type(command).__name__)
            self._report(exc, _error_kind(exc) if _error_kind(exc) != "internal" else kind)
            self._recover_after_error()

    def _recover_after_error(self) -> None:
        # After a failure the machine must be in a state the user can continue from. A failed Load
        # has already said NO_MODEL itself; LOADING is left alone (a device error during a download
        # must not look like a failed load).
        if self.turn is not None and self.turn.generating:
            return  # still inside the turn loop, which finishes itself
        if self.session is not None and self.state is p.EngineState.THINKING:
            self._set_state(p.EngineState.IDLE)
        elif self.state is p.EngineState.RECORDING and not self._recorder_recording():
            self._set_state(p.EngineState.IDLE if self.session is not None else p.EngineState.NO_MODEL)

    # ------------------------------------------------------------------ periodic work

    def _tick(self) -> None:
        if self.turn is not None and not self.turn.generating:
            self._maybe_send_metrics()
            if self.state is p.EngineState.SPEAKING and self._playback_finished():
                self._finish_playback()
        elif self.replaying is not None and self._playback_finished():
            self.replaying = None
            if self.state is p.EngineState.SPEAKING:
                self._set_state(p.EngineState.IDLE)

    # ------------------------------------------------------------------ commands: set-up

    def _on_ApplySettings(self, command: p.ApplySettings) -> None:
        self.sampling = command.sampling
        if command.max_answer_seconds is not None:
            self.max_answer_seconds = command.max_answer_seconds
        if command.system_prompt is not None and command.system_prompt != self.system_prompt:
            self.system_prompt = command.system_prompt
            if self.session is not None:
                # The prompt is the first thing in the cache, so a new one starts a new conversation
                # (the window clears its transcript when it sends a changed prompt).
                self.session.set_system_prompt(command.system_prompt)
                self.records.clear()
                self.history.new_conversation()
                self._post_context()

    def _on_SelectDevices(self, command: p.SelectDevices) -> None:
        self.input_device, self.output_device = command.input_device, command.output_device
        self._open_audio()

    def _on_ListDevices(self, command: p.ListDevices) -> None:
        from engine.audio.devices import list_devices

        # Names, deduplicated in PortAudio order: settings store names, and on Windows one device is
        # listed once per host API (find_device picks the best one for a name).
        inputs = list(dict.fromkeys(d.name for d in list_devices("input")))
        outputs = list(dict.fromkeys(d.name for d in list_devices("output")))
        self._post(p.Devices(tuple(inputs), tuple(outputs), self.input_device, self.output_device))

    def _on_Load(self, command: p.Load) -> None:
        self._abort_turn()
        if self.session is not None:
            # Free the old model before loading the new one: two copies rarely fit in VRAM.
            session, self.session = self.session, None
            session.close()
        self._set_state(p.EngineState.LOADING)
        source: str | None = None
        if not command.demo:
            try:
                resolved = self._resolve_source(command)
            except BaseException:
                self._set_state(p.EngineState.NO_MODEL)  # before the error, so the window knows why
                raise
            if resolved is None:
                self._set_state(p.EngineState.NO_MODEL)
                return
            source = str(resolved)
        try:
            self.session = self._open_session(source, command, lora=command.lora)
        except UserFacingError as exc:
            if exc.kind != "lora" or command.lora is None:
                self._set_state(p.EngineState.NO_MODEL)
                raise
            # A broken voice must not cost the user the model: load without it and say so.
            self._report(exc)
            self.session = self._open_session(source, command, lora=None)
        except BaseException:
            self._set_state(p.EngineState.NO_MODEL)
            raise
        if self.system_prompt is not None:
            self.session.set_system_prompt(self.system_prompt)
        self.history.new_conversation()  # a new model starts with an empty context: a new saved conversation
        self._post(self._info())
        self._post_context()
        self._set_state(p.EngineState.IDLE)

    def _open_session(self, source: str | None, command: p.Load, *, lora: str | None) -> Any:
        opener = self._session_opener
        if opener is None:
            from engine.session import ChatSession

            opener = ChatSession.open
        return opener(source, lora=lora, demo=command.demo, revision=None, context_tokens=command.context_tokens,
                      progress=self._post)

    def _resolve_source(self, command: p.Load) -> Path | None:
        """A checked local folder for the model, downloading it if allowed; None if missing/cancelled.

        The check and the download run in a helper thread (network and file I/O, no model state), so
        this loop keeps answering Cancel and Shutdown."""
        from engine import model_store

        cancel = threading.Event()
        result: dict[str, Any] = {}

        def work() -> None:
            try:
                if (not command.allow_download and model_store.looks_like_repo_id(command.source)
                        and model_store.find_local_model(command.source, command.revision) is None):
                    result["missing"] = True
                    return
                result["path"] = model_store.resolve_model(
                    command.source, revision=command.revision, progress=self._post, cancel=cancel,
                    allow_download=command.allow_download)
            except BaseException as exc:  # noqa: BLE001 - handed to the engine thread below
                result["error"] = exc

        helper = threading.Thread(target=work, name="voicechat-model-resolve", daemon=True)
        helper.start()
        while helper.is_alive():
            helper.join(0.05)
            for command_during in self._drain_commands():
                if isinstance(command_during, p.Cancel):
                    cancel.set()
                elif isinstance(command_during, p.Shutdown):
                    cancel.set()
                    self._stopping = True
                elif isinstance(command_during, (p.ApplySettings, p.SelectDevices, p.ListDevices)):
                    self._dispatch(command_during)  # touch no model: safe at once
                else:
                    self._deferred.append(command_during)
        if "missing" in result:
            self._post(p.ModelMissing(command.source))
            return None
        error = result.get("error")
        if error is not None:
            from engine.errors import DownloadCancelled as DownloadCancelledError

            if isinstance(error, DownloadCancelledError) or cancel.is_set():
                self._post(p.DownloadCancelled(command.source))
                return None
            raise error
        return Path(result["path"])

    def _drain_commands(self) -> list[p.Command]:
        drained = []
        while True:
            try:
                drained.append(self._commands.get_nowait())
            except queue.Empty:
                return drained

    def _info(self) -> p.EngineInfo:
        info: p.EngineInfo = self.session.info
        try:
            import torch

            if torch.cuda.is_available() and torch.cuda.is_initialized():
                # Reserved, not allocated: closer to what the driver (and nvidia-smi) counts for us.
                info = replace(info, vram_used_bytes=int(torch.cuda.memory_reserved()))
        except Exception:  # noqa: BLE001 - the status bar can live without a VRAM figure
            pass
        return info

    def _post_context(self) -> None:
        if self.session is not None:
            self._post(p.ContextUsage(int(self.session.context_used), int(self.session.context_capacity)))

    def _on_SwitchVoice(self, command: p.SwitchVoice) -> None:
        if self.session is None:
            raise UserFacingError("No model is loaded, so there is no voice to switch.")
        self.session.switch_voice(command.lora)  # LoraError: the previous voice stays
        self._post(self._info())

    def _on_Reset(self, command: p.Reset) -> None:
        self._abort_turn()
        self.records.clear()
        self.history.new_conversation()
        if self.session is not None:
            self.session.reset()
            self._post_context()
            self._set_state(p.EngineState.IDLE)

    def _on_Shutdown(self, command: p.Shutdown) -> None:
        self._abort_turn()
        self._stopping = True

    # ------------------------------------------------------------------ audio devices

    def _open_audio(self) -> None:
        """(Re)open both devices. Each one reports its own failure as an EngineError(audio_device) and
        is retried on the next press / answer, so a missing speaker does not stop the microphone."""
        self._close_audio()
        self._need_recorder()
        self._need_player()

    def _close_audio(self) -> None:
        for name in ("recorder", "player"):
            device = getattr(self, name)
            setattr(self, name, None)
            if device is not None:
                try:
                    device.close()
                except Exception:  # noqa: BLE001 - closing a broken device must not hide the real error
                    log.exception("closing the %s failed", name)

    def _need_recorder(self) -> Any:
        if self.recorder is None:
            from engine.audio.capture import PushToTalkRecorder

            options = {"max_take_s": 60.0, **self._recorder_options}
            self.recorder = PushToTalkRecorder(self.input_device, on_take=self._on_take_from_recorder,
                                               on_event=self._on_recorder_event, **options)
            self.recorder.open()  # on failure it posts EngineError itself and retries on press()
        return self.recorder

    def _need_player(self) -> Any:
        if self.player is None:
            from engine.audio.playback import StreamingPlayer

            self.player = StreamingPlayer(self.output_device, on_event=self._events.put, **self._player_options)
            self.player.open()
        return self.player

    # Called on the recorder's worker thread: hand over through the queues, touch no engine state.
    def _on_take_from_recorder(self, take: Any) -> None:
        self._commands.put(_TakeReady(take))

    def _on_recorder_event(self, event: p.Event) -> None:
        if isinstance(event, p.TakeRejected):
            self._commands.put(_TakeNote(event))  # it changes the state machine
        else:
            self._events.put(event)  # InputLevel, EngineError: straight to the window

    def _recorder_recording(self) -> bool:
        return self.recorder is not None and bool(self.recorder.is_recording)

    # ------------------------------------------------------------------ takes and turns

    def _on_StartTake(self, command: p.StartTake) -> None:
        if self.session is None:
            raise UserFacingError("The model is not loaded yet.")
        if self.state is p.EngineState.RECORDING:
            return  # a second press (key and mouse together): one take
        self._barge_in()
        recorder = self._need_recorder()
        if not recorder.press():
            return  # the microphone could not be opened; the recorder has posted why
        self._discard_take = False
        self._take_pressed_t = time.monotonic()
        self._release_t = None
        self._set_state(p.EngineState.RECORDING)

    def _note_played(self, turn: _ActiveTurn) -> None:
        """How much of the answer was heard when it was cut (the history keeps that much of its sound)."""
        player = self.player
        if turn.played_samples is None and player is not None and turn.utterance_id is not None:
            queued = int(player.buffered_frames * ANSWER_RATE / max(1, player.samplerate))
            turn.played_samples = max(0, turn.samples - queued)

    def _barge_in(self) -> None:
        """Stop the answer now: silence first (that is what the user hears), then stop generating."""
        if self.turn is not None:
            self._note_played(self.turn)
        if self.player is not None:
            self.player.flush()
        if self.turn is not None:
            self._note_played(self.turn)
            self.turn.cancel.set()
            self.turn.cancelled = True
            if not self.turn.generating:
                self._finish_playback(interrupted=True)
        if self.replaying is not None:
            self.replaying = None

    def _on_Cancel(self, command: p.Cancel) -> None:
        if self.state is p.EngineState.RECORDING and self.recorder is not None:
            self._drop_running_take()
            return
        self._barge_in()
        if self.turn is None or not self.turn.generating:
            if self.session is not None and self.state is not p.EngineState.RECORDING:
                self._set_state(p.EngineState.IDLE)

    def _drop_running_take(self) -> None:
        """Cancel while recording: end the take and throw it away when it arrives."""
        if self.recorder is not None and self._release_t is None:
            self.recorder.release()
        self._discard_take = True
        self._set_state(p.EngineState.IDLE)

    def _on_EndTake(self, command: p.EndTake) -> None:
        if self.state is not p.EngineState.RECORDING or self.recorder is None or self._release_t is not None:
            return  # release without a take (the press failed, the take was cancelled or cut at the limit)
        # The take ends `tail_s` later in stream time and arrives as _TakeReady; the state stays
        # RECORDING meanwhile, because the tail is still being recorded.
        self._release_t = time.monotonic()
        self.recorder.release()

    def _on__TakeNote(self, note: _TakeNote) -> None:
        self._post(note.event)
        if note.event.reason == "too_short" and self.state is p.EngineState.RECORDING:
            self._discard_take = False
            self._set_state(p.EngineState.IDLE)
        # too_long: the cut take follows as _TakeReady and is answered like any other.

    def _on__TakeReady(self, ready: _TakeReady) -> None:
        if self._discard_take or self.state is not p.EngineState.RECORDING:
            self._discard_take = False
            return  # cancelled, or overtaken by a Load/Reset
        take = ready.take
        # Cut at the limit while still held: the take ends now, so "release" is now.
        release_t = self._release_t if self._release_t is not None else time.monotonic()
        self._release_t = release_t
        # On the 24-bit grid (inaudibly): the saved take then re-embeds bit for bit when continued.
        wave = canonical_take(take.audio)
        user = TurnRecord(self._new_id(), "user", wave, int(take.sample_rate))
        self.records.append(user)
        self.history.user_take(user.turn_id, wave, user.sample_rate, self.session, user.started_at)
        self._post(p.UserTakeAdded(user.turn_id, user.duration_s))
        if self.session is None:
            self._set_state(p.EngineState.NO_MODEL)
            return
        self._run_turn(wave, release_t)

    def _run_turn(self, wave: np.ndarray, release_t: float) -> None:
        from engine.session import AudioPieceOut, ContextTrimmedInfo, TextPieceOut, TurnDone

        player = self._need_player()
        turn = _ActiveTurn(self._new_id(), release_t, time.monotonic(), threading.Event(), self.sampling.greedy,
                           sampling=self.sampling)
        self.turn = turn
        # None when the speaker cannot be opened: the player has said why, and the answer is still
        # generated and kept (replay/export once the device is back).
        turn.utterance_id = player.begin_utterance()
        turn.underruns_before = player.underruns
        self._set_state(p.EngineState.THINKING)
        self._post(p.AssistantTurnStarted(turn.turn_id, greedy=turn.greedy))
        turn.respond_t = time.monotonic()
        try:
            for out in self.session.respond(wave, self.sampling, max_answer_seconds=self.max_answer_seconds,
                                            cancel=turn.cancel):
                if turn.first_output_t is None and isinstance(out, (TextPieceOut, AudioPieceOut)):
                    turn.first_output_t = time.monotonic()
                if isinstance(out, TextPieceOut):
                    turn.text += out.text
                    self._post(p.TextDelta(turn.turn_id, out.text))
                elif isinstance(out, AudioPieceOut):
                    turn.frames += out.frames
                    self._queue_answer_audio(turn, player, np.asarray(out.pcm, dtype=np.float32))
                elif isinstance(out, ContextTrimmedInfo):
                    self._post(p.ContextTrimmed(out.dropped_turns, int(self.session.context_used)))
                elif isinstance(out, TurnDone):
                    turn.stats = out.stats
                self._during_turn(turn)
        except BaseException:
            turn.failed = True
            raise
        finally:
            turn.generating = False
            self._end_of_generation(turn)

    def _queue_answer_audio(self, turn: _ActiveTurn, player: Any, pcm: np.ndarray) -> None:
        if len(pcm) == 0:
            return
        turn.pieces.append(pcm)
        turn.samples += len(pcm)
        if turn.cancel.is_set():
            return  # kept for the record, but a barge-in means nothing more is played
        if turn.utterance_id is not None:
            player.enqueue(pcm)
        now = time.monotonic()
        if turn.first_enqueue_t is None:
            turn.first_enqueue_t = now
            if self.state is p.EngineState.THINKING:
                self._set_state(p.EngineState.SPEAKING)
        audio_s = turn.samples / ANSWER_RATE
        self._post(p.AudioChunkQueued(turn.turn_id, len(pcm), ANSWER_RATE, audio_s))
        # Live RTF as the session defines it (time since the prefill finished over audio made), with
        # the first output piece standing in for "prefill done"; after a few frames so the first
        # figure is not a meaningless 0.
        if audio_s >= 0.3 and now - turn.last_rtf_t >= 0.1 and turn.first_output_t is not None:
            turn.last_rtf_t = now
            self._post(p.LiveRtf(turn.turn_id, (now - turn.first_output_t) / audio_s, turn.frames))

    def _during_turn(self, turn: _ActiveTurn) -> None:
        """Between two output pieces: act on what the user did meanwhile."""
        for command in self._drain_commands():
            if isinstance(command, (p.StartTake, p.EndTake)):
                try:
                    # Barge-in: StartTake cancels this turn and starts recording at once; its EndTake
                    # only ends the take (the take itself waits, as _TakeReady, for this turn to end).
                    self._dispatch(command)
                except Exception as exc:  # noqa: BLE001
                    self._report(exc, "take")
            elif isinstance(command, p.Cancel):
                self._on_Cancel(command)
            elif isinstance(command, p.Shutdown):
                turn.cancel.set()
                self._stopping = True
            elif isinstance(command, (p.ApplySettings, p.ListDevices, *history_commands.RUN_DURING_TURN)):
                self._dispatch(command)  # no effect on the running turn
            else:
                # EndTake of a barge-in take, voice switch, reset, load, export...: after this turn.
                self._deferred.append(command)

    def _end_of_generation(self, turn: _ActiveTurn) -> None:
        if turn.failed and not turn.pieces and not turn.text:
            # Nothing was produced: close the window's item, keep no empty record, measure nothing.
            self._post(p.AssistantTurnFinished(turn.turn_id, "", 0.0, True))
            turn.metrics_sent = True
            self.turn = None
            if self.state in (p.EngineState.THINKING, p.EngineState.SPEAKING):
                self._set_state(p.EngineState.IDLE)
            self._post_context()
            return
        pcm = np.concatenate(turn.pieces) if turn.pieces else np.zeros(0, np.float32)
        cancelled = turn.cancelled or bool(turn.stats is not None and turn.stats.cancelled)
        turn.cancelled = cancelled
        text = turn.stats.text if turn.stats is not None and turn.stats.text else turn.text
        turn.text = text
        record = TurnRecord(turn.turn_id, "assistant", pcm, ANSWER_RATE, text=text, cancelled=cancelled,
                            greedy=turn.greedy)
        self.records.append(record)
        heard = len(pcm) if turn.played_samples is None else min(len(pcm), turn.played_samples)
        self.history.answer(turn.turn_id, pcm[:heard], ANSWER_RATE, text=text, cancelled=cancelled,
                            generated_samples=len(pcm), session=self.session, context_valid=not turn.failed,
                            sampling=turn.sampling or self.sampling, started_at=record.started_at)
        if not cancelled and self.player is not None and turn.utterance_id is not None:
            self.player.mark_end_of_stream()  # lets the rest drain without counting as an underrun
        self._post(p.AssistantTurnFinished(turn.turn_id, text, record.duration_s, cancelled))
        if turn.stats is not None and turn.stats.rtf is not None and not cancelled:
            self._post(p.LiveRtf(turn.turn_id, float(turn.stats.rtf), turn.frames))
        self._post_context()
        if self.session is not None:
            self._post(self._info())
        if self.state is p.EngineState.THINKING:
            # No audio at all (cancelled before the first frame, or a text-only answer).
            self._finish_playback(interrupted=cancelled)
        elif self.state is not p.EngineState.SPEAKING:
            # Barge-in: already recording the next take; this turn is over.
            self._send_metrics(turn)
            if self.turn is turn:
                self.turn = None
        self._maybe_send_metrics()

    def _playback_finished(self) -> bool:
        player = self.player
        # A stream that died (unplugged) never drains: count that as finished, the player reported it.
        return player is None or not player.is_open or not player.is_speaking

    def _finish_playback(self, interrupted: bool = False) -> None:
        turn = self.turn
        if turn is not None:
            turn.cancelled = turn.cancelled or interrupted
            self._send_metrics(turn)
            self.turn = None
        if self.state in (p.EngineState.SPEAKING, p.EngineState.THINKING):
            self._set_state(p.EngineState.IDLE if self.session is not None else p.EngineState.NO_MODEL)

    def _first_audible(self, turn: _ActiveTurn) -> float | None:
        """Monotonic time at which the first sample of the answer reached the speaker, if known."""
        if self.player is None or turn.utterance_id is None:
            return None
        stats = self.player.utterance_stats()
        if stats is None or stats.uid != turn.utterance_id:
            return None
        return stats.first_audible_monotonic

    def _maybe_send_metrics(self) -> None:
        turn = self.turn
        if turn is None or turn.generating or turn.metrics_sent or turn.stats is None:
            return
        if turn.first_enqueue_t is not None and self._first_audible(turn) is None and not self._playback_finished():
            return  # wait until the player knows when the first sample was heard
        self._send_metrics(turn)

    def _send_metrics(self, turn: _ActiveTurn) -> None:
        if turn.metrics_sent:
            return
        turn.metrics_sent = True
        stats = turn.stats
        offset_ms = (turn.respond_t - turn.release_t) * 1000.0  # the take's tail and hand-over

        def since_release(seconds: float | None) -> float | None:
            return None if seconds is None else offset_ms + seconds * 1000.0

        audible = self._first_audible(turn)
        metrics = p.TurnMetrics(
            turn_id=turn.turn_id,
            audio_encoded_ms=since_release(stats.audio_encoded_s) if stats else offset_ms,
            prefill_done_ms=since_release(stats.prefill_done_s) if stats else offset_ms,
            first_text_ms=since_release(stats.first_text_s) if stats else None,
            first_audio_frame_ms=since_release(stats.first_audio_frame_s) if stats else None,
            first_audible_ms=None if audible is None else (audible - turn.release_t) * 1000.0,
            rtf=stats.rtf if stats else None,
            frames=int(stats.frames) if stats else 0,
            text=turn.text,
            cancelled=turn.cancelled,
            underruns=max(0, self.player.underruns - turn.underruns_before) if self.player is not None else 0,
        )
        for record in reversed(self.records):
            if record.turn_id == turn.turn_id:
                record.metrics = metrics
                break
        self.history.metrics(turn.turn_id, metrics)
        self._post(metrics)

    def _abort_turn(self) -> None:
        """Before Load/Reset/Shutdown: stop sound and forget the active turn (it is not generating here)."""
        if self.player is not None:
            self.player.flush()
        if self.turn is not None:
            self.turn.cancel.set()
            if self.turn.stats is not None:
                self._send_metrics(self.turn)
            self.turn = None
        self.replaying = None
        if self.state is p.EngineState.RECORDING and self.recorder is not None:
            self._drop_running_take()
        if self.state in (p.EngineState.SPEAKING, p.EngineState.THINKING, p.EngineState.RECORDING):
            self._set_state(p.EngineState.IDLE if self.session is not None else p.EngineState.NO_MODEL)

    # ------------------------------------------------------------------ replay and export

    def _on_ReplayTurn(self, command: p.ReplayTurn) -> None:
        record = next((r for r in self.records if r.turn_id == command.turn_id), None)
        if record is None or len(record.pcm) == 0:
            raise UserFacingError("That turn has no audio to replay.")
        self._play_recorded(record.pcm, record.sample_rate, record.turn_id)

    def _play_recorded(self, pcm: np.ndarray, sample_rate: int, replay_id: int = -1) -> None:
        if self.state is p.EngineState.RECORDING:
            return  # never play into a running take
        self._barge_in()
        player = self._need_player()
        if player.begin_utterance() is None:
            return  # no output device; the player has posted why
        player.enqueue(_resample(pcm, sample_rate, ANSWER_RATE))
        player.mark_end_of_stream()
        self.replaying = replay_id
        self._set_state(p.EngineState.SPEAKING)

    def _on_Export(self, command: p.Export) -> None:
        paths = export_conversation(self.records, Path(command.wav_path))
        self._post(p.Exported(tuple(str(x) for x in paths)))

    # ------------------------------------------------------------------ teardown

    def _teardown(self) -> None:
        if self.turn is not None:
            self.turn.cancel.set()
        self.history.close()  # what the writer still has is saved first (bounded wait)
        self._close_audio()
        if self.session is not None:
            session, self.session = self.session, None
            session.close()


def export_conversation(records: list[TurnRecord], wav_path: Path) -> list[Path]:
    """One WAV with both sides in order (24 kHz mono, 16-bit), plus .txt and .json transcripts."""
    import soundfile as sf

    if not records:
        raise UserFacingError("There is nothing to export yet.")
    wav_path = wav_path.with_suffix(".wav")
    wav_path.parent.mkdir(parents=True, exist_ok=True)
    gap = np.zeros(int(EXPORT_GAP_S * ANSWER_RATE), np.float32)
    parts: list[np.ndarray] = []
    turns_json: list[dict[str, Any]] = []
    lines: list[str] = []
    position = 0
    for record in records:
        pcm = _resample(record.pcm, record.sample_rate, ANSWER_RATE)
        start_s = position / ANSWER_RATE
        parts.append(pcm)
        parts.append(gap)
        position += len(pcm) + len(gap)
        entry: dict[str, Any] = {
            "turn_id": record.turn_id,
            "role": record.role,
            "start_s": round(start_s, 3),
            "duration_s": round(record.duration_s, 3),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(record.started_at)),
        }
        if record.role == "assistant":
            entry["text"] = record.text
            entry["cancelled"] = record.cancelled
            entry["greedy"] = record.greedy
            entry["metrics"] = asdict(record.metrics) if record.metrics is not None else None
            lines.append(f"[{_clock(start_s)}] Assistant: {record.text}" + (" (interrupted)" if record.cancelled else ""))
        else:
            lines.append(f"[{_clock(start_s)}] User: (voice, {record.duration_s:.1f} s)")
        turns_json.append(entry)
    audio = np.concatenate(parts[:-1]) if parts else np.zeros(0, np.float32)
    # Clip rather than wrap: a sample over full scale must not become a loud click in PCM_16.
    audio = np.clip(audio, -1.0, 1.0)
    txt_path = wav_path.with_suffix(".txt")
    json_path = wav_path.with_suffix(".json")
    _atomic_write(wav_path, lambda f: sf.write(f, audio, ANSWER_RATE, subtype="PCM_16", format="WAV"), binary=True)
    _atomic_write(txt_path, lambda f: f.write("\n".join(lines) + "\n"))
    doc = {"sample_rate": ANSWER_RATE, "gap_s": EXPORT_GAP_S, "duration_s": round(len(audio) / ANSWER_RATE, 3),
           "turns": turns_json}
    _atomic_write(json_path, lambda f: f.write(json.dumps(doc, ensure_ascii=False, indent=2) + "\n"))
    return [wav_path, txt_path, json_path]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60.0)
    return f"{int(minutes):02d}:{secs:05.2f}"


def _atomic_write(path: Path, write: Callable[[Any], Any], *, binary: bool = False) -> None:
    tmp = path.with_name(path.name + ".part")
    with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
        write(f)
    tmp.replace(path)
