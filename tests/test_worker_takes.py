"""Takes through the engine protocol with real PortAudio (ALSA test devices): presses at millisecond spacing.

The recorder merges presses that land in one audio block and refuses one while both of its take buffers are
busy; the engine must still tell which take a delivered one is, so that a normal hold after any burst of
presses produces its take (issue 26: a take declared lost after 30 quick presses).
"""

from __future__ import annotations

import random
import time

import pytest

from engine import protocol as p
from engine.worker.takes import TAKE_LOST
from engine_helpers import SPEAKER, Engine, audio_env, engine  # noqa: F401 - fixtures

pytestmark = [pytest.mark.timeout(240), pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice")]


def burst(eng: Engine, rng: random.Random, pairs: int) -> None:
    """`pairs` press/release pairs, holds of 0-8 ms and gaps of 0-30 ms (as a bouncing key or fast clicks)."""
    for _ in range(pairs):
        eng.send(p.StartTake())
        time.sleep(rng.uniform(0.0, 0.008))
        eng.send(p.EndTake())
        time.sleep(rng.uniform(0.0, 0.03))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_normal_hold_after_a_burst_of_presses_produces_its_take(engine: Engine, seed: int) -> None:
    rng = random.Random(seed)
    burst(engine, rng, 30)
    mark = len(engine.seen)
    engine.send(p.StartTake())
    time.sleep(0.5)
    engine.send(p.EndTake())
    # The take of that hold arrives (a tail later) and is answered; it is not declared lost 5 s later.
    added = engine.wait_for(lambda e: isinstance(e, (p.UserTakeAdded, p.EngineError)) and
                            (isinstance(e, p.UserTakeAdded) or e.message == TAKE_LOST), timeout=30, after=mark)
    assert isinstance(added, p.UserTakeAdded), "the hold after the burst was declared lost"
    assert added.duration_s >= 0.45
    engine.wait_state(p.EngineState.IDLE, after=mark)
    assert not [e for e in engine.errors(mark) if e.message == TAKE_LOST]


def test_a_release_never_overtakes_its_deferred_press(engine: Engine, tmp_path) -> None:  # noqa: ANN001
    """Pressed during an answer behind a replay and an export asked for just before, released during that replay:
    the press waits behind them (the table), and so must its release. The release used to run at once, as a
    release does while a replay plays, before its press: the press then opened a take that no release ended,
    RECORDING until the 60 s limit (found by tests/test_worker_stateful.py). The replay is held playing until
    the release is in (the test streams are not paced: it would end at once)."""
    import threading

    mark = len(engine.seen)
    engine.send(p.ApplySettings(p.SamplingSettings(), "Respond with interleaved text and audio.", 20.0), p.StartTake())
    time.sleep(0.5)
    engine.send(p.EndTake())
    first = engine.wait_for(lambda e: isinstance(e, p.UserTakeAdded), after=mark, timeout=30)
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=mark, timeout=30)
    audio = engine.worker.audio
    played_out, real_finished = threading.Event(), audio.playback_finished
    audio.playback_finished = lambda: played_out.is_set() and real_finished()
    answering = len(engine.seen)
    # During the answer: all three wait for it (the press stops it).
    engine.send(p.ReplayTurn(first.turn_id), p.Export(str(tmp_path / "talk.wav")), p.StartTake())
    stopped = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished), after=answering, timeout=30)
    engine.wait_state(p.EngineState.SPEAKING, after=engine.seen.index(stopped))  # the replay plays (held)
    engine.send(p.EndTake(), p.Ping(5))
    engine.wait_for(lambda e: isinstance(e, p.Pong) and e.seq == 5, after=answering, timeout=10)
    released = len(engine.seen)
    played_out.set()
    # The replay ends, the export runs, then the press and its release, in that order: RECORDING, then rest again
    # (a take too short to answer, or one answered) instead of recording on to the take limit.
    recording = engine.wait_for(lambda e: isinstance(e, p.StateChanged) and e.state is p.EngineState.RECORDING,
                                after=released, timeout=30)
    at = next(i for i in range(released, len(engine.seen)) if engine.seen[i] is recording)  # (events compare by value)
    rest = engine.wait_for(lambda e: isinstance(e, p.StateChanged) and e.state is not p.EngineState.RECORDING,
                           after=at + 1, timeout=15)
    assert rest.state in (p.EngineState.IDLE, p.EngineState.THINKING)
    assert engine.of(p.Exported, answering)


def test_a_hold_made_while_an_export_runs_is_a_take_of_its_length(engine: Engine, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A press and its release made while an export is being written wait for it (the table), then reach the
    recorder within a millisecond of each other. They carry when the user made them, so the take is the 0.5 s
    hold with its pre-roll and tail. It used to be refused as too short: press and release on one audio block
    (found by tests/test_worker_stateful.py, behind an answer's queued export and model load). The export is
    held open until the release is in."""
    hold_while_an_export_runs(engine, tmp_path, monkeypatch, busy_after_release_s=0.0)


def test_a_hold_acted_on_later_than_the_recorders_memory_keeps_its_length(audio_env, tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """The same, with the engine busy for longer after the release than the recorder reaches back (1 s here; in
    the app BACKDATE_LIMIT_S, a long take's prefill on a slow machine): the press is placed at the limit and
    its release as much later, so the take is still the length held. Both used to be cut to the limit, one
    frame: the hold was refused as a zero-length take, the user's press lost (CI's red run of stop 40, the
    stateful test's burst of presses behind an answer's slow start)."""
    eng = Engine(recorder_options={"tail_s": 0.05, "backdate_limit_s": 1.0})
    try:
        eng.send(p.SelectDevices(None, SPEAKER), p.Load(source="demo", demo=True))
        eng.wait_state(p.EngineState.IDLE, timeout=120)
        hold_while_an_export_runs(eng, tmp_path, monkeypatch, busy_after_release_s=1.5)
    finally:
        eng.stop()


def hold_while_an_export_runs(engine: Engine, tmp_path, monkeypatch, *, busy_after_release_s: float) -> None:  # noqa: ANN001
    """A 0.5 s hold made while an export is written, which ends `busy_after_release_s` after the release: the
    hold becomes a take of its length (pre-roll and tail included)."""
    import threading

    from engine.worker import thread as worker_thread

    writing, finish = threading.Event(), threading.Event()
    real_export = worker_thread.export_conversation

    def slow_export(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        writing.set()
        assert finish.wait(30)
        return real_export(*args, **kwargs)

    monkeypatch.setattr(worker_thread, "export_conversation", slow_export)
    mark = len(engine.seen)
    engine.send(p.Export(str(tmp_path / "talk.wav")))
    assert writing.wait(30)
    press = p.StartTake()
    engine.send(press)
    time.sleep(0.5)
    release = p.EndTake()
    engine.send(release, p.Ping(7))
    engine.wait_for(lambda e: isinstance(e, p.Pong) and e.seq == 7, after=mark, timeout=10)
    assert not engine.of(p.StateChanged, mark), "the press ran during the export"
    time.sleep(busy_after_release_s)
    finish.set()
    answer = engine.wait_for(lambda e: isinstance(e, (p.UserTakeAdded, p.TakeRejected)), after=mark, timeout=30)
    assert isinstance(answer, p.UserTakeAdded), f"the hold was refused: {answer}"
    # The 0.3 s pre-roll + the hold + the tests' 0.05 s tail (engine_helpers), to within a few blocks.
    assert answer.duration_s == pytest.approx(0.3 + (release.at - press.at) + 0.05, abs=0.04)
    assert [e.kind for e in engine.errors(mark)] == ["export"]  # (nothing to export yet: said once it ran)
