"""Shared fixtures: one tiny random checkpoint (real Hub layout) and its loaded model, per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# Variables of the caller's environment that change what the code under test does (offline mode, where
# the Hub is, where Hugging Face caches live). Every test starts without them; a test that needs one
# sets it (isolated_user_dirs sets HF_HUB_OFFLINE for itself).
_CALLER_ENVIRONMENT = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE", "HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE")


@pytest.fixture(autouse=True)
def _independent_of_the_callers_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    for variable in _CALLER_ENVIRONMENT:
        monkeypatch.delenv(variable, raising=False)
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: reset the constant this process uses too.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from engine.model.tiny_checkpoint import write_tiny_checkpoint

    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model") / "LFM2.5-Audio-tiny")


@pytest.fixture(scope="session")
def tiny_loaded(tiny_model_dir: Path):
    from engine.model.loading import load_model

    return load_model(tiny_model_dir, device="cpu")


@pytest.fixture
def isolated_user_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point platformdirs (settings, demo model, logs, model store) at a temporary home."""
    for variable in ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_STATE_HOME"):
        monkeypatch.setenv(variable, str(tmp_path / variable.lower()))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # for child processes
    monkeypatch.delenv("HF_XET_CACHE", raising=False)  # engine.model.store.download sets it; undone after the test
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # read at import: this process needs the constant
    return tmp_path


def liquid_depthformer_logits(model, hidden: torch.Tensor, codes: torch.Tensor) -> torch.Tensor:
    """Teacher-forced codebook logits (8, 2049) from liquid-audio's own depthformer modules and KV cache."""
    inputs = model.depth_linear(hidden[0]).view(model.codebooks, model.depthformer_dim)
    token_embedding = torch.zeros_like(inputs[0])
    cache = None
    logits = []
    for i in range(model.codebooks):
        out, cache = model.depthformer.forward_cached((inputs[i] + token_embedding)[None, None, :], cache)
        logits.append(model.depth_embeddings[i].get_logits(out.squeeze()))
        token_embedding = model.depth_embeddings[i](codes[i : i + 1]).squeeze()
    return torch.stack(logits)


def sine(seconds: float, rate: int, frequency: float = 440.0, amplitude: float = 0.3):
    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * frequency * t)).astype(np.float32)


os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def _history_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test saves its conversations under its own temporary folder, never in the real data folder."""
    from engine.history import store

    folder = tmp_path / "history-store"
    monkeypatch.setattr(store, "default_history_dir", lambda: folder)
    return folder


@pytest.fixture(scope="session")
def tiny_model_with_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint plus its audio tokenizer (Mimi at its real size, random weights): what voice training needs."""
    from engine.model.tiny_checkpoint import write_audio_tokenizer, write_tiny_checkpoint

    folder = write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-model-mimi") / "LFM2.5-Audio-tiny")
    write_audio_tokenizer(folder)
    return folder
