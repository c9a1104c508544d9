"""The real-time engine on the GPU, at full size, with random weights from the reference config.

(a) A graph replay equals the same step run eagerly, bit for bit, over >= 200 greedy steps and two
    turns. (b) Teacher-forced outputs match liquid-audio's / transformers' own modules within bf16
tolerance. (c) After a voice switch, the captured graphs compute with the freshly merged weights.
Free-running token comparisons between differently computed paths are not used as evidence: with
random weights the greedy top-1 has near-ties.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import liquid_depthformer_logits

pytestmark = pytest.mark.gpu

SAMPLED = None  # set lazily (needs engine.protocol)


@pytest.fixture(scope="module")
def full_size():
    from engine.bench.random_model import random_full_size_model

    torch.backends.cuda.matmul.allow_tf32 = False
    return random_full_size_model(stop_tokens=True)


@pytest.fixture(scope="module")
def full_size_int8(full_size):
    """The same model with its large matrices int8 (engine/model/quantized.py), quantized in memory."""
    import copy
    import dataclasses

    from engine.model.quantized import quantize_model

    model = copy.deepcopy(full_size.model)
    quantize_model(model, device=torch.device("cuda"))
    torch.cuda.empty_cache()
    return dataclasses.replace(full_size, model=model, precision="int8")


PRECISIONS = pytest.mark.parametrize("precision", ["bf16", "int8"])


def _model(request, precision: str):
    return request.getfixturevalue("full_size" if precision == "bf16" else "full_size_int8")


def _prompt(loaded, positions: int, seed: int) -> torch.Tensor:
    generator = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(1, positions, loaded.model.lfm.config.hidden_size, device="cuda", generator=generator).to(loaded.dtype)


class ReplayVersusEager:
    """Wraps the graphed backend: every step is replayed from the graph, then re-run eagerly from the
    same saved state, and both results (outputs and the whole cache) must be bitwise equal."""

    def __init__(self, backend) -> None:
        self.backend = backend
        self.steps_checked = 0

    def __getattr__(self, name: str):
        return getattr(self.backend, name)

    def _state(self) -> list[torch.Tensor]:
        b = self.backend
        return [t.clone() for t in (*b.backbone.snapshot(), b.input, b.hidden, b.token, b.frame)]

    def _restore(self, state: list[torch.Tensor]) -> None:
        b = self.backend
        *cache, inp, hidden, token, frame = state
        b.backbone.restore(cache)
        for target, source in zip((b.input, b.hidden, b.token, b.frame), (inp, hidden, token, frame)):
            target.copy_(source)

    def _check(self, name: str) -> None:
        b = self.backend
        before = self._state()
        b.graphs[name].replay()
        replayed = self._state()
        self._restore(before)
        b.steps[name]()  # the same step, eagerly
        eager = self._state()
        for x, y in zip(replayed, eager):
            assert torch.equal(x, y), name
        self.steps_checked += 1

    def decode(self) -> None:
        self._check("decode")
        self.backend.positions += 1
        self.backend.backbone.positions = self.backend.positions

    def text_head(self, sampling):
        self.backend._apply(sampling)
        self._check("text_head")
        return self.backend.token

    def audio_head(self, sampling):
        self.backend._apply(sampling)
        self._check("audio_head")
        return self.backend.frame

    def read_token(self, token) -> int:
        return int(self.backend.token.item())

    def read_frame(self, frame):
        values = tuple(int(v) for v in self.backend.frame.tolist())
        return torch.tensor(values), values


@PRECISIONS
@torch.inference_mode()
def test_graph_replay_is_bitwise_equal_to_eager_steps(request, precision: str) -> None:
    from engine.chat.generation import GeneratedFrame, GeneratedText, Schedule, interleaved_decode
    from engine.protocol import SamplingSettings
    from engine.realtime.backend import GraphedBackend

    full_size = _model(request, precision)
    backend = GraphedBackend(full_size, context_tokens=1024)
    assert {"decode", "text_head", "audio_head"} < set(backend.graphs)
    # The fused NVRTC kernels are what the graphs replay here (a silent fallback would go untested).
    assert backend.depthformer.fused is not None and backend.backbone.short_conv is not None
    assert backend.backbone.attention_step is not None
    assert backend.text_sampling.fused is not None and backend.audio_sampling.fused is not None
    if precision == "int8":  # the int8 kernels run every product, the text head and the depthformer's input
        assert backend.depthformer.fused.int8 and backend.text_product is not None and backend.depthformer.input_product is not None
        assert len(backend.backbone.matvec_shapes) == 6 and all(shape[5] for shape in backend.backbone.matvec_shapes)
    # The conv layers' int8 in-projections run the conv step as their epilogue (bf16: the conv step's own kernel).
    assert backend.backbone.conv_epilogue == (precision == "int8")
    checking = ReplayVersusEager(backend)
    schedule = Schedule(full_size.interleaved_n_text, full_size.interleaved_n_audio)
    produced = 0
    for turn, positions in enumerate((60, 25)):
        backend.prefill(_prompt(full_size, positions, seed=turn))
        for event in interleaved_decode(checking, schedule, SamplingSettings(greedy=True), max_new_tokens=120):
            produced += isinstance(event, (GeneratedText, GeneratedFrame))
    assert produced == 240
    assert checking.steps_checked == 480  # a head and a decode per generated token
    assert backend.positions == 60 + 25 + 240



@torch.inference_mode()
def test_depthformer_grid_is_fitted_beside_the_decoder_without_touching_the_conversation(full_size) -> None:
    """The start-up timing of the depthformer's grid with the decoder's frame beside it (as ChatSession.open
    runs it): every candidate is timed, the fastest is kept, the audio head's graph replays that grid
    bitwise like the eager frame, and the cache and the decoder are as they were."""
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.chat.session import fit_depthformer_to_decoder
    from engine.protocol import SamplingSettings
    from engine.realtime.backend import GraphedBackend

    backend = GraphedBackend(full_size, context_tokens=1024)
    backend.prefill(_prompt(full_size, 40, seed=5))
    before = backend.snapshot()
    decoder = make_audio_decoder(full_size, use_cuda_graphs=True)
    fit_depthformer_to_decoder(backend, decoder)
    depthformer = backend.depthformer
    timings = depthformer.grid_timings_ms["backbone_step_and_frame_beside_the_decoder"]
    assert sorted(timings) == sorted(depthformer.grid_candidates()) and len(timings) >= 2
    assert depthformer.fused.blocks == min(timings, key=timings.__getitem__)
    assert all(torch.equal(a, b) for a, b in zip(backend.snapshot(), before, strict=True))
    assert decoder.decoder._frames_done == 0 and backend.positions == 40
    backend.audio_head(SamplingSettings(greedy=True))
    replayed = (backend.input.clone(), backend.frame.clone())
    backend.steps["audio_head"]()
    assert torch.equal(backend.input, replayed[0]) and torch.equal(backend.frame, replayed[1])

def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


@PRECISIONS
@torch.inference_mode()
def test_prefill_graphs_replay_bitwise_and_match_the_unpadded_prefill(request, precision: str) -> None:
    from engine.realtime.backend import PREFILL_BUCKETS, GraphedBackend

    full_size = _model(request, precision)
    # 4096 slots: the bitwise checks below advance the position by each bucket's rows in turn.
    engine = GraphedBackend(full_size, context_tokens=4096)
    plain = GraphedBackend(full_size, context_tokens=4096, capture=False)  # eager, one unpadded span
    assert {f"prefill_{rows}" for rows in PREFILL_BUCKETS} <= set(engine.graphs) and plain.prefill_buckets == ()
    assert engine.backbone.flash_prefill  # every bucket attends with FlashAttention (a fallback would go untested)
    # Bitwise: every bucket's replay equals its eager twin from the same state (after a 20-position history).
    checking = ReplayVersusEager(engine)
    engine.prefill(_prompt(full_size, 20, seed=20))
    for rows in PREFILL_BUCKETS:
        real = rows - 3
        engine.prefill_input[:real].copy_(_prompt(full_size, real, seed=rows)[0])
        engine.prefill_input[real:rows].zero_()
        engine.backbone.span_length.fill_(real)
        checking._check(f"prefill_{rows}")
    assert checking.steps_checked == len(PREFILL_BUCKETS)
    # Against one unpadded eager prefill, within bf16 tolerance: spans that pad (700 to 768), and one
    # that chunks (1100 = 1024, then 76 padded to 128). The cache's valid slots and conv states agree too.
    engine.reset()
    for turn, positions in enumerate((20, 45, 130, 700, 1100)):
        prompt = _prompt(full_size, positions, seed=30 + turn)
        engine.prefill(prompt)
        plain.prefill(prompt)
        assert engine.positions == plain.positions == int(engine.backbone.position)
        assert _rel(engine.hidden[0], plain.hidden[0]) < 2e-2, positions
        for ours, theirs in zip(engine.backbone.snapshot()[1:], plain.backbone.snapshot()[1:]):
            if ours.dim() == 4:  # attention keys/values: the slots written so far
                ours, theirs = ours[:, :, : plain.positions], theirs[:, :, : plain.positions]
            assert _rel(ours, theirs) < 2e-2, positions
    assert engine.positions == 1995


@torch.inference_mode()
def test_flash_prefill_attention_equals_the_masked_attention(full_size) -> None:
    """FlashAttention over the whole cache (causal from the bottom right, `position + rows` slots used)
    against the masked attention: at the cache's start, in the middle, and at its very end."""
    from engine.realtime.static_model import StaticBackbone

    backbone = StaticBackbone(full_size.model.lfm, max_positions=4096)
    assert backbone.flash_prefill
    generator = torch.Generator(device="cuda").manual_seed(11)
    shape = (1, backbone.kv_heads, backbone.max_positions, backbone.head_dim)
    keys, values = (torch.randn(shape, device="cuda", generator=generator).to(torch.bfloat16) for _ in range(2))
    for rows, position in ((32, 0), (128, 5), (64, 4096 - 64), (256, 0), (256, 1), (768, 2100), (1024, 4096 - 1024), (512, 3000)):
        q = torch.randn((rows, backbone.heads, backbone.head_dim), device="cuda", generator=generator).to(torch.bfloat16)
        backbone.position.fill_(position)
        expected = backbone._attend(q, keys, values, backbone._prefill_mask(rows, backbone.max_positions, matmul=False))
        got = backbone._attend_flash(q, keys, values)
        assert got.shape == expected.shape == (rows, backbone.hidden)
        assert _rel(got, expected) < 1e-2, (rows, position)


