"""Issue 25 on the CPU, through the real loading code on the tiny checkpoint: the loader never holds a
float32 copy of the model, builds exactly what liquid-audio's own `from_pretrained` builds, and a voice
switch keeps no copy of the weights on the model's device (the pristine rows come from the checkpoint).

Memory is followed with a TorchDispatchMode that sees every tensor an aten op creates: the float32
storages alive on the model's device (until their storage is freed), at their peak (the GPU figures are the benchmark's `small_cards`).
"""

from __future__ import annotations

import json
import weakref
from types import SimpleNamespace
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from engine.errors import GpuMemoryError, ModelFilesError
from engine.model.loading import UNUSED_AUDIO_HEAD, load_model, load_weights
from engine.model.lora import MERGE_CHUNK_ELEMENTS, VoiceSwitcher, load_voice
from engine.model.memory import model_need


class LiveStorages(TorchDispatchMode):
    """Bytes of the `dtype` storages on `device` that ops create, alive now and at their peak."""

    def __init__(self, dtype: torch.dtype = torch.float32, device: str = "cpu") -> None:
        super().__init__()
        self.dtype, self.device = dtype, device
        self.live: dict[int, int] = {}
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor) and not t.is_meta}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor) or t.dtype != self.dtype or t.device.type != self.device:
                continue
            storage = t.untyped_storage()
            key = storage.data_ptr()
            if key in inputs or key in self.live or storage.nbytes() == 0:
                continue  # a view or an in-place result: nothing new was allocated
            self.live[key] = storage.nbytes()
            # Storages keep their Python object while any tensor uses them: this fires when the memory is freed.
            weakref.finalize(storage, self.live.pop, key, None)
            self.peak = max(self.peak, sum(self.live.values()))
        return out

    @property
    def now(self) -> int:
        return sum(self.live.values())


def _parameter_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_loading_in_bf16_never_holds_a_float32_model(tiny_model_dir: Path) -> None:
    from liquid_audio import LFM2AudioModel

    with LiveStorages() as ours:
        model, _ = load_weights(tiny_model_dir, device=torch.device("cpu"), dtype=torch.bfloat16)
    with LiveStorages() as theirs:
        LFM2AudioModel.from_pretrained(tiny_model_dir, dtype=torch.bfloat16, device="cpu")
    model_float32_bytes = sum(p.numel() * 4 for p in model.parameters())
    largest_parameter = max(p.numel() * 4 for p in model.parameters())
    positional_encodings = model.conformer.pos_enc.pe.numel() * 4  # liquid-audio computes them in float32
    # One parameter at a time while the model is built, and the buffers liquid-audio computes in float32:
    bound = largest_parameter + positional_encodings
    assert ours.peak <= bound < 0.5 * model_float32_bytes, (ours.peak, bound, model_float32_bytes)
    # liquid-audio's own from_pretrained holds the whole model in float32 (what this test exists to catch).
    assert theirs.peak >= model_float32_bytes > bound
    assert all(p.dtype == torch.bfloat16 for p in model.parameters() if p.is_floating_point())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_loader_builds_exactly_what_liquid_audio_builds(tiny_model_dir: Path, dtype: torch.dtype) -> None:
    from liquid_audio import LFM2AudioModel

    reference = LFM2AudioModel.from_pretrained(tiny_model_dir, dtype=dtype, device="cpu")
    loaded = load_model(tiny_model_dir, device="cpu", dtype=dtype).model
    for kind in ("named_parameters", "named_buffers"):
        ours = dict(getattr(loaded, kind)(remove_duplicate=False))
        theirs = dict(getattr(reference, kind)(remove_duplicate=False))
        assert ours.keys() == theirs.keys()
        for name, tensor in theirs.items():
            if name == UNUSED_AUDIO_HEAD:  # never read: not loaded (engine/model/loading.py)
                assert ours[name].shape == (0, tensor.shape[1]) and tensor.numel() > 0
                continue
            assert ours[name].dtype == tensor.dtype and torch.equal(ours[name], tensor), name

    def tied(model: torch.nn.Module) -> list[list[str]]:
        groups: dict[int, list[str]] = {}
        for name, p in model.named_parameters(remove_duplicate=False):
            groups.setdefault(p.data_ptr(), []).append(name)
        return sorted(g for g in groups.values() if len(g) > 1)

    assert tied(loaded) == tied(reference) and tied(loaded)
    assert loaded.lfm.config._attn_implementation == reference.lfm.config._attn_implementation


