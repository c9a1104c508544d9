"""Voice switches in both precisions (issue 45), on the tiny checkpoint through the real loader and real peft
adapters: whatever voices came before, a switch leaves exactly the weights a fresh merge of the voice gives
(bitwise), tied heads included; a voice that cannot be merged changes nothing; memory stays flat; and the
reader that streams the checkpoint's bytes (engine/model/row_reads.py) delivers every byte in order.

More switch sequences: VOICE_SWITCH_EXAMPLES=50 (default 6).
"""

from __future__ import annotations

import copy
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import LoraError
from engine.model.loading import load_model
from engine.model.lora import VoiceSwitcher, load_voice
from engine.model.quantized import QuantizedLinear, quantize_model, quantize_rows
from engine.model.row_reads import ByteRange, RowReader, TruncatedFile
from voice_kinds import KINDS, make_voice

EXAMPLES = int(os.environ.get("VOICE_SWITCH_EXAMPLES", "6"))
@pytest.fixture(scope="module")
def voices(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    folder = tmp_path_factory.mktemp("voices")
    model = load_model(tiny_model_dir, device="cpu").model
    for seed, kind in enumerate(KINDS, start=1):
        make_voice(model, folder / kind, kind, seed)
    return {kind: load_voice(folder / kind) for kind in KINDS}


def _load(folder: Path, precision: str):
    return load_model(folder, device="cpu", dtype=torch.bfloat16, precision=precision)


def _state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.clone() for name, tensor in model.state_dict().items()}


def _differences(model: torch.nn.Module, expected: dict[str, torch.Tensor]) -> list[str]:
    now = model.state_dict()
    return [name for name, tensor in expected.items() if not torch.equal(now[name], tensor)]


@pytest.fixture(scope="module", params=["bf16", "int8"])
def fresh_merges(request, tiny_model_dir: Path, voices) -> tuple[str, dict[str | None, dict[str, torch.Tensor]]]:
    """Per voice (None: the model's own), the weights a fresh merge gives: a freshly loaded model, one switch."""
    precision = request.param
    loaded = _load(tiny_model_dir, precision)
    merges: dict[str | None, dict[str, torch.Tensor]] = {None: _state(loaded.model)}
    for kind, voice in voices.items():
        model = copy.deepcopy(loaded.model)  # ties kept: deepcopy shares what the model shares
        VoiceSwitcher(model, checkpoint=loaded.weights).apply(voice)
        merges[kind] = _state(model)
        assert _differences(model, merges[None]), kind  # the voice does change the weights
    return precision, merges


def test_every_voice_merges_in_both_precisions_as_the_formula_says(tiny_model_dir: Path, voices, fresh_merges) -> None:
    """W = round(W0 + Σ scale · B @ A) in float32 from the checkpoint's rows (quantized once per row in int8), for
    every adapted layer; the tied heads' merge lands in their embedding tables too (one weight), in int8 as in bf16."""
    from engine.model.checkpoint import CheckpointTensors

    precision, merges = fresh_merges
    checkpoint = CheckpointTensors(tiny_model_dir / "model.safetensors")
    model = _load(tiny_model_dir, precision).model
    for kind, voice in voices.items():
        state = merges[kind]
        for delta in voice.deltas:
            stored = delta.module + ".weight"
            if stored not in checkpoint:  # a tied head: the checkpoint has it under its table's name
                stored = delta.module.replace("to_logits", "embedding") + ".weight"
            expected = checkpoint.tensor(stored).to(torch.float32, copy=True).addmm_(delta.b.float(), delta.a.float(), alpha=delta.scale)
            module = model.get_submodule(delta.module)
            if isinstance(module, QuantizedLinear):
                values, scales = torch.empty(expected.shape, dtype=torch.int8), torch.empty(expected.shape[0])
                quantize_rows(expected, values, scales)
                assert torch.equal(state[delta.module + ".values"], values) and torch.equal(state[delta.module + ".scales"], scales)
            else:
                assert torch.equal(state[delta.module + ".weight"], expected.to(torch.bfloat16)), (kind, delta.module)
    heads = {d.module for d in voices["tied_heads"].deltas}
    assert heads == {f"depth_embeddings.{i}.to_logits" for i in range(8)}
    table = "depth_embeddings.3.embedding." + ("values" if precision == "int8" else "weight")
    assert not torch.equal(merges["tied_heads"][table], merges[None][table])  # one weight: the table moved with its head


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sequence=st.lists(st.sampled_from([None, *KINDS]), min_size=1, max_size=6))
def test_any_sequence_of_switches_leaves_exactly_the_fresh_merge(tiny_model_dir: Path, voices, fresh_merges, sequence) -> None:
    """Through the engine's fused matrices (q|k|v and w1|w3 are views of one matrix), whatever came before."""
    from engine.realtime.backend import GraphedBackend

    precision, merges = fresh_merges
    loaded = _load(tiny_model_dir, precision)
    GraphedBackend(loaded, context_tokens=32, capture=False)  # the layers' weights become views of fused matrices
    pointers = {name: t.data_ptr() for name, t in loaded.model.state_dict().items()}
    switcher = VoiceSwitcher(loaded.model, checkpoint=loaded.weights, reader=loaded.reader)
    for kind in sequence:
        switcher.apply(voices[kind] if kind else None)
        assert _differences(loaded.model, merges[kind]) == [], (precision, sequence, kind)
        assert switcher.voice_name == (kind if kind else None)
    assert {name: t.data_ptr() for name, t in loaded.model.state_dict().items()} == pointers  # in place, always


