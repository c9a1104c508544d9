"""Hands-free turn-taking on the engine thread: a voice take is answered at once, provisionally.

The listener (engine/audio/turn_taking.py) hands a take over after a short silence; the answer is prepared right
away (encode, prefill, first frames) with its sound held in the player. Then one of two things happens:

* the silence goes on (`VoiceTurnOver`): the turn is over, the answer is heard; once nothing can continue the
  take any more (`VoiceTurnOver(settled=True)`, or any other command, or the time limit below) its records are
  final and go to the history;
* the user goes on speaking (`VoiceStarted(continues=seq)`): the take and its half-answer are withdrawn, from
  the transcript (`TurnsWithdrawn`), the records (so from the history, replay and export: their finishing was
  deferred, engine/worker/records.py) and the model's context (`ChatSession.withdraw_after`), and the whole
  sentence arrives as one take, from the first take's start through the pause.

The listener decides when (it counts the silence in microphone frames); the time limits here are only the
safety net for a listener that was stopped, muted or rebuilt before it could say so.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import protocol as p
from engine.worker.records import ANSWER_RATE
from engine.worker.table import VoiceStarted, VoiceTurnOver

# Beyond the listener's join window: the answer is heard and the take settled even if the listener never says so.
SAFETY_MARGIN_S = 1.0
# Commands that leave a provisional take open; any other (a press, an export, a replay, a new conversation, a
# mute...) makes it final first: nothing can continue it after the user did something else.
KEEPS_IT_OPEN = (p.Ping, p.ListDevices, p.ApplySettings, p.ListHistory, p.OpenHistory, VoiceTurnOver)


@dataclass
class Provisional:
    seq: int  # the listener's take
    end_of_speech_t: float  # monotonic
    last_kept: Any  # the model's last conversation turn before the take (what a withdrawal keeps)
    deadline: float  # monotonic: heard and settled from here on, whatever the listener says
    turn_over: bool  # its answer may be heard
    turn_id: int | None = None  # the answer's turn id, once it started
    heard_s: float = 0.0  # withdrawn: how much of its answer had been heard


class VoiceTurns:
    """Owned by the engine thread (engine/worker/thread.py)."""

    def __init__(self) -> None:
        self.current: Provisional | None = None
        self.joining: int | None = None  # the voice take in progress continues (joins) a withdrawn one

    # ------------------------------------------------------------------ a take arrives

    def take_audio(self, take: Any) -> np.ndarray:
        """The audio to answer: a continuation whose first part was withdrawn is the whole sentence; one whose
        first part stays (the engine could not join them) only the speech after the pause."""
        seq = int(getattr(take, "seq", 0))
        joined = self.joining is not None and self.joining == seq
        self.joining = None
        if getattr(take, "continues", None) is not None and not joined:
            return take.audio[int(take.own_offset):]
        return take.audio

    def begin(self, worker: Any, take: Any) -> bool:
        """A take arrives (before its record is added); returns whether its answer's sound is to be held."""
        self.settle(worker)
        end_of_speech_t = getattr(take, "end_of_speech_t", None)
        if end_of_speech_t is None or worker.session is None:
            return False  # push-to-talk: final at once
        listener = worker.audio.listener
        join_s = listener.options.join_s if listener is not None else 0.0
        turns = worker.session.conversation.turns
        self.current = Provisional(int(take.seq), end_of_speech_t, turns[-1] if turns else None,
                                   end_of_speech_t + join_s + SAFETY_MARGIN_S, bool(take.turn_over))
        worker.book.begin_provisional()
        return not take.turn_over

    def answer_started(self, turn_id: int) -> None:
        if self.current is not None and self.current.turn_id is None:
            self.current.turn_id = turn_id

    # ------------------------------------------------------------------ the listener's word, and the time limits

    def before_command(self, worker: Any, command: Any) -> None:
        """Every command, before the table acts on it (engine/worker/thread.py `_submit`)."""
        current = self.current
        if current is None or isinstance(command, KEEPS_IT_OPEN):
            return
        if isinstance(command, VoiceStarted) and command.continues == current.seq:
            self.joining = command.seq
            turn = worker.turn
            if turn is not None and turn.turn_id == current.turn_id:
                turn.withdrawn = True  # stopped by the table's cancel step: no metrics, no record kept
                turn.note_heard(worker.audio.queued_samples())
                current.heard_s = (turn.heard_samples or 0) / ANSWER_RATE
            else:  # it has played out
                answers = [r for r in worker.book.provisional if r.role == "assistant"]
                current.heard_s = sum(r.duration_s for r in answers)
            return
        self.settle(worker)

    def on_turn_over(self, worker: Any, command: VoiceTurnOver) -> None:
        current = self.current
        if current is None or current.seq != command.seq:
            return
        current.turn_over = True
        self.release(worker)
        if command.settled:
            self.settle(worker)

    def tick(self, worker: Any, now: float) -> None:
        current = self.current
        if current is not None and now >= current.deadline:
            current.turn_over = True
            self.release(worker)
            self.settle(worker)

    def release(self, worker: Any) -> None:
        """The answer of the provisional take is heard from now on (if it is held)."""
        turn, current = worker.turn, self.current
        if current is None or turn is None or turn.turn_id != current.turn_id or not turn.held:
            return
        turn.held = False
        turn.end_of_speech_wait_ms = max(0.0, (time.monotonic() - current.end_of_speech_t) * 1000.0)
        if worker.player is not None:
            worker.player.release_hold()

    def holds(self, turn_id: int) -> bool:
        """Whether the answer `turn_id`, starting now, waits for the end of the turn."""
        current = self.current
        return current is not None and not current.turn_over and current.turn_id == turn_id

    # ------------------------------------------------------------------ the end of it

    def settle(self, worker: Any) -> None:
        """The provisional take and its answer are final (their records go to the history)."""
        if self.current is None:
            return
        self.release(worker)
        self.current = None
        worker.book.settle()

    def withdraw(self, worker: Any) -> None:
        """The user went on speaking: the provisional take and its answer are taken back everywhere."""
        current, self.current = self.current, None
        if current is None:
            return
        withdrawn = worker.book.withdraw()
        if worker.session is not None:
            worker.session.withdraw_after(current.last_kept)
            worker._post_context()
        if withdrawn:
            worker._post(p.TurnsWithdrawn(tuple(r.turn_id for r in withdrawn), current.heard_s))
