"""Checking a model folder names exactly what is missing or broken; resolving sources."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from engine.errors import ModelFilesError, ModelNotFoundError
from engine.model.store import check_model_folder, resolve_model


@pytest.fixture
def model_copy(tiny_model_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_model_dir, tmp_path / "model"))


def test_complete_tiny_folder_has_no_problems(tiny_model_dir: Path) -> None:
    assert check_model_folder(tiny_model_dir) == []
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
        assert (tiny_model_dir / name).is_file()
    assert (tiny_model_dir / "audio_detokenizer" / "config.json").is_file()
    assert (tiny_model_dir / "audio_detokenizer" / "model.safetensors").is_file()


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("config.json", "config.json is missing"),
        ("model.safetensors", "model.safetensors (the weights) is missing"),
        ("tokenizer.json", "tokenizer.json is missing"),
        ("tokenizer_config.json", "tokenizer_config.json is missing"),
        ("audio_detokenizer/model.safetensors", "audio_detokenizer/model.safetensors is missing"),
        ("audio_detokenizer/config.json", "audio_detokenizer/config.json is missing"),
    ],
)
def test_each_missing_file_is_named(model_copy: Path, relative: str, expected: str) -> None:
    (model_copy / relative).unlink()
    assert check_model_folder(model_copy) == [expected]


def test_missing_audio_decoder_folder_is_named(model_copy: Path) -> None:
    shutil.rmtree(model_copy / "audio_detokenizer")
    (problem,) = check_model_folder(model_copy)
    assert "audio decoder is missing" in problem and "audio_detokenizer/" in problem


def test_truncated_weights_are_reported(model_copy: Path) -> None:
    weights = model_copy / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    (problem,) = check_model_folder(model_copy)
    assert problem.startswith("model.safetensors is")
    assert "truncated" in problem


def test_weights_without_format_metadata_are_reported(model_copy: Path) -> None:
    from safetensors.torch import load_file, save_file

    weights = model_copy / "model.safetensors"
    save_file(load_file(str(weights)), str(weights))  # no metadata
    assert check_model_folder(model_copy) == [
        'model.safetensors lacks the {"format": "pt"} metadata that the loader requires'
    ]


def test_weights_not_matching_config_are_reported(model_copy: Path) -> None:
    config = json.loads((model_copy / "config.json").read_text())
    config["lfm"]["num_hidden_layers"] = 5
    config["lfm"]["layer_types"].append("conv")
    (model_copy / "config.json").write_text(json.dumps(config))
    (problem,) = check_model_folder(model_copy)
    assert problem.startswith("model.safetensors lacks")
    assert "lfm.layers.4." in problem


def test_corrupt_config_is_reported(model_copy: Path) -> None:
    (model_copy / "config.json").write_text("{not json")
    problems = check_model_folder(model_copy)
    assert problems[0].startswith("config.json is not valid JSON")


def test_loading_a_broken_folder_raises_a_clear_error(model_copy: Path) -> None:
    from engine.model.loading import load_model

    (model_copy / "tokenizer.json").unlink()
    with pytest.raises(ModelFilesError) as caught:
        load_model(model_copy, device="cpu")
    assert "tokenizer.json is missing" in caught.value.message
    assert str(model_copy) in caught.value.message


def test_resolve_folder_and_offline_repo(tiny_model_dir: Path, isolated_user_dirs: Path) -> None:
    assert resolve_model(str(tiny_model_dir)) == tiny_model_dir
    with pytest.raises(ModelNotFoundError) as caught:
        resolve_model("LiquidAI/LFM2.5-Audio-1.5B-JP")
    assert "no network connection" in caught.value.message
    assert "demo model" in caught.value.message
    with pytest.raises(ModelNotFoundError):
        resolve_model("not a repo id or folder")