def test_a_voice_that_cannot_be_merged_changes_nothing(tiny_model_dir: Path, voices) -> None:
    """An int8 model quantized in memory keeps no bf16 rows: a voice that adapts an int8 layer is refused before a
    single weight is written, even when layers it could merge come first, and the previous voice stays."""
    model = load_model(tiny_model_dir, device="cpu", dtype=torch.bfloat16).model
    quantize_model(model, device=torch.device("cpu"))
    switcher = VoiceSwitcher(model)
    conformer_only = copy.copy(voices["all_linear"])
    object.__setattr__(conformer_only, "deltas", tuple(d for d in voices["all_linear"].deltas if d.module.startswith("conformer.")))
    object.__setattr__(conformer_only, "name", "conformer")
    switcher.apply(conformer_only)  # plain layers: host copies of their weights
    before = _state(model)
    with pytest.raises(LoraError) as raised:
        switcher.apply(voices["all_linear"])  # audio_adapter.*, conformer.* (fine) sort before lfm.* (int8)
    assert "bf16 weights for" in raised.value.message
    assert sorted(d.module for d in voices["all_linear"].deltas)[0].startswith(("audio_adapter", "conformer"))
    assert _differences(model, before) == [] and switcher.voice_name == "conformer"
    switcher.apply(None)  # and the voice that did fit comes out again exactly
    reference = load_model(tiny_model_dir, device="cpu", dtype=torch.bfloat16).model
    quantize_model(reference, device=torch.device("cpu"))
    assert _differences(model, _state(reference)) == []


def test_memory_stays_flat_over_many_switches(tiny_model_dir: Path, voices) -> None:
    """Twenty switches in int8: the float32 storages alive after each are the adapter's at most (none after going
    back to the plain voice), and the host memory the switcher keeps (the reader's slots) does not grow."""
    from test_small_card_memory import LiveStorages

    loaded = _load(tiny_model_dir, "int8")
    switcher = VoiceSwitcher(loaded.model, checkpoint=loaded.weights, reader=loaded.reader)
    order = ["all_linear", None, "qv", "attention_mlp", "tied_heads", None, "partial"] * 3
    held = []
    with LiveStorages() as float32:
        for kind in order:
            switcher.apply(voices[kind] if kind else None)
            held.append(switcher.host_bytes)
            assert float32.now == 0, (kind, float32.now)
    assert held == [held[0]] * len(held) and held[0] == loaded.reader.host_bytes > 0
    assert switcher.pristine.host_bytes == 0  # read back from the checkpoint, not kept


