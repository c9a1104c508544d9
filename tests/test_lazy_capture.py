"""Graphs captured behind "ready" (engine/realtime/lazy_capture.py), on the CPU with the tiny model: the encoder's
rungs are made one at a time between turns, on the thread that runs them (per `capture_behind_ready` call, or per
idle tick of a real EngineWorker); a turn before a rung is in is answered by the eager encoder with the same rows;
a press that comes while a rung is made waits for that rung only; a capture that fails leaves its rung eager and
the others in use; a session closed with rungs pending never captures them. No thread is started for any of it.

On the CPU a rung's "capture" is its eager steps on its static buffers (what a replay repeats), with the same
warm-up and check as on CUDA (tests/test_gpu_engine.py runs the real captures between real turns).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import sine
from engine import protocol as p
from engine.chat.audio_decoding import make_audio_decoder
from engine.chat.session import ChatSession, TurnDone
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.realtime.encoder_graphs import EncoderGraphs, ladder
from engine.worker import EngineWorker
from engine.worker.table import Phase
from engine_helpers import DEFAULT_PROMPT, SPEAKER, Engine, audio_env  # noqa: F401 - fixture

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),  # as in tests/test_worker.py
]

SECONDS = 4.0  # the ladder up to a 4 s take: rungs of 2 and 4 s
RUNGS = ladder(401)


def _deferred_encoder(loaded, max_seconds: float = SECONDS) -> EncoderGraphs:  # noqa: ANN001
    return EncoderGraphs(loaded.model, loaded.processor.audio, max_seconds=max_seconds, dtype=loaded.dtype,
                         device=loaded.device, capture=False, defer=True)


def _session(model_dir: Path) -> ChatSession:
    from engine.model.loading import load_model

    loaded = load_model(model_dir, device="cpu")
    backend = GraphedBackend(loaded, context_tokens=256, capture=False)
    session = ChatSession(loaded, backend, make_audio_decoder(loaded, use_cuda_graphs=False), context_tokens=256,
                          fallback_reason="test", graphs_ready=False, model_id=None, encoder_graphs=_deferred_encoder(loaded))
    session.queue_lazy_capture()  # as ChatSession.open does once it is ready
    return session


def _turn(session: ChatSession, seconds: float):  # noqa: ANN202
    outputs = list(session.respond(sine(seconds, 16000, 330.0), SamplingSettings(greedy=True), max_new_tokens=20,
                                   max_take_seconds=SECONDS))
    assert isinstance(outputs[-1], TurnDone)
    return outputs[-1].stats


def _last_take(session: ChatSession):  # noqa: ANN202
    return list(session.conversation.audio_in_pieces())[-1]


def _rel(got: torch.Tensor, expected: torch.Tensor) -> float:
    return float((got.float() - expected.float()).norm() / expected.float().norm())


def _through_rungs(encoder: EncoderGraphs, monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per take encoded from its samples: whether a rung made its rows (False: the eager encoder did)."""
    used: list[bool] = []
    original = encoder.encode_wave

    def encode_wave(wave):  # noqa: ANN001, ANN202
        result = original(wave)
        used.append(result is not None)
        return result

    monkeypatch.setattr(encoder, "encode_wave", encode_wave)
    return used


def test_a_turn_before_any_rung_is_answered_eagerly_with_the_rows_the_rung_gives_later(tiny_model_dir: Path, monkeypatch) -> None:
    session = _session(tiny_model_dir)
    encoder = session.encoder_graphs
    used = _through_rungs(encoder, monkeypatch)
    assert encoder.rungs == {} and encoder.pending == sorted(RUNGS, reverse=True) and session.captures_pending
    before = _turn(session, 1.3)
    eager_take = _last_take(session)
    assert used == [False] and before.frames > 0 and before.first_pcm_s is not None
    threads = set(threading.enumerate())
    # One rung per call, longest first, on this thread.
    assert session.capture_behind_ready() is True
    assert sorted(encoder.rungs) == [401] and encoder.pending == [201]
    assert session.capture_behind_ready() is False
    assert sorted(encoder.rungs) == RUNGS and encoder.pending == [] and not session.captures_pending
    assert session.capture_behind_ready() is False  # nothing left: nothing runs
    assert set(threading.enumerate()) == threads
    capture = session.lazy_capture
    assert capture.done and capture.problems == [] and encoder.problems == []
    assert set(capture.seconds) == {f"encoder rung of {frames} mel frames" for frames in RUNGS}
    assert capture.finished_after_s is not None and capture.finished_after_s >= sum(capture.seconds.values())
    # The same take again, now through its rung: the rows the eager encoder gave (the padding is masked).
    session.reset()
    after = _turn(session, 1.3)
    rung_take = _last_take(session)
    assert used == [False, True] and after.frames == before.frames
    assert rung_take.mel.shape == eager_take.mel.shape and _rel(rung_take.mel, eager_take.mel) < 1e-4
    assert rung_take.embeddings.shape == eager_take.embeddings.shape
    assert _rel(rung_take.embeddings, eager_take.embeddings) < 2e-2
    session.close()


