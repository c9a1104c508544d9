"""How a take begins and ends on the engine thread: push-to-talk's press and release (StartTake, EndTake),
hands-free's switch and its listener's voice (SetHandsFree, VoiceStarted, VoiceTurnOver), and what the recorder
hands back on the take channel (engine/worker/takes.py): a finished take, answered (engine/worker/turn.py) or kept
as the voice wizard's clip, or a note that a take was too short, too long or refused.

Each handler gets the worker and a command, as engine/worker/thread.py's command table dispatches them
(`HANDLERS`); its loops call `take_arrived` with what the recorder sent and `reconcile_listener` on every tick.
The worker keeps the state (its phase, `hands_free`, `takes`, the microphone and listener in `audio`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine import protocol as p
from engine.errors import UserFacingError
from engine.worker.table import RESTING, Phase, VoiceStarted, VoiceTurnOver
from engine.worker.takes import TakeMessage, TakeNote
from engine.worker.turn import answer_take

# ---------------------------------------------------------------------- push-to-talk


def start_take(worker: Any, command: p.StartTake) -> None:
    if worker.session is None:
        raise UserFacingError("The model is not loaded yet.")
    if worker.phase is Phase.RECORDING and worker.takes.held:
        return  # a second press (key and mouse together): one take
    # RECORDING but released: the last take is still in its tail or on its way (a burst of quick presses
    # outruns the recorder's notes). This press is a take of its own (or continues that one in its tail);
    # whatever the recorder says about the earlier presses no longer belongs to the take in progress.
    if worker.phase in RESTING and not worker.takes.is_open():
        # No microphone, the chosen one gone, or its stream died: look again before the press (a microphone
        # that was not open has no pre-roll to lose).
        worker.audio.rescan()
    if worker.takes.press(command.at):  # False: the microphone could not be opened; the recorder has said why
        if worker.phase is not Phase.RECORDING:
            worker._set_phase(Phase.RECORDING)
    elif worker.phase is Phase.RECORDING:
        worker.takes.settled()
        worker._set_phase(worker._rest_phase())


def end_take(worker: Any, command: p.EndTake) -> None:
    # Nothing to end when the press failed or the take was cancelled or cut at the limit. The take
    # itself ends `tail_s` later in stream time and arrives on the take channel; the phase stays
    # RECORDING meanwhile, because the tail is still being recorded.
    if worker.phase is Phase.RECORDING:
        worker.takes.release(command.at)


# ---------------------------------------------------------------------- hands-free


def set_hands_free(worker: Any, command: p.SetHandsFree) -> None:
    worker.hands_free = command
    if (command.muted or not command.enabled) and worker.phase is Phase.RECORDING and worker.takes.is_voice:
        worker.takes.drop()  # muted (or switched off) while talking: that take is not sent
        worker._set_phase(worker._rest_phase())
    reconcile_listener(worker)


def voice_started(worker: Any, command: VoiceStarted) -> None:
    """The listener heard speech: the same as a press of the talk button (the table has already stopped
    an answer), except that the take began before, with its pre-roll, and ends when the speech does."""
    if not worker.hands_free.enabled or worker.hands_free.muted or worker.session is None:
        return
    if worker.phase is Phase.RECORDING or worker.phase not in RESTING:
        return  # a take is in progress already (a press, or this voice's), or the engine is busy
    if worker.voice_turns.joining == command.seq:
        worker.voice_turns.withdraw(worker)  # the user went on after a pause: one take of the whole sentence
    worker.takes.voice(command.seq)
    worker._set_phase(Phase.RECORDING)


def voice_turn_over(worker: Any, command: VoiceTurnOver) -> None:
    worker.voice_turns.on_turn_over(worker, command)


def reconcile_listener(worker: Any) -> None:
    """The listener runs exactly when hands-free is on and a model is loaded (engine/worker/audio_ports.py).
    A listener stopped or rebuilt (new timings, echo cancellation switched) never delivers the voice take it
    had begun: that take is dropped, as a mute drops it, rather than left open for ever."""
    want = worker.hands_free.enabled and worker.session is not None and worker.phase is not Phase.LOADING
    replaced = worker.audio.reconcile_listener(worker.hands_free, want)
    if replaced:
        worker.voice_turns.settle(worker)  # no continuation will come from that listener
    if replaced and worker.phase is Phase.RECORDING and worker.takes.is_voice:
        worker.takes.drop()
        worker._set_phase(worker._rest_phase())


# ---------------------------------------------------------------------- what the recorder hands back


def take_arrived(worker: Any, message: TakeMessage) -> None:
    keep = worker.phase is Phase.RECORDING and worker.takes.belongs(message)
    if isinstance(message, TakeNote):
        if keep and message.event.reason != "busy":  # busy: the recorder has told the window already
            worker._post(message.event)
        if keep and message.event.reason in ("too_short", "busy"):
            worker.takes.settled()
            worker._set_phase(worker._rest_phase())
        # too_long: the cut take follows and is answered like any other.
        return
    if not keep:
        return  # cancelled, or overtaken by a Load/Reset
    worker.takes.settled()
    if worker.voice_training.takes_clip(message.take):  # the voice wizard's clip: saved, not answered
        worker._set_phase(worker._rest_phase())
        return
    answer_take(worker, message.take)


HANDLERS: dict[type, Callable[[Any, Any], None]] = {
    p.StartTake: start_take,
    p.EndTake: end_take,
    p.SetHandsFree: set_hands_free,
    VoiceStarted: voice_started,
    VoiceTurnOver: voice_turn_over,
}
