"""Random interleavings of every command, at random moments, on the real engine thread.

A hypothesis `RuleBasedStateMachine` drives the real `EngineWorker` on the demo model with the real
ALSA test devices (a microphone with a user who talks now and then, tests/room.py's SpeakingMic: quiet room
noise and generated voiced syllables from tests/voice_signals.py; a speaker read in real time). Each example
starts an engine, loads the demo model, lets the user say one utterance hands-free at rest (`first_words`: every
example checks the voice path once, whatever rules are drawn), runs random steps and ends with a Shutdown (at a
random moment when the `shutdown` rule is drawn, else after checking the records at rest).

The user's voice is switched on and off by rules (`say`, `hush`) while the other rules run, so in
hands-free mode voice takes start and end among every other command; rules wait for what a voice must lead
to: `voice_take` (one take of the whole utterance, or a rejection the window is told of), `barge_in_by_voice`
(speech during an answer stops it and becomes the next take; a Japanese backchannel does not:
`backchannel_over_an_answer`), `speak_while_muted` (muted before or during the speech: no take) and
`retune_during_voice_take` (new timings mid-take: the take is not left open).

After every step:
- the engine answers a ping within PING_DEADLINE_S;
- every StateChanged is a legal step of the table (engine/worker/table.py);
- no EngineError of kind "internal";
- no take gets a second answer, no answer finishes twice;
- no take is declared lost (TAKE_LOST), a voice take included.
At the end of each example:
- in hands-free mode, once the user has been silent for longer than the end-of-speech silence (counted in
  microphone frames), no voice take is still open;
- every take got exactly one assistant turn (started and finished);
- the records (as exported) match what the window was told since the last ConversationCleared;
- every record was handed to the turn-finished seam once;
- after Shutdown the thread is gone within 5 s.

The default suite runs 6 examples of each of its two machines (about two and a half minutes on two cores: its
speech rules talk in real time, ~12 s an example; 10 took the whole suite to 917 s of CI's 900 on a slow run, 20
past it), each CI run other random ones; set VOICECHAT_STATEFUL_EXAMPLES (and optionally VOICECHAT_STATEFUL_STEPS)
for more.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition, rule,
                                 run_state_machine_as_test)

from app_helpers import make_voice_adapter
from engine import protocol as p
from engine.worker.table import NOT_LOADED, VoiceStarted, public_transitions
from engine.worker.takes import TAKE_LOST, Takes
from engine_helpers import DEFAULT_PROMPT, SPEAKER, Engine, alsa_devices
from japanese_speech import BACKCHANNELS, PAUSED_SENTENCES, paused_sentence, say
from room import SpeakingMic
from voice_signals import speech

EXAMPLES = int(os.environ.get("VOICECHAT_STATEFUL_EXAMPLES", "6"))
STEPS = int(os.environ.get("VOICECHAT_STATEFUL_STEPS", "12"))
# The limit grows with the run asked for: 200 examples took over 30 minutes on two cores (a fixed 1800 s cut
# such a run off mid-example, which hypothesis then reported as a flaky test).
pytestmark = [
    pytest.mark.timeout(max(1800, EXAMPLES * STEPS * 2)),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]
PING_DEADLINE_S = 30.0  # generous: two shared cores, and ChatSession.open (demo: ~1.5 s) reads no commands
REST_TIMEOUT_S = 90.0
LEGAL = public_transitions()
PROMPTS = (DEFAULT_PROMPT, "Answer briefly.", "Speak slowly.")
RESTING = (p.EngineState.IDLE, p.EngineState.NO_MODEL)
MISSING_MIC = "No Such Microphone"
# What a voice take may miss of an utterance that starts over the assistant's answer (see barge_in_by_voice).
DOUBLE_TALK_ONSET_LOSS_S = 0.4


class Context:
    """What the machine needs from the test function (hypothesis builds the machine itself)."""

    good_voice: Path
    broken_voice: Path
    out: Path
    mic: SpeakingMic
    examples = 0
    steps = 0
    during_answer = 0  # commands sent right after an answer's first audio
    voice_starts = 0  # speech starts the listener reported
    voice_takes = 0  # takes of a voice_take / barge_in_by_voice rule
    barge_ins = 0  # answers stopped by the user's voice
    muted_utterances = 0  # utterances that a mute kept from becoming takes
    paused_sentences = 0  # sentences with a thinking pause checked (pause_and_go_on)
    withdrawals = 0  # half-answers withdrawn because the user went on after a pause
    backchannels = 0  # backchannels said over an answer that went on (backchannel_over_an_answer)


CTX = Context()


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        CTX.examples += 1
        self.finished_records: list = []  # the engine thread appends (list.append is atomic)
        self.eng = Engine(on_record_finished=self.finished_records.append)
        self.prompt = DEFAULT_PROMPT
        self.eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), self.prompt, 1.0),
                      p.Load(source="demo", demo=True))
        self.eng.wait_state(p.EngineState.IDLE, timeout=120)
        self.stopped = False
        self.checked = 0
        self.public = p.EngineState.NO_MODEL
        self.ping_seq = 0
        self.takes: dict[int, int] = {}  # user take id -> answers started for it
        self.withdrawn: set[int] = set()  # turn ids taken back (TurnsWithdrawn)
        self.finished: set[int] = set()
        self.started: set[int] = set()
        self.exports = 0
        self.hands_free = False
        self.muted = False
        self.end_of_speech = 0.6
        self.echo_cancellation = True
        self.microphone: str | None = None
        self.held = False  # a press of ours not released yet (the listener's speech would join that take)
        # The listener's speech starts, as it puts them on the engine's command queue (an observer: the real
        # command goes on unchanged).
        self.voice_started: list[int] = []
        audio = self.eng.worker.audio
        put = audio._put_command

        def observed(command: object) -> None:
            if isinstance(command, VoiceStarted):
                self.voice_started.append(command.seq)
                CTX.voice_starts += 1
            put(command)

        audio._put_command = observed
        CTX.mic.hush()

    # ------------------------------------------------------------------ commands at random moments

    @rule(enabled=st.booleans(), muted=st.booleans(), end_of_speech=st.sampled_from((0.3, 0.6, 1.5)),
          echo_cancellation=st.booleans())
    def hands_free(self, enabled: bool, muted: bool, end_of_speech: float, echo_cancellation: bool) -> None:
        """Hands-free on or off, muted or not, at any moment (the listener starts, stops or is rebuilt)."""
        self.hands_free, self.muted = enabled, muted
        self.end_of_speech, self.echo_cancellation = end_of_speech, echo_cancellation
        self._send(p.SetHandsFree(enabled, muted, end_of_speech, 0.1, echo_cancellation))

    @rule()
    def start_take(self) -> None:
        self.held = True
        self._send(p.StartTake())

    @rule()
    def end_take(self) -> None:
        self.held = False
        self._send(p.EndTake())

    @rule(hold=st.floats(0.0, 0.8))
    def talk(self, hold: float) -> None:
        self.held = False
        self._send(p.StartTake())
        time.sleep(hold)
        self._send(p.EndTake())

    @rule(times=st.integers(2, 4))
    def rapid_press_release(self, times: int) -> None:
        self.held = False
        for _ in range(times):
            self._send(p.StartTake(), p.EndTake())

    @rule(presses=st.lists(st.tuples(st.floats(0.0, 0.008), st.floats(0.0, 0.03)), min_size=1, max_size=30))
    def burst_of_presses_then_a_hold(self, presses: list[tuple[float, float]]) -> None:
        """Presses at millisecond spacing (holds of 0-8 ms, gaps of 0-30 ms: a bouncing key, fast clicks),
        then an ordinary 0.5 s hold, which must produce its take (or be refused for a reason the user is
        told: no model, no microphone), and never be declared lost."""
        if self.stopped:
            return
        if self.hands_free:  # push-to-talk's rule: a voice take in progress would take the hold's place
            self.hands_free = False
            self._send(p.SetHandsFree(False))
        self.held = False
        takes = self.eng.worker.takes
        microphone = self._microphone_stream(takes)
        for hold, gap in presses:
            self._send(p.StartTake())
            time.sleep(hold)
            self._send(p.EndTake())
            time.sleep(gap)
        mark = len(self.eng.seen)
        self._send(p.StartTake())
        time.sleep(0.5)
        self._send(p.EndTake())

        def outcome(e: p.Event) -> bool:
            if isinstance(e, p.UserTakeAdded):
                return e.duration_s >= 0.45
            if isinstance(e, p.TakeRejected) and e.reason == "too_short":
                # Only where the microphone was opened anew meanwhile: a device choice (SelectDevices) waits for
                # the answer the burst stops and reopens the microphone just before the presses run, so the hold
                # began before its stream existed (a press made while the engine was busy otherwise lands where it
                # was made, engine/audio/capture.py).
                return self._microphone_stream(takes) != microphone
            return isinstance(e, p.EngineError) and (e.kind == "audio_device" or e.message in (NOT_LOADED, TAKE_LOST))

        event = self.eng.wait_for(outcome, timeout=20, after=mark)
        assert not (isinstance(event, p.EngineError) and event.message == TAKE_LOST), "the hold's take was lost"

    @staticmethod
    def _microphone_stream(takes: Takes) -> tuple[object, int] | None:
        """Which microphone stream runs now: the recorder (held, so that a new one is never the same object) and
        its stream's serial (None: none open)."""
        recorder = takes.recorder
        source = recorder.listen_source() if recorder is not None else None
        return (recorder, source[0]) if source is not None else None

    @rule()
    def cancel(self) -> None:
        self._send(p.Cancel())

    @rule(prompt=st.sampled_from((None, "same", *PROMPTS)), greedy=st.booleans(),
          seconds=st.sampled_from((0.5, 1.0, 3.0)))
    def apply_settings(self, prompt: str | None, greedy: bool, seconds: float) -> None:
        if prompt == "same":
            prompt = self.prompt
        if prompt is not None:
            self.prompt = prompt
        self._send(p.ApplySettings(p.SamplingSettings(greedy=greedy), prompt, seconds))

    @rule(voice=st.sampled_from(("good", "broken", None)))
    def switch_voice(self, voice: str | None) -> None:
        path = {"good": CTX.good_voice, "broken": CTX.broken_voice, None: None}[voice]
        self._send(p.SwitchVoice(None if path is None else str(path)))

    @rule(microphone=st.sampled_from((None, "vc_test_mic", "No Such Microphone")))
    def select_devices(self, microphone: str | None) -> None:
        self.microphone = microphone
        self._send(p.SelectDevices(microphone, SPEAKER))

    @rule(rescan=st.booleans())
    def list_devices(self, rescan: bool) -> None:
        self._send(p.ListDevices(rescan=rescan))  # a re-scan only while the engine rests, at any moment

    @rule()
    def reset(self) -> None:
        self._send(p.Reset())

    @rule(context=st.sampled_from((4096, 1024)), voice=st.sampled_from((None, "good", "broken")))
    def load(self, context: int, voice: str | None) -> None:
        lora = {"good": str(CTX.good_voice), "broken": str(CTX.broken_voice), None: None}[voice]
        self._send(p.Load(source="demo", demo=True, lora=lora, context_tokens=context))

    @rule(broken_path=st.booleans())
    def export(self, broken_path: bool) -> None:
        self.exports += 1
        folder = CTX.out / "not-a-folder.txt" if broken_path else CTX.out / f"export-{CTX.examples}"
        self._send(p.Export(str(folder / f"talk-{self.exports}.wav")))

    @rule(which=st.sampled_from(("first", "last", "bogus")))
    def replay(self, which: str) -> None:
        ids = sorted({e.turn_id for e in self.eng.of(p.UserTakeAdded)} | {e.turn_id for e in self.eng.of(p.AssistantTurnFinished)})
        turn_id = 10_000 if which == "bogus" or not ids else (ids[0] if which == "first" else ids[-1])
        self._send(p.ReplayTurn(turn_id))

    # Commands while an answer is being generated (respond() holds the session's lock), in four rules so
    # that hypothesis picks these moments often: the answers of the tiny model are made in a blink.
    @rule(command=st.sampled_from(("new_prompt", "new_prompt", "same_prompt")))
    def prompt_during_an_answer(self, command: str) -> None:
        self._during_an_answer(command)

    @rule(command=st.sampled_from(("voice", "broken_voice", "reset", "load", "devices")))
    def change_during_an_answer(self, command: str) -> None:
        self._during_an_answer(command)

    @rule(command=st.sampled_from(("barge_in", "cancel", "release", "hands_free", "mute")))
    def take_during_an_answer(self, command: str) -> None:
        self._during_an_answer(command)

    @rule(command=st.sampled_from(("export", "replay")))
    def replay_or_export_during_an_answer(self, command: str) -> None:
        self._during_an_answer(command)

    def _during_an_answer(self, command: str) -> None:
        """A long answer, and `command` as soon as its first audio was queued."""
        if self.stopped:
            return
        mark = len(self.eng.seen)
        self.held = False
        self.eng.send(p.ApplySettings(p.SamplingSettings(), self.prompt, 20.0), p.StartTake())
        time.sleep(0.3)
        self.eng.send(p.EndTake())
        try:
            self.eng.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), timeout=5, after=mark)
        except AssertionError:
            return  # no answer came (say, the microphone was switched off or a change was pending)
        CTX.steps += 1
        CTX.during_answer += 1
        if command in ("new_prompt", "same_prompt"):
            if command == "new_prompt":
                self.prompt = next(x for x in PROMPTS if x != self.prompt)
            self.eng.send(p.ApplySettings(p.SamplingSettings(greedy=True), self.prompt, 1.0))
        elif command in ("voice", "broken_voice"):
            self.eng.send(p.SwitchVoice(str(CTX.good_voice if command == "voice" else CTX.broken_voice)))
        elif command == "reset":
            self.eng.send(p.Reset())
        elif command == "load":
            self.eng.send(p.Load(source="demo", demo=True))
        elif command == "devices":
            self.microphone = "vc_test_mic"
            self.eng.send(p.SelectDevices("vc_test_mic", SPEAKER))
        elif command == "export":
            self.exports += 1
            self.eng.send(p.Export(str(CTX.out / f"during-{CTX.examples}" / f"talk-{self.exports}.wav")))
        elif command == "replay":
            self.eng.send(p.ReplayTurn(self.eng.of(p.UserTakeAdded)[-1].turn_id))
        elif command == "barge_in":
            self.held = True  # pressed, not released: the engine records until a release
            self.eng.send(p.StartTake())
        elif command == "cancel":
            self.eng.send(p.Cancel())
        elif command in ("hands_free", "mute"):
            self.hands_free, self.muted = True, command == "mute"
            self.end_of_speech, self.echo_cancellation = 0.6, True
            self.eng.send(p.SetHandsFree(True, muted=command == "mute"))
        else:
            self.eng.send(p.EndTake())

    # ------------------------------------------------------------------ the user's voice

    @initialize(seconds=st.sampled_from((0.6, 1.5)), end_of_speech=st.sampled_from((0.3, 0.6)), seed=st.integers(0, 20),
                then=st.sampled_from(("off", "listening", "muted")))
    def first_words(self, seconds: float, end_of_speech: float, seed: int, then: str) -> None:
        """Every example begins with one utterance, hands-free, the engine at rest (voice_take's checks), and then
        hands-free off (as before any rule), left listening or muted, for the random rules.

        The rules that make speech heard are 4 of 28 and do nothing where the engine cannot listen at that
        moment; hypothesis also switches a random subset of the rules off in each example (swarm testing,
        FeatureFlags) and makes many examples of a run near-copies of a few earlier ones. So whether a run heard
        any voice at all was left to its seed: seed 996, 20 examples, heard 3 speech starts and one voice take,
        and one CI run (21 examples) heard none, failing the coverage check below with nothing wrong. Here, with
        the model just loaded, the engine must listen and hear the utterance, so the voice path is checked in
        every example, and a listener that hears nothing fails in the first one."""
        assert self._voice_take(seconds, end_of_speech, seed), "the engine, at rest with a model, did not listen"
        if then != "listening":
            self.hands_free = self.muted = then == "muted"
            self._send(p.SetHandsFree(self.hands_free, self.muted, self.end_of_speech, 0.1, self.echo_cancellation))

    @rule(seconds=st.sampled_from((0.3, 1.0, 2.5)), loud=st.booleans(), seed=st.integers(0, 20))
    def say(self, seconds: float, loud: bool, seed: int) -> None:
        """The user starts talking (instead of what they were saying) and goes on while the next rules run."""
        if not self.stopped:
            CTX.steps += 1
            CTX.mic.say(self._utterance(seconds, seed, 0.5 if loud else 0.25))

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(sentence=st.sampled_from(PAUSED_SENTENCES), pause=st.floats(0.1, 1.4))
    def pause_and_go_on(self, sentence: tuple[str, str], pause: float) -> None:
        """A Japanese sentence with a thinking pause after a particle: the rest of it arrives at any moment of the
        first part's answer (before the take is handed over, while the answer is prepared and held, while it is
        heard). One take of the whole sentence is kept; a half-answer is withdrawn everywhere (the records and the
        seam are checked at the end of the example)."""
        CTX.mic.hush()
        if not self._listening(muted=False) or not self._ready_for_a_voice() or not self._at_rest():
            return
        audio, _, _ = paused_sentence(*sentence, pause, rate=CTX.mic.rate, level=0.4)
        mark = len(self.eng.seen)
        _, end = CTX.mic.say(audio)
        CTX.mic.wait_fed(end + int(2.5 * CTX.mic.rate))  # past the join window (1.5 s) after the end of speech
        self._at_rest()
        self._check_new_events()
        withdrawn = {i for e in self.eng.of(p.TurnsWithdrawn, mark) for i in e.turn_ids}
        takes = [e for e in self.eng.of(p.UserTakeAdded, mark) if e.turn_id not in withdrawn]
        CTX.paused_sentences += 1
        CTX.withdrawals += len(self.eng.of(p.TurnsWithdrawn, mark))
        assert len(takes) == 1, f"a {pause:.2f} s pause: {len(takes)} takes kept ({sentence})"
        assert takes[0].duration_s >= len(audio) / CTX.mic.rate, "the kept take is not the whole sentence"

    @rule()
    def hush(self) -> None:
        """The user stops talking, mid-syllable if need be."""
        CTX.mic.hush()

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(seconds=st.sampled_from((0.6, 1.5)), end_of_speech=st.sampled_from((0.3, 0.6)), seed=st.integers(0, 20))
    def voice_take(self, seconds: float, end_of_speech: float, seed: int) -> None:
        """Hands-free on, the engine at rest, the user says one utterance: exactly one take of all of it
        (pre-roll included), or a rejection the window is told of; it is never lost. (Over an answer's echo the
        double-talk check may find the onset late or split the utterance, issue 26's known limit: that case is
        barge_in_by_voice's, with its allowance.)"""
        self._voice_take(seconds, end_of_speech, seed)

    def _voice_take(self, seconds: float, end_of_speech: float, seed: int) -> bool:
        """voice_take's checks; False (nothing said) where the engine cannot listen at rest now."""
        CTX.mic.hush()
        self.end_of_speech = end_of_speech
        if not self._listening(muted=False) or not self._ready_for_a_voice() or not self._at_rest():
            return False
        mark = len(self.eng.seen)
        starts = len(self.voice_started)
        _, end = CTX.mic.say(self._utterance(seconds, seed, 0.4))
        outcome = self.eng.wait_for(lambda e: isinstance(e, (p.UserTakeAdded, p.TakeRejected))
                                    or (isinstance(e, p.EngineError) and e.kind in ("take", "audio_device")),
                                    timeout=30, after=mark)
        assert not (isinstance(outcome, p.EngineError) and outcome.message == TAKE_LOST), "the voice take was lost"
        # The end of the utterance and more than one end-of-speech silence after it: nothing else comes of it.
        CTX.mic.wait_fed(end + int((end_of_speech + 1.0) * CTX.mic.rate))
        self._ping()
        assert len(self.voice_started) - starts == 1, f"{len(self.voice_started) - starts} starts for one utterance"
        gone = {i for e in self.eng.of(p.TurnsWithdrawn, mark) for i in e.turn_ids}
        takes = [e for e in self.eng.of(p.UserTakeAdded, mark) if e.turn_id not in gone]
        if isinstance(outcome, p.UserTakeAdded):
            CTX.voice_takes += 1
            assert len(takes) == 1, f"one utterance became {len(takes)} takes"
            assert takes[0].duration_s >= seconds, f"a take of {takes[0].duration_s:.2f} s for {seconds} s of speech"
        else:
            assert not takes, f"a take besides the rejection {outcome}"
        return True

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(seconds=st.sampled_from((1.0, 1.5)), seed=st.integers(0, 20))
    def barge_in_by_voice(self, seconds: float, seed: int) -> None:
        """Speech while the assistant answers stops the answer and becomes the next take, the whole utterance."""
        CTX.mic.hush()
        if not self._listening(muted=False) or not self._ready_for_a_voice() or (answer := self._an_answer_plays()) is None:
            return
        speaking = len(self.eng.seen)
        starts = len(self.voice_started)
        _, end = CTX.mic.say(self._utterance(seconds, seed, 0.5))
        take = self.eng.wait_for(lambda e: isinstance(e, p.UserTakeAdded), timeout=30, after=speaking)
        finished = [e for e in self.eng.seen[speaking:self.eng.seen.index(take)]
                    if isinstance(e, p.AssistantTurnFinished) and e.turn_id == answer]
        assert finished or answer in self.finished, "the user's take came while the answer was still going"
        if finished and finished[0].cancelled:
            CTX.barge_ins += 1
        CTX.voice_takes += 1
        # Over the answer's echo the double-talk check finds the voice's onset later (issue 26's known limit,
        # tests/test_voice.py's xfail: up to 0.66 s, less the 0.3 s pre-roll): the take may miss that much.
        assert take.duration_s >= seconds - DOUBLE_TALK_ONSET_LOSS_S, f"a take of {take.duration_s:.2f} s for {seconds} s of speech"
        CTX.mic.wait_fed(end + int((self.end_of_speech + 1.0) * CTX.mic.rate))
        self._ping()
        assert len(self.voice_started) - starts == 1 and len(self.eng.of(p.UserTakeAdded, speaking)) == 1

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(word=st.sampled_from(BACKCHANNELS))
    def backchannel_over_an_answer(self, word: str) -> None:
        """A backchannel while the assistant answers: ducked meanwhile, then on at full level; no take, no stop."""
        CTX.mic.hush()
        if not self._listening(muted=False) or not self._ready_for_a_voice() or (answer := self._an_answer_plays()) is None:
            return
        speaking = len(self.eng.seen)
        _, end = CTX.mic.say(say(word, rate=CTX.mic.rate, level=0.4))
        CTX.mic.wait_fed(end + int(0.5 * CTX.mic.rate))  # past the gaps a voice may have (then it is restored)
        self._ping()
        self._check_new_events()
        assert not self.eng.of(p.UserTakeAdded, speaking), f"「{word}」 became a take"
        assert answer not in {e.turn_id for e in self.eng.of(p.AnswerInterrupted, speaking)}, f"「{word}」 stopped it"
        player = self.eng.worker.audio.player  # (it played the answer)
        deadline = time.monotonic() + 5.0  # (only against a hang: the listener may be behind the microphone)
        while player.is_audible and player.gain != 1.0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert player.gain == 1.0 or not player.is_audible, f"the answer stayed ducked after 「{word}」"
        CTX.backchannels += player.is_audible
        self._send(p.Cancel())  # (the stop button: the next rules need not wait for the rest of a 20 s answer)

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(during=st.booleans(), seed=st.integers(0, 20))
    def speak_while_muted(self, during: bool, seed: int) -> None:
        """Muted before the user speaks, or while a voice take runs: no take comes of it."""
        CTX.mic.hush()
        # At rest, as voice_take: over an answer's echo the double-talk check may find no onset in the whole
        # utterance (issue 26's known limit, barge_in_by_voice's to test with its allowance).
        if not self._listening(muted=False) or not self._ready_for_a_voice() or (during and not self._at_rest()):
            return
        mark = len(self.eng.seen)
        starts = len(self.voice_started)
        if during:
            _, end = CTX.mic.say(self._utterance(3.0, seed, 0.4))
            deadline = time.monotonic() + 20
            while len(self.voice_started) == starts or self.public is not p.EngineState.RECORDING:
                assert CTX.mic.talking and time.monotonic() < deadline, "3 s of speech started no take"
                time.sleep(0.01)
                self._check_new_events()
            self._listening(muted=True)
            starts = len(self.voice_started)
        else:
            self._listening(muted=True)
            _, end = CTX.mic.say(self._utterance(1.5, seed, 0.4))
        CTX.mic.wait_fed(end + int((self.end_of_speech + 1.0) * CTX.mic.rate))
        self._ping()
        assert len(self.voice_started) == starts, "the listener heard speech while muted"
        assert not self.eng.of(p.UserTakeAdded, mark), "a take while muted"
        CTX.muted_utterances += 1

    @precondition(lambda self: not self.stopped and self.microphone != MISSING_MIC)
    @rule(end_of_speech=st.sampled_from((0.3, 1.5)), echo_cancellation=st.booleans(), seed=st.integers(0, 20))
    def retune_during_voice_take(self, end_of_speech: float, echo_cancellation: bool, seed: int) -> None:
        """New hands-free timings (the listener is rebuilt) while a voice take runs: that take is dropped or
        delivered, never left open once the user is silent (it was: RECORDING for ever)."""
        CTX.mic.hush()
        # At rest, as voice_take: over an answer's echo the double-talk check may find no onset in the whole
        # utterance (issue 26's known limit, barge_in_by_voice's to test with its allowance).
        if not self._listening(muted=False) or not self._ready_for_a_voice() or not self._at_rest():
            return
        mark = len(self.eng.seen)
        starts = len(self.voice_started)
        CTX.mic.say(self._utterance(3.0, seed, 0.4))
        deadline = time.monotonic() + 20
        while len(self.voice_started) == starts or self.public is not p.EngineState.RECORDING:
            assert CTX.mic.talking and time.monotonic() < deadline, "3 s of speech started no take"
            time.sleep(0.01)
            self._check_new_events()
        self.end_of_speech = end_of_speech
        self.echo_cancellation = not self.echo_cancellation if echo_cancellation else self.echo_cancellation
        self._listening(muted=False)
        CTX.mic.hush()
        CTX.mic.wait_fed(CTX.mic.frames_fed + int((end_of_speech + 1.5) * CTX.mic.rate))
        assert self._ping().state is not p.EngineState.RECORDING, "the voice take was left open"
        assert len(self.eng.of(p.UserTakeAdded, mark)) <= 1

    def _utterance(self, seconds: float, seed: int, level: float) -> object:
        return speech(seconds, f0=110.0 + 10 * (seed % 5), seed=seed, level=level, rate=CTX.mic.rate, pauses=False)

    def _an_answer_plays(self) -> int | None:
        """A push-to-talk take whose answer (20 s at most) is playing: its turn id (None: no answer came, a change
        was pending or the take was refused)."""
        mark = len(self.eng.seen)
        self.eng.send(p.ApplySettings(p.SamplingSettings(), self.prompt, 20.0), p.StartTake())
        time.sleep(0.3)
        self.eng.send(p.EndTake())
        try:  # the answer to this take (not one from before, still playing out) and its first audio
            started = self.eng.wait_for(lambda e: isinstance(e, p.AssistantTurnStarted), timeout=10, after=mark)
            self.eng.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), timeout=10,
                              after=self.eng.seen.index(started))
        except AssertionError:
            return None
        self.eng.send(p.ApplySettings(p.SamplingSettings(), self.prompt, 1.0))  # from the next answer on
        return started.turn_id

    def _listening(self, *, muted: bool) -> bool:
        """Hands-free on (muted as asked) and listening, as the engine says; False if it cannot listen now (no
        model loaded, or loading)."""
        if self.stopped:
            return False
        self.hands_free, self.muted = True, muted
        self._send(p.SetHandsFree(True, muted, self.end_of_speech, 0.1, self.echo_cancellation))
        wanted = p.HandsFreeState(enabled=True, listening=True, muted=muted)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = self.eng.of(p.HandsFreeState)
            if states and states[-1] == wanted:
                return True
            time.sleep(0.02)
        return False

    def _at_rest(self, timeout: float = 30.0) -> bool:
        """Until the engine rests (IDLE: no answer playing, so no echo); False if it does not within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._ping().state is p.EngineState.IDLE:
                time.sleep(0.3)  # the echo canceller's tail of the last answer has passed
                return self._ping().state is p.EngineState.IDLE
            time.sleep(0.05)
        return False

    def _ready_for_a_voice(self) -> bool:
        """Our press released, and the engine resting or answering (not recording, loading or exporting)."""
        if self.held:
            self.held = False
            self._send(p.EndTake())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pong = self._ping()
            if pong.state in (p.EngineState.IDLE, p.EngineState.THINKING, p.EngineState.SPEAKING):
                time.sleep(0.1)  # the listener has seen some of the room's quiet since the last hush
                return True
            if pong.state is p.EngineState.NO_MODEL:
                return False
            time.sleep(0.05)
        return False

    @rule(seconds=st.floats(0.0, 1.0))
    def wait(self, seconds: float) -> None:
        time.sleep(seconds)

    @rule(state=st.sampled_from((p.EngineState.RECORDING, p.EngineState.THINKING, p.EngineState.SPEAKING,
                                 p.EngineState.IDLE)))
    def wait_for_state(self, state: p.EngineState) -> None:
        """Let the engine get to `state` (if it is on its way there), so the next command meets it there."""
        deadline = time.monotonic() + 3.0
        while not self.stopped and time.monotonic() < deadline:
            self.eng.pump()
            states = [e.state for e in self.eng.seen if isinstance(e, p.StateChanged)]
            if states and states[-1] is state:
                return
            time.sleep(0.01)

    @precondition(lambda self: not self.stopped)
    @rule()
    def shutdown(self) -> None:
        self._send(p.Shutdown())
        self._assert_stops()

    def _send(self, *commands: p.Command) -> None:
        if not self.stopped:
            CTX.steps += 1
            self.eng.send(*commands)

    # ------------------------------------------------------------------ invariants

    @invariant()
    def engine_answers_and_keeps_its_rules(self) -> None:
        if self.stopped:
            return
        self._ping()
        self._check_new_events()

    def _ping(self) -> p.Pong:
        self.ping_seq += 1
        seq = self.ping_seq
        self.eng.send(p.Ping(seq))
        return self.eng.wait_for(lambda e: isinstance(e, p.Pong) and e.seq == seq, timeout=PING_DEADLINE_S,
                                 after=self.checked)

    def _check_new_events(self) -> None:
        self.eng.pump()
        for event in self.eng.seen[self.checked:]:
            if isinstance(event, p.StateChanged):
                assert (self.public, event.state) in LEGAL, f"illegal step {self.public} -> {event.state}"
                self.public = event.state
            elif isinstance(event, p.EngineError):
                assert event.kind != "internal", f"internal error: {event.message}\n{event.details}"
                assert event.message != TAKE_LOST, "a take was declared lost"
            elif isinstance(event, p.UserTakeAdded):
                assert event.turn_id not in self.takes
                self.takes[event.turn_id] = 0
            elif isinstance(event, p.AssistantTurnStarted):
                take = event.turn_id - 1
                assert take in self.takes, f"answer {event.turn_id} without a take"
                self.takes[take] += 1
                assert self.takes[take] == 1, f"take {take} answered twice"
                self.started.add(event.turn_id)
            elif isinstance(event, p.AssistantTurnFinished):
                assert event.turn_id in self.started and event.turn_id not in self.finished
                self.finished.add(event.turn_id)
            elif isinstance(event, p.TurnsWithdrawn):
                # The last take and its answer, never one taken back before.
                assert event.turn_ids and set(event.turn_ids) <= set(self.takes) | self.started, event
                assert self.withdrawn.isdisjoint(event.turn_ids)
                self.withdrawn.update(event.turn_ids)
        self.checked = len(self.eng.seen)

    # ------------------------------------------------------------------ end of an example

    def teardown(self) -> None:
        try:
            if not self.stopped:
                self._check_no_voice_take_left_open()
                self._wait_for_rest()
                self._check_new_events()
                assert all(count == 1 for count in self.takes.values()), f"unanswered takes: {self.takes}"
                assert self.started == self.finished
                self._check_records()
                self._send(p.Shutdown())
                self._assert_stops()
                self._check_seam()
        finally:
            if self.eng.worker.is_alive():
                self.eng.send(p.Shutdown())
                self.eng.worker.join(10)

    def _check_no_voice_take_left_open(self) -> None:
        """Hands-free, unmuted, no press of ours: once the user has been silent for longer than the end-of-speech
        silence (in microphone frames), the listener has ended every voice take, so the engine records nothing."""
        CTX.mic.hush()
        if not (self.hands_free and not self.muted and not self.held) or self.microphone == MISSING_MIC:
            return  # (no microphone open: nothing takes the room's audio, and nothing can be heard)
        CTX.mic.wait_fed(CTX.mic.frames_fed + int((self.end_of_speech + 1.5) * CTX.mic.rate))
        pong = self._ping()
        # (A press of ours deferred behind a replay and an export, its release run before it, used to leave a take
        # open here: engine/worker/thread.py _submit keeps a release behind its press now.)
        assert pong.state is not p.EngineState.RECORDING, "a voice take was still open after the user's silence"

    def _wait_for_rest(self) -> None:
        """Until two pings in a row find the engine resting with nothing else happening in between."""
        deadline = time.monotonic() + REST_TIMEOUT_S
        # A take still held would otherwise run to its 60 s limit, and a long answer to its end.
        CTX.mic.hush()
        self._send(p.SetHandsFree(False), p.EndTake(), p.Cancel())
        while True:
            assert time.monotonic() < deadline, "the engine did not come to rest"
            first = self._ping()
            mark = len(self.eng.seen)
            time.sleep(0.3)
            second = self._ping()
            quiet = all(isinstance(e, (p.InputLevel, p.Pong, p.HandsFreeState)) for e in self.eng.seen[mark:])
            if first.state in RESTING and second.state in RESTING and quiet:
                return
            if second.state is not p.EngineState.IDLE:
                self._send(p.EndTake(), p.Cancel())

    def _check_records(self) -> None:
        """What the engine keeps (its export) is what the window was told, since the last new conversation."""
        events = self.eng.seen
        cleared = max((i for i, e in enumerate(events) if isinstance(e, p.ConversationCleared)), default=-1)
        told = [e for e in events[cleared + 1:] if isinstance(e, (p.UserTakeAdded, p.AssistantTurnFinished))
                and e.turn_id not in self.withdrawn]
        mark = len(events)
        path = CTX.out / f"final-{CTX.examples}.wav"
        self.eng.send(p.Export(str(path)))
        answer = self.eng.wait_for(lambda e: isinstance(e, (p.Exported, p.EngineError)), timeout=30, after=mark)
        if isinstance(answer, p.EngineError):
            assert answer.kind == "export" and "nothing to export" in answer.message
            assert not told, f"the window was told of {told} but nothing is kept"
            return
        kept = json.loads(path.with_suffix(".json").read_text(encoding="utf-8"))["turns"]
        # An answer that failed before producing anything is closed in the window without a record.
        told = [e for e in told if not (isinstance(e, p.AssistantTurnFinished) and not e.text and not e.duration_s
                                        and e.turn_id not in {t["turn_id"] for t in kept})]
        assert [t["turn_id"] for t in kept] == [e.turn_id for e in told]
        for turn, event in zip(kept, told, strict=True):
            assert turn["duration_s"] == pytest.approx(event.duration_s, abs=1e-3)
            if isinstance(event, p.AssistantTurnFinished):
                assert turn["role"] == "assistant" and turn["text"] == event.text
                assert turn["cancelled"] == event.cancelled
            else:
                assert turn["role"] == "user"
        self.kept_ids = [t["turn_id"] for t in kept]

    def _check_seam(self) -> None:
        ids = [r.turn_id for r in self.finished_records]
        assert len(ids) == len(set(ids)), f"a record was finished twice: {ids}"
        missing = set(getattr(self, "kept_ids", [])) - set(ids)
        assert not missing, f"records never handed to the seam: {missing}"
        assert self.withdrawn.isdisjoint(ids), f"withdrawn turns went to the history: {self.withdrawn & set(ids)}"
        for record in self.finished_records:
            if record.role == "assistant":
                assert record.metrics is not None and record.metrics.turn_id == record.turn_id

    def _assert_stops(self) -> None:
        self.stopped = True
        started = time.monotonic()
        self.eng.worker.join(5)
        assert not self.eng.worker.is_alive(), "the engine thread was still running 5 s after Shutdown"
        assert time.monotonic() - started <= 5.5
        self.eng.wait_for(lambda e: isinstance(e, p.EngineStopped), timeout=2)


@pytest.fixture
def talking_env(isolated_user_dirs: Path, tmp_path: Path):  # noqa: ANN201
    """The ALSA test devices: the microphone of a user who talks when the rules say, a speaker read in real time."""
    with alsa_devices(tmp_path / "alsa", SpeakingMic) as devices:
        yield devices


def test_random_interleavings_of_every_command(talking_env, isolated_user_dirs: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from engine.chat.session import demo_model_folder, ensure_demo_model

    CTX.mic = talking_env[1]

    ensure_demo_model()
    CTX.good_voice = make_voice_adapter(demo_model_folder(), isolated_user_dirs / "voices" / "alice")
    CTX.broken_voice = isolated_user_dirs / "voices" / "broken"
    CTX.broken_voice.mkdir(parents=True)
    CTX.out = tmp_path / "exports"
    CTX.out.mkdir()
    (CTX.out / "not-a-folder.txt").write_text("a file where the export wants a folder")
    CTX.examples = CTX.steps = CTX.during_answer = 0
    CTX.voice_starts = CTX.voice_takes = CTX.barge_ins = CTX.muted_utterances = 0
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), print_blob=True),
    )
    print(f"stateful engine test: {CTX.examples} examples, {CTX.steps} commands sent, "
          f"{CTX.during_answer} of them during an answer; {CTX.voice_starts} speech starts heard, "
          f"{CTX.voice_takes} voice takes checked, {CTX.barge_ins} answers stopped by voice, "
          f"{CTX.muted_utterances} utterances kept out by the mute; {CTX.paused_sentences} paused sentences, "
          f"{CTX.withdrawals} half-answers withdrawn, {CTX.backchannels} backchannels over an answer that went on")
    assert CTX.voice_starts > 0 and CTX.voice_takes > 0, "the user's voice never became a take"


def test_new_timings_after_a_device_change_end_the_voice_take_in_progress(talking_env, isolated_user_dirs: Path,  # noqa: ANN001
                                                                          tmp_path: Path) -> None:
    """A sequence the machine above found: devices chosen again during an answer (the streams and the listener are
    closed and opened again), then new hands-free timings while a voice take runs. The listener that began the
    take had been replaced by the device change, not by reconcile_listener, which therefore did not say so: the
    take stayed open (RECORDING) for ever."""
    from engine.chat.session import ensure_demo_model

    CTX.mic = talking_env[1]
    ensure_demo_model()
    CTX.out = tmp_path / "exports"
    CTX.out.mkdir()
    machine = EngineMachine()
    try:
        machine.change_during_an_answer("devices")
        machine.retune_during_voice_take(echo_cancellation=False, end_of_speech=0.3, seed=0)  # asserts no take is left open
    finally:
        machine.eng.send(p.Shutdown())
        machine.eng.worker.join(10)