def _clear_top1_agrees(ours: torch.Tensor, reference: torch.Tensor, margin: float) -> tuple[int, int]:
    """(checked, agreeing) over rows whose reference top-2 gap exceeds `margin` × the logits' std."""
    top2 = reference.float().topk(2, dim=-1)
    clear = (top2.values[..., 0] - top2.values[..., 1]) > margin * reference.float().std(dim=-1)
    agree = ours.float().argmax(-1) == top2.indices[..., 0]
    return int(clear.sum()), int((agree & clear).sum())


@PRECISIONS
@torch.inference_mode()
def test_teacher_forced_backbone_matches_transformers(request, precision: str) -> None:
    """With int8 the reference is transformers' own modules over the same int8 weights, dequantized."""
    from engine.chat.generation import EagerBackend
    from engine.realtime.backend import GraphedBackend

    full_size = _model(request, precision)
    model = full_size.model
    reference = EagerBackend(model)
    engine = GraphedBackend(full_size, context_tokens=1024)
    assert engine.backbone.attention_step is not None  # what is compared here, over 4 key chunks
    prompt = _prompt(full_size, 75, seed=3)
    reference.prefill(prompt)
    engine.prefill(prompt)
    assert _rel(engine.hidden[0], reference._hidden) < 2e-2
    generator = torch.Generator(device="cuda").manual_seed(4)
    checked = agreeing = 0
    for step in range(150):
        if step % 3 == 0:
            token = torch.randint(0, model.lfm.config.vocab_size, (1,), device="cuda", generator=generator)
            embedding = model.lfm.embed_tokens(token)
        else:
            frame = torch.randint(0, 2048, (8,), device="cuda", generator=generator)
            embedding = model.audio_embedding(frame + model.codebook_offsets).sum(0, keepdim=True)
        reference._pending = embedding[None]
        engine.input.copy_(embedding)
        reference.decode()
        engine.decode()  # graph replay
        assert _rel(engine.hidden[0], reference._hidden) < 2e-2, step
        ours = torch.nn.functional.linear(engine.hidden[0], model.lfm.embed_tokens.weight)
        theirs = torch.nn.functional.linear(reference._hidden, model.lfm.embed_tokens.weight)
        c, a = _clear_top1_agrees(ours, theirs, margin=0.1)
        checked, agreeing = checked + c, agreeing + a
    assert checked > 100 and agreeing == checked


