"""The engine thread: reads `Command`s, drives the model, the recorder and the player, posts `Event`s.

Every command goes through one place, `EngineWorker._submit`, which looks it up in the command table
(engine/worker/table.py) for the current phase: run now, cancel what runs and then run, run after the
turn, or refuse with a message. Three loops read commands and all of them submit there: the main loop,
the turn between two pieces of the answer (`_between_pieces`) and the wait for a helper thread (a model
download, an export). None of them re-enters a turn, and nothing that needs the session's lock runs
while a turn holds it. A command runs as the worker's `_on_<Command>` method, or, for a concern with a
module of its own, from that module's `HANDLERS`: takes and hands-free (engine/worker/take_commands.py),
the history (engine/history/engine_commands.py), voice training (engine/worker/voice_training.py).

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
from pathlib import Path
from typing import Any

import numpy as np

from engine import protocol as p
from engine.errors import UserFacingError
from engine.history import engine_commands as history_commands
from engine.history.service import HistoryKeeper
from engine.worker.audio_ports import AudioPorts
from engine.worker.helper_thread import wait_for_helper
from engine.worker.loading import load
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
    rule_for,
)
from engine.worker import take_commands, voice_training
from engine.worker.takes import TAKE_LOST, Takes
from engine.worker.turn import ActiveTurn
from engine.worker.voice_turns import VoiceTurns

log = logging.getLogger(__name__)

# The commands whose handlers live in a module of their own: takes and hands-free, the history, voice training.
_MODULE_HANDLERS = {**take_commands.HANDLERS, **history_commands.HANDLERS, **voice_training.HANDLERS}
# The EngineError kind of a command's failure when the exception does not say it itself.
_COMMAND_ERROR_KIND = {
    "Load": "model", "SwitchVoice": "lora", "SelectDevices": "audio_device", "StartTake": "take",
    "EndTake": "take", "Export": "export", "ApplySettings": "settings", "SetPrompt": "settings",
    "ReplayTurn": "take", "ExportHistory": "export", "ReplayHistoryTurn": "take", "StartClip": "take",
    "StopClip": "take", "PlayClip": "voice_training", "TranscribeClip": "voice_training",
    "PlanVoiceTraining": "voice_training", "StartVoiceTraining": "voice_training", "TrainingProcessEnded": "voice_training",
    "ExportVoice": "voice_sharing", "ImportVoice": "voice_sharing",
}


def _error_kind(exc: BaseException) -> str:
    if isinstance(exc, UserFacingError):
        return exc.kind
    name = type(exc).__name__
    if name == "OutOfMemoryError" or "out of memory" in str(exc).lower():
        return "gpu_memory"
    if name == "PortAudioError" or type(exc).__module__.startswith("engine.audio"):
        return "audio_device"
    return "internal"


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
        self._thread = threading.Thread(target=self._run, name="voicechat-engine", daemon=True)

        self.phase = Phase.NO_MODEL
        self.state = p.EngineState.NO_MODEL  # what the window was last told
        self.session: Any = None
        # The microphone, the speaker, the chosen devices and the hands-free listener (engine/worker/audio_ports.py).
        self.audio = AudioPorts(self._post, self._commands.put, dict(recorder_options or {}), dict(player_options or {}))
        # Every finished record is saved in the history (engine/history), then handed to the caller's listener.
        self.history = HistoryKeeper(self._post, history_folder)
        self._on_record_finished = on_record_finished
        self.book = RecordBook(self._record_finished)
        self.sampling = p.SamplingSettings()
        self.system_prompt: str | None = None  # the prompt in use
        self.requested_prompt: str | None = None  # the last prompt asked for (may wait for the turn)
        self.max_answer_seconds = 30.0
        self.turn: ActiveTurn | None = None
        self.replaying: int | None = None
        self._next_id = 1
        self._pending: collections.deque[Any] = collections.deque()  # AFTER_TURN and cancelled-then-run commands
        self._stopping = False
        self._helper_cancel: threading.Event | None = None
        self.hands_free = p.SetHandsFree(enabled=False)  # hands-free listening as the window asked for it
        self.last_load: p.Load | None = None  # the Load the session in use came from
        self.voice_training = voice_training.VoiceTrainingHost(self)  # clips for a voice, and its training process
        self.voice_turns = VoiceTurns()  # a voice take answered provisionally (engine/worker/voice_turns.py)

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

    @property
    def takes(self) -> Takes:
        return self.audio.takes

    @property
    def player(self) -> Any:
        return self.audio.player

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
        if self.session is not None:
            return Phase.IDLE
        return Phase.TRAINING if self.voice_training.holds_gpu else Phase.NO_MODEL

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
                take_commands.take_arrived(self, message)
            elif self.takes.lost(time.monotonic()):
                self.takes.settled()
                self._post(p.EngineError(kind="take", message=TAKE_LOST, template=TAKE_LOST))
                self._set_phase(self._rest_phase())
            command = self._next_command(None)
        else:
            message = self.takes.next_message(None)
            if message is not None:
                take_commands.take_arrived(self, message)
                return
            # While sound is playing, or graphs are still to be captured behind "ready" (one per idle tick), wake up
            # often; otherwise sleep longer.
            busy = self.phase in (Phase.PLAYING_OUT, Phase.REPLAYING) or bool(getattr(self.session, "captures_pending", False))
            command = self._next_command(0.01 if busy else 0.1)
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
        """`work(cancel)` in a helper thread while the commands are read; its result, or its exception."""
        self._helper_cancel = threading.Event()
        try:
            return wait_for_helper(work, name, read_commands=self._between_pieces, stopping=lambda: self._stopping,
                                   cancel=self._helper_cancel)
        finally:
            self._helper_cancel = None

    # ------------------------------------------------------------------ the command table

    def _submit(self, command: Any, *, waited: bool = False) -> None:
        """The one place where a command meets the table (engine/worker/table.py). `waited`: it comes from the
        waiting commands (`_pending`), whose earlier ones have all run."""
        if self._stopping and not isinstance(command, p.Ping):
            return
        self.voice_turns.before_command(self, command)
        try:
            rule = rule_for(command, self.phase)
        except KeyError:
            self._post(p.EngineError("internal", f"Unknown command {type(command).__name__}"))
            return
        if (rule.outcome is Outcome.RUN and not waited and isinstance(command, p.EndTake)
                and any(isinstance(c, p.StartTake) for c in self._pending)):
            # Its press is still waiting (deferred behind a replay or an export): a release never overtakes its
            # press, or the press would later open a take that no release ends (RECORDING until the take limit).
            self._pending.append(command)
        elif rule.outcome is Outcome.RUN:
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
            self._submit(self._pending.popleft(), waited=True)

    def _execute(self, command: Any) -> None:
        handler = getattr(self, "_on_" + type(command).__name__, None)
        if handler is None:  # takes and hands-free, the history, voice training: each in its own module
            module_handler = _MODULE_HANDLERS[type(command)]
            handler = lambda c: module_handler(self, c)  # noqa: E731
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
        if phase is Phase.PLAYING_OUT and self.audio.queued_samples() == 0:
            # Generated and heard to its end; only the device's last buffer drains: finished, not interrupted (speech
            # now is the next take, not 中断 with all of the answer's seconds).
            self._close_turn()
            return
        if self.turn is not None and self.turn.note_heard(self.audio.queued_samples()) and not self.turn.withdrawn:
            self._post(p.AnswerInterrupted(self.turn.turn_id, self.turn.heard_samples / ANSWER_RATE))
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

    # ------------------------------------------------------------------ periodic work

    def _tick(self) -> None:
        if self.hands_free.enabled or self.audio.listener is not None:
            take_commands.reconcile_listener(self)
        self.voice_turns.tick(self, time.monotonic())
        if self.phase is Phase.PLAYING_OUT and self.turn is not None:
            finished = self.audio.playback_finished()
            if self.turn.metrics is None and (finished or self._first_audible(self.turn) is not None):
                self._send_metrics(self.turn)
            if finished:
                self._close_turn()
        elif self.phase is Phase.REPLAYING and self.audio.playback_finished():
            self.replaying = None
            self._set_phase(self._rest_phase())
        elif self.phase in RESTING and self.audio.died():
            # A stream stopped under us (its device was unplugged): look again while resting, so that the
            # window's list is current and the system default, if that is another device now, is used.
            try:
                self.audio.rescan()
            except Exception as exc:  # noqa: BLE001 - PortAudio did not start again: said; the engine keeps running
                self._report(exc, "audio_device")
        if (self.phase is Phase.IDLE and self.session is not None and self._commands.empty() and not self._pending
                and self.session.captures_pending):
            # One graph left behind "ready" (an encoder rung, ~0.1 s) per idle tick, on this thread, so that no turn's
            # CUDA work meets its capture: a press that comes meanwhile waits for one rung at most, and the recorder
            # backdates it (no audio is lost); a take whose rung is not in yet is encoded eagerly.
            try:
                self.session.capture_behind_ready()
            except Exception as exc:  # noqa: BLE001 - a bug, said once: the rest stays eager, the engine keeps running
                self.session.lazy_capture.drop()
                self._report(exc)

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
        self.audio.input_device, self.audio.output_device = command.input_device, command.output_device
        self.audio.open()

    def _on_ListDevices(self, command: p.ListDevices) -> None:
        if command.rescan and self.phase in RESTING:
            self.audio.rescan()  # posts the new list
        else:
            self.audio.post_devices()

    def _on_Load(self, command: p.Load) -> None:
        load(self, command)

    def _on_SwitchVoice(self, command: p.SwitchVoice) -> None:
        if self.session is None:
            raise UserFacingError("No model is loaded, so there is no voice to switch.")
        self.session.switch_voice(command.lora)  # LoraError: the previous voice stays
        self._post(self.session.info)

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

    # ------------------------------------------------------------------ cancel

    def _on_Cancel(self, command: p.Cancel) -> None:
        if self.phase is Phase.RECORDING:
            self.takes.drop()
            self._set_phase(self._rest_phase())
        elif self.phase is Phase.LOADING and self._helper_cancel is not None:
            self._helper_cancel.set()  # a download stops; the partial files stay for next time
        # Otherwise there is nothing to cancel (an answer was stopped by the table's cancel step).

    # ------------------------------------------------------------------ a turn

    def _close_turn(self) -> None:
        turn, self.turn = self.turn, None
        if turn is None:
            return
        self._send_metrics(turn)
        if self.phase in (Phase.THINKING, Phase.SPEAKING, Phase.PLAYING_OUT):
            self._set_phase(self._rest_phase())

    def _first_audible(self, turn: ActiveTurn) -> float | None:
        return self.audio.first_audible(turn.utterance_id) if turn.played else None

    def _send_metrics(self, turn: ActiveTurn) -> None:
        """The turn's waterfall, once: to the window and into its record, which is then finished."""
        if turn.metrics is not None:
            return
        turn.metrics = turn.metrics_from(self._first_audible(turn), self.audio.underruns_since(turn.underruns_before))
        if turn.record is not None:
            turn.record.metrics = turn.metrics
            self.book.finish(turn.record)  # (provisional: when settled; withdrawn: never)
        if not turn.withdrawn:
            self._post(turn.metrics)

    # ------------------------------------------------------------------ replay and export

    def _on_ReplayTurn(self, command: p.ReplayTurn) -> None:
        record = self.book.find(command.turn_id)
        if record is None or len(record.pcm) == 0:
            raise UserFacingError("That turn has no audio to replay.")
        self._play_recorded(record.pcm, record.sample_rate, record.turn_id)

    def _play_recorded(self, pcm: np.ndarray, sample_rate: int, replay_id: int = -1) -> None:
        player = self.audio.need_player()
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
        self.voice_turns.settle(self)
        self.voice_training.shutdown()
        self.history.close()  # what the writer still has is saved first (bounded wait)
        self.audio.close()
        if self.session is not None:
            session, self.session = self.session, None
            session.close()