def test_detokenizer_is_exactly_liquid_audios_less_its_unused_token_table(tiny_model_dir: Path, monkeypatch) -> None:
    from liquid_audio import LFM2AudioProcessor

    from engine.model.loading import UNUSED_TOKEN_TABLE, load_detokenizer

    monkeypatch.setattr(torch.nn.Module, "cuda", lambda module, device=None: module)  # liquid-audio's hard-coded .cuda()
    theirs = LFM2AudioProcessor.from_pretrained(tiny_model_dir, device="cpu").audio_detokenizer
    with LiveStorages() as float32:
        ours = load_detokenizer(tiny_model_dir / "audio_detokenizer", device=torch.device("cpu"))
    for kind in ("named_parameters", "named_buffers"):
        mine, reference = dict(getattr(ours, kind)()), dict(getattr(theirs, kind)())
        assert mine.keys() == reference.keys()
        for name, tensor in reference.items():
            if name == UNUSED_TOKEN_TABLE:
                assert mine[name].numel() == 0
                continue
            assert mine[name].dtype == tensor.dtype and torch.equal(mine[name], tensor), name
    # Each parameter allocated once, filled in place: never a second copy of the detokenizer.
    assert float32.peak <= _parameter_bytes(ours) + sum(b.nbytes for b in ours.buffers()) + 4 * max(p.numel() for p in theirs.parameters())
    codes = torch.randint(0, 2048, (1, 8, 6))
    assert torch.equal(ours(codes), theirs(codes))  # it never read the table it no longer has


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16])
def test_cuda_loader_reads_the_files_bit_for_bit(tiny_model_dir: Path, dtype: torch.dtype) -> None:
    """On the GPU the tensors travel through the pinned staging buffers: every one must land exactly."""
    from liquid_audio import LFM2AudioModel

    reference = LFM2AudioModel.from_pretrained(tiny_model_dir, dtype=dtype, device="cuda")
    loaded = load_model(tiny_model_dir, device="cuda", dtype=dtype)
    for kind in ("named_parameters", "named_buffers"):
        ours, theirs = dict(getattr(loaded.model, kind)()), dict(getattr(reference, kind)())
        for name, tensor in theirs.items():
            if name == UNUSED_AUDIO_HEAD:  # never read: not loaded
                assert ours[name].numel() == 0
                continue
            assert torch.equal(ours[name], tensor), name


def test_a_checkpoint_missing_a_weight_is_refused_by_name(tiny_model_dir: Path, tmp_path: Path, monkeypatch) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    weights = load_file(str(folder / "model.safetensors"))
    del weights["lfm.layers.0.feed_forward.w2.weight"]
    save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
    # The folder check names it first; past it (a check that missed a name), the loader must not leave
    # uninitialised memory in the model.
    monkeypatch.setattr("engine.model.loading.check_model_folder", lambda _folder: [])
    with pytest.raises(ModelFilesError, match="w2.weight"):
        load_model(folder, device="cpu")


def _write_voice(folder: Path, model: torch.nn.Module, suffixes: tuple[str, ...] | None, seed: int) -> None:
    from engine.bench.small_cards import write_lora_voice

    shapes = {
        name: tuple(m.weight.shape)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear) and not name.endswith("to_logits") and (suffixes is None or name.rsplit(".", 1)[-1] in suffixes)
    }
    write_lora_voice(folder, shapes, torch.Generator().manual_seed(seed))


def test_voice_switches_keep_no_copy_of_the_weights(tiny_model_dir: Path, tmp_path: Path) -> None:
    loaded = load_model(tiny_model_dir, device="cpu", dtype=torch.float32)
    model = loaded.model
    pristine = {name: p.detach().numpy().copy() for name, p in model.named_parameters()}
    _write_voice(tmp_path / "attn", model, ("q_proj", "k_proj", "v_proj", "out_proj", "w1", "w2", "w3"), seed=1)
    _write_voice(tmp_path / "all", model, None, seed=2)
    voices = {"attn": load_voice(tmp_path / "attn"), "all": load_voice(tmp_path / "all")}
    adapter_bytes = max(sum(d.a.numel() + d.b.numel() for d in v.deltas) * 4 for v in voices.values())
    switcher = VoiceSwitcher(model, checkpoint=loaded.weights)
    merged: dict[str, dict[str, np.ndarray]] = {}
    with LiveStorages() as float32:
        for name in ("attn", None, "all", None, "attn", "all", "attn", None):
            switcher.apply(voices[name] if name else None)
            # After every switch the device holds the weights again and nothing else (an adapter's size at most).
            assert float32.now <= adapter_bytes, (name, float32.now)
            # (numpy copies: the test's own bookkeeping allocates nothing the mode would count)
            state = {n: p.detach().numpy().copy() for n, p in model.named_parameters()}
            if name is None:
                assert all(np.array_equal(state[n], pristine[n]) for n in pristine)
            # A voice's weights depend only on the voice, never on the voices merged before it.
            assert all(np.array_equal(state[n], merged.setdefault(str(name), state)[n]) for n in state)
    # While merging: a chunk of rows at a time, never a whole weight's worth of copies.
    largest_chunk = max(min(p.numel(), MERGE_CHUNK_ELEMENTS + p.shape[-1]) for p in model.parameters() if p.dim() == 2) * 4
    assert float32.peak <= 2 * largest_chunk + adapter_bytes, (float32.peak, largest_chunk)
    assert switcher.pristine.host_bytes == 0  # read back from the checkpoint, not kept in host memory either
    assert not np.array_equal(merged["attn"]["lfm.layers.0.feed_forward.w2.weight"], pristine["lfm.layers.0.feed_forward.w2.weight"])