@PRECISIONS
@torch.inference_mode()
def test_teacher_forced_depthformer_matches_liquid_audio(request, precision: str) -> None:
    from engine.realtime.backend import GraphedBackend

    full_size = _model(request, precision)
    model = full_size.model
    engine = GraphedBackend(full_size, context_tokens=64, capture=False)
    generator = torch.Generator(device="cuda").manual_seed(5)
    checked = agreeing = 0
    for _ in range(20):
        hidden = torch.randn(1, model.lfm.config.hidden_size, device="cuda", generator=generator).to(full_size.dtype)
        codes = torch.randint(0, 2048, (8,), device="cuda", generator=generator)
        ours = engine.depthformer.teacher_forced_logits(hidden, codes)
        expected = liquid_depthformer_logits(model, hidden, codes)
        for i in range(8):
            assert _rel(ours[i], expected[i]) < 2e-2, i
            c, a = _clear_top1_agrees(ours[i], expected[i], margin=0.1)
            checked, agreeing = checked + c, agreeing + a
    assert checked > 100 and agreeing == checked


def _make_adapter(model: torch.nn.Module, folder: Path) -> None:
    """A real peft adapter on the full-size model (injected, saved, then removed again)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(11)
    config = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "w1", "w3", "qkv_proj"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(str(folder))
    peft_model.unload()


@torch.inference_mode(False)
def test_voice_switch_updates_what_the_graphs_compute(full_size, tmp_path: Path) -> None:
    from engine.chat.generation import EagerBackend
    from engine.model.lora import VoiceSwitcher, load_voice
    from engine.realtime.backend import GraphedBackend

    model = full_size.model
    _make_adapter(model, tmp_path / "voice")
    assert json.loads((tmp_path / "voice" / "adapter_config.json").read_text())["r"] == 8
    with torch.inference_mode():
        engine = GraphedBackend(full_size, context_tokens=512)
        pointers = {n: p.data_ptr() for n, p in model.named_parameters()}
        prompt = _prompt(full_size, 40, seed=6)
        embedding = _prompt(full_size, 1, seed=7)[0]

        def graph_step() -> torch.Tensor:
            engine.reset()
            engine.prefill(prompt)
            engine.input.copy_(embedding)
            engine.decode()  # graph replay
            return engine.hidden[0].clone()

        without_voice = graph_step()
        switcher = VoiceSwitcher(model)
        switcher.apply(load_voice(tmp_path / "voice"))
        assert {n: p.data_ptr() for n, p in model.named_parameters()} == pointers
        with_voice = graph_step()
        reference = EagerBackend(model)  # liquid-audio's modules with the freshly merged weights
        reference.prefill(prompt)
        reference._pending = embedding[None]
        reference.decode()
        assert _rel(with_voice, reference._hidden) < 2e-2
        # The graphs follow the merged weights: far from the voiceless result, close to the reference.
        assert _rel(with_voice, without_voice) > 3 * _rel(with_voice, reference._hidden)
        # The eager run of the same step on the merged weights is bitwise the graph's result.
        engine.reset()
        engine.prefill(prompt)
        engine.input.copy_(embedding)
        engine._decode()
        assert torch.equal(engine.hidden[0], with_voice)
        switcher.apply(None)
        assert torch.equal(graph_step(), without_voice)


def _eager_encoding(full_size, wave):  # noqa: ANN001, ANN202
    """liquid-audio's own log-mel features of `wave` (its preprocessor on the unpadded samples) as a user take of a
    conversation, and that take's eager `_prefill` rows."""
    from engine.chat.conversation import Conversation
    from engine.chat.session import _lone_take

    mel, _ = full_size.processor.audio(torch.from_numpy(wave)[None].cuda(), torch.tensor([wave.shape[0]], device="cuda"))
    take = Conversation(full_size.processor.text, codebooks=full_size.codebooks).add_audio_turn("user", mel[0].float()).pieces[1]
    return take, full_size.model._prefill(**_lone_take(take, full_size.codebooks, full_size.device).as_kwargs())[0]


