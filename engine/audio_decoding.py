"""Audio codes → 24 kHz PCM, frame by frame, for whichever decoder the model folder ships.

The LFM2 detokenizer (audio_detokenizer/) is preferred; a folder with only the Mimi checkpoint
uses Mimi's own streaming decoder. Both stream with their state carried from frame to frame
(`engine.realtime.streaming_decoder`), so playback starts after the first frame.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import torch

from engine.loading import LoadedModel


class AudioDecoder(Protocol):
    def step(self, codes: torch.Tensor) -> np.ndarray: ...
    def flush(self) -> np.ndarray: ...
    def reset(self) -> None: ...


class _NumpyOutput:
    """Adapts a streaming decoder that returns device tensors to float32 numpy chunks."""

    def __init__(self, decoder: object) -> None:
        self._decoder = decoder

    def step(self, codes: torch.Tensor) -> np.ndarray:
        return _to_numpy(self._decoder.step(codes))  # type: ignore[attr-defined]

    def flush(self) -> np.ndarray:
        return _to_numpy(self._decoder.flush())  # type: ignore[attr-defined]

    def reset(self) -> None:
        self._decoder.reset()  # type: ignore[attr-defined]


def _to_numpy(pcm: torch.Tensor) -> np.ndarray:
    return pcm.detach().reshape(-1).to(device="cpu", dtype=torch.float32).numpy()


def make_audio_decoder(loaded: LoadedModel, *, use_cuda_graphs: bool) -> AudioDecoder:
    from engine.realtime.streaming_decoder import MimiStreamingDecoder, StreamingDetokenizer

    if loaded.uses_mimi:
        return _NumpyOutput(MimiStreamingDecoder(loaded.processor.mimi))
    decoder = StreamingDetokenizer(loaded.processor.audio_detokenizer)
    if use_cuda_graphs and loaded.device.type == "cuda":
        decoder.capture_graph()
    return _NumpyOutput(decoder)