def test_a_voice_switched_between_two_rungs_leaves_both_checked_on_the_weights_of_their_moment(
        tiny_model_dir: Path, tmp_path: Path) -> None:
    """Each rung is warmed up, captured and checked in one go between turns, so a switch can only come between two
    rungs: both pass their checks and give the new voice's rows."""
    from engine.bench.small_cards import write_lora_voice

    session = _session(tiny_model_dir)
    conformer = {name: tuple(m.weight.shape) for name, m in session.loaded.model.named_modules()
                 if isinstance(m, torch.nn.Linear) and name.startswith("conformer.")}
    write_lora_voice(tmp_path / "voice", conformer, torch.Generator().manual_seed(3))
    assert session.capture_behind_ready() is True
    session.switch_voice(str(tmp_path / "voice"))
    session.wait_for_graphs()
    encoder = session.encoder_graphs
    assert sorted(encoder.rungs) == RUNGS and encoder.problems == [] and session.lazy_capture.problems == []
    assert session.voices.voice_name == "voice"
    _turn(session, 1.3)  # through the 201-frame rung, made after the switch
    _turn(session, 3.0)  # through the 401-frame rung, made before it
    with torch.inference_mode():
        eager = session.embed(session.conversation.span(0, session.loaded.device))[0]  # liquid-audio's own, new voice
        rows = session.embed_from(0)[0]  # the takes' rows as the rungs made them
    assert rows.shape == eager.shape and _rel(rows, eager) < 2e-2
    session.close()


@pytest.mark.parametrize("failure", ["raises", "wrong rows"])
def test_a_failed_capture_leaves_its_rung_eager_and_the_others_in_use(tiny_model_dir: Path, monkeypatch, failure: str) -> None:
    session = _session(tiny_model_dir)
    if failure == "raises":
        original = EncoderGraphs._capture_and_check

        def capture_and_check(graphs: EncoderGraphs, rung) -> object:  # noqa: ANN001
            if rung.frames == 201:
                raise RuntimeError("no graph today")
            return original(graphs, rung)

        monkeypatch.setattr(EncoderGraphs, "_capture_and_check", capture_and_check)
        expected = "RuntimeError: no graph today"
    else:  # the 201-frame rung's "replay" writes rows that are not the eager encoder's: its check refuses it
        run = EncoderGraphs._run

        def wrong(graphs: EncoderGraphs, rung, name: str) -> None:  # noqa: ANN001
            run(graphs, rung, name)
            if rung.frames == 201 and name == "encode":
                rung.rows.add_(1.0)

        monkeypatch.setattr(EncoderGraphs, "_run", wrong)
        expected = "rows off by"
    used = _through_rungs(session.encoder_graphs, monkeypatch)
    session.wait_for_graphs()
    encoder = session.encoder_graphs
    assert sorted(encoder.rungs) == [401] and encoder.pending == [] and not session.captures_pending
    (problem,) = session.lazy_capture.problems
    assert problem.startswith("encoder rung of 201 mel frames: ") and expected in problem
    (noted,) = encoder.problems
    assert noted.startswith("201 frames: ") and expected in noted
    stats = _turn(session, 1.3)  # a 1.3 s take: the 4 s rung holds it
    assert used == [True] and stats.frames > 0
    assert session.capture_behind_ready() is False  # a failed rung is not tried again
    session.close()


def test_a_session_closed_with_rungs_pending_never_captures_them(tiny_model_dir: Path, monkeypatch) -> None:
    session = _session(tiny_model_dir)
    made: list[int] = []
    original = EncoderGraphs.make_rung
    monkeypatch.setattr(EncoderGraphs, "make_rung", lambda graphs, frames: made.append(frames) or original(graphs, frames))
    threads = set(threading.enumerate())
    assert session.capture_behind_ready() is True and made == [401]
    capture = session.lazy_capture
    session.close()
    assert capture.done and not session.captures_pending and session.encoder_graphs is None
    assert session.capture_behind_ready() is False
    session.wait_for_graphs()  # nothing to wait for
    assert made == [401] and capture.finished_after_s is None
    assert set(threading.enumerate()) == threads