@torch.inference_mode()
def test_audio_encoder_graphs_match_the_eager_encoder(full_size) -> None:
    """Every rung captures both graphs and passes its start-up checks; for takes of lengths between the
    rungs, a replay from the samples gives liquid-audio's own log-mel features (the preprocessor on the
    unpadded take) and its eager `_prefill` rows, and a replay from kept features gives the same rows."""
    import numpy as np

    from engine.realtime.encoder_graphs import EncoderGraphs, ladder

    model = full_size.model
    graphs = EncoderGraphs(model, full_size.processor.audio, max_seconds=30.0, dtype=full_size.dtype, device=full_size.device)
    assert graphs.problems == [] and sorted(graphs.rungs) == ladder(3001)  # up to a 30 s take (past 20 s too)
    assert all(set(rung.graphs) == {"features", "encode"} for rung in graphs.rungs.values())
    rng = np.random.default_rng(7)
    for seconds in (0.43, 3.97, 11.3, 27.3):
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        take, expected_rows = _eager_encoding(full_size, wave)
        mel, rows = graphs.encode_wave(wave)
        assert mel.shape == take.mel.shape and rows.shape == expected_rows.shape
        assert _rel(mel, take.mel) < 1e-4, seconds
        assert _rel(rows, expected_rows) < 2e-2, seconds
        assert _rel(graphs.encode_mel(take.mel), expected_rows) < 2e-2, seconds
        # A replay is its eager step bit for bit (the same buffers, the same kernels).
        rung = graphs.rung_for(mel.shape[1])
        graphs.encode_wave(wave)
        replayed = rung.mel.clone(), rung.rows.clone()
        graphs._features(rung)
        graphs._encode(rung)
        assert torch.equal(rung.mel, replayed[0]) and torch.equal(rung.rows, replayed[1]), seconds


