"""Random interleavings of every command, at random moments, on the real engine thread.

A hypothesis `RuleBasedStateMachine` drives the real `EngineWorker` on the demo model with the real
ALSA test devices (a microphone fed with a tone, a speaker read in real time). Each example starts an
engine, loads the demo model, runs random steps and ends with a Shutdown (at a random moment when the
`shutdown` rule is drawn, else after checking the records at rest).

After every step:
- the engine answers a ping within PING_DEADLINE_S;
- every StateChanged is a legal step of the table (engine/worker/table.py);
- no EngineError of kind "internal";
- no take gets a second answer, no answer finishes twice.
At the end of each example:
- every take got exactly one assistant turn (started and finished);
- the records (as exported) match what the window was told since the last ConversationCleared;
- every record was handed to the turn-finished seam once;
- after Shutdown the thread is gone within 5 s.

The default suite runs a few examples (about two minutes on two cores); set VOICECHAT_STATEFUL_EXAMPLES
(and optionally VOICECHAT_STATEFUL_STEPS) for more.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from app_helpers import make_voice_adapter
from engine import protocol as p
from engine.worker.table import NOT_LOADED, public_transitions
from engine.worker.takes import TAKE_LOST
from engine_helpers import DEFAULT_PROMPT, SPEAKER, Engine, audio_env  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.timeout(1800),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]

EXAMPLES = int(os.environ.get("VOICECHAT_STATEFUL_EXAMPLES", "20"))
STEPS = int(os.environ.get("VOICECHAT_STATEFUL_STEPS", "12"))
PING_DEADLINE_S = 30.0  # generous: two shared cores, and ChatSession.open (demo: ~1.5 s) reads no commands
REST_TIMEOUT_S = 90.0
LEGAL = public_transitions()
PROMPTS = (DEFAULT_PROMPT, "Answer briefly.", "Speak slowly.")
RESTING = (p.EngineState.IDLE, p.EngineState.NO_MODEL)


class Context:
    """What the machine needs from the test function (hypothesis builds the machine itself)."""

    good_voice: Path
    broken_voice: Path
    out: Path
    examples = 0
    steps = 0
    during_answer = 0  # commands sent right after an answer's first audio


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
        self.finished: set[int] = set()
        self.started: set[int] = set()
        self.exports = 0
        self.hands_free = False

    # ------------------------------------------------------------------ commands at random moments

    @rule(enabled=st.booleans(), muted=st.booleans(), end_of_speech=st.sampled_from((0.3, 0.6, 1.5)),
          echo_cancellation=st.booleans())
    def hands_free(self, enabled: bool, muted: bool, end_of_speech: float, echo_cancellation: bool) -> None:
        """Hands-free on or off, muted or not, at any moment (the listener starts, stops or is rebuilt)."""
        self.hands_free = enabled
        self._send(p.SetHandsFree(enabled, muted, end_of_speech, 0.1, echo_cancellation))

    @rule()
    def start_take(self) -> None:
        self._send(p.StartTake())

    @rule()
    def end_take(self) -> None:
        self._send(p.EndTake())

    @rule(hold=st.floats(0.0, 0.8))
    def talk(self, hold: float) -> None:
        self._send(p.StartTake())
        time.sleep(hold)
        self._send(p.EndTake())

    @rule(times=st.integers(2, 4))
    def rapid_press_release(self, times: int) -> None:
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
            return isinstance(e, p.EngineError) and (e.kind == "audio_device" or e.message in (NOT_LOADED, TAKE_LOST))

        event = self.eng.wait_for(outcome, timeout=20, after=mark)
        assert not (isinstance(event, p.EngineError) and event.message == TAKE_LOST), "the hold's take was lost"

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
            self.eng.send(p.SelectDevices("vc_test_mic", SPEAKER))
        elif command == "export":
            self.exports += 1
            self.eng.send(p.Export(str(CTX.out / f"during-{CTX.examples}" / f"talk-{self.exports}.wav")))
        elif command == "replay":
            self.eng.send(p.ReplayTurn(self.eng.of(p.UserTakeAdded)[-1].turn_id))
        elif command == "barge_in":
            self.eng.send(p.StartTake())
        elif command == "cancel":
            self.eng.send(p.Cancel())
        elif command in ("hands_free", "mute"):
            self.hands_free = True
            self.eng.send(p.SetHandsFree(True, muted=command == "mute"))
        else:
            self.eng.send(p.EndTake())

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
        self.checked = len(self.eng.seen)

    # ------------------------------------------------------------------ end of an example

    def teardown(self) -> None:
        try:
            if not self.stopped:
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

    def _wait_for_rest(self) -> None:
        """Until two pings in a row find the engine resting with nothing else happening in between."""
        deadline = time.monotonic() + REST_TIMEOUT_S
        # A take still held would otherwise run to its 60 s limit, and a long answer to its end.
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
        told = [e for e in events[cleared + 1:] if isinstance(e, (p.UserTakeAdded, p.AssistantTurnFinished))]
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


def test_random_interleavings_of_every_command(audio_env, isolated_user_dirs: Path, tmp_path: Path) -> None:  # noqa: ANN001
    from engine.chat.session import demo_model_folder, ensure_demo_model

    ensure_demo_model()
    CTX.good_voice = make_voice_adapter(demo_model_folder(), isolated_user_dirs / "voices" / "alice")
    CTX.broken_voice = isolated_user_dirs / "voices" / "broken"
    CTX.broken_voice.mkdir(parents=True)
    CTX.out = tmp_path / "exports"
    CTX.out.mkdir()
    (CTX.out / "not-a-folder.txt").write_text("a file where the export wants a folder")
    CTX.examples = CTX.steps = CTX.during_answer = 0
    run_state_machine_as_test(
        EngineMachine,
        settings=settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, database=None,
                          suppress_health_check=list(HealthCheck), print_blob=True),
    )
    print(f"stateful engine test: {CTX.examples} examples, {CTX.steps} commands sent, "
          f"{CTX.during_answer} of them during an answer")
