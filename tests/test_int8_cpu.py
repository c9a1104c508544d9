"""The int8 weight-only model (engine/model/quantized.py) on the tiny model, on the CPU: the quantization's
math, loading straight from the checkpoint into int8 (no bf16 or float32 copy of a quantized matrix),
the engine's plain paths against liquid-audio's own modules over the same dequantized weights, voices
merged into the pristine rows and quantized again (exactly reversible), the memory need, and the
teacher-forced bf16-vs-int8 check. The int8 kernels themselves are tested on the GPU
(tests/test_gpu_kernels.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from conftest import liquid_depthformer_logits
from engine.model.loading import load_model, load_weights
from engine.model.quantized import (
    QuantizedEmbedding,
    QuantizedLinear,
    dequantize,
    is_quantized_tensor,
    quantize_model,
    quantize_rows,
    quantized_module_names,
    weight_bytes,
)


@settings(max_examples=60, deadline=None)
@given(
    arrays("float32", st.tuples(st.integers(1, 6), st.integers(1, 40)), elements=st.floats(-1e4, 1e4, width=32)),
)
def test_quantized_rows_round_to_the_nearest_step_of_their_scale(rows) -> None:
    w = torch.from_numpy(rows)
    values, scales = torch.empty(w.shape, dtype=torch.int8), torch.empty(w.shape[0])
    quantize_rows(w, values, scales)
    peak = w.abs().amax(dim=1)
    assert torch.equal(scales, torch.where(peak > 0, peak / 127, torch.ones_like(peak)).clamp_min(torch.finfo(torch.float32).tiny))
    assert int(values.abs().max()) <= 127
    restored = dequantize(values, scales, torch.float32)
    # Every weight is within half a step of its row's scale (float32 rounding aside), and the largest is exact.
    assert torch.all((restored - w).abs() <= scales[:, None] * (0.5 + 1e-5) + 1e-6 * w.abs())
    again_values, again_scales = torch.empty_like(values), torch.empty_like(scales)
    quantize_rows(w.clone(), again_values, again_scales)
    assert torch.equal(values, again_values) and torch.equal(scales, again_scales)  # deterministic


@pytest.fixture(scope="module")
def int8_loaded(tiny_model_dir: Path):
    return load_model(tiny_model_dir, device="cpu", precision="int8")


def test_int8_loading_quantizes_every_listed_matrix_from_the_checkpoint(tiny_model_dir: Path, tiny_loaded, int8_loaded) -> None:
    bf16_model, model = tiny_loaded.model, int8_loaded.model
    names = quantized_module_names(bf16_model)
    assert len(names) > 20
    for name in names:
        module = model.get_submodule(name)
        assert isinstance(module, (QuantizedLinear, QuantizedEmbedding)), name
        reference = bf16_model.get_submodule(name).weight.detach()
        values, scales = torch.empty(reference.shape, dtype=torch.int8), torch.empty(reference.shape[0])
        quantize_rows(reference, values, scales)  # the model loads in float32 on the CPU: the file's values
        assert torch.equal(module.values, values) and torch.equal(module.scales, scales), name
    # The codebooks' logits heads are their embedding tables (tied), one copy of the int8 rows.
    for embedding in model.depth_embeddings:
        assert embedding.to_logits.values is embedding.embedding.values
    # Everything else is exactly the bf16 model's.
    quantized_params = {f"{n}.weight" for n in names} | {f"depth_embeddings.{i}.to_logits.weight" for i in range(8)}
    ours = dict(model.named_parameters())
    for name, param in bf16_model.named_parameters():
        if name not in quantized_params:
            assert torch.equal(ours[name], param), name
    assert weight_bytes(model) < 0.65 * weight_bytes(bf16_model)


def test_int8_loading_never_makes_a_full_copy_of_a_quantized_matrix(tiny_model_dir: Path, monkeypatch) -> None:
    """Each matrix is read from the checkpoint in chunks of rows and quantized into its int8 storage: the
    rows given to the quantizer never cover a whole matrix bigger than a chunk."""
    import engine.model.quantized as quantized

    monkeypatch.setattr(quantized, "QUANTIZE_CHUNK_ELEMENTS", 4096)
    chunks: list[int] = []
    original = quantized.quantize_rows

    def spy(rows, values, scales):
        chunks.append(rows.numel())
        return original(rows, values, scales)

    monkeypatch.setattr(quantized, "quantize_rows", spy)
    model, _ = load_weights(tiny_model_dir, device=torch.device("cpu"), dtype=torch.float32, precision="int8")
    widest = max(m.in_features if isinstance(m, QuantizedLinear) else m.embedding_dim for m in model.modules()
                 if isinstance(m, (QuantizedLinear, QuantizedEmbedding)))
    assert chunks and max(chunks) <= max(4096, widest)
    assert max(chunks) < model.lfm.embed_tokens.values.numel()
    # Nothing of the quantized modules is left as a floating matrix.
    for name in quantized_module_names(model):
        module = model.get_submodule(name)
        assert all(not t.is_floating_point() or t.dim() < 2 for t in module.parameters()), name


def test_memory_need_counts_int8_matrices_at_a_byte_per_weight(tiny_model_dir: Path, tiny_loaded, int8_loaded) -> None:
    from engine.model.checkpoint import read_safetensors_header
    from engine.model.memory import model_need

    bf16, int8 = (model_need(tiny_model_dir, context_tokens=4096, precision=p) for p in ("bf16", "int8"))
    header = read_safetensors_header(tiny_model_dir / "model.safetensors")[1]
    quantized = [(n, e["shape"]) for n, e in header.items() if is_quantized_tensor(n, e["shape"])]
    expected_saving = sum(shape[0] * shape[1] - 4 * shape[0] for _, shape in quantized)
    # and the detokenizer's transformer at 2 bytes instead of 4 (tests/test_detokenizer_precision.py)
    detokenizer = read_safetensors_header(tiny_model_dir / "audio_detokenizer" / "model.safetensors")[1]
    expected_saving += sum(2 * math.prod(e["shape"]) for n, e in detokenizer.items()
                           if n.startswith(("emb.", "lfm.")) and n != "lfm.embed_tokens.weight")
    assert bf16.weights - int8.weights == expected_saving
    # The header rule names exactly the tensors the loader quantizes (a tied table is stored once).
    stored = {n.removesuffix(".weight").replace("to_logits", "embedding") for n, _ in quantized}
    assert stored == set(quantized_module_names(int8_loaded.model))


@torch.inference_mode()
def test_engine_plain_paths_match_liquid_audios_modules_on_the_int8_weights(int8_loaded) -> None:
    """The static engine over Int8Matrix weights (prefill, decode, text head, depthformer) computes what
    liquid-audio's / transformers' modules compute with the same weights dequantized (float32 on the CPU)."""
    from engine.chat.generation import EagerBackend
    from engine.realtime.backend import GraphedBackend

    model = int8_loaded.model
    engine = GraphedBackend(int8_loaded, context_tokens=96, capture=False)
    reference = EagerBackend(model)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randn(1, 12, model.lfm.config.hidden_size, generator=generator)
    engine.prefill(prompt)
    reference.prefill(prompt)
    torch.testing.assert_close(engine.hidden[0], reference._hidden, rtol=1e-4, atol=1e-4)
    for step in range(6):
        token = torch.randint(0, model.lfm.config.vocab_size, (1,), generator=generator)
        engine.feed_token(token)
        torch.testing.assert_close(engine.input, model.lfm.embed_tokens(token))
        reference._pending = engine.input[None].clone()
        engine.decode()
        reference.decode()
        torch.testing.assert_close(engine.hidden[0], reference._hidden, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(engine.text_logits(), torch.nn.functional.linear(reference._hidden, model.lfm.embed_tokens.weight),
                                   rtol=1e-4, atol=1e-4)
    for _ in range(3):
        hidden = torch.randn(1, model.lfm.config.hidden_size, generator=generator)
        codes = torch.randint(0, 2048, (8,), generator=generator)
        torch.testing.assert_close(engine.depthformer.teacher_forced_logits(hidden, codes), liquid_depthformer_logits(model, hidden, codes),
                                   rtol=1e-4, atol=1e-4)


def _make_adapter(model: torch.nn.Module, folder: Path, *, seed: int, targets: list[str]) -> None:
    import copy

    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=targets, init_lora_weights=False)
    get_peft_model(copy.deepcopy(model), config).save_pretrained(str(folder))


@torch.inference_mode()
def test_voices_on_int8_merge_into_the_pristine_rows_and_switch_back_exactly(tiny_model_dir: Path, tiny_loaded, tmp_path: Path) -> None:
    from engine.model.lora import VoiceSwitcher, load_voice
    from engine.realtime.backend import GraphedBackend

    loaded = load_model(tiny_model_dir, device="cpu", precision="int8")
    engine = GraphedBackend(loaded, context_tokens=64, capture=False)  # fuses q|k|v and w1|w3: views of one matrix
    model = loaded.model
    state = {name: t.clone() for name, t in model.state_dict().items()}
    pointers = {name: t.data_ptr() for name, t in model.state_dict().items()}
    _make_adapter(tiny_loaded.model, tmp_path / "attn", seed=1, targets=["q_proj", "k_proj", "v_proj", "out_proj", "w1", "w2", "w3"])
    _make_adapter(tiny_loaded.model, tmp_path / "all", seed=2, targets=["q_proj", "in_proj", "qkv_proj", "depth_linear", "w2"])
    switcher = VoiceSwitcher(model, checkpoint=loaded.weights)
    voice = load_voice(tmp_path / "attn")
    switcher.apply(voice)
    for delta in voice.deltas:
        module = model.get_submodule(delta.module)
        assert isinstance(module, QuantizedLinear)
        merged = tiny_loaded.model.get_submodule(delta.module).weight.float() + delta.scale * delta.b @ delta.a
        values, scales = torch.empty_like(module.values), torch.empty_like(module.scales)
        quantize_rows(merged, values, scales)
        assert torch.equal(module.values, values) and torch.equal(module.scales, scales), delta.module
    # The engine's fused matrices see the merge (the layers' buffers are views into them).
    attention = next(layer for layer in engine.backbone.layers if hasattr(layer, "qkv"))
    assert attention.qkv.values.data_ptr() == model.lfm.layers[engine.backbone.layers.index(attention)].self_attn.q_proj.values.data_ptr()
    for other in (load_voice(tmp_path / "all"), None):
        switcher.apply(other)
    after = model.state_dict()
    for name, tensor in state.items():
        assert torch.equal(after[name], tensor), name  # back exactly to what loading made
    assert {name: t.data_ptr() for name, t in after.items()} == pointers


def test_a_model_quantized_in_memory_equals_one_loaded_int8(tiny_model_dir: Path, int8_loaded) -> None:
    model = load_model(tiny_model_dir, device="cpu").model
    quantize_model(model, device=torch.device("cpu"))
    theirs = int8_loaded.model.state_dict()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, theirs[name]), name


@torch.inference_mode()
def test_the_precision_check_passes_identical_engines_and_measures_int8(tiny_model_dir: Path, tiny_loaded, int8_loaded) -> None:
    from engine.chat.precision_check import Thresholds, compare_with_reference, record_reference
    from engine.realtime.backend import GraphedBackend

    bf16 = GraphedBackend(tiny_loaded, context_tokens=96, capture=False)
    int8 = GraphedBackend(int8_loaded, context_tokens=96, capture=False)
    prompt = torch.randn(1, 10, tiny_loaded.model.lfm.config.hidden_size, generator=torch.Generator().manual_seed(3))
    reference = record_reference(bf16, prompt, n_text=3, n_audio=4)
    assert reference.kinds.count("text") == 6 and reference.kinds.count("audio") == 8
    same = compare_with_reference(bf16, reference)
    assert same.passed and all(s.kl_mean == 0 and s.top1 == 1 for s in same.streams.values())
    report = compare_with_reference(int8, reference)
    assert set(report.streams) == {"text", *(f"codebook_{i}" for i in range(8))}
    assert all(0 < s.kl_mean < 0.5 for s in report.streams.values())
    # The verdict follows the thresholds.
    assert not compare_with_reference(int8, reference, Thresholds(text_top1=0.0, max_kl=0.0)).passed
    assert compare_with_reference(int8, reference, Thresholds(text_top1=0.0, max_kl=1.0)).passed


def test_sessions_run_the_int8_check_on_their_own_prompt_and_keep_the_verdict(tiny_model_dir: Path, tmp_path: Path) -> None:
    from engine.chat.audio_decoding import make_audio_decoder
    from engine.chat.session import ChatSession
    from engine.model.precision_verdicts import load_verdict, store_verdict
    from engine.realtime.backend import GraphedBackend

    def session(precision: str) -> ChatSession:  # the real-time engine, run eagerly (ChatSession.open's CPU path is the eager one)
        loaded = load_model(tiny_model_dir, device="cpu", precision=precision)
        return ChatSession(loaded, GraphedBackend(loaded, context_tokens=160, capture=False), make_audio_decoder(loaded, use_cuda_graphs=False),
                           context_tokens=160, fallback_reason="test", graphs_ready=False, model_id=None)

    bf16, int8 = session("bf16"), session("int8")
    assert int8.loaded.precision == "int8" and isinstance(int8.loaded.model.lfm.embed_tokens, QuantizedEmbedding)
    prompt = bf16.check_prompt()
    assert prompt.shape[1] == int8.check_prompt().shape[1] > 10
    reference = bf16.record_check_reference()
    report = int8.compare_with_check_reference(reference)
    assert set(report.streams) == {"text", *(f"codebook_{i}" for i in range(8))}
    assert int8.conversation.positions == bf16.conversation.positions  # a fresh conversation after the check
    verdicts = tmp_path / "verdicts.json"
    assert load_verdict(tiny_model_dir, "cpu", verdicts) is None
    store_verdict(tiny_model_dir, "cpu", report.as_dict(), verdicts)
    assert load_verdict(tiny_model_dir, "cpu", verdicts)["passed"] == report.passed
    assert load_verdict(tiny_model_dir, "other GPU", verdicts) is None
    verdicts.write_bytes(verdicts.read_bytes()[:-7])  # damaged: checked again, never taken as a pass
    assert load_verdict(tiny_model_dir, "cpu", verdicts) is None