@torch.inference_mode(False)
def test_the_app_session_opens_with_every_graph_and_survives_context_trims(isolated_user_dirs) -> None:
    """The product's own path: ChatSession.open on CUDA (step, prefill and decoder graphs, then the warm-up turn;
    the encoder's rungs behind "ready", one captured between each two of the first turns, as the engine thread's idle
    ticks do, then the rest at once), and turns of many take lengths in a small context, so that trims, rebuilds from
    position 0 and prefills near the end of the context (eager tails) all run on the GPU, before, between and after
    the rungs' captures."""
    import threading

    import numpy as np

    from engine.protocol import SamplingSettings
    from engine.realtime.backend import PREFILL_BUCKETS
    from engine.realtime.encoder_graphs import ladder
    from engine.chat.session import AudioPieceOut, ChatSession, ContextTrimmedInfo, TurnDone

    session = ChatSession.open(None, demo=True, context_tokens=320)
    backend = session.backend
    assert session.info.fallback_reason is None and session.info.graphs_ready
    assert set(backend.graphs) == {"decode", "text_head", "audio_head", *(f"prefill_{r}" for r in PREFILL_BUCKETS if r <= 320)}
    assert session.encoder_graphs is not None and session.encoder_graphs.rungs == {} and session.captures_pending
    assert {"loaded", "step_graphs", "decoder_graphs", "ready"} <= set(session.startup)
    rng = np.random.default_rng(0)
    trims = 0
    captured_during_turns = []
    for i, seconds in enumerate([0.7, 3.3, 9.1, 1.2, 7.6, 2.2, 5.5, 0.9, 4.4, 6.1]):
        if i == 6:  # the second half: every rung in use
            threads = set(threading.enumerate())
            session.wait_for_graphs()
            assert set(threading.enumerate()) <= threads  # captured on this thread, none started
            assert session.encoder_graphs.problems == [] and session.lazy_capture.problems == []
            assert sorted(session.encoder_graphs.rungs) == ladder(6001) and session.encoder_graphs.pending == []
        elif 0 < i < 6:
            assert session.capture_behind_ready()  # one rung between two turns (more remain)
        captured_during_turns.append(len(session.encoder_graphs.rungs))
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        outputs = list(session.respond(wave, SamplingSettings(greedy=i % 2 == 0), max_answer_seconds=1.5))
        (done,) = [o for o in outputs if isinstance(o, TurnDone)]
        pcm = np.concatenate([o.pcm.reshape(-1) for o in outputs if isinstance(o, AudioPieceOut)])
        trims += sum(isinstance(o, ContextTrimmedInfo) for o in outputs)
        assert done.stats.frames > 0 and pcm.size == done.stats.frames * 1920 and np.isfinite(pcm).all(), seconds
        assert float(np.abs(pcm).max()) > 0.0
        assert backend.positions == backend.backbone.positions == int(backend.backbone.position) <= 320
        if done.stats.trimmed_ahead_turns:  # rebuilt after the answer: the cache holds every position
            assert backend.positions == session.context_used
            # ... from the kept takes' embeddings, which equal liquid-audio's own prefill of the history
            with torch.inference_mode():
                expected = session.embed(session.conversation.span(0, backend.device))
                got = session.embed_from(0)
            assert got.shape == expected.shape and _rel(got, expected) < 2e-2
    assert trims >= 3
    assert captured_during_turns == [0, 1, 2, 3, 4, 5] + [len(ladder(6001))] * 4
    # A rung captured behind "ready": its replay is its eager steps, bit for bit.
    encoder = session.encoder_graphs
    with torch.inference_mode():
        mel, _ = encoder.encode_wave((0.1 * rng.standard_normal(int(3.3 * 16000))).astype(np.float32))
        rung = encoder.rung_for(mel.shape[1])
        assert set(rung.graphs) == {"features", "encode"}
        replayed = rung.mel.clone(), rung.rows.clone()
        encoder._features(rung)
        encoder._encode(rung)
    assert torch.equal(rung.mel, replayed[0]) and torch.equal(rung.rows, replayed[1])
    session.close()
    assert not session.captures_pending and session.capture_behind_ready() is False


