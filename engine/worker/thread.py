"""The engine thread: reads `Command`s, drives the model, the recorder and the player, posts `Event`s.

Every command goes through one place, `EngineWorker._submit`, which looks it up in the command table
(engine/worker/table.py) for the current phase: run now, cancel what runs and then run, run after the
turn, or refuse with a message. Three loops read commands and all of them submit there: the main loop,
the turn between two pieces of the answer (`_between_pieces`) and the wait for a helper thread (a model
download, an export). None of them re-enters a turn, and nothing that needs the session's lock runs
while a turn holds it.

Everything model-related (open, respond, switch_voice, reset) runs on this one thread, so torch state
that is thread-local (grad mode, the current stream) is always the same. Only `ChatSession.open` itself
blocks the loop (it has no cancel); commands sent meanwhile wait in the queue.

Every exception from a command becomes an `EngineError` and the loop goes on. If the thread dies
anyway, `EngineStopped(error=...)` is posted from a `finally`.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from engine import protocol as p
from engine.errors import UserFacingError
from engine.history import engine_commands as history_commands
from engine.history.audio import canonical_take
from engine.history.service import HistoryKeeper, answer_tokens
from engine.worker.records import ANSWER_RATE, RecordBook, RecordListener, TurnRecord, export_conversation, resample
from engine.worker.table import (
    BUSY,
    DEFERRED_CHANGE,
    PUBLIC_STATE,
    RESTING,
    RUNS_WHILE_CANCELLING,
    TRANSITIONS,
    Outcome,
    Phase,
    SetPrompt,
    VoiceStarted,
    rule_for,
)
from engine.worker.takes import TAKE_LOST, TakeMessage, TakeNote, TakeReady, Takes
from engine.worker.turn import ActiveTurn, TurnClock, stream_answer

log = logging.getLogger(__name__)

# The EngineError kind of a command's failure when the exception does not say it itself.
_COMMAND_ERROR_KIND = {
    "Load": "model", "SwitchVoice": "lora", "SelectDevices": "audio_device", "StartTake": "take",
    "EndTake": "take", "Export": "export", "ApplySettings": "settings", "SetPrompt": "settings",
    "ReplayTurn": "take", "ExportHistory": "export", "ReplayHistoryTurn": "take",
}


class _HelperAbandoned(Exception):
    """The engine is shutting down and did not wait for a helper thread to finish."""


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, UserFacingError):
        return exc.kind
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "gpu_memory"
    if name == "PortAudioError" or type(exc).__module__.startswith("engine.audio"):
        return "audio_device"
    return "internal"


def _is_listed(device: str | None, kind: str) -> bool:
    """Whether PortAudio lists the device called `device` (None: any, for the system default) for `kind`."""
    from engine.audio.devices import AudioDeviceError, find_device

    try:
        find_device(device, kind)  # type: ignore[arg-type]
    except AudioDeviceError:
        return False
    return True


class EngineWorker:
    """Owns the engine thread. Constructed by the app with the two queues; `start()` returns at once.

    `on_record_finished` is called on the engine thread with every finished TurnRecord (see
    engine/worker/records.py): the seam for a history store."""

    def __init__(
        self,
        commands: "queue.Queue[p.Command]",
        events: "queue.Queue[p.Event]",
        *,
        session_opener: Callable[..., Any] | None = None,
        recorder_options: dict[str, Any] | None = None,
        player_options: dict[str, Any] | None = None,
        on_record_finished: RecordListener | None = None,
        history_folder: Path | None = None,
    ) -> None:
        self._commands = commands
        self._events = events
        # `session_opener` lets the lead's self-test open the session its own way; by default the real
        # ChatSession is used. The option dicts tune the real recorder/player (tests shorten the tail).
        self._session_opener = session_opener
        self._player_options = dict(player_options or {})
        self._thread = threading.Thread(target=self._run, name="voicechat-engine", daemon=True)

        self.phase = Phase.NO_MODEL
        self.state = p.EngineState.NO_MODEL  # what the window was last told
        self.session: Any = None
        self.player: Any = None
        self.takes = Takes(self._post, dict(recorder_options or {}))
        # Every finished record is saved in the history (engine/history), then handed to the caller's listener.
        self.history = HistoryKeeper(self._post, history_folder)
        self._on_record_finished = on_record_finished
        self.book = RecordBook(self._record_finished)
        self.sampling = p.SamplingSettings()
        self.system_prompt: str | None = None  # the prompt in use
        self.requested_prompt: str | None = None  # the last prompt asked for (may wait for the turn)
        self.max_answer_seconds = 30.0
        self.input_device: str | None = None
        self.output_device: str | None = None
        self.turn: ActiveTurn | None = None
        self.replaying: int | None = None
        self._next_id = 1
        self._pending: collections.deque[Any] = collections.deque()  # AFTER_TURN and cancelled-then-run commands
        self._stopping = False
        self._helper_cancel: threading.Event | None = None
        # Hands-free listening (engine/audio/voice.py): what the window asked for, and the listener thread.
        self.hands_free = p.SetHandsFree(enabled=False)
        self.listener: Any = None
        self._listener_key: tuple | None = None

    # ------------------------------------------------------------------ thread handle

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    @property
    def records(self) -> list[TurnRecord]:
        return self.book.records

    @property
    def recorder(self) -> Any:
        return self.takes.recorder

    # ------------------------------------------------------------------ plumbing

    def _record_finished(self, record: TurnRecord) -> None:
        self.history.record_finished(record, self.session)
        if self._on_record_finished is not None:
            self._on_record_finished(record)

    def _post(self, event: p.Event) -> None:
        self._events.put(event)

    def _set_phase(self, phase: Phase) -> None:
        if phase is self.phase:
            return
        if phase not in TRANSITIONS[self.phase]:
            message = f"Illegal engine transition {self.phase.value} -> {phase.value}"
            log.error(message)
            self._post(p.EngineError("internal", message))
        self.phase = phase
        public = PUBLIC_STATE[phase]
        if public is not None and public is not self.state:
            self.state = public
            self._post(p.StateChanged(public))

    def _rest_phase(self) -> Phase:
        return Phase.IDLE if self.session is not None else Phase.NO_MODEL

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

    # ------------------------------------------------------------------ the loops

    def _run(self) -> None:
        error: str | None = None
        try:
            self.history.start()
            self.history.refresh_listing()
            while not self._stopping:
                self._run_pending()
                if self._stopping:
                    break
                self._wait_and_handle_one()
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

    def _wait_and_handle_one(self) -> None:
        """Wait for the next take message or command and handle it. While recording, the wait is on the
        recorder's channel (the take is handed over the moment it arrives); otherwise on the commands."""
        if self.phase is Phase.RECORDING:
            message = self.takes.next_message(0.01)
            if message is not None:
                self._on_take_message(message)
            elif self.takes.lost(time.monotonic()):
                self.takes.settled()
                self._post(p.EngineError(kind="take", message=TAKE_LOST, template=TAKE_LOST))
                self._set_phase(self._rest_phase())
            command = self._next_command(None)
        else:
            message = self.takes.next_message(None)
            if message is not None:
                self._on_take_message(message)
                return
            # While sound is playing wake up often to notice its end; otherwise sleep longer.
            playing = self.phase in (Phase.PLAYING_OUT, Phase.REPLAYING)
            command = self._next_command(0.01 if playing else 0.1)
        if command is not None:
            self._submit(command)

    def _next_command(self, timeout: float | None) -> p.Command | None:
        try:
            return self._commands.get(timeout=timeout) if timeout else self._commands.get_nowait()
        except queue.Empty:
            return None

    def _drain_commands(self) -> list[p.Command]:
        drained = []
        while (command := self._next_command(None)) is not None:
            drained.append(command)
        return drained

    def _between_pieces(self) -> None:
        """Between two pieces of an answer (the session's lock is held): act on what arrived meanwhile."""
        for command in self._drain_commands():
            self._submit(command)

    def _wait_for_helper(self, work: Callable[[threading.Event], Any], name: str) -> Any:
        """Run `work(cancel)` in a helper thread (network and file I/O, no model state) and keep reading
        commands until it is done; returns its result or raises its exception."""
        cancel = threading.Event()
        done = threading.Event()
        result: dict[str, Any] = {}

        def run() -> None:
            try:
                result["value"] = work(cancel)
            except BaseException as exc:  # noqa: BLE001 - handed to the engine thread below
                result["error"] = exc
            finally:
                done.set()

        self._helper_cancel = cancel
        threading.Thread(target=run, name=f"voicechat-{name}", daemon=True).start()
        try:
            while not done.wait(0.02):
                for command in self._drain_commands():
                    self._submit(command)
                if self._stopping:
                    # Shutdown: the helper was told to stop (a download), but one stuck in the network
                    # must not keep the engine alive; it is a daemon thread and touches no engine state.
                    done.wait(1.0)
                    if not done.is_set():
                        raise _HelperAbandoned(name)
        finally:
            self._helper_cancel = None
        if "error" in result:
            raise result["error"]
        return result.get("value")

    # ------------------------------------------------------------------ the command table

    def _submit(self, command: Any) -> None:
        """The one place where a command meets the table (engine/worker/table.py)."""
        if self._stopping and not isinstance(command, p.Ping):
            return
        try:
            rule = rule_for(command, self.phase)
        except KeyError:
            self._post(p.EngineError("internal", f"Unknown command {type(command).__name__}"))
            return
        if rule.outcome is Outcome.RUN:
            self._execute(command)
        elif rule.outcome is Outcome.REFUSE:
            self._post(p.EngineError(kind=rule.kind, message=rule.message, template=rule.message))
        elif rule.outcome is Outcome.AFTER_TURN:
            self._pending.append(command)
            change = DEFERRED_CHANGE.get(type(command))
            if change is not None and self.phase in (Phase.THINKING, Phase.SPEAKING):
                self._post(p.ChangeDeferred(change))
        else:
            self._cancel_activity()
            if self.phase in BUSY and type(command) not in RUNS_WHILE_CANCELLING:
                self._pending.append(command)  # runs the moment the turn (or helper) has ended
            else:
                self._execute(command)

    def _run_pending(self) -> None:
        """At a quiet point: run the waiting commands in arrival order, as far as the phase allows."""
        while self._pending and not self._stopping and self.phase not in BUSY:
            if rule_for(self._pending[0], self.phase).outcome is Outcome.AFTER_TURN:
                return  # still waiting (e.g. an export for the answer that is playing out)
            self._submit(self._pending.popleft())

    def _execute(self, command: Any) -> None:
        handler = getattr(self, "_on_" + type(command).__name__, None)
        if handler is None:  # the history's commands (engine/history/engine_commands.py)
            history_handler = history_commands.HANDLERS[type(command)]
            handler = lambda c: history_handler(self, c)  # noqa: E731
        try:
            handler(command)
        except Exception as exc:  # noqa: BLE001 - every failure is shown, the engine keeps running
            kind = _error_kind(exc)
            if kind == "internal" and type(exc).__name__ != "SessionBusy":  # that one is a bug here, not the user's
                kind = _COMMAND_ERROR_KIND.get(type(command).__name__, kind)
            self._report(exc, kind)
            if self.phase is Phase.RECORDING and not (self.recorder is not None and self.recorder.is_recording):
                self._set_phase(self._rest_phase())

    def _cancel_activity(self) -> None:
        """Stop what runs now: silence first (that is what the user hears), then the rest."""
        phase = self.phase
        if self.turn is not None:
            self._note_heard(self.turn)
        if phase in (Phase.THINKING, Phase.SPEAKING, Phase.PLAYING_OUT, Phase.REPLAYING) and self.player is not None:
            self.player.flush()
        if phase in (Phase.THINKING, Phase.SPEAKING):
            assert self.turn is not None
            self.turn.stop()  # respond() ends at its next step; the turn closes itself
        elif phase is Phase.PLAYING_OUT:
            assert self.turn is not None
            self.turn.cancelled = True
            self._close_turn()
        elif phase is Phase.REPLAYING:
            self.replaying = None
            self._set_phase(self._rest_phase())
        elif phase is Phase.RECORDING:
            self.takes.drop()
            self._set_phase(self._rest_phase())
        elif phase is Phase.LOADING and self._helper_cancel is not None:
            self._helper_cancel.set()

    def _note_heard(self, turn: ActiveTurn) -> None:
        """How much of an answer was heard when it is cut (the history keeps that much of its sound)."""
        player = self.player
        if turn.heard_samples is None and player is not None and turn.utterance_id is not None:
            queued = int(player.buffered_frames * ANSWER_RATE / max(1, player.samplerate))
            turn.heard_samples = max(0, turn.samples - queued)
            if turn.record is not None:
                turn.record.heard_samples = turn.heard_samples

    # ------------------------------------------------------------------ periodic work

    def _tick(self) -> None:
        if self.hands_free.enabled or self.listener is not None:
            self._reconcile_listener()
        if self.phase is Phase.PLAYING_OUT and self.turn is not None:
            finished = self._playback_finished()
            if self.turn.metrics is None and (finished or self._first_audible(self.turn) is not None):
                self._send_metrics(self.turn)
            if finished:
                self._close_turn()
        elif self.phase is Phase.REPLAYING and self._playback_finished():
            self.replaying = None
            self._set_phase(self._rest_phase())
        elif self.phase in RESTING and (self.takes.died() or (self.player is not None and self.player.died)):
            # A stream stopped under us (its device was unplugged): look again while resting, so that the
            # window's list is current and the system default, if that is another device now, is used.
            try:
                self._rescan_audio()
            except Exception as exc:  # noqa: BLE001 - PortAudio did not start again: said; the engine keeps running
                self._report(exc, "audio_device")

    # ------------------------------------------------------------------ commands: set-up

    def _on_Ping(self, command: p.Ping) -> None:
        self._post(p.Pong(command.seq, self.state))

    def _on_ApplySettings(self, command: p.ApplySettings) -> None:
        self.sampling = command.sampling  # read when the next turn starts
        if command.max_answer_seconds is not None:
            self.max_answer_seconds = command.max_answer_seconds
        if command.system_prompt is not None and command.system_prompt != self.requested_prompt:
            self.requested_prompt = command.system_prompt
            self._submit(SetPrompt(command.system_prompt))

    def _on_SetPrompt(self, command: SetPrompt) -> None:
        if command.prompt == self.system_prompt:
            return
        if self.session is None and not self.book.records:
            self.system_prompt = command.prompt
            return  # nothing to start anew: Load applies the prompt
        # The prompt is the first thing in the cache, so a new one starts a new conversation. A prompt
        # that is too long for the context raises here, and the previous one stays.
        if self.session is not None:
            self.session.set_system_prompt(command.prompt)
        self.system_prompt = command.prompt
        self.book.clear()
        self.history.new_conversation()
        self._post(p.ConversationCleared("system_prompt"))
        self._post_context()

    def _on_SelectDevices(self, command: p.SelectDevices) -> None:
        self.input_device, self.output_device = command.input_device, command.output_device
        self._open_audio()

    def _on_ListDevices(self, command: p.ListDevices) -> None:
        if command.rescan and self.phase in RESTING:
            self._rescan_audio()  # posts the new list
        else:
            self._post_devices()

    def _post_devices(self) -> None:
        from engine.audio.devices import list_devices

        # Names, deduplicated in PortAudio order: settings store names, and on Windows one device is
        # listed once per host API (find_device picks the best one for a name).
        inputs = list(dict.fromkeys(d.name for d in list_devices("input")))
        outputs = list(dict.fromkeys(d.name for d in list_devices("output")))
        self._post(p.Devices(tuple(inputs), tuple(outputs), self.input_device, self.output_device))

    def _on_Load(self, command: p.Load) -> None:
        self._set_phase(Phase.LOADING)
        source: str | None = None
        if not command.demo:
            # The new folder is checked (or downloaded) first: a missing or broken one leaves the
            # loaded model and voice as they were.
            after_failure = Phase.IDLE if self.session is not None else Phase.NO_MODEL
            try:
                resolved = self._resolve_source(command)
            except BaseException:
                self._set_phase(after_failure)  # before the error, so the window knows why
                raise
            if resolved is None or self._stopping:
                self._set_phase(after_failure)
                return
            source = str(resolved)
        if self.session is not None:
            # Free the old model before loading the new one: two copies rarely fit in VRAM.
            session, self.session = self.session, None
            session.close()
        try:
            self.session = self._open_session(source, command, lora=command.lora)
        except BaseException:
            self._set_phase(Phase.NO_MODEL)
            raise
        # A broken voice never costs the model: the session opened without it and says why.
        voice_problem = getattr(self.session, "voice_problem", None)
        if voice_problem is not None:
            self._report(voice_problem, "lora")
        if self.system_prompt is not None:
            try:
                self.session.set_system_prompt(self.system_prompt)
            except UserFacingError as exc:  # too long for this context: the default prompt stays
                self._report(exc, "settings")
        self.history.new_conversation()  # a new model starts with an empty context: a new saved conversation
        self._post(self._info())
        self._post_context()
        self._set_phase(Phase.IDLE)

    def _open_session(self, source: str | None, command: p.Load, *, lora: str | None) -> Any:
        opener = self._session_opener
        if opener is None:
            from engine.chat.session import ChatSession

            opener = ChatSession.open
        return opener(source, lora=lora, demo=command.demo, revision=None, context_tokens=command.context_tokens,
                      progress=self._post)

    def _resolve_source(self, command: p.Load) -> Path | None:
        """A checked local folder for the model, downloading it if allowed; None if missing/cancelled."""
        from engine.model.store import find_local_model, looks_like_repo_id, resolve_model
        from engine.errors import DownloadCancelled as DownloadCancelledError

        def work(cancel: threading.Event) -> Path | None:
            if (not command.allow_download and looks_like_repo_id(command.source)
                    and find_local_model(command.source, command.revision) is None):
                return None
            return Path(resolve_model(command.source, revision=command.revision, progress=self._post,
                                      cancel=cancel, allow_download=command.allow_download))

        cancelled = threading.Event()

        def tracked(cancel: threading.Event) -> Path | None:
            try:
                return work(cancel)
            finally:
                if cancel.is_set():
                    cancelled.set()

        try:
            path = self._wait_for_helper(tracked, "model-resolve")
        except _HelperAbandoned:
            return None
        except DownloadCancelledError:
            self._post(p.DownloadCancelled(command.source))
            return None
        except Exception:
            if cancelled.is_set():
                self._post(p.DownloadCancelled(command.source))
                return None
            raise
        if cancelled.is_set():
            self._post(p.DownloadCancelled(command.source))
            return None
        if path is None:
            self._post(p.ModelMissing(command.source))
        return path

    def _on_SwitchVoice(self, command: p.SwitchVoice) -> None:
        if self.session is None:
            raise UserFacingError("No model is loaded, so there is no voice to switch.")
        self.session.switch_voice(command.lora)  # LoraError: the previous voice stays
        self._post(self._info())

    def _on_Reset(self, command: p.Reset) -> None:
        self.book.clear()
        self.history.new_conversation()
        self._post(p.ConversationCleared("reset"))
        if self.session is not None:
            self.session.reset()
            self._post_context()

    def _on_Shutdown(self, command: p.Shutdown) -> None:
        self._stopping = True
        self._pending.clear()

    # ------------------------------------------------------------------ audio devices

    def _open_audio(self) -> None:
        """(Re)open both devices. Each one reports its own failure as an EngineError(audio_device) and
        is retried on the next press / answer, so a missing speaker does not stop the microphone."""
        self._close_audio()
        self.takes.device = self.input_device
        self.takes.open()
        self._need_player()

    def _rescan_audio(self) -> None:
        """Look again for devices (one plugged in since PortAudio last looked, or one gone), post the new list and
        reopen the streams on the chosen devices (None: the system default, which may now be another one).

        Only while the engine rests (no take, no sound): re-initialising PortAudio ends every open stream,
        so both are closed first. A stream that was open is reopened (a failure says why); one that was not
        only if its device is listed now, so that a device still missing is not reported once more (it was
        when it failed, and the next press or answer says it again)."""
        from engine.audio.devices import rescan_devices

        assert self.phase in RESTING, self.phase
        recorder_was_open = self.takes.is_open()
        player_was_open = self.player is not None and self.player.is_open
        self._close_audio()
        rescan_devices()
        self._post_devices()
        self.takes.device = self.input_device
        if recorder_was_open or _is_listed(self.input_device, "input"):
            self.takes.open()
        if player_was_open or _is_listed(self.output_device, "output"):
            self._need_player()

    def _close_audio(self) -> None:
        self._stop_listener()
        self.takes.close()
        player, self.player = self.player, None
        if player is not None:
            try:
                player.close()
            except Exception:  # noqa: BLE001 - closing a broken device must not hide the real error
                log.exception("closing the player failed")

    def _need_player(self) -> Any:
        if self.player is None:
            from engine.audio.playback import StreamingPlayer

            self.player = StreamingPlayer(self.output_device, on_event=self._events.put, **self._player_options)
            self.player.open()
        return self.player

    def _playback_finished(self) -> bool:
        player = self.player
        # A stream that died (unplugged) never drains: count that as finished, the player reported it.
        return player is None or not player.is_open or not player.is_speaking

    # ------------------------------------------------------------------ takes

    def _on_StartTake(self, command: p.StartTake) -> None:
        if self.session is None:
            raise UserFacingError("The model is not loaded yet.")
        if self.phase is Phase.RECORDING and self.takes.held:
            return  # a second press (key and mouse together): one take
        # RECORDING but released: the last take is still in its tail or on its way (a burst of quick presses
        # outruns the recorder's notes). This press is a take of its own (or continues that one in its tail);
        # whatever the recorder says about the earlier presses no longer belongs to the take in progress.
        if self.phase in RESTING and not self.takes.is_open():
            # No microphone, the chosen one gone, or its stream died: look again before the press (a microphone
            # that was not open has no pre-roll to lose).
            self._rescan_audio()
        if self.takes.press():  # False: the microphone could not be opened; the recorder has said why
            if self.phase is not Phase.RECORDING:
                self._set_phase(Phase.RECORDING)
        elif self.phase is Phase.RECORDING:
            self.takes.settled()
            self._set_phase(self._rest_phase())

    # ------------------------------------------------------------------ hands-free

    def _on_SetHandsFree(self, command: p.SetHandsFree) -> None:
        self.hands_free = command
        if (command.muted or not command.enabled) and self.phase is Phase.RECORDING and self.takes.is_voice:
            self.takes.drop()  # muted (or switched off) while talking: that take is not sent
            self._set_phase(self._rest_phase())
        self._reconcile_listener()

    def _on_VoiceStarted(self, command: VoiceStarted) -> None:
        """The listener heard speech: the same as a press of the talk button (the table has already stopped
        an answer), except that the take began before, with its pre-roll, and ends when the speech does."""
        if not self.hands_free.enabled or self.hands_free.muted or self.session is None:
            return
        if self.phase is Phase.RECORDING or self.phase not in RESTING:
            return  # a take is in progress already (a press, or this voice's), or the engine is busy
        self.takes.voice(command.seq)
        self._set_phase(Phase.RECORDING)

    def _reconcile_listener(self) -> None:
        """Run the listener exactly when hands-free is on and a model is loaded, bound to the current
        recorder and player (they are replaced when devices change)."""
        want = self.hands_free.enabled and self.session is not None and self.phase is not Phase.LOADING
        if not want:
            self._stop_listener()
            self._post_hands_free()
            return
        recorder = self.takes.open()
        player = self._need_player()
        recorder.reference = player
        key = (id(recorder), id(player), self.hands_free.end_of_speech_s, self.hands_free.min_speech_s,
               self.hands_free.echo_cancellation)
        if self.listener is None or key != self._listener_key or not self.listener.running:
            self._stop_listener()
            from engine.audio.voice import VoiceListener, VoiceOptions

            options = VoiceOptions(end_silence_s=self.hands_free.end_of_speech_s,
                                   min_speech_s=self.hands_free.min_speech_s,
                                   echo_cancellation=self.hands_free.echo_cancellation,
                                   max_take_s=float(self.takes._options.get("max_take_s", 60.0)))
            self.listener = VoiceListener(
                recorder, player, options,
                on_start=lambda seq, event: self._commands.put(VoiceStarted(seq, time.monotonic())),
                on_take=lambda take: self.takes.channel.put(TakeReady(take)),
                on_error=lambda exc: self._post(p.EngineError(kind="take", message="Hands-free listening failed.",
                                                              details=repr(exc))))
            self._listener_key = key
            self.listener.start()
        self.listener.set_muted(self.hands_free.muted)
        self._post_hands_free()

    def _stop_listener(self) -> None:
        listener, self.listener = self.listener, None
        self._listener_key = None
        if listener is not None:
            listener.stop()
            if listener.recorder is not None:
                listener.recorder.reference = None

    def _post_hands_free(self) -> None:
        state = p.HandsFreeState(enabled=self.hands_free.enabled, listening=self.listener is not None,
                                 muted=self.hands_free.muted)
        if state != getattr(self, "_hands_free_posted", None):
            self._hands_free_posted = state
            self._post(state)

    def _on_EndTake(self, command: p.EndTake) -> None:
        # Nothing to end when the press failed or the take was cancelled or cut at the limit. The take
        # itself ends `tail_s` later in stream time and arrives on the take channel; the phase stays
        # RECORDING meanwhile, because the tail is still being recorded.
        if self.phase is Phase.RECORDING:
            self.takes.release()

    def _on_Cancel(self, command: p.Cancel) -> None:
        if self.phase is Phase.RECORDING:
            self.takes.drop()
            self._set_phase(self._rest_phase())
        elif self.phase is Phase.LOADING and self._helper_cancel is not None:
            self._helper_cancel.set()  # a download stops; the partial files stay for next time
        # Otherwise there is nothing to cancel (an answer was stopped by the table's cancel step).

    def _on_take_message(self, message: TakeMessage) -> None:
        keep = self.phase is Phase.RECORDING and self.takes.belongs(message)
        if isinstance(message, TakeNote):
            if keep and message.event.reason != "busy":  # busy: the recorder has told the window already
                self._post(message.event)
            if keep and message.event.reason in ("too_short", "busy"):
                self.takes.settled()
                self._set_phase(self._rest_phase())
            # too_long: the cut take follows and is answered like any other.
            return
        if not keep:
            return  # cancelled, or overtaken by a Load/Reset
        self.takes.settled()
        take = message.take
        # Cut at the limit while still held: the take ends now, so "release" is now. A hands-free take ended
        # when the speech did: the latency counts from there (what the user feels), the wait for the
        # end-of-speech silence included and measured on its own.
        wait_ms = None
        end_of_speech_t = getattr(take, "end_of_speech_t", None)
        if end_of_speech_t is not None and self.takes.released_t is None:
            self.takes.released_t = end_of_speech_t
            wait_ms = max(0.0, (time.monotonic() - end_of_speech_t) * 1000.0)
        if self.takes.released_t is None:
            self.takes.released_t = time.monotonic()
        # On the 24-bit grid (inaudibly): the saved take then re-embeds bit for bit when continued.
        wave = canonical_take(take.audio)
        user = self.book.add(TurnRecord(self._new_id(), "user", wave, int(take.sample_rate)))
        self._post(p.UserTakeAdded(user.turn_id, user.duration_s))
        self.book.finish(user)
        self._run_turn(wave, self.takes.released_t, end_of_speech_wait_ms=wait_ms)

    # ------------------------------------------------------------------ a turn

    def _run_turn(self, wave: np.ndarray, release_t: float, *, end_of_speech_wait_ms: float | None = None) -> None:
        session = self.session
        player = self._need_player()
        turn = ActiveTurn(self._new_id(), TurnClock(release_t, time.monotonic()), self.sampling.greedy,
                          sampling=self.sampling, end_of_speech_wait_ms=end_of_speech_wait_ms)
        self.turn = turn
        # None when the speaker cannot be opened: the player has said why, and the answer is still
        # generated and kept (replay/export once the device is back).
        turn.utterance_id = player.begin_utterance()
        turn.underruns_before = player.underruns
        self._set_phase(Phase.THINKING)
        self._post(p.AssistantTurnStarted(turn.turn_id, greedy=turn.greedy))
        turn.clock = TurnClock(release_t, time.monotonic())
        try:
            answer = session.respond(wave, self.sampling, max_answer_seconds=self.max_answer_seconds,
                                     cancel=turn.cancel)
            stream_answer(turn, answer, player=player, post=self._post, context_used=lambda: session.context_used,
                          on_first_audio=self._on_first_audio, between_pieces=self._between_pieces)
        except Exception as exc:  # noqa: BLE001 - shown; the conversation stays usable
            turn.failed = True
            kind = _error_kind(exc)
            self._report(exc, kind)
        finally:
            turn.generating = False
            self._end_of_generation(turn)

    def _on_first_audio(self) -> None:
        if self.phase is Phase.THINKING:
            self._set_phase(Phase.SPEAKING)

    def _end_of_generation(self, turn: ActiveTurn) -> None:
        if turn.failed and not turn.pieces and not turn.text:
            # Nothing was produced: close the window's item, keep no empty record, measure nothing.
            self._post(p.AssistantTurnFinished(turn.turn_id, "", 0.0, True))
            self.turn = None
            self._set_phase(self._rest_phase())
            self._post_context()
            return
        stats = turn.stats
        turn.cancelled = turn.cancelled or bool(stats is not None and stats.cancelled)
        if stats is not None and stats.text:
            turn.text = stats.text
        record = self.book.add(TurnRecord(turn.turn_id, "assistant", turn.pcm(), ANSWER_RATE, text=turn.text,
                                          cancelled=turn.cancelled, greedy=turn.greedy))
        turn.record = record
        # For the history: what the model generated (to continue from), what was heard, how it was sampled.
        record.tokens = None if turn.failed else answer_tokens(self.session)
        record.heard_samples = turn.heard_samples
        record.sampling = turn.sampling
        if not turn.cancelled and self.player is not None and turn.utterance_id is not None:
            self.player.mark_end_of_stream()  # lets the rest drain without counting as an underrun
        self._post(p.AssistantTurnFinished(turn.turn_id, turn.text, record.duration_s, turn.cancelled))
        if stats is not None and stats.rtf is not None and not turn.cancelled:
            self._post(p.LiveRtf(turn.turn_id, float(stats.rtf), turn.frames))
        self._post_context()
        if self.session is not None:
            self._post(self._info())
        if self.phase is Phase.SPEAKING and not turn.cancelled:
            self._set_phase(Phase.PLAYING_OUT)  # metrics once the first sample was heard
        else:
            self._close_turn()  # text only, or stopped: nothing more will be heard

    def _close_turn(self) -> None:
        turn, self.turn = self.turn, None
        if turn is None:
            return
        self._send_metrics(turn)
        if self.phase in (Phase.THINKING, Phase.SPEAKING, Phase.PLAYING_OUT):
            self._set_phase(self._rest_phase())

    def _first_audible(self, turn: ActiveTurn) -> float | None:
        """Monotonic time at which the first sample of the answer reached the speaker, if known."""
        if self.player is None or turn.utterance_id is None or not turn.played:
            return None
        stats = self.player.utterance_stats()
        if stats is None or stats.uid != turn.utterance_id:
            return None
        return stats.first_audible_monotonic

    def _send_metrics(self, turn: ActiveTurn) -> None:
        """The turn's waterfall, once: to the window and into its record, which is then finished."""
        if turn.metrics is not None:
            return
        underruns = max(0, self.player.underruns - turn.underruns_before) if self.player is not None else 0
        turn.metrics = turn.metrics_from(self._first_audible(turn), underruns)
        if turn.record is not None:
            turn.record.metrics = turn.metrics
            self.book.finish(turn.record)
        self._post(turn.metrics)

    # ------------------------------------------------------------------ replay and export

    def _on_ReplayTurn(self, command: p.ReplayTurn) -> None:
        record = self.book.find(command.turn_id)
        if record is None or len(record.pcm) == 0:
            raise UserFacingError("That turn has no audio to replay.")
        self._play_recorded(record.pcm, record.sample_rate, record.turn_id)

    def _play_recorded(self, pcm: np.ndarray, sample_rate: int, replay_id: int = -1) -> None:
        player = self._need_player()
        if player.begin_utterance() is None:
            return  # no output device; the player has posted why
        player.enqueue(resample(pcm, sample_rate, ANSWER_RATE))
        player.mark_end_of_stream()
        self.replaying = replay_id
        self._set_phase(Phase.REPLAYING)

    def _on_Export(self, command: p.Export) -> None:
        # Arrays never change in place: a shallow copy.
        self._export(self.book.snapshot(), command.wav_path, command.labels)

    def _export(self, records: list[TurnRecord], wav_path: str, labels: p.TranscriptLabels) -> None:
        origin = self.phase
        self._set_phase(Phase.EXPORTING)
        try:
            paths = self._wait_for_helper(lambda _cancel: export_conversation(records, Path(wav_path), labels),
                                          "export")
        finally:
            self._set_phase(origin)
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
