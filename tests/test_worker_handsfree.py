"""Hands-free conversation through the engine protocol, with real PortAudio streams over ALSA (a simulated
room, tests/room.py, feeds the microphone with the echo of what the app plays, room noise and the user).

Generated rooms and voices (tests/voice_signals.py); the DSP itself is tested on minutes of generated rooms
in tests/test_voice.py. Nothing is timed by the wall clock: the tests wait for events and count them.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

import alsa_env
from engine import protocol as p
from engine_helpers import DEFAULT_PROMPT, SPEAKER, Engine
from room import Room
from voice_signals import speech

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice")]


@pytest.fixture
def room(isolated_user_dirs: Path, tmp_path: Path):  # noqa: ANN201
    env = alsa_env.install(tmp_path / "alsa")
    the_room = Room(env, delay_s=0.12, attenuation_db=12.0, noise_db=-60.0)
    the_room.start()
    yield the_room
    the_room.stop()
    env.uninstall()


@pytest.fixture
def engine(room: Room):  # noqa: ANN201
    eng = Engine()
    eng.send(p.SelectDevices(None, SPEAKER), p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 3.0),
             p.Load(source="demo", demo=True))
    eng.wait_state(p.EngineState.IDLE, timeout=120)
    eng.send(p.SetHandsFree(enabled=True))
    eng.wait_for(lambda e: isinstance(e, p.HandsFreeState) and e.listening, timeout=20)
    yield eng
    eng.stop()


def push_to_talk_turn(eng: Engine, hold_s: float = 0.4) -> int:
    mark = len(eng.seen)
    eng.send(p.StartTake())
    time.sleep(hold_s)
    eng.send(p.EndTake())
    eng.wait_for(lambda e: isinstance(e, p.AudioChunkQueued), timeout=60, after=mark)
    return mark


def test_the_assistants_echo_starts_no_take(engine: Engine, room: Room) -> None:
    """Answers played into the room come back to the microphone (delay, attenuation, noise): no take."""
    for _ in range(3):
        mark = push_to_talk_turn(engine)
        engine.wait_for(lambda e: isinstance(e, p.TurnMetrics), timeout=60, after=mark)
        engine.wait_state(p.EngineState.IDLE, timeout=60, after=mark)
        time.sleep(0.7)  # the echo's tail and an end-of-speech silence
    assert room.speaker_loud_frames > room.rate  # seconds of answers really went through the room
    takes = engine.of(p.UserTakeAdded)
    assert len(takes) == 3, f"the echo started {len(takes) - 3} take(s)"
    states = [e.state for e in engine.of(p.StateChanged)]
    assert states.count(p.EngineState.RECORDING) == 3


def test_speech_during_an_answer_stops_it_and_becomes_the_next_take(engine: Engine, room: Room) -> None:
    first = push_to_talk_turn(engine)
    engine.wait_for(lambda e: isinstance(e, p.TurnMetrics), timeout=60, after=first)
    engine.wait_state(p.EngineState.IDLE, timeout=60, after=first)  # AEC3 has heard one answer
    mark = push_to_talk_turn(engine)
    utterance = speech(1.2, f0=120.0, seed=7, level=0.3, rate=room.rate, pauses=False)
    room.say(utterance)
    # The answer stops (as with the button: the window is told how much of it was heard), the take of the whole
    # utterance follows and is answered.
    answer = engine.wait_for(lambda e: isinstance(e, p.AssistantTurnStarted), timeout=30, after=mark)
    stopped = engine.wait_for(lambda e: isinstance(e, p.AnswerInterrupted), timeout=30, after=mark)
    assert stopped.turn_id == answer.turn_id and 0.0 < stopped.heard_s < 3.0
    take = engine.wait_for(lambda e: isinstance(e, p.UserTakeAdded), timeout=30,
                           after=engine.seen.index(stopped))
    assert take.duration_s >= 1.2  # the utterance, its pre-roll and tail: no syllable lost
    metrics = engine.wait_for(lambda e: isinstance(e, p.TurnMetrics) and e.turn_id == take.turn_id + 1, timeout=60,
                              after=mark)
    # Latency from the end of speech, with the end-of-speech wait as its own figure (until the answer may be
    # heard: the default 0.3 s of silence; the answer was prepared meanwhile, from the take's handover on).
    assert metrics.end_of_speech_wait_ms is not None and 250 <= metrics.end_of_speech_wait_ms
    # Prepared during the wait (handed over after 0.2 s of silence), heard after it.
    assert metrics.audio_encoded_ms < metrics.end_of_speech_wait_ms
    assert metrics.first_audible_ms is not None and metrics.first_audible_ms >= metrics.end_of_speech_wait_ms


def test_muted_hears_nothing_and_mute_drops_the_take_in_progress(engine: Engine, room: Room) -> None:
    engine.send(p.SetHandsFree(enabled=True, muted=True))
    engine.wait_for(lambda e: isinstance(e, p.HandsFreeState) and e.muted, timeout=10)
    mark = len(engine.seen)
    room.say(speech(1.0, f0=120.0, seed=3, level=0.3, rate=room.rate, pauses=False))
    time.sleep(2.0)
    assert not engine.of(p.UserTakeAdded, mark)
    engine.send(p.SetHandsFree(enabled=True, muted=False))
    room.say(speech(3.0, f0=120.0, seed=4, level=0.3, rate=room.rate, pauses=False))
    engine.wait_state(p.EngineState.RECORDING, timeout=20, after=mark)
    engine.send(p.SetHandsFree(enabled=True, muted=True))
    engine.wait_state(p.EngineState.IDLE, timeout=20, after=mark)
    time.sleep(3.0)
    assert not engine.of(p.UserTakeAdded, mark)