@torch.inference_mode(False)
def test_turns_before_and_between_the_rung_captures_are_answered_and_the_rungs_match_the_eager_encoder(isolated_user_dirs) -> None:
    """ChatSession.open on CUDA, then turns at once (before any rung: the eager encoder) and between the rungs'
    captures (each on this thread, between two turns, as the engine thread's idle tick makes them): every turn is
    answered in real time, a take whose rung is in goes through it, and the rows a rung gives are the eager encoder's
    for the same take. Then, for takes just inside every rung, a replay gives liquid-audio's own features and
    `_prefill` rows."""
    import threading
    import time

    import numpy as np

    from engine.chat.session import ChatSession, TurnDone, _lone_take
    from engine.chat.conversation import Conversation
    from engine.protocol import SamplingSettings
    from engine.realtime.encoder_graphs import MEL_FRAMES_PER_SECOND, ladder

    session = ChatSession.open(None, demo=True, context_tokens=512)
    encoder = session.encoder_graphs
    assert encoder is not None and encoder.rungs == {} and encoder.pending == sorted(ladder(6001), reverse=True)
    rng = np.random.default_rng(1)
    through: list[bool] = []
    original = encoder.encode_wave

    def encode_wave(wave):  # noqa: ANN001, ANN202
        result = original(wave)
        through.append(result is not None)
        return result

    encoder.encode_wave = encode_wave  # on this session's object only
    turns = []
    takes = {seconds: (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32) for seconds in (2.7, 1.1, 4.9, 13.3)}

    def turn(seconds: float) -> None:
        outputs = list(session.respond(takes[seconds], SamplingSettings(greedy=True), max_answer_seconds=1.0))
        (done,) = [o for o in outputs if isinstance(o, TurnDone)]
        take = list(session.conversation.audio_in_pieces())[-1]
        turns.append((seconds, len(encoder.rungs), through[-1], done.stats.first_pcm_s, done.stats.frames, take.embeddings.clone()))
        session.reset()

    for seconds in (2.7, 1.1):  # right after ready: no rung yet
        turn(seconds)
    captures = []
    while True:
        threads = set(threading.enumerate())
        started = time.perf_counter()
        more = session.capture_behind_ready()
        captures.append(time.perf_counter() - started)
        assert set(threading.enumerate()) <= threads  # captured on this thread, none started
        if len(encoder.rungs) in (1, 4, 9) or not more:  # between captures, and after the last
            for seconds in takes:
                turn(seconds)
        if not more:
            break
    assert len(captures) == len(ladder(6001)) and encoder.problems == [] and session.lazy_capture.problems == []
    assert sorted(encoder.rungs) == ladder(6001) and not session.captures_pending
    assert all(first < 0.5 and frames > 0 for _, _, _, first, frames, _ in turns), [t[:5] for t in turns]
    for seconds, rungs, went_through, *_ in turns:  # a take went through a rung exactly when one held it
        frames = int(seconds * MEL_FRAMES_PER_SECOND) + 1
        holds = any(length >= frames for length in sorted(ladder(6001), reverse=True)[:rungs])
        assert went_through == holds, (seconds, rungs)
    assert any(went for _, rungs, went, *_ in turns if rungs < len(ladder(6001))), "no turn between the captures used a rung"
    eager = {seconds: rows for seconds, rungs, went, _, _, rows in turns if not went}
    for seconds, _, went, _, _, rows in turns:  # the same take: a rung's rows are the eager encoder's
        if went and seconds in eager:
            assert rows.shape == eager[seconds].shape and _rel(rows, eager[seconds]) < 2e-2, seconds
    loaded = session.loaded
    with torch.inference_mode():
        for frames in ladder(6001):  # a take just inside each rung
            wave = (0.1 * rng.standard_normal((frames - 2) * 160 + 37)).astype(np.float32)
            device_wave = torch.from_numpy(wave)[None].cuda()
            expected_mel, _ = loaded.processor.audio(device_wave, torch.tensor([wave.shape[0]], device="cuda"))
            conversation = Conversation(loaded.processor.text, codebooks=loaded.codebooks)
            take = conversation.add_audio_turn("user", expected_mel[0].float()).pieces[1]
            expected_rows = loaded.model._prefill(**_lone_take(take, loaded.codebooks, loaded.device).as_kwargs())[0]
            mel, rows = original(wave)
            assert encoder.rung_for(mel.shape[1]).frames == frames
            assert mel.shape == take.mel.shape and rows.shape == expected_rows.shape, frames
            assert _rel(mel, take.mel) < 1e-4 and _rel(rows, expected_rows) < 2e-2, frames
    session.close()


