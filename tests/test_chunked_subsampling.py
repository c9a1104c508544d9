"""The conformer's subsampling a stretch of time at a time (engine/realtime/chunked_subsampling.py) against
liquid-audio's own forward, on generated take lengths, valid lengths and stretch sizes."""

from __future__ import annotations

import copy
from dataclasses import asdict

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from liquid_audio.model.conformer.encoder import ConformerEncoder, ConformerEncoderConfig
from liquid_audio.model.conformer.subsampling import MaskedConvSequential
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from engine.model.tiny_checkpoint import _ENCODER
from engine.realtime import chunked_subsampling
from engine.realtime.chunked_subsampling import ChunkedMaskedConvSequential, chunk_subsampling


@pytest.fixture(scope="module")
def conformer() -> ConformerEncoder:
    torch.manual_seed(3)
    model = ConformerEncoder(**asdict(ConformerEncoderConfig(**copy.deepcopy(_ENCODER)))).eval()
    with torch.no_grad():  # not liquid-audio's init (biases zero): every parameter counts, padding rows included
        for parameter in model.pre_encode.conv.parameters():
            parameter.normal_(0.0, 0.3)
    return model


class LargestTensor(TorchDispatchMode):
    """The largest tensor any operation made, in elements."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            if isinstance(tensor, torch.Tensor):
                self.largest = max(self.largest, tensor.numel())
        return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(frames=st.integers(1, 700), valid_share=st.floats(0.0, 1.0), rows_per_chunk=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_stretch_by_stretch_gives_liquid_audios_rows_and_lengths(
        conformer: ConformerEncoder, frames: int, valid_share: float, rows_per_chunk: int, seed: int) -> None:
    """Every output row (at take and stretch edges, past the valid length, where the valid length ends inside a
    stretch's halo) is liquid-audio's, and so is the valid length."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn((1, frames, conformer._feat_in), generator=generator) + 0.5
    lengths = torch.tensor([max(1, round(frames * valid_share))])
    layers = conformer.pre_encode.conv
    with torch.inference_mode(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(chunked_subsampling, "ROWS_PER_CHUNK", rows_per_chunk)
        expected, expected_lengths = MaskedConvSequential.forward(layers, x, lengths)
        got, got_lengths = ChunkedMaskedConvSequential.forward(layers, x, lengths)
    assert got.shape == expected.shape
    assert torch.equal(got_lengths, expected_lengths)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)


def test_a_long_take_never_holds_its_first_stage_whole(conformer: ConformerEncoder) -> None:
    """A 60 s take: liquid-audio's subsampling makes the first stage's (channels, 3001, 64) tensor; stretch by
    stretch, nothing larger than one stretch's first stage is made, and the conformer's output is the same."""
    frames = 6001
    x = torch.randn((1, conformer._feat_in, frames))
    lengths = torch.tensor([frames - 321])
    whole = copy.deepcopy(conformer)
    chunked = copy.deepcopy(conformer)
    chunk_subsampling(chunked)
    assert type(chunked.pre_encode.conv) is ChunkedMaskedConvSequential
    assert chunked.state_dict().keys() == whole.state_dict().keys()  # loaders and voices see the same names
    channels = _ENCODER["subsampling_conv_channels"]
    first_stage_rows, stretch_rows = 3001, 4 * chunked_subsampling.ROWS_PER_CHUNK + 3
    with torch.inference_mode():
        with LargestTensor() as seen_whole:
            whole.pre_encode(x.mT, lengths)
        with LargestTensor() as seen_chunked:
            chunked.pre_encode(x.mT, lengths)
        expected, expected_lengths = whole(x, lengths)
        got, got_lengths = chunked(x, lengths)
    assert seen_whole.largest == channels * first_stage_rows * 64
    assert seen_chunked.largest <= max(channels * stretch_rows * 64, frames * conformer._feat_in)
    assert torch.equal(got_lengths, expected_lengths)
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


class _PaddedInForward(torch.nn.Conv2d):
    """A convolution that pads time on one side in its own forward (as NeMo's CausalConv2D does)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(torch.nn.functional.pad(x, (0, 0, 2, 0)))


@pytest.mark.parametrize("odd_layer", ["pooling", "convolution padding in its forward"])
def test_layers_it_cannot_split_run_as_liquid_audio_runs_them(conformer: ConformerEncoder, odd_layer: str) -> None:
    """A layer that is neither a plain convolution nor element-wise: the whole take at once."""
    model = copy.deepcopy(conformer)
    if odd_layer == "pooling":
        model.pre_encode.conv[1] = torch.nn.MaxPool2d(kernel_size=(3, 1), stride=(1, 1), padding=(1, 0))
    else:
        plain = model.pre_encode.conv[2]
        odd = _PaddedInForward(plain.in_channels, plain.out_channels, plain.kernel_size, stride=plain.stride,
                               padding=(0, plain.padding[1]), groups=plain.groups)
        odd.load_state_dict(plain.state_dict())
        model.pre_encode.conv[2] = odd
    chunk_subsampling(model)
    x = torch.randn((1, 3000, conformer._feat_in))
    lengths = torch.tensor([2500])
    with torch.inference_mode():
        expected, _ = MaskedConvSequential.forward(model.pre_encode.conv, x, lengths)
        got, _ = model.pre_encode.conv(x, lengths)
    assert torch.equal(got, expected)
