"""Settings persistence: round trip, atomic write, corrupt file moved aside, bad fields defaulted."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.protocol import SamplingSettings
from engine.settings import (
    DEFAULT_SYSTEM_PROMPT,
    Settings,
    default_settings_path,
    load_settings,
    save_settings,
)


def test_missing_file_is_first_run_with_defaults(tmp_path: Path) -> None:
    result = load_settings(tmp_path / "settings.json")
    assert result.first_run
    assert result.warning is None
    assert result.settings == Settings()
    assert result.settings.system_prompt == DEFAULT_SYSTEM_PROMPT


def test_round_trip_keeps_every_field(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "settings.json"  # the folder does not exist yet
    original = Settings(
        sampling=SamplingSettings(greedy=True, audio_temperature=0.7, audio_top_k=8, text_temperature=0.3,
                                  text_top_k=20),
        system_prompt="丁寧に答えてください。",
        input_device="USB マイク",
        output_device="Speakers",
        model_source="/models/lfm",
        model_revision="abc123",
        demo=False,
        lora="/voices/alice",
        max_answer_seconds=12.5,
        context_tokens=8192,
        ptt_key="F9",
        language="en",
        precision="int8",
    )
    save_settings(original, path)
    loaded = load_settings(path)
    assert loaded.warning is None and not loaded.first_run
    assert loaded.settings == original
    # Japanese is stored readably (ensure_ascii=False) and a version is recorded for later migrations.
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["system_prompt"] == "丁寧に答えてください。"
    assert data["version"] == 1


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "settings.json"
    save_settings(Settings(system_prompt="first"), path)

    # A failure in the middle of the write (here: os.replace) must leave the old file intact.
    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        save_settings(Settings(system_prompt="second"), path)
    monkeypatch.undo()
    assert load_settings(path).settings.system_prompt == "first"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.json"]


def test_corrupt_file_is_moved_aside_and_user_is_told(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text('{"system_prompt": "half a fi', encoding="utf-8")
    result = load_settings(path)
    assert result.settings == Settings()
    assert result.warning is not None and "corrupt" in result.warning
    assert result.moved_to is not None and result.moved_to.name.startswith("settings.json.corrupt-")
    assert result.moved_to.read_text(encoding="utf-8") == '{"system_prompt": "half a fi'  # kept, not deleted
    assert not path.exists()
    # Saving afterwards creates a fresh, valid file.
    save_settings(result.settings, path)
    assert load_settings(path).warning is None


def test_two_corrupt_files_in_the_same_second_do_not_overwrite_each_other(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text("[1, 2]", encoding="utf-8")  # valid JSON, but not an object
    first = load_settings(path).moved_to
    path.write_text("nonsense", encoding="utf-8")
    second = load_settings(path).moved_to
    assert first is not None and second is not None and first != second
    assert first.exists() and second.exists()


def test_invalid_fields_fall_back_individually(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({
        "system_prompt": "kept",
        "max_answer_seconds": -3,
        "context_tokens": "lots",
        "sampling": {"greedy": True, "audio_top_k": 0},
        "language": "fr",
        "from_a_newer_version": 1,
    }), encoding="utf-8")
    result = load_settings(path)
    s = result.settings
    assert s.system_prompt == "kept"
    assert s.sampling.greedy is True
    assert s.sampling.audio_top_k == SamplingSettings().audio_top_k
    assert s.max_answer_seconds == Settings().max_answer_seconds
    assert s.context_tokens == Settings().context_tokens
    assert s.language == "auto"
    assert result.warning is not None
    for name in ("max_answer_seconds", "context_tokens", "sampling.audio_top_k", "language"):
        assert name in result.warning
    assert path.exists()  # a partly invalid file is not "corrupt": it stays where it is


@pytest.mark.parametrize("damaged", ["fp8", "INT8", "", 8, None, ["int8"], {"precision": "int8"}])
def test_a_damaged_precision_falls_back_to_bf16_and_is_reported(tmp_path: Path, damaged: object) -> None:
    path = tmp_path / "settings.json"
    path.write_text(json.dumps({"system_prompt": "kept", "precision": damaged}), encoding="utf-8")
    result = load_settings(path)
    assert result.settings.precision == "bf16" and result.settings.system_prompt == "kept"
    assert result.warning is not None and "precision" in result.warning
    save_settings(result.settings, path)
    assert json.loads(path.read_text(encoding="utf-8"))["precision"] == "bf16"
    assert load_settings(path).warning is None


def test_default_path_is_in_the_platform_config_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = default_settings_path()
    assert path == tmp_path / "VoiceChat" / "settings.json"
