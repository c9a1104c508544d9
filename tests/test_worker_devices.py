"""A microphone plugged in while the app runs is found and used.

PortAudio lists devices only when it is initialised, so the engine re-scans (re-initialises it) when the
settings dialog asks for the list with `ListDevices(rescan=True)` and when push-to-talk finds no open
microphone (none at the start, the chosen one gone, or its stream died), and only while it rests.

Nothing is faked: the real worker, the demo model, real PortAudio over ALSA (tests/alsa_env.py). The ALSA
configuration starts without any capture device and is then replaced by one with a microphone, which is
what PortAudio sees of a microphone being plugged in; alsa-lib reloads it when PortAudio re-initialises.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import alsa_env
from app_helpers import MicFeeder, SpeakerTap
from engine import protocol as p
from engine_helpers import DEFAULT_PROMPT, SPEAKER, Engine

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice"),
]

NO_MICROPHONE = "No microphone was found. Connect one and try again."
MIC = "vc_test_mic"


@pytest.fixture
def no_microphone(isolated_user_dirs: Path, tmp_path: Path) -> Iterator[tuple[alsa_env.AlsaTestEnv, list[MicFeeder]]]:
    """ALSA with the test speaker and no capture device; feeders the test starts are stopped after it."""
    env = alsa_env.install(tmp_path / "alsa", microphone=False)
    tap = SpeakerTap(env)
    tap.start()
    feeders: list[MicFeeder] = []
    yield env, feeders
    for feeder in feeders:
        feeder.stop()
    tap.stop()
    env.uninstall()


def _engine_on_the_demo_model() -> Engine:
    eng = Engine()
    eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 1.5),
             p.Load(source="demo", demo=True))
    eng.wait_state(p.EngineState.IDLE, timeout=120)
    return eng


def _feed(env: alsa_env.AlsaTestEnv, feeders: list[MicFeeder]) -> MicFeeder:
    """A 440 Hz tone into the test microphone, in real time (it needs the device listed, for its rate)."""
    feeder = MicFeeder(env, frequency=440.0, amplitude=0.3)
    feeder.start()
    feeders.append(feeder)
    return feeder


def _take_of_a_turn(eng: Engine, start: int, feeder: MicFeeder) -> np.ndarray:
    """Hold push-to-talk while the microphone delivers 0.5 s, release, wait for the answer; the take's PCM."""
    fed = feeder.frames_fed
    deadline = time.monotonic() + 30
    while feeder.frames_fed - fed < feeder.rate // 2:  # counted in the microphone's frames, not in wall time
        assert time.monotonic() < deadline, "the microphone feed stalled"
        time.sleep(0.01)
    eng.send(p.EndTake())
    take = eng.wait_for(lambda e: isinstance(e, p.UserTakeAdded), after=start)
    eng.wait_state(p.EngineState.IDLE, after=start)
    record = next(r for r in eng.worker.records if r.role == "user" and r.turn_id == take.turn_id)
    assert record.sample_rate == 16_000
    return record.pcm


def _assert_is_the_tone(pcm: np.ndarray) -> None:
    assert len(pcm) > 0.3 * 16_000
    middle = pcm[len(pcm) // 4: -len(pcm) // 4]
    rms = float(np.sqrt(np.mean(middle.astype(np.float64) ** 2)))
    assert rms == pytest.approx(0.3 / np.sqrt(2), rel=0.1)
    spectrum = np.abs(np.fft.rfft(middle * np.hanning(len(middle))))
    assert float(np.argmax(spectrum)) * 16_000 / len(middle) == pytest.approx(440.0, abs=10.0)


def test_push_to_talk_finds_a_microphone_plugged_in_after_the_start(no_microphone) -> None:  # noqa: ANN001
    env, feeders = no_microphone
    eng = _engine_on_the_demo_model()
    try:
        # None at the start: said once, and the list has no input.
        assert [e.template for e in eng.errors()] == [NO_MICROPHONE]
        start = len(eng.seen)
        eng.send(p.ListDevices())
        devices = eng.wait_for(lambda e: isinstance(e, p.Devices), after=start)
        assert devices.inputs == () and SPEAKER in devices.outputs

        # A press looks again, still finds none, and says so (once: the list's look does not say it again);
        # nothing is recorded.
        start = len(eng.seen)
        eng.send(p.StartTake())
        assert eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start).template == NO_MICROPHONE
        assert [d.inputs for d in eng.of(p.Devices, start)] == [()]
        eng.send(p.Ping(1))
        eng.wait_for(lambda e: isinstance(e, p.Pong), after=start)
        assert len(eng.errors(start)) == 1 and not eng.of(p.StateChanged, start)

        # Plugged in: the next press finds it, says so in the device list (the window's "no microphone"
        # clears on it) and records from it.
        env.plug_in_microphone()
        start = len(eng.seen)
        eng.send(p.StartTake())
        eng.wait_state(p.EngineState.RECORDING, after=start)
        listed = eng.of(p.Devices, start)
        assert len(listed) == 1 and MIC in listed[0].inputs and listed[0].selected_input is None
        _assert_is_the_tone(_take_of_a_turn(eng, start, _feed(env, feeders)))
        assert eng.errors(start) == []
        assert eng.of(p.AssistantTurnFinished, start)
    finally:
        eng.stop()


