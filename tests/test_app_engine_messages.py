"""Engine messages in the UI language: the engine writes English templates + values, the app translates.

The catalogue in app/engine_messages.py must list exactly strings the engine writes (checked against the
string constants of engine/, as Python's parser joins them), and each must read in Japanese with the
engine's own values filled in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from PySide6.QtWidgets import QApplication

from app.engine_messages import TEMPLATES, engine_text
from app.i18n import install_translator
from engine import protocol as p

ENGINE = Path(__file__).resolve().parents[1] / "engine"


def _engine_strings() -> set[str]:
    strings: set[str] = set()
    for path in ENGINE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                strings.add(node.value)
    return strings


def test_every_translated_template_is_a_string_the_engine_writes() -> None:
    strings = _engine_strings()
    missing = [template for template in TEMPLATES if template not in strings]
    assert missing == []


@pytest.fixture
def japanese(qapp):  # noqa: ANN001, ANN201
    install_translator(QApplication.instance(), "ja")
    yield
    install_translator(QApplication.instance(), "ja")


def test_a_missing_microphone_reads_in_japanese_with_its_name(japanese) -> None:  # noqa: ANN001
    from engine.audio.devices import AudioDeviceError, find_device

    with pytest.raises(AudioDeviceError) as caught:
        find_device("vc_no_such_mic", "input")
    event = p.EngineError.from_exception("audio_device", caught.value)
    assert event.template in TEMPLATES and ("name", "vc_no_such_mic") in event.values
    text = engine_text(event.message, event.template, event.values)
    assert text.startswith("マイク「vc_no_such_mic」が見つかりません。抜かれた可能性があります。使用できるデバイス: ")

    install_translator(QApplication.instance(), "en")  # an English UI shows the engine's own words
    assert engine_text(event.message, event.template, event.values) == event.message


def test_a_missing_voice_folder_reads_in_japanese(japanese, tmp_path: Path) -> None:  # noqa: ANN001
    from engine.errors import LoraError
    from engine.model.lora import load_voice

    with pytest.raises(LoraError) as caught:
        load_voice(tmp_path / "ずんだもん")
    event = p.EngineError.from_exception("lora", caught.value)
    assert engine_text(event.message, event.template, event.values) == f"声のフォルダー {tmp_path / 'ずんだもん'} がありません。"


def test_fixed_sentences_and_unknown_messages(japanese) -> None:  # noqa: ANN001
    cpu = "No CUDA GPU: running eagerly on the CPU (much slower than real time)."
    assert engine_text(cpu) == "CUDA 対応 GPU がありません: CPU で実行しています (実時間よりかなり遅くなります)。"
    assert engine_text("Something the catalogue does not know.") == "Something the catalogue does not know."
    # A value that looks like a placeholder is shown as it is, not expanded.
    template = "{source} is not downloaded yet."
    assert engine_text("{x} is not downloaded yet.", template, (("source", "{x}"),)) == "{x} はまだダウンロードされていません。"


def test_a_broken_model_folder_reads_in_japanese_problem_by_problem(japanese, tiny_model_dir: Path, tmp_path: Path) -> None:  # noqa: ANN001
    import shutil

    from engine.errors import ModelFilesError
    from engine.model.loading import load_model

    folder = tmp_path / "モデル"
    shutil.copytree(tiny_model_dir, folder)
    (folder / "tokenizer_config.json").unlink()
    (folder / "audio_detokenizer" / "model.safetensors").unlink()
    with pytest.raises(ModelFilesError) as caught:
        load_model(folder, device="cpu")
    event = p.EngineError.from_exception("model", caught.value)
    assert [part.template for _, parts in event.part_lists for part in parts] == ["{file} is missing"] * 2
    assert engine_text(event.message, event.template, event.values, event.part_lists) == (
        f"モデルフォルダー {folder} は使えません: tokenizer_config.json がありません、"
        "audio_detokenizer/model.safetensors がありません"
    )
    install_translator(QApplication.instance(), "en")
    assert engine_text(event.message, event.template, event.values, event.part_lists) == event.message
    assert event.message == (
        f"The model folder {folder} cannot be used: tokenizer_config.json is missing; "
        "audio_detokenizer/model.safetensors is missing"
    )


def test_a_problem_without_a_template_is_shown_as_written(japanese) -> None:  # noqa: ANN001
    from engine.errors import ModelFilesError, Problem

    error = ModelFilesError("/m", [Problem("{file} is missing", file="config.json"), "weird {braces} from a library"])
    event = p.EngineError.from_exception("model", error)
    assert engine_text(event.message, event.template, event.values, event.part_lists) == (
        "モデルフォルダー /m は使えません: config.json がありません、weird {braces} from a library"
    )


def test_an_unsupported_adapter_reads_in_japanese(japanese, tmp_path: Path) -> None:  # noqa: ANN001
    import json

    from engine.errors import LoraError
    from engine.model.lora import load_voice

    voice = tmp_path / "ずんだもん"
    voice.mkdir()
    (voice / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "use_dora": True}))
    (voice / "adapter_model.safetensors").write_bytes(b"")
    with pytest.raises(LoraError) as caught:
        load_voice(voice)
    event = p.EngineError.from_exception("lora", caught.value)
    assert engine_text(event.message, event.template, event.values) == (
        "ずんだもん は DoRA アダプターです。使えるのは通常の LoRA の声だけです。"
    )