@torch.inference_mode()
def test_encoder_rungs_captured_one_by_one_between_eager_encodings_match_the_eager_encoder(full_size) -> None:
    """At full size: the ladder's rungs captured one job at a time (engine/realtime/lazy_capture.py) into a shared
    pool, with liquid-audio's eager encoder run on takes of random lengths between every two captures (as turns run
    between the engine thread's idle ticks): every rung passes its check, and for takes between the rungs a replay
    gives liquid-audio's own features and `_prefill` rows."""
    import threading

    import numpy as np

    from engine.realtime.encoder_graphs import EncoderGraphs, ladder
    from engine.realtime.lazy_capture import LazyCapture

    model = full_size.model
    pool = torch.cuda.graph_pool_handle()
    graphs = EncoderGraphs(model, full_size.processor.audio, max_seconds=30.0, dtype=full_size.dtype, device=full_size.device,
                           pool=pool, defer=True)
    assert graphs.rungs == {} and graphs.pending == sorted(ladder(3001), reverse=True)
    capture = LazyCapture(graphs.jobs())
    threads = set(threading.enumerate())
    rng = np.random.default_rng(3)

    def eager_encoding() -> None:
        _eager_encoding(full_size, (0.1 * rng.standard_normal(int(rng.uniform(0.5, 20) * 16000))).astype(np.float32))

    eager_encoding()
    while capture.run_next():
        eager_encoding()
    torch.cuda.synchronize()
    assert capture.done and capture.problems == [] and graphs.problems == [], (capture.problems, graphs.problems)
    assert sorted(graphs.rungs) == ladder(3001) and set(threading.enumerate()) <= threads
    assert set(capture.seconds) == {f"encoder rung of {frames} mel frames" for frames in ladder(3001)}
    for seconds in (0.43, 3.97, 11.3, 27.3):
        wave = (0.1 * rng.standard_normal(int(seconds * 16000))).astype(np.float32)
        take, expected_rows = _eager_encoding(full_size, wave)
        mel, rows = graphs.encode_wave(wave)
        assert mel.shape == take.mel.shape and rows.shape == expected_rows.shape
        assert _rel(mel, take.mel) < 1e-4, seconds
        assert _rel(rows, expected_rows) < 2e-2, seconds


def _fresh_tiny(folder: Path, precision: str):
    from engine.model.loading import load_model

    return load_model(folder, device="cuda", precision=precision)


