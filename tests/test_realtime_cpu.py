"""The real-time engine's plain-op step functions, checked on the CPU in float32.

The same code is what the CUDA graphs capture; here it runs eagerly (`capture=False`), so these
tests pin down its math against liquid-audio/transformers without a GPU. The GPU tests
(test_gpu_engine.py) add graph-replay equality and bf16 tolerances at full size.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch

from engine.chat.generation import EagerBackend, Schedule, interleaved_decode
from engine.protocol import SamplingSettings
from engine.realtime.backend import GraphedBackend
from engine.realtime.sampling import DeviceSampling
from conftest import liquid_depthformer_logits
from test_reference_generation import liquid_turns, reference_turns, takes


@pytest.fixture
def fresh_loaded(tiny_model_dir: Path):
    from engine.model.loading import load_model

    return load_model(tiny_model_dir, device="cpu")


@pytest.mark.parametrize("buckets", [(), (4, 8, 16)], ids=["unpadded prefill", "padded, chunked prefill"])
def test_static_engine_tokens_equal_liquid_audio_over_two_turns(
    fresh_loaded, monkeypatch: pytest.MonkeyPatch, buckets: tuple[int, ...]
) -> None:
    expected = liquid_turns(fresh_loaded, takes(), max_new_tokens=40)
    backend = GraphedBackend(fresh_loaded, context_tokens=512, capture=False, prefill_buckets=buckets)
    monkeypatch.setattr("test_reference_generation.EagerBackend", lambda model: backend)
    got, used, conversation = reference_turns(fresh_loaded, takes(), max_new_tokens=40)
    assert used is backend
    assert got == expected
    assert backend.positions == conversation.positions - 2


def _forced_sequence(loaded, steps: int) -> list[torch.Tensor]:
    """Input embeddings for teacher forcing: text tokens and audio frames, interleaved."""
    generator = torch.Generator().manual_seed(3)
    model = loaded.model
    embeddings = []
    for i in range(steps):
        if i % 3 == 0:
            token = torch.randint(0, model.lfm.config.vocab_size, (1,), generator=generator)
            embeddings.append(model.lfm.embed_tokens(token))
        else:
            frame = torch.randint(0, 2048, (8,), generator=generator)
            embeddings.append(model.audio_embedding(frame + model.codebook_offsets).sum(0, keepdim=True))
    return embeddings


@torch.no_grad()
def test_teacher_forced_hidden_states_match_transformers(fresh_loaded) -> None:
    model = fresh_loaded.model
    prompt = torch.randn(1, 37, model.lfm.config.hidden_size, generator=torch.Generator().manual_seed(1))
    reference = EagerBackend(model)
    static = GraphedBackend(fresh_loaded, context_tokens=256, capture=False)
    reference.prefill(prompt)
    static.prefill(prompt)
    torch.testing.assert_close(static.hidden[0], reference._hidden, rtol=1e-4, atol=1e-4)
    for embedding in _forced_sequence(fresh_loaded, 30):
        reference._pending = embedding[None]
        static.input.copy_(embedding)
        reference.decode()
        static.decode()
        torch.testing.assert_close(static.hidden[0], reference._hidden, rtol=1e-4, atol=1e-4)
    assert static.positions == reference.positions == 67


@pytest.mark.parametrize("attention", ["masked", "matmul"])
@torch.no_grad()
def test_padding_rows_never_reach_the_real_rows(fresh_loaded, attention: str) -> None:
    """The padded prefill (what the prefill graphs capture) is exact by causality: whatever the padding
    rows hold, the real rows' hidden state, cache slots and conv states are those of the unpadded span."""
    hidden_size = fresh_loaded.model.lfm.config.hidden_size
    generator = torch.Generator().manual_seed(8)
    history = torch.randn(11, hidden_size, generator=generator)
    span = torch.randn(7, hidden_size, generator=generator)
    padding = 100 * torch.randn(9, hidden_size, generator=generator)
    results = []
    for padded in (False, True):
        backend = GraphedBackend(fresh_loaded, context_tokens=64, capture=False)
        backbone = backend.backbone
        backbone.prefill(history)
        if padded:
            backbone.span_length.fill_(7)
            last = backbone.prefill_rows(
                torch.cat((span, padding)), keys=backbone.max_positions, attention=attention
            )
        else:
            last = backbone.prefill(span)
        assert int(backbone.position) == 18
        results.append((last, [t[..., :18, :] if t.dim() == 4 else t for t in backbone.snapshot()[1:]]))
    (unpadded, unpadded_state), (padded, padded_state) = results
    torch.testing.assert_close(padded, unpadded, rtol=1e-5, atol=1e-5)
    assert len(padded_state) == len(unpadded_state)
    for ours, theirs in zip(padded_state, unpadded_state):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_chunked_prefill_and_its_eager_tail_match_one_unpadded_prefill(fresh_loaded) -> None:
    """Spans longer than the largest bucket go through in chunks; near the end of the context, where a
    padded bucket would not fit, the rest runs eagerly. Both land where one unpadded prefill does."""
    hidden_size = fresh_loaded.model.lfm.config.hidden_size
    generator = torch.Generator().manual_seed(9)
    first = torch.randn(1, 37, hidden_size, generator=generator)  # chunks of 16, 16, then 5 padded to 8
    second = torch.randn(1, 9, hidden_size, generator=generator)  # 37 + 16 > 48: eager
    bucketed = GraphedBackend(fresh_loaded, context_tokens=48, capture=False, prefill_buckets=(4, 8, 16))
    plain = GraphedBackend(fresh_loaded, context_tokens=48, capture=False)
    assert plain.prefill_buckets == ()
    for prompt in (first, second):
        for backend in (bucketed, plain):
            backend.prefill(prompt)
        assert bucketed.positions == plain.positions == bucketed.backbone.positions == int(bucketed.backbone.position)
        torch.testing.assert_close(bucketed.hidden, plain.hidden, rtol=1e-5, atol=1e-5)
        for ours, theirs in zip(bucketed.backbone.snapshot(), plain.backbone.snapshot()):
            valid = ours[..., : plain.positions, :] if ours.dim() == 4 else ours
            torch.testing.assert_close(valid, theirs[..., : plain.positions, :] if theirs.dim() == 4 else theirs, rtol=1e-5, atol=1e-5)
    assert bucketed.positions == 46
    with pytest.raises(ValueError, match="holds 48 positions; 49"):
        bucketed.prefill(second[:, :3])
    assert bucketed.positions == 46  # refused before anything was written


