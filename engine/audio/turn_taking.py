"""Where a hands-free turn starts and ends, frame by frame: `Segmenter` (pure: 10 ms frame verdicts in, events out).

People pause in the middle of a sentence (in Japanese after a particle: 「今度の週末は、」… 「どこに行こうかな。」),
say 「うん」 while the other side talks, and want the answer soon after they have finished. So a take goes through
three moments after its last voiced frame, each `VoiceOptions` setting long (engine/audio/voice.py):

* `handover_s` of silence: the take ends and is handed over (`SpeechEnded`); the engine prepares the answer
  (encode, prefill, first frames) but holds its sound.
* `end_silence_s` of silence: the turn is over (`TurnOver`, or `SpeechEnded.turn_over` when it is the same
  moment): the answer may be heard.
* `join_s`: until then, speech that starts again continues the same take (`SpeechStarted.continues`): the take
  it joins is answered again as one, from its start through the pause (the engine withdraws the half-answer).
  After it, `TurnSettled`: nothing joins that take any more.

Speech while the assistant's answer plays (`playing`: it is heard, its own pauses included, or its echo may still
arrive) starts a take only once it has lasted `barge_in_s` from its onset (a backchannel such as 「うん」「はい」
「そうですね」 is shorter and never stops the answer); a continuation of the take just answered starts at once.
Until then it is `TalkOver`, as soon as it has lasted `min_speech_s` (the listener ducks the answer: the user hears
at once that they were noticed), and `TalkOverEnded` once it has ended as a backchannel (DUCK_HOLD_FRAMES after
it: the answer comes back to full level, not in the comma of 「すみません、もう一度…」). Over the answer to a take
that speech may still continue, its first voiced frame is `TalkOver(continues=True)` already (the listener fades
that half-answer out: it is withdrawn once the speech counts), and `TalkOverEnded` if it was a click.

Speech must last `min_speech_s` (coughs and clicks are shorter) before a take starts, and the take starts
`preroll_s` before the first voiced frame, so no syllable is lost; it keeps `tail_s` of the closing silence, and is
cut at `max_take_s`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SpeechStarted:
    start: int  # first frame of the take (pre-roll included; a continuation: the joined take's start)
    onset: int  # first voiced frame (of talk-over, if that led up to the speech)
    confirmed: int  # the frame at which the speech was long enough to count
    continues: bool = False  # it joins the take that ended last (a pause, not the end of the turn)
    own_start: int = -1  # where this speech's own take starts (pre-roll included): `start` unless it continues


@dataclass(frozen=True)
class SpeechEnded:
    start: int
    onset: int
    last_voiced: int  # the last voiced frame: the end of speech
    end: int  # one past the take's last frame
    cut: bool  # ended at max_take_s, not by silence
    continues: bool = False  # the take runs from a take it joined (see SpeechStarted)
    own_start: int = -1  # where the last speech's own take starts
    turn_over: bool = False  # end_silence_s has passed already: the answer may be heard at once


@dataclass(frozen=True)
class TurnOver:
    """The silence after the last take reached end_silence_s: its answer may be heard."""

    last_voiced: int


@dataclass(frozen=True)
class TurnSettled:
    """join_s has passed since the last take's end of speech: nothing continues it any more."""

    last_voiced: int


@dataclass(frozen=True)
class TalkOver:
    """Speech over the playing answer (it has lasted min_speech_s), not yet longer than a backchannel; or, with
    `continues`, the first voiced frame over the answer to a take that speech may still continue."""

    onset: int
    continues: bool = False


@dataclass(frozen=True)
class TalkOverEnded:
    """The speech of the last TalkOver ended as a backchannel: it starts no take."""

    onset: int
    last_voiced: int


SegmenterEvent = SpeechStarted | SpeechEnded | TurnOver | TurnSettled | TalkOver | TalkOverEnded


@dataclass
class _Ended:
    """The last take handed over, while a continuation may still join it."""

    start: int
    onset: int
    last_voiced: int
    turn_over: bool


