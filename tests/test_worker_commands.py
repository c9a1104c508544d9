"""Commands at every moment of a turn, on the real engine thread (demo model, ALSA test devices).

The first tests reproduce a hang that was found by hand: a changed system prompt sent while the
assistant was thinking or speaking deadlocked the engine thread on the session's lock, for good.
"""

from __future__ import annotations

import time

import pytest

from engine import protocol as p
from engine_helpers import DEFAULT_PROMPT, Engine, audio_env, engine  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]


def start_long_answer(eng: Engine, answer_seconds: float = 60.0) -> int:
    """A take, answered with up to `answer_seconds` (by default 60 s, so the answer is still running when the test
    acts); returns the index of the first event after it."""
    eng.send(p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, answer_seconds))
    start = len(eng.seen)
    eng.send(p.StartTake())
    eng.wait_state(p.EngineState.RECORDING, after=start)
    time.sleep(0.3)
    eng.send(p.EndTake())
    return start


@pytest.mark.parametrize("moment", ["thinking", "speaking"])
def test_a_new_system_prompt_during_an_answer_does_not_hang_the_engine(engine: Engine, moment: str) -> None:
    start = start_long_answer(engine)
    if moment == "thinking":
        engine.wait_for(lambda e: isinstance(e, p.AssistantTurnStarted), after=start)
    else:
        engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    engine.send(p.ApplySettings(p.SamplingSettings(), "Answer briefly.", 60.0))
    engine.send(p.Cancel())
    # Before the fix the engine thread deadlocked here and never answered again.
    finished = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished), timeout=20, after=start)
    assert finished.cancelled
    engine.wait_state(p.EngineState.IDLE, timeout=20, after=start)
    engine.wait_for(lambda e: isinstance(e, p.ConversationCleared), timeout=20, after=start)

    # The window was told that the prompt waits for the answer, and when it was applied.
    kinds = [type(e) for e in engine.seen[start:]]
    deferred = kinds.index(p.ChangeDeferred)
    assert engine.seen[start + deferred] == p.ChangeDeferred("system_prompt")
    assert kinds.index(p.AssistantTurnFinished) < kinds.index(p.ConversationCleared)
    assert engine.of(p.ConversationCleared, start) == [p.ConversationCleared("system_prompt")]
    assert engine.worker.system_prompt == "Answer briefly." and engine.worker.session.system_prompt == "Answer briefly."
    assert engine.worker.records == []
    # The conversation goes on, in the new one.
    engine.send(p.ApplySettings(p.SamplingSettings(), "Answer briefly.", 1.0))
    do_turn(engine)
    assert [r.role for r in engine.worker.records] == ["user", "assistant"]
    assert engine.errors(start) == []


def do_turn(eng: Engine, hold_s: float = 0.3) -> int:
    start = len(eng.seen)
    eng.send(p.StartTake())
    eng.wait_state(p.EngineState.RECORDING, after=start)
    time.sleep(hold_s)
    eng.send(p.EndTake())
    eng.wait_for(lambda e: isinstance(e, p.TurnMetrics), after=start)
    eng.wait_state(p.EngineState.IDLE, after=start)
    return start


def ping(eng: Engine, seq: int) -> p.Pong:
    mark = len(eng.seen)
    eng.send(p.Ping(seq))
    return eng.wait_for(lambda e: isinstance(e, p.Pong) and e.seq == seq, timeout=10, after=mark)


def test_the_engine_answers_pings_while_it_answers(engine: Engine) -> None:
    start = start_long_answer(engine)
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    assert ping(engine, 1).state is p.EngineState.SPEAKING
    engine.send(p.Cancel())
    engine.wait_state(p.EngineState.IDLE, after=start)
    assert ping(engine, 2).state is p.EngineState.IDLE


def test_reset_during_an_answer_stops_it_first(engine: Engine) -> None:
    start = start_long_answer(engine)
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    engine.send(p.Reset())
    cleared = engine.wait_for(lambda e: isinstance(e, p.ConversationCleared), timeout=20, after=start)
    assert cleared.cause == "reset"
    kinds = [type(e) for e in engine.seen[start:]]
    assert kinds.index(p.AssistantTurnFinished) < kinds.index(p.ConversationCleared)
    assert engine.of(p.AssistantTurnFinished, start)[0].cancelled
    assert p.ChangeDeferred not in kinds  # stopped, not deferred
    engine.wait_state(p.EngineState.IDLE, after=start)
    assert engine.worker.records == [] and engine.errors(start) == []


def test_a_voice_and_a_model_change_during_an_answer_wait_for_it(engine: Engine, isolated_user_dirs) -> None:  # noqa: ANN001
    from app_helpers import make_voice_adapter
    from engine.chat.session import demo_model_folder

    voice = make_voice_adapter(demo_model_folder(), isolated_user_dirs / "voices" / "alice")
    engine.send(p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 3.0))
    start = len(engine.seen)
    engine.send(p.StartTake())
    time.sleep(0.3)
    engine.send(p.EndTake())
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    engine.send(p.SwitchVoice(str(voice)), p.Load(source="demo", demo=True, context_tokens=2048))
    info = engine.wait_for(lambda e: isinstance(e, p.EngineInfo) and e.context_tokens == 2048, timeout=60, after=start)
    assert info.voice_name is None  # the reload (without a voice) came after the switch
    seen = engine.seen[start:]
    deferred = [e.change for e in seen if isinstance(e, p.ChangeDeferred)]
    assert deferred == ["voice", "model"]
    finished = next(i for i, e in enumerate(seen) if isinstance(e, p.AssistantTurnFinished))
    voiced = next(i for i, e in enumerate(seen) if isinstance(e, p.EngineInfo) and e.voice_name == "alice")
    loading = next(i for i, e in enumerate(seen) if isinstance(e, p.StateChanged) and e.state is p.EngineState.LOADING)
    assert finished < voiced < loading, [type(e).__name__ + str(getattr(e, "state", "")) for e in seen]
    assert not engine.of(p.AssistantTurnFinished, start)[0].cancelled  # the answer was not cut short
    engine.wait_state(p.EngineState.IDLE, after=start + loading)
    assert engine.errors(start) == []


