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


def start_long_answer(eng: Engine) -> int:
    """A take, answered with up to 60 s (so the answer is still running when the test acts)."""
    eng.send(p.ApplySettings(p.SamplingSettings(), DEFAULT_PROMPT, 60.0))
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