class Segmenter:
    """Where takes start and end, frame by frame (pure: frame indices in, events out)."""

    # A voiced run may have gaps this long (between syllables) and still count towards `min_speech_s`.
    MAX_ONSET_GAP_FRAMES = 8
    # While the answer plays: the gaps a voice may have and still count as one utterance towards `barge_in_s`
    # (the closures of 「ちょっと待って」 are 100 ms long; 「うん、うん」 with a longer pause are two backchannels).
    MAX_BARGE_IN_GAP_FRAMES = 20
    # How far back before the first speech frame a run of talk-over frames may date a take's start.
    MAX_TALK_OVER_LEAD_FRAMES = 100
    # While the answer plays: a short utterance (taken for a backchannel) this little before a take's speech
    # starts is that take's beginning (「すみません、」 before 「もう一度説明してもらえますか」).
    MAX_BACKCHANNEL_LEAD_FRAMES = 100
    # While the answer plays: how long after the last voiced frame of speech over it the answer stays turned down
    # (TalkOver until TalkOverEnded): a pause inside an interruption does not bring it back up in between.
    DUCK_HOLD_FRAMES = 50

    def __init__(self, options: Any) -> None:
        """`options`: a VoiceOptions (engine/audio/voice.py)."""
        self.options = options
        frames = lambda seconds: max(0, round(seconds * 100))  # noqa: E731
        self._min = max(1, frames(options.min_speech_s))
        self._release = max(1, frames(options.end_silence_s))
        self._handover = max(1, min(frames(options.handover_s), self._release))
        self._join = max(self._release, frames(options.join_s))
        self._barge_in = frames(options.barge_in_s)
        self._preroll = frames(options.preroll_s)
        self._tail = min(frames(options.tail_s), self._handover)
        self._max = max(self._min + 1, frames(options.max_take_s))
        self.reset()

    def reset(self) -> None:
        self._onset: int | None = None
        self._voiced = 0
        self._last_voiced = -1
        self._start: int | None = None  # set while a take is in progress
        self._take_onset = 0
        self._own_start = 0
        self._continues = False
        self._run: int | None = None  # first frame of the current run of speech or talk-over frames
        self._last_heard = -1  # the last such frame
        self._ended: _Ended | None = None
        self._short: tuple[int, int] | None = None  # the last utterance too short to start a take: (onset, end)
        self._talking_over: int | None = None  # the onset of the speech a TalkOver was reported for, until it ends

    @property
    def in_take(self) -> bool:
        return self._start is not None

    def push(self, index: int, speech: bool, talk_over: bool = False, playing: bool = False) -> SegmenterEvent | None:
        """Frame `index` (consecutive from the caller's 0) was speech or not; `talk_over` (VoiceProcessor's)
        keeps a take going and dates its start back, but never starts one; `playing`: the assistant's answer is
        heard now (speech must outlast a backchannel to start a take)."""
        heard = speech or talk_over
        if self._start is None:
            return self._between_takes(index, speech, heard, playing)
        if heard:
            self._last_voiced = index
        start = self._start
        if index + 1 - start >= self._max:
            event = SpeechEnded(start, self._take_onset, index, index + 1, cut=True, continues=self._continues,
                                own_start=self._own_start)
            self.reset()
            return event
        if index - self._last_voiced >= self._handover:
            last = self._last_voiced
            turn_over = index - last >= self._release
            event = SpeechEnded(start, self._take_onset, last, last + 1 + self._tail, cut=False,
                                continues=self._continues, own_start=self._own_start, turn_over=turn_over)
            self.reset()
            self._ended = _Ended(start, event.onset, last, turn_over)
            return event
        return None

    def _between_takes(self, index: int, speech: bool, heard: bool, playing: bool) -> SegmenterEvent | None:
        if heard:
            if self._run is None or index - self._last_heard > self.MAX_ONSET_GAP_FRAMES:
                self._run = index
            self._last_heard = index
        ended = self._ended
        gap = self.MAX_BARGE_IN_GAP_FRAMES if playing and ended is None else self.MAX_ONSET_GAP_FRAMES
        if speech:
            if self._onset is None:
                self._onset, self._voiced = index, 0
            self._voiced += 1
            self._last_voiced = index
            long_enough = ended is not None or not playing or index + 1 - self._onset >= self._barge_in
            if self._voiced >= self._min:
                if long_enough:
                    return self._start_take(index)
                if self._talking_over is None:
                    self._talking_over = self._onset
                    return TalkOver(self._onset)
            elif ended is not None and playing and self._talking_over is None:
                self._talking_over = self._onset
                return TalkOver(self._onset, continues=True)
        elif self._onset is not None and index - self._last_voiced > gap:
            if playing and ended is None and self._voiced >= self._min:  # speech, taken for a backchannel
                self._short = (self._onset, self._last_voiced)
            self._onset = None
        if self._talking_over is not None and self._onset is None and index - self._last_voiced > self.DUCK_HOLD_FRAMES:
            onset, self._talking_over = self._talking_over, None
            return TalkOverEnded(onset, self._last_voiced)
        if ended is not None and self._onset is None:
            silence = index - ended.last_voiced
            if not ended.turn_over and silence >= self._release:
                ended.turn_over = True
                return TurnOver(ended.last_voiced)
            if silence >= self._join:
                self._ended = None
                return TurnSettled(ended.last_voiced)
        return None

    def _start_take(self, index: int) -> SpeechStarted:
        first = self._onset
        assert first is not None
        if self._short is not None and 0 <= first - self._short[1] <= self.MAX_BACKCHANNEL_LEAD_FRAMES:
            first = self._short[0]
        self._short = None
        self._talking_over = None
        if self._run is not None and self._run < first:
            first = max(self._run, first - self.MAX_TALK_OVER_LEAD_FRAMES)
        own_start = max(0, first - self._preroll)
        ended, self._ended = self._ended, None
        self._own_start = own_start
        self._continues = ended is not None
        if ended is not None:  # a pause, not the end of the turn: the take goes on from where it began
            self._start, self._take_onset = ended.start, ended.onset
        else:
            self._start, self._take_onset = own_start, first
        self._onset = first
        return SpeechStarted(self._start, self._take_onset, index, continues=self._continues, own_start=own_start)