@torch.no_grad()
def test_teacher_forced_depthformer_logits_match_liquid_audio(fresh_loaded) -> None:
    model = fresh_loaded.model
    static = GraphedBackend(fresh_loaded, context_tokens=64, capture=False)
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        hidden = torch.randn(1, model.lfm.config.hidden_size, generator=generator)
        codes = torch.randint(0, 2048, (8,), generator=generator)
        ours = static.depthformer.teacher_forced_logits(hidden, codes)
        torch.testing.assert_close(ours, liquid_depthformer_logits(model, hidden, codes), rtol=1e-4, atol=1e-4)


@torch.no_grad()
def test_voice_switch_reaches_the_fused_weights(fresh_loaded, tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model

    from engine.model.lora import VoiceSwitcher, load_voice

    model = fresh_loaded.model
    static = GraphedBackend(fresh_loaded, context_tokens=64, capture=False)  # fuses q|k|v and w1|w3 as views
    torch.manual_seed(0)
    peft_model = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "k_proj", "w1", "w3", "qkv_proj"], init_lora_weights=False))
    peft_model.save_pretrained(str(tmp_path / "voice"))
    merged = peft_model.merge_and_unload()
    qkv_before = static.backbone.layers[1].qkv.clone()

    VoiceSwitcher(model).apply(load_voice(tmp_path / "voice"))

    assert not torch.equal(static.backbone.layers[1].qkv, qkv_before)
    prompt = torch.randn(1, 9, model.lfm.config.hidden_size, generator=torch.Generator().manual_seed(2))
    reference = EagerBackend(merged)
    reference.prefill(prompt)
    static.prefill(prompt)
    torch.testing.assert_close(static.hidden[0], reference._hidden, rtol=1e-4, atol=1e-4)


