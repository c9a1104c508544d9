"""LoRA voices made with peft on the tiny model: merge math, in-place switching, clear errors."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from engine.errors import LoraError
from engine.model.lora import VoiceSwitcher, load_voice
from engine.model.loading import load_model

TARGETS = ["q_proj", "v_proj", "w1", "qkv_proj", "depth_linear"]


def make_adapter(model: torch.nn.Module, folder: Path, *, seed: int, r: int = 4, alpha: int = 8, **extra) -> torch.nn.Module:
    """A real peft adapter with random (non-zero) A and B; returns peft's own merged model."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(r=r, lora_alpha=alpha, target_modules=TARGETS, init_lora_weights=False, **extra)
    peft_model = get_peft_model(copy.deepcopy(model), config)
    peft_model.save_pretrained(str(folder))
    return peft_model.merge_and_unload()


@pytest.fixture
def model(tiny_model_dir: Path):
    return load_model(tiny_model_dir, device="cpu").model


def test_merge_equals_base_plus_scaled_product_and_peft(model, tmp_path: Path) -> None:
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    peft_merged = dict(make_adapter(model, tmp_path / "voice", seed=1).named_parameters())
    voice = load_voice(tmp_path / "voice")
    pointers = {name: p.data_ptr() for name, p in model.named_parameters()}

    VoiceSwitcher(model).apply(voice)

    params = dict(model.named_parameters())
    changed = {name for name in params if not torch.equal(params[name], base[name])}
    assert changed == {f"{d.module}.weight" for d in voice.deltas}
    assert len(changed) > 10
    for delta in voice.deltas:
        name = f"{delta.module}.weight"
        assert delta.scale == 8 / 4
        expected = base[name] + delta.scale * delta.b @ delta.a
        torch.testing.assert_close(params[name], expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(params[name], peft_merged[name], rtol=0, atol=1e-6)
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == pointers


def test_switching_voices_rewrites_the_same_tensors(model, tmp_path: Path) -> None:
    base = {name: p.detach().clone() for name, p in model.named_parameters()}
    merged_a = dict(make_adapter(model, tmp_path / "a", seed=1).named_parameters())
    merged_b = dict(make_adapter(model, tmp_path / "b", seed=2, r=2, alpha=4, use_rslora=True).named_parameters())
    pointers = {name: p.data_ptr() for name, p in model.named_parameters()}
    switcher = VoiceSwitcher(model)

    switcher.apply(load_voice(tmp_path / "a"))
    switcher.apply(load_voice(tmp_path / "b"))
    for name, p in model.named_parameters():
        torch.testing.assert_close(p, merged_b[name], rtol=0, atol=1e-6)
    switcher.apply(load_voice(tmp_path / "a"))
    for name, p in model.named_parameters():
        torch.testing.assert_close(p, merged_a[name], rtol=0, atol=1e-6)
    switcher.apply(None)
    for name, p in model.named_parameters():
        assert torch.equal(p, base[name]), name
    assert {name: p.data_ptr() for name, p in model.named_parameters()} == pointers
    assert switcher.voice_name is None


def _edit_adapter(folder: Path, rename: tuple[str, str] | None = None, reshape: str | None = None, base: str | None = None) -> None:
    from safetensors.torch import load_file, save_file

    weights = load_file(str(folder / "adapter_model.safetensors"))
    if rename:
        weights = {k.replace(*rename): v for k, v in weights.items()}
    if reshape:
        weights = {k: (torch.zeros(v.shape[0], v.shape[1] + 3) if reshape in k else v) for k, v in weights.items()}
    save_file(weights, str(folder / "adapter_model.safetensors"))
    if base:
        config = json.loads((folder / "adapter_config.json").read_text())
        config["base_model_name_or_path"] = base
        (folder / "adapter_config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"rename": ("lfm.layers.1.self_attn.q_proj", "lfm.layers.1.self_attn.x_proj")}, "it targets lfm.layers.1.self_attn.x_proj, which the model does not have"),
        ({"reshape": "lfm.layers.3.self_attn.v_proj.lora_A"}, "lfm.layers.3.self_attn.v_proj is"),
        ({"base": "someone/Other-Model-7B"}, "was trained for someone/Other-Model-7B"),
    ],
)
def test_unfit_adapter_is_refused_and_previous_voice_stays(model, tmp_path: Path, edit: dict, message: str) -> None:
    make_adapter(model, tmp_path / "good", seed=1)
    make_adapter(model, tmp_path / "bad", seed=3)
    _edit_adapter(tmp_path / "bad", **edit)
    switcher = VoiceSwitcher(model, model_id="LiquidAI/LFM2.5-Audio-1.5B-JP")
    switcher.apply(load_voice(tmp_path / "good"))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}

    with pytest.raises(LoraError) as caught:
        switcher.apply(load_voice(tmp_path / "bad"))

    assert message in caught.value.message
    assert switcher.voice_name == "good"
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_unreadable_adapter_folders(tmp_path: Path) -> None:
    with pytest.raises(LoraError, match="does not exist"):
        load_voice(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LoraError, match="has no adapter_config.json"):
        load_voice(tmp_path / "empty")
    (tmp_path / "empty" / "adapter_config.json").write_text("{}")
    (tmp_path / "empty" / "adapter_model.safetensors").write_bytes(b"garbage")
    with pytest.raises(LoraError, match="is unreadable"):
        load_voice(tmp_path / "empty")
