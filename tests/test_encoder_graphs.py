"""The audio encoder's graph ladder (engine.realtime.encoder_graphs), on the CPU.

The captured graphs need CUDA (tests/test_gpu_engine.py checks them at full size). What holds on any
machine is tested here: liquid-audio's conformer encodes a take padded with zeros to the next rung to the
same valid frames (the premise of one graph per rung), and a conformer call routed through the ladder
inside liquid-audio's own `_prefill` gives the same embeddings as the plain call: the CPU stands in for
the graph by recomputing the captured call into the same static buffers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import sine
from engine.chat.conversation import Conversation
from engine.realtime.encoder_graphs import EncoderGraphs, _Rung, ladder


def test_ladder_steps_and_reach() -> None:
    assert ladder(150) == [101, 201]
    rungs = ladder(6001)  # a 60 s take
    assert rungs[:10] == [100 * i + 1 for i in range(1, 11)]
    assert rungs[10:15] == [1201, 1401, 1601, 1801, 2001]
    assert rungs[15:] == [2501, 3001, 3501, 4001, 4501, 5001, 5501, 6001]
    assert len(rungs) == 23 and ladder(6002)[-1] == 6501 and ladder(101) == [101]


def _mel(loaded, seconds: float, frequency: float) -> torch.Tensor:
    wave = torch.from_numpy(sine(seconds, 16000, frequency) + 0.01 * np.random.default_rng(0).standard_normal(int(seconds * 16000)).astype(np.float32))
    mel, _ = loaded.processor.audio(wave[None], torch.tensor([wave.shape[0]]))
    return mel[0].float()


@torch.no_grad()
@pytest.mark.parametrize("seconds", [0.73, 1.37, 3.05])
def test_a_take_padded_to_its_rung_encodes_to_the_same_frames(tiny_loaded, seconds: float) -> None:
    conformer = tiny_loaded.model.conformer
    mel = _mel(tiny_loaded, seconds, 330)
    frames = mel.shape[1]
    rung = next(r for r in ladder(10_000) if r >= frames)
    assert rung > frames  # the take is really padded
    expected, expected_length = conformer(mel[None], torch.tensor([frames]))
    padded = torch.zeros((1, mel.shape[0], rung))
    padded[0, :, :frames] = mel
    got, got_length = conformer(padded, torch.tensor([frames]))
    valid = int(expected_length[0])
    assert int(got_length[0]) == valid and got.shape[-1] > valid
    torch.testing.assert_close(got[..., :valid], expected, rtol=1e-5, atol=1e-5)


class _RecomputeInPlace:
    """Stands in for a captured graph on the CPU: reruns the call on the rung's static buffers."""

    def __init__(self, forward, rung: _Rung) -> None:
        self.forward, self.rung = forward, rung

    def replay(self) -> None:
        encoded, encoded_length = self.forward(self.rung.features, self.rung.length)
        self.rung.encoded.copy_(encoded)
        self.rung.encoded_length.copy_(encoded_length)


def _cpu_ladder(conformer, rungs: list[int]) -> EncoderGraphs:
    graphs = object.__new__(EncoderGraphs)  # the constructor captures CUDA graphs; build the rest by hand
    graphs.conformer, graphs.dtype, graphs.device, graphs.problems = conformer, torch.float32, torch.device("cpu"), []
    graphs._eager_forward = conformer.forward
    graphs.rungs = {}
    for frames in rungs:
        features = torch.full((1, conformer._feat_in, frames), float("nan"))  # stale data must be overwritten
        length = torch.tensor([frames])
        encoded, encoded_length = conformer(torch.zeros_like(features), length)
        rung = _Rung(None, features, length, torch.full_like(encoded, float("nan")), encoded_length.clone())
        rung.graph = _RecomputeInPlace(conformer.forward, rung)
        graphs.rungs[frames] = rung
    return graphs


@torch.no_grad()
def test_prefill_through_the_ladder_equals_the_plain_prefill(tiny_loaded) -> None:
    model = tiny_loaded.model
    graphs = _cpu_ladder(model.conformer, [100, 200, 400])
    for seconds, frequency in ((1.37, 300), (0.55, 500), (4.3, 700)):  # rungs 200 and 100; 4.3 s has none: eager
        conversation = Conversation(tiny_loaded.processor.text, codebooks=tiny_loaded.codebooks)
        conversation.add_text_turn("system", "Respond with interleaved text and audio.")
        conversation.add_audio_turn("user", _mel(tiny_loaded, seconds, frequency))
        conversation.open_assistant_turn()
        span = conversation.span(0, torch.device("cpu"))
        expected = model._prefill(**span.as_kwargs())
        with graphs.installed(model):
            assert "forward" in vars(model.conformer)
            got = model._prefill(**span.as_kwargs())
        assert "forward" not in vars(model.conformer)  # the module's own forward is back
        assert got.shape == expected.shape
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    used = {frames for frames, rung in graphs.rungs.items() if not torch.isnan(rung.encoded).any()}
    assert used == {100, 200}


def test_installed_restores_the_forward_after_an_error(tiny_loaded) -> None:
    graphs = _cpu_ladder(tiny_loaded.model.conformer, [100])
    with pytest.raises(ValueError), graphs.installed(tiny_loaded.model):
        raise ValueError("a failing prefill")
    assert "forward" not in vars(tiny_loaded.model.conformer)
