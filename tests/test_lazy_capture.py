"""Graphs captured behind "ready" (engine/realtime/lazy_capture.py), on the CPU with the tiny model: the encoder's
rungs are made on a thread of their own while turns are answered; a turn never waits for a capture, however slow
(here: held until the test lets it go), and is answered by the eager encoder meanwhile; a voice switched under a
capture has it prepared again; a capture that fails leaves its rung eager and the others in use.

On the CPU a rung's "capture" is its eager steps on its static buffers (what a replay repeats), with the same
warm-up, check and publishing as on CUDA (tests/test_gpu_engine.py runs the real captures beside real turns).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import sine
from engine.chat.audio_decoding import make_audio_decoder
from engine.chat.session import ChatSession, TurnDone
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.realtime.encoder_graphs import EncoderGraphs, ladder

SECONDS = 4.0  # the ladder up to a 4 s take: rungs of 2 and 4 s


def _session(model_dir: Path) -> ChatSession:
    from engine.model.loading import load_model

    loaded = load_model(model_dir, device="cpu")
    backend = GraphedBackend(loaded, context_tokens=256, capture=False)
    encoder = EncoderGraphs(loaded.model, loaded.processor.audio, max_seconds=SECONDS, dtype=loaded.dtype, device=loaded.device,
                            capture=False, defer=True)
    return ChatSession(loaded, backend, make_audio_decoder(loaded, use_cuda_graphs=False), context_tokens=256,
                       fallback_reason="test", graphs_ready=False, model_id=None, encoder_graphs=encoder)


def _turn(session: ChatSession, seconds: float) -> tuple[list, object, float]:
    started = time.perf_counter()
    outputs = list(session.respond(sine(seconds, 16000, 330.0), SamplingSettings(greedy=True), max_new_tokens=20, max_take_seconds=SECONDS))
    assert isinstance(outputs[-1], TurnDone)
    return outputs, outputs[-1].stats, time.perf_counter() - started


class HeldCapture:
    """EncoderGraphs._prepare (the warm-up and the capture) held until released: a capture as slow as a test wants."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls: list[int] = []
        original = EncoderGraphs._prepare

        def held(graphs: EncoderGraphs, frames: int, stream) -> object:  # noqa: ANN001
            self.calls.append(frames)
            self.entered.set()
            assert self.release.wait(120), "never released"
            return original(graphs, frames, stream)

        monkeypatch.setattr(EncoderGraphs, "_prepare", held)


def _in_thread(work) -> tuple[threading.Thread, list]:  # noqa: ANN001
    result: list = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


def test_a_turn_is_answered_while_a_capture_is_held_and_the_rungs_come_after(tiny_model_dir: Path, monkeypatch) -> None:
    session = _session(tiny_model_dir)
    encoder = session.encoder_graphs
    assert encoder.rungs == {} and encoder.pending == sorted(ladder(401), reverse=True)
    _, baseline, baseline_s = _turn(session, 1.3)  # no capture running: the eager encoder
    held = HeldCapture(monkeypatch)
    session.start_lazy_capture()
    assert held.entered.wait(30)
    thread, result = _in_thread(lambda: _turn(session, 1.3))
    thread.join(timeout=max(60.0, 20 * baseline_s))
    # The turn was answered while the capture was still held: it never waited for it.
    assert not thread.is_alive() and result, "the turn waited for the capture"
    assert not held.release.is_set() and encoder.rungs == {}
    _, during, during_s = result[0]
    assert during.frames == baseline.frames > 0 and during.first_pcm_s is not None
    held.release.set()
    assert session.wait_for_graphs(120)
    assert sorted(encoder.rungs) == ladder(401) and encoder.pending == [] and encoder.problems == []
    assert session.lazy_capture.problems == [] and held.calls == sorted(ladder(401), reverse=True)
    # From now on a take is encoded through its rung (on the CUDA, a graph replay).
    used = []
    original = encoder.encode_wave
    monkeypatch.setattr(encoder, "encode_wave", lambda wave: used.append(original(wave)) or used[-1])
    _, after, _ = _turn(session, 1.3)
    assert used and used[0] is not None and after.frames == baseline.frames
    session.close()


def test_a_voice_switched_under_a_capture_has_it_prepared_again(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    """The check compares the new graphs with a warm-up run on the weights of that moment: a switch in between
    makes that reference stale, so the rung is prepared again (and its check passes on the new weights)."""
    from engine.bench.small_cards import write_lora_voice

    session = _session(tiny_model_dir)
    conformer = {name: tuple(m.weight.shape) for name, m in session.loaded.model.named_modules()
                 if isinstance(m, torch.nn.Linear) and name.startswith("conformer.")}
    write_lora_voice(tmp_path / "voice", conformer, torch.Generator().manual_seed(3))
    held = HeldCapture(monkeypatch)
    session.start_lazy_capture()
    assert held.entered.wait(30)
    session.switch_voice(str(tmp_path / "voice"))  # the device is free: the capture is outside its lock
    held.release.set()
    assert session.wait_for_graphs(120)
    longest = max(ladder(401))
    assert held.calls.count(longest) == 2 and sorted(session.encoder_graphs.rungs) == ladder(401)
    assert session.encoder_graphs.problems == [] and session.voices.voice_name == "voice"
    session.close()


def test_a_failed_capture_leaves_its_rung_eager_and_the_others_in_use(tiny_model_dir: Path, monkeypatch) -> None:
    session = _session(tiny_model_dir)
    original = EncoderGraphs._prepare

    def failing(graphs: EncoderGraphs, frames: int, stream) -> object:  # noqa: ANN001
        if frames == 201:
            raise RuntimeError("no graph today")
        return original(graphs, frames, stream)

    monkeypatch.setattr(EncoderGraphs, "_prepare", failing)
    session.start_lazy_capture()
    assert session.wait_for_graphs(120)
    assert sorted(session.encoder_graphs.rungs) == [401] and session.encoder_graphs.pending == []
    assert session.lazy_capture.problems == ["encoder rung of 201 mel frames: RuntimeError: no graph today"]
    assert session.encoder_graphs.problems == ["201 frames: RuntimeError: no graph today"]
    _, stats, _ = _turn(session, 1.3)  # a 1.3 s take fits the 4 s rung
    assert stats.frames > 0
    session.close()


def test_closing_a_session_stops_its_capture(tiny_model_dir: Path, monkeypatch) -> None:
    session = _session(tiny_model_dir)
    held = HeldCapture(monkeypatch)
    session.start_lazy_capture()
    assert held.entered.wait(30)
    closer, _ = _in_thread(session.close)
    time.sleep(0.05)
    held.release.set()  # the capture in progress ends; no other starts
    closer.join(timeout=60)
    assert not closer.is_alive() and session.lazy_capture.done.is_set()
    assert held.calls == [max(ladder(401))] and np.all([not t.name == "lazy-capture" for t in threading.enumerate()])