def test_a_barge_in_after_a_new_prompt_is_answered_in_the_new_conversation(engine: Engine) -> None:
    start = start_long_answer(engine)
    first = engine.wait_for(lambda e: isinstance(e, p.UserTakeAdded), after=start)
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    mark = len(engine.seen)
    engine.send(p.ApplySettings(p.SamplingSettings(), "Answer briefly.", 1.0), p.StartTake())
    engine.wait_state(p.EngineState.RECORDING, after=mark)
    time.sleep(0.3)
    engine.send(p.EndTake())
    second = engine.wait_for(lambda e: isinstance(e, p.UserTakeAdded) and e.turn_id != first.turn_id, after=start)
    kinds = [type(e) for e in engine.seen[start:]]
    assert kinds.index(p.ConversationCleared) < len(kinds) - 1
    cleared_at = kinds.index(p.ConversationCleared)
    take_at = next(i for i, e in enumerate(engine.seen[start:]) if e is second)
    assert cleared_at < take_at
    engine.wait_for(lambda e: isinstance(e, p.TurnMetrics) and e.turn_id == second.turn_id + 1, after=start)
    engine.wait_state(p.EngineState.IDLE, after=start + take_at)
    assert [r.turn_id for r in engine.worker.records] == [second.turn_id, second.turn_id + 1]
    assert engine.errors(start) == []


def test_finished_turns_reach_the_history_seam_once_with_their_metrics(audio_env) -> None:  # noqa: ANN001
    from engine_helpers import SPEAKER

    finished: list = []
    eng = Engine(on_record_finished=finished.append)
    try:
        eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 1.0),
                 p.Load(source="demo", demo=True))
        eng.wait_state(p.EngineState.IDLE, timeout=120)
        do_turn(eng)
        do_turn(eng)
    finally:
        eng.stop()
    assert [(r.role, r.turn_id) for r in finished] == [("user", 1), ("assistant", 2), ("user", 3), ("assistant", 4)]
    metrics = {m.turn_id: m for m in eng.of(p.TurnMetrics)}
    for record in finished:
        assert record.conversation == 1 and len(record.pcm) > 0
        if record.role == "assistant":
            assert record.metrics == metrics[record.turn_id] and record.text


def test_presses_cancelled_by_resets_do_not_leave_the_engine_recording(engine: Engine) -> None:
    """Found by the stateful test: presses cancelled by Reset, then a real take. The recorder merges
    presses within one block and refuses one while both its buffers are busy, so counting presses lost
    track of which take was which: the real take was thrown away and the engine stayed RECORDING."""
    start = len(engine.seen)
    engine.send(p.StartTake(), p.Reset(), p.StartTake(), p.ReplayTurn(1), p.Reset(), p.Reset(), p.StartTake())
    time.sleep(0.05)
    engine.send(p.StartTake())
    time.sleep(0.35)
    engine.send(p.EndTake())
    # Either the take is answered, or the engine says it was lost: it never stays RECORDING.
    outcome = engine.wait_for(lambda e: isinstance(e, p.TurnMetrics)
                              or isinstance(e, p.EngineError) and e.kind == "take" and "lost" in e.message,
                              timeout=30, after=start)
    at = next(i for i, e in enumerate(engine.seen) if e is outcome)
    if not any(isinstance(e, p.StateChanged) and e.state is p.EngineState.IDLE for e in engine.seen[at:]):
        engine.wait_state(p.EngineState.IDLE, after=at)
    if isinstance(outcome, p.TurnMetrics):
        assert engine.of(p.UserTakeAdded, start)
    assert [e.kind for e in engine.errors(start)] in (["take"], ["take", "take"])  # the replay refused while recording
    assert ping(engine, 7).state is p.EngineState.IDLE


def test_an_answer_heard_to_its_end_is_not_interrupted_while_the_device_drains(engine: Engine, monkeypatch) -> None:  # noqa: ANN001
    """A stop (a cancel, or hands-free speech) after the whole answer was generated and heard, while the device's
    last buffer still drains (a long output buffer; the room test met it as 「そうですね」 said at an answer's end),
    closes the answer as finished: not 中断 with all of its seconds, not cancelled."""
    from engine.worker.table import Phase

    worker = engine.worker
    monkeypatch.setattr(worker.audio, "playback_finished", lambda: False)  # the device has not said it drained
    start = start_long_answer(engine, answer_seconds=1.0)
    deadline = time.monotonic() + 60
    while not (worker.phase is Phase.PLAYING_OUT and worker.audio.queued_samples() == 0):
        assert time.monotonic() < deadline, f"the answer was not played out ({worker.phase})"
        time.sleep(0.01)
    mark = len(engine.seen)
    engine.send(p.Cancel())
    engine.wait_state(p.EngineState.IDLE, after=mark)
    assert engine.of(p.AnswerInterrupted, start) == []
    record = worker.records[-1]
    assert record.role == "assistant" and not record.cancelled and record.heard_samples is None  # all of it heard
    assert engine.errors(start) == []