def test_the_settings_dialogs_list_looks_again_and_the_engine_uses_what_it_finds(no_microphone) -> None:  # noqa: ANN001
    env, feeders = no_microphone
    eng = _engine_on_the_demo_model()
    try:
        env.plug_in_microphone()
        # A plain list (the window's at start) does not re-scan: PortAudio has not seen the microphone yet.
        start = len(eng.seen)
        eng.send(p.ListDevices())
        assert eng.wait_for(lambda e: isinstance(e, p.Devices), after=start).inputs == ()

        # The settings dialog's does: the microphone is listed and opened at once.
        start = len(eng.seen)
        eng.send(p.ListDevices(rescan=True))
        assert MIC in eng.wait_for(lambda e: isinstance(e, p.Devices), after=start).inputs
        feeder = _feed(env, feeders)
        eng.send(p.Ping(2))
        eng.wait_for(lambda e: isinstance(e, p.Pong), after=start)
        assert eng.errors(start) == [] and eng.worker.takes.is_open()

        # The press needs no second look (the microphone is open, with its pre-roll): no new list.
        start = len(eng.seen)
        eng.send(p.StartTake())
        eng.wait_state(p.EngineState.RECORDING, after=start)
        _assert_is_the_tone(_take_of_a_turn(eng, start, feeder))
        assert eng.of(p.Devices, start) == [] and eng.errors(start) == []

        # Unplugged again: the dialog's list says so, and opening the default microphone says why.
        env.unplug_microphone()
        start = len(eng.seen)
        eng.send(p.ListDevices(rescan=True))
        assert eng.wait_for(lambda e: isinstance(e, p.Devices), after=start).inputs == ()
        assert eng.wait_for(lambda e: isinstance(e, p.EngineError), after=start).template == NO_MICROPHONE
        assert not eng.worker.takes.is_open()
    finally:
        eng.stop()


def test_a_microphone_that_goes_away_is_noticed_at_once_and_one_plugged_in_is_used(no_microphone) -> None:  # noqa: ANN001
    from engine.audio.devices import rescan_devices

    env, feeders = no_microphone
    env.plug_in_microphone()
    rescan_devices()  # (nothing is open yet) the engine starts with a microphone
    feeder = _feed(env, feeders)
    eng = _engine_on_the_demo_model()
    try:
        assert eng.errors() == [] and eng.worker.takes.is_open()

        # Unplugged: PortAudio stops the recorder's stream under it (aborted here, as the device going away
        # does), and the configuration no longer has a capture device. With no command, the engine notices,
        # looks again and posts the list without a microphone (the window's "no microphone" state).
        env.unplug_microphone()
        start = len(eng.seen)
        eng.worker.takes.recorder._stream.abort()
        devices = eng.wait_for(lambda e: isinstance(e, p.Devices), after=start)
        assert devices.inputs == () and SPEAKER in devices.outputs
        eng.send(p.Ping(3))
        eng.wait_for(lambda e: isinstance(e, p.Pong), after=start)
        assert not eng.worker.takes.is_open() and not eng.worker.takes.died()  # looked once, not again and again
        assert len(eng.of(p.Devices, start)) == 1
        # The speaker was reopened (its device is still there); of the microphone, at most its own death was said.
        assert eng.worker.player is not None and eng.worker.player.is_open
        assert all(e.template != NO_MICROPHONE for e in eng.errors(start))

        # Plugged in again: the next press finds it and records from it.
        env.plug_in_microphone()
        start = len(eng.seen)
        eng.send(p.StartTake())
        eng.wait_state(p.EngineState.RECORDING, after=start)
        assert MIC in eng.of(p.Devices, start)[0].inputs
        _assert_is_the_tone(_take_of_a_turn(eng, start, feeder))
    finally:
        eng.stop()