def test_device_sampling_modes_without_rebuilding() -> None:
    sampler = DeviceSampling(torch.device("cpu"))
    logits = torch.tensor([0.0, 2.0, 1.5, -1.0, 1.9, 0.5])
    sampler.set(greedy=True, temperature=1.0, top_k=4)
    assert [int(sampler.sample(logits)) for _ in range(20)] == [1] * 20
    sampler.set(greedy=False, temperature=1.0, top_k=2)
    torch.manual_seed(0)
    draws = torch.stack([sampler.sample(logits) for _ in range(4000)]).flatten()
    assert set(draws.tolist()) == {1, 4}
    share = (draws == 1).float().mean().item()
    expected = torch.softmax(torch.tensor([2.0, 1.9]), 0)[0].item()  # 0.525
    assert abs(share - expected) < 0.03
    sampler.set(greedy=False, temperature=0.5, top_k=3)
    draws = torch.stack([sampler.sample(logits) for _ in range(4000)]).flatten()
    assert set(draws.tolist()) == {1, 2, 4}
    probabilities = torch.softmax(torch.tensor([2.0, 1.5, 1.9]) / 0.5, 0)
    for token, p in zip([1, 2, 4], probabilities.tolist()):
        assert abs((draws == token).float().mean().item() - p) < 0.03


def test_interleaved_decode_stops_within_one_step_on_cancel(fresh_loaded) -> None:
    import threading

    from engine.chat.generation import GeneratedFrame, GeneratedText, TurnEnd

    backend = GraphedBackend(fresh_loaded, context_tokens=128, capture=False)
    backend.prefill(torch.randn(1, 5, fresh_loaded.model.lfm.config.hidden_size))
    cancel = threading.Event()
    events = []
    for event in interleaved_decode(backend, Schedule(6, 9), SamplingSettings(greedy=True), max_new_tokens=100, cancel=cancel):
        events.append(event)
        if len(events) == 10:
            cancel.set()
    assert isinstance(events[-1], TurnEnd) and events[-1].reason == "cancelled"
    produced = [e for e in events if isinstance(e, (GeneratedText, GeneratedFrame))]
    assert len(produced) == 10
    # Every produced token has been fed: the cache is consistent for the next turn.
    assert backend.positions == 5 + 10


@pytest.mark.parametrize("close_at_first_frame", [False, True], ids=["consumed", "closed at the first frame"])
def test_the_first_audio_frame_is_handed_over_before_its_decode(fresh_loaded, close_at_first_frame: bool) -> None:
    """The turn's first audio frame reaches the consumer before the backbone step that feeds it is
    queued (its decoding, the first sound, goes ahead of that step); every other token after it. Either
    way, every token handed over is fed, even if the consumer stops right at the first frame."""
    from engine.chat.generation import GeneratedFrame, GeneratedText

    backend = GraphedBackend(fresh_loaded, context_tokens=128, capture=False)
    prompt = torch.randn(1, 5, fresh_loaded.model.lfm.config.hidden_size, generator=torch.Generator().manual_seed(5))
    backend.prefill(prompt)
    decode = interleaved_decode(backend, Schedule(6, 9), SamplingSettings(greedy=True), max_new_tokens=30)
    handed, frames = 0, 0
    for event in decode:
        if not isinstance(event, (GeneratedText, GeneratedFrame)):
            continue
        handed += 1
        frames += isinstance(event, GeneratedFrame)
        first_frame = isinstance(event, GeneratedFrame) and frames == 1
        # Fed so far: the prefill and every token handed over, but the first frame only once handed over.
        assert backend.positions == 5 + handed - (1 if first_frame else 0), handed
        if first_frame and close_at_first_frame:
            decode.close()
            break
    assert frames >= 1 and backend.positions == 5 + handed