def test_memory_need_counts_weights_as_loaded(tiny_model_dir: Path, tiny_loaded) -> None:
    need = model_need(tiny_model_dir, context_tokens=4096)
    bf16_model = sum(p.numel() * 2 for p in tiny_loaded.model.parameters())
    detokenizer = _parameter_bytes(tiny_loaded.processor.audio_detokenizer)
    buffers_in_file = sum(b.numel() * (2 if b.is_floating_point() else b.element_size()) for n, b in tiny_loaded.model.state_dict().items()
                          if n.endswith(("running_mean", "running_var", "num_batches_tracked")))
    assert need.weights == pytest.approx(bf16_model + detokenizer + buffers_in_file, rel=0.01)
    assert model_need(tiny_model_dir, context_tokens=8192).runtime > need.runtime


def test_too_small_a_card_is_told_before_loading(tiny_model_dir: Path, monkeypatch) -> None:
    from engine.chat.session import ChatSession

    monkeypatch.setattr("engine.chat.opening.default_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (int(1.0e9), int(6.4e9)))
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda device=None: 1.0)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: SimpleNamespace(total_memory=int(6.4e9)))
    monkeypatch.setattr("engine.chat.opening.use_expandable_cuda_segments", lambda: False)
    monkeypatch.setattr("engine.chat.opening.compile_in_background", lambda device: None)
    loads = []
    monkeypatch.setattr("engine.chat.opening.load_model", lambda *a, **k: loads.append(a))
    with pytest.raises(GpuMemoryError) as raised:
        ChatSession.open(str(tiny_model_dir), device="cuda")
    assert not loads  # told before a byte was loaded
    assert raised.value.values["free"] == "1.0" and float(raised.value.values["needed"]) >= 1.2


def test_full_size_writer_round_trips_through_the_app_loader(tmp_path: Path) -> None:
    """The benchmark's checkpoint writer (small_cards), on a tiny config: the folder passes the app's check,
    loads through the app's loader, and both voices merge into it."""
    from engine.bench.small_cards import write_full_size_checkpoint
    from engine.model.store import check_model_folder
    from engine.model.tiny_checkpoint import _DETOKENIZER, tiny_config

    config = tiny_config()
    config["audio_detokenizer"] = {k: v for k, v in _DETOKENIZER.items() if k != "model_type"}
    config_path = tmp_path / "config.json"
    config_path.write_text(json.dumps(config))
    folder = tmp_path / "LFM2.5-Audio-1.5B-JP"
    written = write_full_size_checkpoint(folder, config_path=config_path, device="cpu")
    assert check_model_folder(folder) == []
    loaded = load_model(folder, device="cpu")
    switcher = VoiceSwitcher(loaded.model, checkpoint=loaded.weights)
    for voice in ("attention_mlp", "all_linear"):
        switcher.apply(load_voice(tmp_path / f"voice-{voice}"))
        assert len(switcher.voice.deltas) == written["voices"][voice]["modules"]
    assert written["voices"]["all_linear"]["modules"] > written["voices"]["attention_mlp"]["modules"]


def test_a_first_launch_finds_no_compiled_kernels_and_the_second_finds_the_firsts(tmp_path: Path) -> None:
    """small_cards' launches: each card's first launch gets an empty app data folder (where the kernel cache
    lives), even when an earlier run left one; its second launch gets the folder the first filled."""
    import os
    import subprocess
    import sys

    from engine.bench.small_cards import cache_environment, data_home

    first = data_home(tmp_path, "6 GB-bf16", "first")
    (first / "voicechat" / "kernel-cache").mkdir(parents=True)
    (first / "voicechat" / "kernel-cache" / "matvec.bin").write_bytes(b"compiled")
    second = data_home(tmp_path, "6 GB-bf16", "second")
    assert second == first and (second / "voicechat" / "kernel-cache" / "matvec.bin").read_bytes() == b"compiled"
    again = data_home(tmp_path, "6 GB-bf16", "first")
    assert again == first and not any(again.iterdir())
    assert data_home(tmp_path, "8 GB-bf16", "first") != first
    # The child process's kernel cache is in the folder given, and so are the driver's and PyTorch's.
    environment = cache_environment(first)
    cache = subprocess.run(
        [sys.executable, "-c", "from engine.paths import kernel_cache_dir; print(kernel_cache_dir())"],
        env={**os.environ, **environment}, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert Path(cache).is_relative_to(first)
    assert all(Path(environment[name]).is_relative_to(first) for name in ("CUDA_CACHE_PATH", "PYTORCH_KERNEL_CACHE_PATH"))
