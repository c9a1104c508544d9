"""The engine thread on the real tiny demo model and real PortAudio streams (ALSA test devices).

Nothing is mocked: `Load(demo=True)` goes through ChatSession.open and liquid-audio's loading code,
takes come from a file-backed ALSA microphone fed with a tone, answers go to an ALSA speaker whose
output the test reads back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from app_helpers import make_voice_adapter
from engine import protocol as p
from engine_helpers import SPEAKER, Engine, audio_env, engine  # noqa: F401 - fixtures

pytestmark = [
    pytest.mark.timeout(240),
    # sounddevice sets ndarray.shape in every callback, which NumPy 2.5 deprecates: one warning per
    # audio block would flood the report (and slow the callbacks down under pytest's recorder).
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]


def wait_until(condition: Callable[[], bool], timeout: float = 20.0, what: Callable[[], object] = str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"condition not met in time ({what()})"
        time.sleep(0.02)


def do_turn(eng: Engine, hold_s: float = 0.5) -> tuple[int, p.TurnMetrics]:
    """Press, speak for `hold_s`, release; wait until the answer has been played. Returns the event index
    where the turn started and its metrics."""
    start = len(eng.seen)
    eng.send(p.StartTake())
    eng.wait_state(p.EngineState.RECORDING, after=start)
    time.sleep(hold_s)
    eng.send(p.EndTake())
    metrics = eng.wait_for(lambda e: isinstance(e, p.TurnMetrics), after=start)
    eng.wait_state(p.EngineState.IDLE, after=start)
    return start, metrics


def test_a_turn_goes_through_every_state_and_is_measured(engine: Engine, audio_env) -> None:  # noqa: ANN001
    _, _, tap = audio_env
    info = engine.of(p.EngineInfo)[0]
    assert info.model_name == "demo (random weights)" and info.device_name == "CPU"
    assert not info.graphs_ready and "CPU" in (info.fallback_reason or "")
    context_before = engine.of(p.ContextUsage)[-1].used_tokens

    start, metrics = do_turn(engine, hold_s=0.6)
    states = [e.state for e in engine.of(p.StateChanged, start)]
    assert states == [p.EngineState.RECORDING, p.EngineState.THINKING, p.EngineState.SPEAKING, p.EngineState.IDLE]

    take = engine.of(p.UserTakeAdded, start)[0]
    # 0.6 s held + up to 0.3 s pre-roll + 0.05 s tail, within the scheduling jitter of a shared CPU.
    assert 0.5 < take.duration_s < 1.5
    started = engine.of(p.AssistantTurnStarted, start)[0]
    assert started.turn_id == take.turn_id + 1 and started.greedy is False
    text = "".join(e.text for e in engine.of(p.TextDelta, start))
    finished = engine.of(p.AssistantTurnFinished, start)[0]
    # The random model still produces (random) text. Deltas hold back incomplete UTF-8 sequences,
    # the final text is the decoder's whole output (where random bytes may decode to U+FFFD).
    assert text and finished.text.replace("\ufffd", "") == text.replace("\ufffd", "")
    chunks = engine.of(p.AudioChunkQueued, start)
    assert chunks and chunks[-1].total_seconds == pytest.approx(finished.duration_s, abs=1e-6)
    assert all(c.sample_rate == 24_000 for c in chunks)

    # The waterfall is in order, from the release on, and the first sample became audible after the
    # first frame was generated.
    assert 0 < metrics.audio_encoded_ms <= metrics.prefill_done_ms
    assert metrics.first_audio_frame_ms is not None and metrics.prefill_done_ms <= metrics.first_audio_frame_ms
    assert metrics.first_audible_ms is not None and metrics.first_audible_ms >= metrics.first_audio_frame_ms
    assert metrics.rtf is not None and metrics.rtf > 0 and metrics.frames > 0 and not metrics.cancelled
    assert engine.of(p.LiveRtf, start)

    # Real audio reached the speaker (the tap reads it in real time, behind the FIFO's backlog), and
    # the context grew by the turn.
    wait_until(lambda: tap.loud_frames > 0.25 * finished.duration_s * tap.rate, what=lambda: tap.loud_frames)
    assert engine.of(p.ContextUsage, start)[-1].used_tokens > context_before
    assert engine.errors() == []


def test_input_level_is_measured_from_the_microphone(engine: Engine) -> None:
    levels = [e for e in engine.of(p.InputLevel)]
    deadline = time.monotonic() + 5
    while len(levels) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
        levels = engine.of(p.InputLevel)
    # The feeder plays a 0.3-amplitude sine: RMS 0.3/sqrt(2), peak 0.3.
    assert levels[-1].rms == pytest.approx(0.3 / np.sqrt(2), rel=0.05)
    assert levels[-1].peak == pytest.approx(0.3, rel=0.05) and not levels[-1].clipping


def test_barge_in_stops_the_answer_and_records_the_next_take(engine: Engine) -> None:
    engine.send(p.ApplySettings(p.SamplingSettings(), None, 60.0))  # a long answer to interrupt
    start = len(engine.seen)
    engine.send(p.StartTake())
    time.sleep(0.4)
    engine.send(p.EndTake())
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    engine.send(p.StartTake())  # barge-in while the answer is generated and played
    engine.wait_state(p.EngineState.RECORDING, after=start + 3)
    first = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished), after=start)
    assert first.cancelled and first.duration_s < 30  # stopped long before the 60 s limit
    metrics = engine.wait_for(lambda e: isinstance(e, p.TurnMetrics), after=start)
    assert metrics.cancelled
    time.sleep(0.3)
    engine.send(p.ApplySettings(p.SamplingSettings(), None, 1.0), p.EndTake())
    second = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished) and e.turn_id != first.turn_id,
                             after=start)
    assert not second.cancelled
    engine.wait_state(p.EngineState.IDLE, after=len(engine.seen) - 1)
    takes = engine.of(p.UserTakeAdded, start)
    assert len(takes) == 2  # the barge-in take was kept and answered
    assert engine.errors(start) == []


def test_cancel_stops_the_answer_and_returns_to_idle(engine: Engine) -> None:
    engine.send(p.ApplySettings(p.SamplingSettings(), None, 60.0))
    start = len(engine.seen)
    engine.send(p.StartTake())
    time.sleep(0.3)
    engine.send(p.EndTake())
    engine.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), after=start)
    engine.send(p.Cancel())  # the window's "stop answer" (Esc)
    finished = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnFinished), after=start)
    assert finished.cancelled and finished.duration_s < 30
    engine.wait_state(p.EngineState.IDLE, after=start)
    assert engine.of(p.TurnMetrics, start)[0].cancelled
    # The conversation goes on normally afterwards.
    engine.send(p.ApplySettings(p.SamplingSettings(), None, 1.0))
    do_turn(engine, 0.3)
    assert engine.errors(start) == []


def test_settings_reach_the_next_turn(engine: Engine) -> None:
    engine.send(p.ApplySettings(p.SamplingSettings(greedy=True), None, 1.0))
    start, _ = do_turn(engine, 0.3)
    assert engine.of(p.AssistantTurnStarted, start)[0].greedy is True
    engine.send(p.ApplySettings(p.SamplingSettings(greedy=False, audio_temperature=0.7), None, 1.0))
    start, _ = do_turn(engine, 0.3)
    assert engine.of(p.AssistantTurnStarted, start)[0].greedy is False


def test_voice_switch_is_in_place(engine: Engine, isolated_user_dirs: Path) -> None:
    from engine.chat.session import demo_model_folder

    voice = make_voice_adapter(demo_model_folder(), isolated_user_dirs / "voices" / "alice")
    session = engine.worker.session
    start = len(engine.seen)
    engine.send(p.SwitchVoice(str(voice)))
    info = engine.wait_for(lambda e: isinstance(e, p.EngineInfo), after=start)
    assert info.voice_name == "alice"
    assert engine.worker.session is session  # nothing was reloaded
    assert not engine.of(p.StateChanged, start)  # no LOADING in between
    do_turn(engine, 0.3)

    # A broken voice is refused with a clear error; the previous voice stays.
    start = len(engine.seen)
    broken = isolated_user_dirs / "voices" / "broken"
    broken.mkdir()
    engine.send(p.SwitchVoice(str(broken)))
    error = engine.wait_for(lambda e: isinstance(e, p.EngineError), after=start)
    assert error.kind == "lora" and "adapter_config.json" in error.message
    assert engine.worker.session.info.voice_name == "alice"


def test_replay_and_export_keep_both_sides(engine: Engine, audio_env, tmp_path: Path) -> None:  # noqa: ANN001
    _, _, tap = audio_env
    do_turn(engine, 0.4)
    do_turn(engine, 0.3)
    takes = engine.of(p.UserTakeAdded)
    answers = engine.of(p.AssistantTurnFinished)

    answers_heard = sum(a.duration_s for a in answers)
    # Random-weight answers are noise with quiet stretches: a quarter above -40 dBFS is plenty.
    wait_until(lambda: tap.loud_frames >= 0.25 * answers_heard * tap.rate, what=lambda: tap.loud_frames)
    before = tap.loud_frames
    start = len(engine.seen)
    engine.send(p.ReplayTurn(takes[0].turn_id))
    engine.wait_state(p.EngineState.SPEAKING, after=start)
    engine.wait_state(p.EngineState.IDLE, after=start)
    # The whole take (a tone, loud throughout) was played again.
    wait_until(lambda: tap.loud_frames - before >= 0.9 * takes[0].duration_s * tap.rate,
               what=lambda: (tap.loud_frames - before, takes[0].duration_s * tap.rate))

    start = len(engine.seen)
    engine.send(p.Export(str(tmp_path / "out" / "talk.wav")))
    exported = engine.wait_for(lambda e: isinstance(e, p.Exported), after=start)
    wav, txt, js = (Path(x) for x in exported.paths)
    assert (wav.name, txt.name, js.name) == ("talk.wav", "talk.txt", "talk.json")
    audio, rate = sf.read(wav)
    assert rate == 24_000
    items = [takes[0].duration_s, answers[0].duration_s, takes[1].duration_s, answers[1].duration_s]
    assert len(audio) / rate == pytest.approx(sum(items) + 3 * 0.4, abs=0.01)
    doc = json.loads(js.read_text(encoding="utf-8"))
    assert [t["role"] for t in doc["turns"]] == ["user", "assistant", "user", "assistant"]
    assert doc["turns"][1]["text"] == answers[0].text
    assert doc["turns"][1]["metrics"]["first_audible_ms"] is not None
    assert doc["turns"][2]["start_s"] == pytest.approx(items[0] + items[1] + 0.8, abs=0.01)
    lines = txt.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and lines[0].startswith("[00:00.00] User:") and answers[1].text in lines[3]

    engine.send(p.Reset())
    usage = engine.wait_for(lambda e: isinstance(e, p.ContextUsage), after=len(engine.seen))
    assert usage.used_tokens < engine.of(p.ContextUsage, start)[0].used_tokens or usage.used_tokens < 60


def test_errors_become_events_and_the_engine_keeps_running(audio_env, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    eng = Engine()
    try:
        eng.send(p.StartTake())
        assert eng.wait_for(lambda e: isinstance(e, p.EngineError)).kind == "take"  # no model yet

        start = len(eng.seen)
        eng.send(p.Load(source=str(isolated_user_dirs / "no-such-model")))
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start)
        assert error.kind == "model" and "no-such-model" in error.message
        assert eng.of(p.StateChanged, start)[-1].state is p.EngineState.NO_MODEL

        # HF_HUB_OFFLINE is set by isolated_user_dirs: a Hub model that is not downloaded is "missing"
        # at start-up, and a download asked for explicitly fails with a clear message.
        start = len(eng.seen)
        eng.send(p.Load(source="LiquidAI/LFM2.5-Audio-1.5B-JP", allow_download=False))
        assert eng.wait_for(lambda e: isinstance(e, p.ModelMissing), after=start).source == "LiquidAI/LFM2.5-Audio-1.5B-JP"
        start = len(eng.seen)
        eng.send(p.Load(source="LiquidAI/LFM2.5-Audio-1.5B-JP", allow_download=True))
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start)
        assert error.kind == "model" and "network" in error.message

        start = len(eng.seen)
        eng.send(p.SelectDevices("No Such Microphone", None))
        error = eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start)
        assert error.kind == "audio_device" and "No Such Microphone" in error.message

        start = len(eng.seen)
        eng.send(p.Export(str(isolated_user_dirs / "empty.wav")))
        assert eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start).kind == "export"

        eng.send(p.ListDevices())
        devices = eng.wait_for(lambda e: isinstance(e, p.Devices))
        assert SPEAKER in devices.outputs and "vc_test_mic" in devices.inputs
        assert eng.worker.is_alive()
    finally:
        eng.stop()
    assert isinstance(eng.seen[-1] if eng.seen else None, p.EngineStopped) or eng.of(p.EngineStopped)


class _Fatal(BaseException):
    """Something no handler catches (like a KeyboardInterrupt in the engine thread)."""


def test_a_dying_thread_still_says_why(audio_env) -> None:  # noqa: ANN001
    def opener(*args: object, **kwargs: object) -> object:
        raise _Fatal("native crash stand-in")

    eng = Engine(session_opener=opener)
    eng.send(p.Load(source="demo", demo=True))
    stopped = eng.wait_for(lambda e: isinstance(e, p.EngineStopped))
    assert "native crash stand-in" in (stopped.error or "")
    eng.worker.join(5)
    assert not eng.worker.is_alive()