# --------------------------------------------------------------------------- the reader


@settings(max_examples=max(EXAMPLES, 10), deadline=None)
@given(pieces=st.lists(st.tuples(st.integers(0, 4000), st.integers(0, 300), st.booleans()), min_size=1, max_size=40),
       slots=st.integers(1, 4), threads=st.integers(1, 3))
def test_the_reader_delivers_every_range_in_order(tmp_path_factory, pieces, slots, threads) -> None:
    """Ranges of a file, with and without destinations, more of them than slots: each arrives in order, whole,
    and a slot is never refilled while the consumer still reads it (the consumer dawdles on every other item)."""
    path = tmp_path_factory.mktemp("reads") / "data.bin"
    data = np.random.default_rng(len(pieces)).integers(0, 256, 5000, dtype=np.uint8)
    path.write_bytes(data.tobytes())
    reader = RowReader("cpu", slot_bytes=300, slots=slots, threads=threads)
    reads = [ByteRange(path, offset, min(size, 5000 - offset), torch.empty(min(size, 5000 - offset), dtype=torch.uint8) if direct else None)
             for offset, size, direct in pieces]
    for i, (read, got) in enumerate(zip(reads, reader.stream(reads), strict=True)):
        expected = data[read.offset : read.offset + read.nbytes]
        if i % 2:
            time.sleep(0.001)
        assert np.array_equal(got.numpy(), expected), i
        if read.destination is not None:
            assert got.data_ptr() == read.destination.data_ptr()
    reader.close()
    assert reader.host_bytes == 0


def test_a_truncated_file_is_an_error_and_no_reader_thread_is_left_behind(tmp_path: Path) -> None:
    path = tmp_path / "short.bin"
    path.write_bytes(bytes(1000))
    reader = RowReader("cpu", slot_bytes=256, slots=2, threads=2)
    reads = [ByteRange(path, offset, 200) for offset in range(0, 1400, 200)]
    with pytest.raises(TruncatedFile, match="truncated"):
        for _ in reader.stream(reads):
            pass
    assert [t for t in threading.enumerate() if t.name.startswith(reader.thread_name)]  # the pool lives on for the next stream
    assert sum(1 for _ in reader.stream(reads[:3])) == 3  # and works
    reader.close()
    assert not [t for t in threading.enumerate() if t.name.startswith(reader.thread_name)]


def test_a_voice_read_a_moment_ago_is_reused_and_one_trained_again_is_read_again(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The switcher keeps the last voices it read (their adapters are what it costs, counted in host_bytes); a voice
    written into the same folder again (a training run that finished) is read again and merged as itself."""
    loaded = _load(tiny_model_dir, "int8")
    switcher = VoiceSwitcher(loaded.model, checkpoint=loaded.weights, reader=loaded.reader)
    base = load_model(tiny_model_dir, device="cpu").model
    make_voice(base, tmp_path / "mine", "attention_mlp", seed=5)
    first = switcher.load(tmp_path / "mine")
    assert switcher.load(tmp_path / "mine") is first
    adapter_bytes = sum(d.a.nbytes + d.b.nbytes for d in first.deltas)
    assert switcher.host_bytes == loaded.reader.host_bytes + adapter_bytes
    switcher.apply(first)
    make_voice(base, tmp_path / "mine", "attention_mlp", seed=6)  # trained again, same shapes and size
    again = switcher.load(tmp_path / "mine")
    assert again is not first and not torch.equal(again.deltas[0].a, first.deltas[0].a)
    switcher.apply(again)
    fresh = copy.deepcopy(_load(tiny_model_dir, "int8").model)
    VoiceSwitcher(fresh, checkpoint=loaded.weights).apply(load_voice(tmp_path / "mine"))
    assert _differences(loaded.model, _state(fresh)) == []
    for seed, kind in enumerate(("qv", "partial", "tied_heads"), start=7):  # more voices than it keeps
        make_voice(base, tmp_path / kind, kind, seed)
        switcher.load(tmp_path / kind)
    assert len(switcher._recent) == 3 and all(v is not again for v in switcher._recent.values())
