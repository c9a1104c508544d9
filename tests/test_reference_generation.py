"""The eager reference equals liquid-audio's own `generate_interleaved`, token for token, over turns.

liquid-audio re-prefills the whole history every turn; the reference keeps transformers' cache
across turns and prefills only the new positions. In float32 on the CPU both must pick the same
greedy tokens (the tiny checkpoint spreads its logits so there are no near-ties).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.chat.conversation import AudioOutPiece, Conversation, TextPiece
from engine.chat.generation import EagerBackend, GeneratedFrame, GeneratedText, Schedule, TurnEnd, interleaved_decode
from engine.model.loading import load_model
from engine.protocol import SamplingSettings
from engine.model.tiny_checkpoint import write_tiny_checkpoint

SYSTEM = "Respond with interleaved text and audio."


def takes() -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [0.1 * torch.randn(1, 32000, generator=generator), 0.1 * torch.randn(1, 20000, generator=generator)]


def liquid_turns(loaded, waves: list[torch.Tensor], max_new_tokens: int) -> list[list[list[int]]]:
    from liquid_audio import ChatState, LFMModality

    chat = ChatState(loaded.processor, dtype=torch.float32)
    chat.new_turn("system")
    chat.add_text(SYSTEM)
    chat.end_turn()
    turns = []
    for wave in waves:
        chat.new_turn("user")
        chat.add_audio(wave, 16000)
        chat.end_turn()
        chat.new_turn("assistant")
        out = list(loaded.model.generate_interleaved(**chat, max_new_tokens=max_new_tokens))
        turns.append([o.tolist() for o in out])
        texts = [o for o in out if o.numel() == 1]
        frames = [o for o in out if o.numel() > 1]
        chat.append(
            text=torch.cat(texts)[None] if texts else torch.empty((1, 0), dtype=torch.long),
            audio_out=torch.stack(frames, 1) if frames else torch.empty((8, 0), dtype=torch.long),
            modality_flag=torch.tensor([LFMModality.TEXT if o.numel() == 1 else LFMModality.AUDIO_OUT for o in out]),
        )
        chat.end_turn()
    return turns


def reference_turns(loaded, waves: list[torch.Tensor], max_new_tokens: int) -> tuple[list[list[list[int]]], EagerBackend, Conversation]:
    processor, model = loaded.processor, loaded.model
    conversation = Conversation(processor.text)
    conversation.add_text_turn("system", SYSTEM)
    backend = EagerBackend(model)
    schedule = Schedule(loaded.interleaved_n_text, loaded.interleaved_n_audio)
    turns = []
    for wave in waves:
        mel, _ = processor.audio(wave, torch.tensor([wave.shape[1]]))
        conversation.add_audio_turn("user", mel[0])
        turn = conversation.open_assistant_turn()
        prefilled_before = backend.positions
        span = conversation.span(backend.positions, loaded.device)
        with torch.no_grad():
            backend.prefill(model._prefill(**span.as_kwargs()))
        assert backend.positions - prefilled_before == span.positions  # only the new positions
        got = []
        for event in interleaved_decode(backend, schedule, SamplingSettings(greedy=True), max_new_tokens=max_new_tokens):
            if isinstance(event, GeneratedText):
                got.append([event.token])
                turn.pieces.append(TextPiece([event.token]))
            elif isinstance(event, GeneratedFrame):
                got.append(list(event.values))
                turn.pieces.append(AudioOutPiece(event.codes))
            else:
                assert isinstance(event, TurnEnd)
        conversation.close_assistant_turn()
        turns.append(got)
    return turns, backend, conversation


@pytest.mark.parametrize("schedule", [(6, 9), (2, 3)])
def test_greedy_tokens_equal_liquid_audio_over_two_turns(tmp_path: Path, tiny_loaded, schedule: tuple[int, int]) -> None:
    if schedule == (6, 9):
        loaded = tiny_loaded
    else:
        loaded = load_model(write_tiny_checkpoint(tmp_path / "m", interleaved_n_text=2, interleaved_n_audio=3), device="cpu")
    waves = takes()
    expected = liquid_turns(loaded, waves, max_new_tokens=40)
    got, backend, conversation = reference_turns(loaded, waves, max_new_tokens=40)
    assert got == expected
    for turn in got:
        texts = [t[0] for t in turn if len(t) == 1]
        frames = [t for t in turn if len(t) == 8]
        assert len(set(texts)) > 1, "text tokens must vary for the comparison to mean something"
        assert len(frames) >= 2 * schedule[1]
    # The schedule is the config's: n_text tokens, then n_audio frames.
    kinds = ["t" if len(t) == 1 else "a" for t in got[0]]
    n_text, n_audio = schedule
    assert kinds[: n_text + n_audio + n_text] == ["t"] * n_text + ["a"] * n_audio + ["t"] * n_text
    # The cache holds the whole history except the closing "\n"s it has not been fed yet.
    assert backend.positions == conversation.positions - 2
