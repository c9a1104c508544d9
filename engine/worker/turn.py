"""One assistant turn: streaming `ChatSession.respond` to the player and the window, and its metrics.

Clocks: the turn's latency waterfall is measured from the push-to-talk release. The session's
`TurnStats` counts seconds from the moment respond() was called, the player reports when the first
sample became audible on the monotonic clock; `TurnClock` turns both into "ms since release".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine import protocol as p
from engine.history.audio import canonical_take
from engine.history.service import answer_tokens
from engine.worker.records import ANSWER_RATE, TurnRecord
from engine.worker.table import Phase

LIVE_RTF_AFTER_S = 0.3  # the first live RTF figure after this much audio (earlier ones mean nothing)
LIVE_RTF_EVERY_S = 0.1


@dataclass(frozen=True)
class TurnClock:
    """The two moments everything is measured against (monotonic seconds)."""

    release: float  # push-to-talk release (or the cut, for a take cut at the limit)
    respond: float  # respond() was called: the take was handed over

    def since_release_ms(self, seconds_after_respond: float | None) -> float | None:
        """A `TurnStats` figure (seconds after respond()) as ms after the release."""
        if seconds_after_respond is None:
            return None
        return (self.respond - self.release + seconds_after_respond) * 1000.0

    def monotonic_ms(self, moment: float | None) -> float | None:
        return None if moment is None else (moment - self.release) * 1000.0


@dataclass
class ActiveTurn:
    """The assistant turn being generated or still playing."""

    turn_id: int
    clock: TurnClock
    greedy: bool
    cancel: threading.Event = field(default_factory=threading.Event)
    pieces: list[np.ndarray] = field(default_factory=list)
    samples: int = 0
    frames: int = 0
    text: str = ""
    generating: bool = True
    played: bool = False  # some of its audio went to the player
    first_output_t: float | None = None  # first piece out of respond(): prefill is done by then
    stats: Any = None  # engine.chat.session.TurnStats once TurnDone arrived
    cancelled: bool = False
    failed: bool = False
    utterance_id: int | None = None  # the player's utterance for this answer (None: no output device)
    underruns_before: int = 0
    last_rtf_t: float = 0.0
    record: Any = None  # its TurnRecord, once generation ended
    metrics: p.TurnMetrics | None = None
    sampling: p.SamplingSettings | None = None  # what it was generated with (kept in the history)
    heard_samples: int | None = None  # set when it is cut: how much of it had been heard
    end_of_speech_wait_ms: float | None = None  # hands-free: from the end of speech until the answer may be heard
    held: bool = False  # hands-free: its sound waits for the end of the turn (engine/worker/voice_turns.py)
    withdrawn: bool = False  # hands-free: stopped because the user went on speaking; taken back, not measured

    def note_heard(self, queued: int | None) -> bool:
        """How much of the answer was heard when it is cut (the history keeps that much of its sound):
        `queued`, the samples still in the player (None: no player). True if it was noted now."""
        if self.heard_samples is None and queued is not None and self.utterance_id is not None:
            self.heard_samples = 0 if self.held else max(0, self.samples - queued)
            if self.record is not None:
                self.record.heard_samples = self.heard_samples
            return True
        return False

    @property
    def audio_s(self) -> float:
        return self.samples / ANSWER_RATE

    def pcm(self) -> np.ndarray:
        return np.concatenate(self.pieces) if self.pieces else np.zeros(0, np.float32)

    def stop(self) -> None:
        """Barge-in or cancel: respond() ends at its next step; nothing more is played."""
        self.cancel.set()
        self.cancelled = True

    def metrics_from(self, first_audible: float | None, underruns: int) -> p.TurnMetrics:
        stats, clock = self.stats, self.clock
        handed_over = clock.since_release_ms(0.0)
        return p.TurnMetrics(
            turn_id=self.turn_id,
            audio_encoded_ms=clock.since_release_ms(stats.audio_encoded_s) if stats else handed_over,
            prefill_done_ms=clock.since_release_ms(stats.prefill_done_s) if stats else handed_over,
            first_text_ms=clock.since_release_ms(stats.first_text_s) if stats else None,
            first_audio_frame_ms=clock.since_release_ms(stats.first_audio_frame_s) if stats else None,
            first_audible_ms=clock.monotonic_ms(first_audible),
            rtf=stats.rtf if stats else None,
            frames=int(stats.frames) if stats else 0,
            text=self.text,
            cancelled=self.cancelled,
            underruns=underruns,
            end_of_speech_wait_ms=self.end_of_speech_wait_ms,
        )


def stream_answer(
    turn: ActiveTurn,
    answer: Any,  # the respond() generator
    *,
    player: Any,
    post: Callable[[p.Event], None],
    context_used: Callable[[], int],
    on_first_audio: Callable[[], None],
    between_pieces: Callable[[], None],
) -> None:
    """Forward every piece of the answer: text to the window, audio to the player (and the window's
    counters); after each piece, `between_pieces` reads the commands that arrived meanwhile."""
    from engine.chat.session import AudioPieceOut, ContextTrimmedInfo, TextPieceOut, TurnDone

    for out in answer:
        if turn.first_output_t is None and isinstance(out, (TextPieceOut, AudioPieceOut)):
            turn.first_output_t = time.monotonic()
        if isinstance(out, TextPieceOut):
            turn.text += out.text
            post(p.TextDelta(turn.turn_id, out.text))
        elif isinstance(out, AudioPieceOut):
            turn.frames += out.frames
            _queue_audio(turn, player, np.asarray(out.pcm, dtype=np.float32), post, on_first_audio)
        elif isinstance(out, ContextTrimmedInfo):
            post(p.ContextTrimmed(out.dropped_turns, int(context_used())))
        elif isinstance(out, TurnDone):
            turn.stats = out.stats
        between_pieces()


def _queue_audio(turn: ActiveTurn, player: Any, pcm: np.ndarray, post: Callable[[p.Event], None],
                 on_first_audio: Callable[[], None]) -> None:
    if len(pcm) == 0:
        return
    first = not turn.pieces
    turn.pieces.append(pcm)
    turn.samples += len(pcm)
    if turn.cancel.is_set():
        return  # kept for the record, but a barge-in means nothing more is played
    if turn.utterance_id is not None:
        player.enqueue(pcm)
    if first:
        turn.played = True
        on_first_audio()
    post(p.AudioChunkQueued(turn.turn_id, len(pcm), ANSWER_RATE, turn.audio_s))
    # Live RTF as the session defines it (time since the prefill finished over audio made), with the
    # first output piece standing in for "prefill done".
    now = time.monotonic()
    if turn.audio_s >= LIVE_RTF_AFTER_S and now - turn.last_rtf_t >= LIVE_RTF_EVERY_S and turn.first_output_t:
        turn.last_rtf_t = now
        post(p.LiveRtf(turn.turn_id, (now - turn.first_output_t) / turn.audio_s, turn.frames))


def answer_take(worker: Any, take: Any) -> None:
    """A take arrived (a push-to-talk press's or the hands-free listener's): its record, and its answer."""
    # Cut at the limit while still held: the take ends now, so "release" is now. A hands-free take ended when the
    # speech did: the latency counts from there (what the user feels), the wait for the end of the turn included
    # and measured on its own (until the answer may be heard: engine/worker/voice_turns.py).
    takes, voice_turns = worker.takes, worker.voice_turns
    wait_ms = None
    end_of_speech_t = getattr(take, "end_of_speech_t", None)
    if end_of_speech_t is not None and takes.released_t is None:
        takes.released_t = end_of_speech_t
        wait_ms = max(0.0, (time.monotonic() - end_of_speech_t) * 1000.0)
    if takes.released_t is None:
        takes.released_t = time.monotonic()
    # On the 24-bit grid (inaudibly): the saved take then re-embeds bit for bit when continued.
    wave = canonical_take(voice_turns.take_audio(take))
    hold = voice_turns.begin(worker, take)
    user = worker.book.add(TurnRecord(worker._new_id(), "user", wave, int(take.sample_rate)))
    worker._post(p.UserTakeAdded(user.turn_id, user.duration_s))
    worker.book.finish(user)  # (a provisional one: when it is settled)
    run_turn(worker, wave, takes.released_t, end_of_speech_wait_ms=wait_ms, hold=hold)


def run_turn(worker: Any, wave: np.ndarray, release_t: float, *, end_of_speech_wait_ms: float | None = None,
             hold: bool = False) -> None:
    """One answer to a take, from respond() to the end of its generation (the engine thread, `worker`, owns
    the phases and the records; its `_close_turn` ends the turn once the sound has played out)."""
    session = worker.session
    player = worker.audio.need_player()
    turn = ActiveTurn(worker._new_id(), TurnClock(release_t, time.monotonic()), worker.sampling.greedy,
                      sampling=worker.sampling, end_of_speech_wait_ms=end_of_speech_wait_ms)
    worker.turn = turn
    worker.voice_turns.answer_started(turn.turn_id)
    # None when the speaker cannot be opened: the player has said why, and the answer is still
    # generated and kept (replay/export once the device is back).
    turn.utterance_id = player.begin_utterance()
    if hold and turn.utterance_id is not None and worker.voice_turns.holds(turn.turn_id):
        turn.held = True
        player.hold()
    turn.underruns_before = player.underruns
    worker._set_phase(Phase.THINKING)
    worker._post(p.AssistantTurnStarted(turn.turn_id, greedy=turn.greedy))
    turn.clock = TurnClock(release_t, time.monotonic())
    try:
        answer = session.respond(wave, worker.sampling, max_answer_seconds=worker.max_answer_seconds,
                                 cancel=turn.cancel)
        stream_answer(turn, answer, player=player, post=worker._post, context_used=lambda: session.context_used,
                      on_first_audio=lambda: _first_audio(worker), between_pieces=worker._between_pieces)
    except Exception as exc:  # noqa: BLE001 - shown; the conversation stays usable
        turn.failed = True
        worker._report(exc)
    finally:
        turn.generating = False
        _end_of_generation(worker, turn)


def _first_audio(worker: Any) -> None:
    if worker.phase is Phase.THINKING:
        worker._set_phase(Phase.SPEAKING)

def _end_of_generation(worker: Any, turn: ActiveTurn) -> None:
    if turn.failed and not turn.pieces and not turn.text:
        # Nothing was produced: close the window's item, keep no empty record, measure nothing.
        worker._post(p.AssistantTurnFinished(turn.turn_id, "", 0.0, True))
        worker.turn = None
        worker._set_phase(worker._rest_phase())
        worker._post_context()
        return
    stats = turn.stats
    turn.cancelled = turn.cancelled or bool(stats is not None and stats.cancelled)
    if stats is not None and stats.text:
        turn.text = stats.text
    record = worker.book.add(TurnRecord(turn.turn_id, "assistant", turn.pcm(), ANSWER_RATE, text=turn.text,
                                      cancelled=turn.cancelled, greedy=turn.greedy))
    turn.record = record
    # For the history: what the model generated (to continue from), what was heard, how it was sampled.
    record.tokens = None if turn.failed else answer_tokens(worker.session)
    record.heard_samples = turn.heard_samples
    record.sampling = turn.sampling
    if not turn.cancelled and worker.player is not None and turn.utterance_id is not None:
        worker.player.mark_end_of_stream()  # lets the rest drain without counting as an underrun
    worker._post(p.AssistantTurnFinished(turn.turn_id, turn.text, record.duration_s, turn.cancelled))
    if stats is not None and stats.rtf is not None and not turn.cancelled:
        worker._post(p.LiveRtf(turn.turn_id, float(stats.rtf), turn.frames))
    worker._post_context()
    if worker.session is not None:
        worker._post(worker.session.info)
    if worker.phase is Phase.SPEAKING and not turn.cancelled:
        worker._set_phase(Phase.PLAYING_OUT)  # metrics once the first sample was heard
    else:
        worker._close_turn()  # text only, or stopped: nothing more will be heard
