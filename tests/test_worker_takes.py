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
from engine_helpers import Engine, audio_env, engine  # noqa: F401 - fixtures

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