def test_rungs_come_one_per_idle_tick_of_the_engine_thread_and_presses_before_and_during_them_are_answered(
        audio_env, monkeypatch) -> None:  # noqa: ANN001
    """A real EngineWorker with the demo model (its session given the deferred rungs the GPU session has): the first
    press comes before any rung is in (its take is encoded eagerly); the second is sent while the first rung is being
    made, so it waits for that rung only, and the take goes through it; the rest come on later idle ticks, one each,
    always on the engine thread while it is idle and no turn holds the session."""
    made: list[tuple[int, str, object, bool]] = []
    per_tick: list[int] = []
    encoded: list[tuple[list[int], bool]] = []
    eng: Engine | None = None

    def opener(source, **kwargs):  # noqa: ANN001, ANN202
        session = ChatSession.open(source, **kwargs)  # the demo model on the CPU: no encoder graphs of its own
        session.encoder_graphs = _deferred_encoder(session.loaded, max_seconds=6.0)
        session.queue_lazy_capture()
        return session

    make_rung = EncoderGraphs.make_rung

    def watched_make_rung(graphs: EncoderGraphs, frames: int) -> object:
        worker = eng.worker
        made.append((frames, threading.current_thread().name, worker.phase, worker.turn is not None))
        if len(made) == 1:
            eng.send(p.StartTake())  # pressed while this rung is made
        return make_rung(graphs, frames)

    tick = EngineWorker._tick

    def counted_tick(worker: EngineWorker) -> None:
        before = len(made)
        tick(worker)
        per_tick.append(len(made) - before)

    encode_take = ChatSession.encode_take

    def watched_encode_take(session: ChatSession, wave):  # noqa: ANN001, ANN202
        mel, rows = encode_take(session, wave)
        encoded.append((sorted(session.encoder_graphs.rungs), rows is not None))
        return mel, rows

    monkeypatch.setattr(EncoderGraphs, "make_rung", watched_make_rung)
    monkeypatch.setattr(EngineWorker, "_tick", counted_tick)
    monkeypatch.setattr(ChatSession, "encode_take", watched_encode_take)

    def take(after: int) -> int:
        """A take whose press was sent after event `after`: held, released, answered; the index after its IDLE."""
        eng.wait_state(p.EngineState.RECORDING, timeout=120, after=after)
        start = len(eng.seen)
        time.sleep(0.4)
        eng.send(p.EndTake())
        eng.wait_for(lambda e: isinstance(e, p.TurnMetrics), after=start)
        idle = eng.wait_for(lambda e: isinstance(e, p.StateChanged) and e.state is p.EngineState.IDLE, after=start)
        return next(i for i in range(start, len(eng.seen)) if eng.seen[i] is idle) + 1

    eng = Engine(session_opener=opener)
    try:
        # The press is queued behind the Load: read right after it, before any idle tick could make a rung.
        eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(SamplingSettings(), DEFAULT_PROMPT, 1.0),
                 p.Load(source="demo", demo=True), p.StartTake())
        after_first = take(0)
        assert encoded == [([], False)]  # before any rung: the eager encoder
        take(after_first)  # the press sent from inside the first rung's making
        assert encoded[1] == ([601], True)  # waited for that rung only, and went through it
        session = eng.worker.session
        deadline = time.monotonic() + 60
        while session.captures_pending and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not session.captures_pending and sorted(session.encoder_graphs.rungs) == ladder(601), session.lazy_capture.problems
        before_third = len(eng.seen)
        eng.send(p.StartTake())
        take(before_third)
        assert encoded[2] == (ladder(601), True)
        assert [frames for frames, *_ in made] == sorted(ladder(601), reverse=True)
        assert all(name == "voicechat-engine" for _, name, _, _ in made)
        assert all(phase is Phase.IDLE for _, _, phase, _ in made)
        assert not any(turn for *_, turn in made)  # never while a turn is under way
        assert max(per_tick) == 1 and sum(per_tick) == len(made)  # one rung per tick at most, only in ticks
        assert session.lazy_capture.problems == [] and eng.errors() == []
        assert len(eng.of(p.UserTakeAdded)) == 3 and len(eng.of(p.TurnMetrics)) == 3
    finally:
        eng.stop()
    assert not np.any([t.name == "lazy-capture" for t in threading.enumerate()])