@PRECISIONS
def test_voice_switches_on_the_gpu_give_the_fresh_merge_and_keep_memory_flat(tiny_model_dir: Path, tmp_path: Path, precision: str) -> None:
    """Through the pinned ring and the copy stream: after any switch the weights are bitwise those of a fresh merge of
    that voice into a freshly loaded model (tied heads, all-linear and partial voices, int8 and bf16), the allocator
    holds what it held before the switch, and after twenty switches the driver's count is where it was."""
    from engine.model.loading import load_model
    from engine.model.lora import VoiceSwitcher, load_voice
    from voice_kinds import KINDS, make_voice

    base = load_model(tiny_model_dir, device="cpu").model
    for seed, kind in enumerate(KINDS, start=1):
        make_voice(base, tmp_path / kind, kind, seed)
    voices = {kind: load_voice(tmp_path / kind) for kind in KINDS}
    import copy

    fresh: dict[str | None, dict[str, torch.Tensor]] = {}
    pristine = _fresh_tiny(tiny_model_dir, precision)
    for kind in (None, *KINDS):
        model = copy.deepcopy(pristine.model)  # a freshly loaded model's weights (ties kept)
        if kind:
            VoiceSwitcher(model, checkpoint=pristine.weights, reader=pristine.reader).apply(voices[kind])
        fresh[kind] = {name: t.clone() for name, t in model.state_dict().items()}
        del model
    pristine.reader.close()
    del pristine
    torch.cuda.empty_cache()
    loaded = _fresh_tiny(tiny_model_dir, precision)
    switcher = VoiceSwitcher(loaded.model, checkpoint=loaded.weights, reader=loaded.reader)
    allocated = torch.cuda.memory_allocated()
    order = ["all_linear", None, "qv", "tied_heads", "attention_mlp", "partial", "all_linear", None, "qv", "attention_mlp"] * 2
    driver = []
    for kind in order:
        switcher.apply(voices[kind] if kind else None)
        torch.cuda.synchronize()
        state = loaded.model.state_dict()
        assert [n for n, t in fresh[kind].items() if not torch.equal(state[n], t)] == [], (precision, kind)
        assert torch.cuda.memory_allocated() == allocated, kind
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        driver.append(total - free)
        assert switcher.last_switch["chunks"] > 0
    assert max(driver) - driver[0] < 8 << 20, [d / 1e6 for d in driver]
    assert switcher.host_bytes == loaded.reader.host_bytes  # the ring, nothing else: read back from the checkpoint


@PRECISIONS
def test_the_loader_puts_every_byte_of_the_checkpoint_in_place_through_the_pinned_ring(tiny_model_dir: Path, precision: str) -> None:
    """The weights as the files hold them, read by several threads through pinned slots onto the GPU: bf16
    parameters equal liquid-audio's own loading; int8 matrices equal the checkpoint's rows quantized on the GPU."""
    from liquid_audio import LFM2AudioModel

    from engine.model.checkpoint import CheckpointTensors
    from engine.model.loading import UNUSED_AUDIO_HEAD
    from engine.model.quantized import QuantizedEmbedding, QuantizedLinear, quantize_rows

    loaded = _fresh_tiny(tiny_model_dir, precision)
    reference = LFM2AudioModel.from_pretrained(tiny_model_dir, dtype=torch.bfloat16, device="cuda")
    checkpoint = CheckpointTensors(tiny_model_dir / "model.safetensors")
    ours = dict(loaded.model.named_parameters())
    int8 = {name for name, m in loaded.model.named_modules() if isinstance(m, (QuantizedLinear, QuantizedEmbedding))}
    for name, tensor in reference.named_parameters():
        if name == UNUSED_AUDIO_HEAD or name.rsplit(".", 1)[0] in int8:
            continue
        assert torch.equal(ours[name], tensor), name
    assert bool(int8) == (precision == "int8")
    for name in sorted(int8):
        module = loaded.model.get_submodule(name)
        stored = f"{name}.weight" if f"{name}.weight" in checkpoint else name.replace("to_logits", "embedding") + ".weight"
        values, scales = torch.empty_like(module.values), torch.empty_like(module.scales)
        quantize_rows(checkpoint.tensor(stored).cuda(), values, scales)
        assert torch.equal(module.values, values) and torch.equal(module.scales, scales), name
