"""Generated bad input: a valid model folder, voice, WAV and settings file, each damaged in turn.

The cases are generated, not picked: every key and nested key of config.json and of the
detokenizer's config.json, every field of a real peft adapter_config.json and of a full settings
file is deleted, given a wrong type and given absurd values; every file is truncated, emptied,
overwritten with random bytes, replaced by a folder and by a dangling link; every `reply` flag is
tried at and beyond its limits; text comes in other encodings. For every case:

- the damage is refused with the project's own error, one line, whose template has a Japanese
  translation (or the damage is harmless and the thing works: then it is really loaded and used);
- nothing is lost: input files are byte-for-byte unchanged, the loaded model and voice stay, a bad
  settings file is moved aside with its bytes intact;
- the CLI exits non-zero with one `error:` line and no traceback (a few real processes prove it),
  the engine keeps running, and the window shows a banner.

To keep the suite quick the tiny model is loaded once and reused; only damage that passes the
folder check costs a real load.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch
from PySide6.QtCore import QCoreApplication
from PySide6.QtWidgets import QApplication

from app.engine_messages import CONTEXT, engine_text
from app.i18n import install_translator
from conftest import sine
from engine import protocol as p
from engine import validation
from engine.errors import LoraError, ModelFilesError, Problem, UserFacingError

ROOT = Path(__file__).resolve().parents[1]


# ============================================================================ generators


def walk(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every key and nested key of a JSON object, with its value."""
    for key, value in data.items():
        yield (*prefix, key), value
        if isinstance(value, dict):
            yield from walk(value, (*prefix, key))


def bad_values(value: Any) -> list[tuple[str, Any]]:
    """A wrong type and absurd values for a JSON value of this type."""
    if isinstance(value, bool):
        return [("wrong type", "yes"), ("absurd", 7)]
    if isinstance(value, int):
        return [("wrong type", str(value)), ("absurd", 10**12), ("absurd negative", -(10**12))]
    if isinstance(value, float):
        return [("wrong type", "0.5"), ("absurd", 1e300), ("nan", math.nan)]
    if isinstance(value, str):
        return [("wrong type", 12345), ("absurd", "\x00" + "字" * 5000)]
    if isinstance(value, list):
        return [("wrong type", {"a": 1}), ("absurd", [10**12] * 3)]
    if isinstance(value, dict):
        return [("wrong type", [1, 2]), ("absurd", "x" * 100)]
    return [("wrong type", [[1.5]]), ("absurd", 10**12)]  # None


def json_damages(data: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, damaged copy) for every key path: deleted, wrong type, absurd."""
    cases = []
    for path, value in walk(data):
        for label, new in [("deleted", None), *bad_values(value)]:
            damaged = copy.deepcopy(data)
            parent = damaged
            for key in path[:-1]:
                parent = parent[key]
            if label == "deleted":
                del parent[path[-1]]
            else:
                parent[path[-1]] = new
            cases.append((f"{'.'.join(path)} {label}", damaged))
    return cases


PRISTINE_NAMES: set[str] = set()
FILE_DAMAGES = ("truncated", "emptied", "random bytes", "folder", "dangling link")


def damage_file(path: Path, how: str, seed: int = 0) -> None:
    data = path.read_bytes()
    if how in ("folder", "dangling link"):
        path.unlink()
        if how == "folder":
            path.mkdir()
        else:
            path.symlink_to(path.with_name(path.name + ".gone"))
        return
    path.write_bytes({
        "truncated": data[: len(data) // 2],
        "emptied": b"",
        "random bytes": random.Random(seed).randbytes(max(len(data), 64)),
        "not UTF-8": b"\xff\xfe\xfa" + data,
        "UTF-16": data.decode("utf-8", "replace").encode("utf-16"),
    }[how])


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every file's bytes (and every link's target) under `folder`, to prove nothing changed."""
    result: dict[str, bytes | str] = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        if path.is_symlink():
            result[key] = "-> " + os.readlink(path)
        elif path.is_file():
            result[key] = path.read_bytes()
    return result


# ============================================================================ what a clear message is


@pytest.fixture(scope="module")
def japanese(qapp) -> Iterator[None]:  # noqa: ANN001
    install_translator(QApplication.instance(), "ja")
    yield


def translated(template: str) -> bool:
    return bool(template) and QCoreApplication.translate(CONTEXT, template) != template


def has_japanese(text: str) -> bool:
    return any("\u3040" <= ch <= "\u30ff" or "\u4e00" <= ch <= "\u9fff" for ch in text)


def assert_clear(error: UserFacingError, names: str | None = None) -> None:
    """One line, the project's own error, a template with a Japanese translation (and its parts')."""
    assert isinstance(error, UserFacingError), error
    assert error.message and "\n" not in error.message and "Traceback" not in error.message
    assert translated(error.template), f"no Japanese for: {error.template or error.message}"
    for parts in error.part_lists.values():
        for part in parts:
            assert translated(part.template), f"no Japanese for problem: {part.text}"
    text = engine_text(error.message, error.template, error.values.items(), error.part_lists.items())
    assert has_japanese(text), text
    if names is not None:
        assert names in error.message, (names, error.message)


# ============================================================================ the valid inputs


@pytest.fixture(scope="module")
def base_model(tiny_model_dir: Path):  # noqa: ANN201
    """The tiny model, loaded once for this module (its weights are checked after every voice case)."""
    from engine.model.loading import load_model

    return load_model(tiny_model_dir, device="cpu")


@pytest.fixture(scope="module")
def good_voice(base_model, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: ANN001
    from peft import LoraConfig, get_peft_model

    folder = tmp_path_factory.mktemp("voices") / "good"
    torch.manual_seed(1)
    config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "w1", "depth_linear"], init_lora_weights=False)
    get_peft_model(copy.deepcopy(base_model.model), config).save_pretrained(str(folder))
    return folder


def copy_folder(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    return target


# ============================================================================ model folder


def model_folder_cases(tiny_model_dir: Path) -> list[tuple[str, str, Callable[[Path], None]]]:
    """Every damage to the model folder, as (label, the file damaged, function damaging it in a copy)."""
    cases: list[tuple[str, str, Callable[[Path], None]]] = []
    for relative in ("config.json", "audio_detokenizer/config.json"):
        original = json.loads((tiny_model_dir / relative).read_text(encoding="utf-8"))
        for label, damaged in json_damages(original):
            cases.append((f"{relative}: {label}", relative, lambda folder, r=relative, d=damaged: write_json(folder / r, d)))
    files = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
             "audio_detokenizer/config.json", "audio_detokenizer/model.safetensors")
    for relative in files:
        damages = FILE_DAMAGES + (("not UTF-8", "UTF-16") if relative.endswith(".json") else ())
        for how in damages:
            cases.append((f"{relative} {how}", relative, lambda folder, r=relative, h=how: damage_file(folder / r, h)))
    # Valid JSON that is no tokenizer: only loading it can tell, and the message must name the file.
    for relative in ("tokenizer.json", "tokenizer_config.json"):
        cases.append((f"{relative} not a tokenizer", relative,
                      lambda folder, r=relative: write_json(folder / r, {"version": "1.0", "model": {"type": "nonsense"}})))
    return cases


def restore(folder: Path, relative: str, pristine: Path) -> None:
    path = folder / relative
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    shutil.copy2(pristine / relative, path)


def test_every_damage_to_the_model_folder_is_named_or_harmless(tiny_model_dir: Path, tmp_path: Path, japanese) -> None:  # noqa: ANN001
    from engine.model.store import check_model_folder
    from engine.chat.session import ChatSession

    cases = model_folder_cases(tiny_model_dir)
    assert len(cases) > 250
    labels = {label for label, _, _ in cases}
    for named_in_the_issue in ("config.json: preprocessor.sample_rate deleted", "tokenizer.json random bytes",
                               "tokenizer.json not a tokenizer", "model.safetensors truncated"):
        assert named_in_the_issue in labels
    global PRISTINE_NAMES
    PRISTINE_NAMES = {f.relative_to(tiny_model_dir).as_posix() for f in tiny_model_dir.rglob("*")}
    harmless: list[str] = []
    failures: list[str] = []
    folder = copy_folder(tiny_model_dir, tmp_path / "model")  # one copy, each damaged file restored after its case
    for label, relative, damage in cases:
        damage(folder)
        try:
            _model_folder_case(label, folder, harmless)
        except Exception as error:  # noqa: BLE001 - collected, so one run names every failing case
            failures.append(f"{label}: {type(error).__name__}: {str(error)[:300]}")
        restore(folder, relative, tiny_model_dir)
        for extra in sorted(folder.rglob("*")):  # e.g. the link's missing target never appears
            assert extra.relative_to(folder).as_posix() in PRISTINE_NAMES, extra
    assert not failures, "\n".join(failures)
    print(f"{len(cases)} model folder cases, {len(harmless)} harmless: {harmless}")
    # Most damage is refused by the check; what passes is only what the libraries really ignore.
    assert len(harmless) < len(cases) // 3, harmless


def _model_folder_case(label: str, folder: Path, harmless: list[str]) -> None:
    from engine.model.store import check_model_folder
    from engine.chat.session import ChatSession

    if True:
        before = snapshot(folder)
        problems = check_model_folder(folder)
        if problems:
            error = ModelFilesError(folder, problems)
            assert_clear(error)
            assert all(isinstance(problem, Problem) for problem in problems), (label, problems)
            damaged_file = label.split(":")[0].split(" ")[0]
            # The message names the damaged file (config.json damage: the file and the key).
            # (or the weights, when a changed config no longer matches them).
            assert damaged_file in error.message or "model.safetensors" in error.message, (label, error.message)
        else:
            # Harmless (liquid-audio/transformers have a default, or ignore the key): it really loads
            # and answers; anything else must still be a clear ModelFilesError.
            harmless.append(label)
            try:
                session = ChatSession.open(str(folder), device="cpu")
            except UserFacingError as error:
                assert_clear(error)
                if "tokenizer" in label:
                    assert label.split(" ")[0] in error.message, error.message
            else:
                outputs = list(session.respond(sine(0.5, 16000), p.SamplingSettings(greedy=True), max_new_tokens=4))
                assert outputs and np.isfinite(np.concatenate(
                    [o.pcm for o in outputs if hasattr(o, "pcm")] or [np.zeros(1, np.float32)])).all(), label
                session.close()
        assert snapshot(folder) == before, f"{label}: the check changed the folder"


def test_missing_or_odd_model_folders(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    from engine.model.store import resolve_model

    (tmp_path / "a-file").write_text("not a folder", encoding="utf-8")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "gone")
    for name in ("missing", "a-file", "empty", "link", "名前/モデル"):
        with pytest.raises(UserFacingError) as caught:
            resolve_model(str(tmp_path / name))
        assert_clear(caught.value)


# ============================================================================ voice


def voice_cases(good_voice: Path) -> list[tuple[str, Callable[[Path], None]]]:
    from safetensors.torch import load_file, save_file

    cases: list[tuple[str, Callable[[Path], None]]] = []
    config = json.loads((good_voice / "adapter_config.json").read_text(encoding="utf-8"))
    for label, damaged in json_damages(config):
        cases.append((f"adapter_config.json: {label}", lambda folder, d=damaged: write_json(folder / "adapter_config.json", d)))
    cases.append(("adapter_config.json: r 0", lambda folder: write_json(folder / "adapter_config.json", {**config, "r": 0})))
    cases.append(("adapter_config.json: not an object", lambda folder: write_json(folder / "adapter_config.json", [config])))
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        damages = FILE_DAMAGES + (("not UTF-8", "UTF-16") if name.endswith(".json") else ())
        for how in damages:
            cases.append((f"{name} {how}", lambda folder, n=name, h=how: damage_file(folder / n, h)))

    def edit_weights(change: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]) -> Callable[[Path], None]:
        def apply(folder: Path) -> None:
            path = folder / "adapter_model.safetensors"
            save_file(change(load_file(str(path))), str(path))
        return apply

    first_a = sorted(k for k in load_file(str(good_voice / "adapter_model.safetensors")) if "lora_A" in k)[0]

    def poke(value: float) -> Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]:
        def change(weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            tensor = weights[first_a].clone()
            tensor.view(-1)[3] = value
            return {**weights, first_a: tensor}
        return change

    for value in (math.nan, math.inf, -math.inf, 1e30):
        cases.append((f"weights: {value} in {first_a}", edit_weights(poke(value))))
    cases += [
        ("weights: integer tensor", edit_weights(lambda w: {**w, first_a: w[first_a].to(torch.int32)})),
        ("weights: 1-D tensor", edit_weights(lambda w: {**w, first_a: w[first_a].flatten()})),
        ("weights: rank differs from r", edit_weights(lambda w: {**w, first_a: torch.cat([w[first_a], w[first_a][:1]])})),
        ("weights: a lora_B missing", edit_weights(lambda w: {k: v for k, v in w.items() if k != first_a.replace("lora_A", "lora_B")})),
        ("weights: an unknown tensor", edit_weights(lambda w: {**w, "base_model.model.extra.weight": torch.zeros(2, 2)})),
        ("weights: none at all", edit_weights(lambda w: {})),
    ]
    return cases


def test_every_damage_to_a_voice_is_refused_or_harmless_and_the_voice_in_use_stays(base_model, good_voice: Path, tmp_path: Path, japanese) -> None:  # noqa: ANN001, E501
    from engine.model.lora import VoiceSwitcher, load_voice

    model = base_model.model
    switcher = VoiceSwitcher(model)
    pristine = {name: t.detach().clone() for name, t in model.state_dict().items()}
    switcher.apply(load_voice(good_voice))
    merged = {name: t.detach().clone() for name, t in model.state_dict().items()}
    assert any(not torch.equal(merged[n], pristine[n]) for n in merged)
    cases = voice_cases(good_voice)
    assert len(cases) > 150
    refused = 0
    try:
        for index, (label, damage) in enumerate(cases):
            folder = copy_folder(good_voice, tmp_path / f"voice-{index}")
            damage(folder)
            before = snapshot(folder)
            try:
                switcher.apply(load_voice(folder))
            except LoraError as error:
                refused += 1
                assert_clear(error)
                assert switcher.voice_name == "good", label
                for name, tensor in model.state_dict().items():
                    assert torch.equal(tensor, merged[name]), f"{label}: {name} changed"
            else:
                # A field the merge does not use: the voice is merged, finite, and the good one comes back.
                assert all(bool(torch.isfinite(t).all()) for t in model.state_dict().values()), label
                switcher.apply(load_voice(good_voice))
            assert snapshot(folder) == before, label
            shutil.rmtree(folder)
    finally:
        switcher.apply(None)
    assert all(torch.equal(t, pristine[n]) for n, t in model.state_dict().items())
    labels = [label for label, _ in cases]
    for named_in_the_issue in ("adapter_config.json: r 0", "weights: nan in", "weights: inf in", "weights: -inf in"):
        assert any(label.startswith(named_in_the_issue) for label in labels)
    assert refused > len(cases) // 3


def test_a_broken_voice_never_costs_the_model(tiny_model_dir: Path, good_voice: Path, tmp_path: Path, japanese) -> None:  # noqa: ANN001
    """Loading a model together with a broken voice (r: 0, NaN weights): the model loads without it."""
    from safetensors.torch import load_file, save_file

    from engine.chat.session import ChatSession

    r0 = copy_folder(good_voice, tmp_path / "r0")
    config = json.loads((r0 / "adapter_config.json").read_text(encoding="utf-8"))
    write_json(r0 / "adapter_config.json", {**config, "r": 0})
    nan = copy_folder(good_voice, tmp_path / "nan")
    weights = load_file(str(nan / "adapter_model.safetensors"))
    key = next(iter(weights))
    weights[key] = torch.full_like(weights[key], math.nan)
    save_file(weights, str(nan / "adapter_model.safetensors"))
    for broken in (r0, nan):
        session = ChatSession.open(str(tiny_model_dir), lora=str(broken), device="cpu")
        assert session.voice_problem is not None and session.info.voice_name is None
        assert_clear(session.voice_problem, names=broken.name)
        outputs = list(session.respond(sine(0.5, 16000), p.SamplingSettings(greedy=True), max_new_tokens=4))
        assert outputs  # the model answers
        session.close()


# ============================================================================ the engine (what the window drives)


def test_the_engine_keeps_model_and_voice_through_bad_loads_voices_and_prompts(
        tiny_model_dir: Path, good_voice: Path, tmp_path: Path, isolated_user_dirs: Path, japanese) -> None:  # noqa: ANN001
    import queue
    import time

    from engine.worker import EngineWorker

    commands: queue.Queue[p.Command] = queue.Queue()
    events: queue.Queue[p.Event] = queue.Queue()
    worker = EngineWorker(commands, events)
    worker.start()
    seen: list[p.Event] = []

    def wait(predicate: Callable[[p.Event], bool], after: int) -> p.Event:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                seen.append(events.get(timeout=0.05))
            except queue.Empty:
                continue
            if predicate(seen[-1]) and len(seen) > after:
                return seen[-1]
        raise AssertionError([type(e).__name__ for e in seen[after:]])

    def idle_after(after: int) -> None:
        wait(lambda e: isinstance(e, p.StateChanged) and e.state is p.EngineState.IDLE, after)

    broken = copy_folder(good_voice, tmp_path / "saved-voice")
    config = json.loads((broken / "adapter_config.json").read_text(encoding="utf-8"))
    write_json(broken / "adapter_config.json", {**config, "r": 0})  # saved in the settings, broken since
    damaged_model = copy_folder(tiny_model_dir, tmp_path / "damaged-model")
    model_config = json.loads((damaged_model / "config.json").read_text(encoding="utf-8"))
    del model_config["preprocessor"]["sample_rate"]
    write_json(damaged_model / "config.json", model_config)
    try:
        commands.put(p.Load(source=str(tiny_model_dir), lora=str(broken)))
        error = wait(lambda e: isinstance(e, p.EngineError), 0)
        assert error.kind == "lora" and "saved-voice" in error.message
        assert translated(error.template)
        info = wait(lambda e: isinstance(e, p.EngineInfo), 0)
        assert info.voice_name is None and info.model_name == tiny_model_dir.name
        idle_after(0)
        session = worker.session

        start = len(seen)
        commands.put(p.SwitchVoice(str(good_voice)))
        assert wait(lambda e: isinstance(e, p.EngineInfo), start).voice_name == "good"

        for bad_load in (p.Load(source=str(damaged_model)), p.Load(source=str(tmp_path / "nowhere"))):
            start = len(seen)
            commands.put(bad_load)
            error = wait(lambda e: isinstance(e, p.EngineError), start)
            assert error.kind == "model"
            assert "sample_rate" in error.message or "nowhere" in error.message
            states = [e.state for e in seen[start:] if isinstance(e, p.StateChanged)]
            assert states[-1] is p.EngineState.IDLE and p.EngineState.NO_MODEL not in states, states
            assert worker.session is session and session.voices.voice_name == "good"  # previous model and voice

        for bad_voice in (broken, tmp_path / "nowhere-voice"):
            start = len(seen)
            commands.put(p.SwitchVoice(str(bad_voice)))
            assert wait(lambda e: isinstance(e, p.EngineError), start).kind == "lora"
            assert session.voices.voice_name == "good"

        start = len(seen)
        commands.put(p.ApplySettings(p.SamplingSettings(), system_prompt="長い" * 3000, max_answer_seconds=5.0))
        error = wait(lambda e: isinstance(e, p.EngineError), start)
        assert error.kind == "settings" and translated(error.template)
        assert session.system_prompt != "長い" * 3000 and worker.system_prompt != "長い" * 3000
        assert worker.is_alive()
    finally:
        commands.put(p.Shutdown())
        worker.join(30)
    assert snapshot(broken)  # the user's (broken) voice folder is still there


# ============================================================================ settings file


FULL_SETTINGS = {
    "sampling": {"greedy": False, "audio_temperature": 0.8, "audio_top_k": 8, "text_temperature": 0.7, "text_top_k": 10},
    "system_prompt": "丁寧に答えてください。",
    "input_device": "USB マイク",
    "output_device": "Speakers",
    "model_source": "/models/lfm",
    "model_revision": "main",
    "demo": False,
    "lora": "/voices/alice",
    "max_answer_seconds": 20.0,
    "context_tokens": 8192,
    "ptt_key": "F9",
    "language": "ja",
    "version": 1,
}


def settings_cases() -> list[tuple[str, bytes]]:
    cases = [(label, json.dumps(data, ensure_ascii=False).encode("utf-8")) for label, data in json_damages(FULL_SETTINGS)]
    text = json.dumps(FULL_SETTINGS, ensure_ascii=False).encode("utf-8")
    rng = random.Random(5)
    cases += [
        ("truncated", text[: len(text) // 2]),
        ("emptied", b""),
        ("random bytes", rng.randbytes(len(text))),
        ("not UTF-8", text.replace("丁寧".encode(), b"\xff\xfe")),
        ("UTF-16", json.dumps(FULL_SETTINGS, ensure_ascii=False).encode("utf-16")),
        ("Shift_JIS", json.dumps(FULL_SETTINGS, ensure_ascii=False).encode("shift_jis")),
        ("too large", json.dumps({**FULL_SETTINGS, "system_prompt": "あ" * 17_000_000}, ensure_ascii=False).encode("utf-8")),
        ("just over the size limit", json.dumps({"x": "a" * validation.MAX_SETTINGS_BYTES}).encode("utf-8")),
        ("prompt over its limit", json.dumps({"system_prompt": "a" * (validation.MAX_SYSTEM_PROMPT_CHARS + 1)}).encode()),
        ("deeply nested", b"[" * 100_000 + b"]" * 100_000),
        ("a list", b"[1, 2, 3]"),
        ("null", b"null"),
        ("NaN values", b'{"max_answer_seconds": NaN, "context_tokens": Infinity}'),
    ]
    return cases


def test_every_damage_to_the_settings_file_is_reported_and_its_bytes_are_kept(tmp_path: Path, japanese) -> None:  # noqa: ANN001
    from engine.settings import Settings, from_json_dict, load_settings, to_json_dict

    cases = settings_cases()
    assert len(cases) > 50
    for index, (label, raw) in enumerate(cases):
        folder = tmp_path / f"settings-{index}"
        folder.mkdir()
        path = folder / "settings.json"
        path.write_bytes(raw)
        result = load_settings(path)
        # Whatever was read is valid settings (the same validation accepts it again).
        again, problems = from_json_dict(json.loads(json.dumps(to_json_dict(result.settings))))
        assert problems == [] and again == result.settings, label
        if result.problem is None:
            assert path.read_bytes() == raw, label  # harmless (e.g. the version key): left alone
            continue
        assert_clear(result.problem)
        assert result.moved_to is not None and result.moved_to.read_bytes() == raw, label  # kept, never deleted
        if path.exists():  # only some values reset: the file stays, a copy is kept aside
            assert path.read_bytes() == raw, label
        others = [f for f in folder.iterdir() if f not in (path, result.moved_to)]
        assert others == [], (label, others)

    # A folder or a dangling link where the file should be.
    folder = tmp_path / "odd"
    folder.mkdir()
    (folder / "settings.json").mkdir()
    result = load_settings(folder / "settings.json")
    assert result.settings == Settings() and result.problem is not None and (folder / "settings.json").is_dir()
    assert_clear(result.problem)
    (folder / "link").symlink_to(folder / "gone")
    result = load_settings(folder / "link")
    assert result.problem is not None and result.moved_to is not None and result.moved_to.is_symlink()
    assert_clear(result.problem)

    # A UTF-8 BOM (Windows Notepad) is still UTF-8: read as it is.
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(FULL_SETTINGS, ensure_ascii=False).encode("utf-8"))
    result = load_settings(bom)
    assert result.problem is None and result.settings.system_prompt == "丁寧に答えてください。"


@pytest.mark.parametrize("label", ["not UTF-8", "too large", "sampling.audio_top_k wrong type"])
def test_the_window_starts_with_defaults_and_says_why(qtbot, tmp_path: Path, label: str) -> None:  # noqa: ANN001
    from app_helpers import make_window

    raw = dict(settings_cases())[label]
    (tmp_path / "settings.json").write_bytes(raw)
    window = make_window(tmp_path)
    qtbot.addWidget(window)
    window.show()
    assert window.banner.isVisible() and window.banner.level == "warning"
    shown = window.banner.text
    assert has_japanese(shown) and "設定" in shown
    kept = [f for f in tmp_path.iterdir() if f.name.startswith("settings.json.")]
    assert len(kept) == 1 and kept[0].read_bytes() == raw
    window.close()


def test_the_self_test_reports_a_bad_settings_file(isolated_user_dirs: Path) -> None:
    from engine.tools.diagnostics import collect_diagnostics
    from engine.settings import default_settings_path

    path = default_settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b'{"system_prompt": "\xff\xfe"}')
    checks = {c["name"]: c for c in collect_diagnostics()["checks"]}
    assert checks["settings"]["status"] == "warning" and "UTF-8" in checks["settings"]["message"]
    assert path.read_bytes() == b'{"system_prompt": "\xff\xfe"}'  # the self-test only looks


# ============================================================================ the reply command


FLAG_LIMITS = {
    "--temperature": (validation.TEMPERATURE, ["nan", "inf", "-inf", "0", "-1", "1e308"]),
    "--top-k": (validation.TOP_K, ["0", "-5", "99999", "abc", "4.5"]),
    "--max-seconds": (validation.MAX_TAKE_SECONDS, ["nan", "0", "-5", "1e9"]),
    "--max-answer-seconds": (validation.MAX_ANSWER_SECONDS, ["nan", "inf", "0", "-5", "1e9"]),
}


def flag_cases() -> tuple[list[list[str]], list[list[str]]]:
    """(accepted, refused): every flag at its limits, just beyond them, and at odd values."""
    accepted, refused = [], []
    for flag, (allowed, odd) in FLAG_LIMITS.items():
        step = 1 if allowed.integer else 0.01
        fmt = (lambda v: str(int(v))) if allowed.integer else (lambda v: repr(float(v)))
        accepted += [[flag, fmt(allowed.low)], [flag, fmt(allowed.high)]]
        refused += [[flag, fmt(allowed.low - step)], [flag, fmt(allowed.high + step)]] + [[flag, v] for v in odd]
    refused += [["--greedy", "--temperature", "1"], ["--no-such-flag"], ["--top-k"]]
    return accepted, refused


@pytest.fixture
def question(tmp_path: Path) -> Path:
    path = tmp_path / "question.wav"
    soundfile.write(path, sine(1.0, 16000), 16000)
    return path


def run_reply(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    from app.cli import main

    try:
        code = main(["reply", *args])
    except SystemExit as exit_:  # argparse
        code = exit_.code  # type: ignore[assignment]
    return int(code), capsys.readouterr().err


def assert_one_error_line(code: int, err: str, label: object) -> None:
    assert code == 2, (label, err)
    assert "Traceback" not in err, (label, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, (label, err)


def test_every_flag_at_and_beyond_its_limits(question: Path, tmp_path: Path, capsys, isolated_user_dirs: Path) -> None:  # noqa: ANN001
    from app.cli import build_parser
    from engine.tools.reply import check_reply_args

    accepted, refused = flag_cases()
    answer = tmp_path / "answer.wav"
    original = question.read_bytes()
    for flags in accepted:  # the same ranges as the settings file and the dialog
        args = build_parser().parse_args(["reply", str(question), str(answer), *flags])
        check_reply_args(args)
    for flags in refused:
        code, err = run_reply([str(question), str(answer), *flags], capsys)
        assert_one_error_line(code, err, flags)
        assert not answer.exists() and question.read_bytes() == original
    assert len(accepted) == 8 and len(refused) >= 30


def wav_cases(question: Path, tmp_path: Path) -> list[tuple[str, Path]]:
    """Damaged input recordings: each file damage, odd audio, odd names."""
    cases = []
    for how in FILE_DAMAGES + ("not UTF-8",):
        path = tmp_path / f"damaged-{how.replace(' ', '-')}.wav"
        shutil.copy(question, path)
        damage_file(path, how)
        cases.append((how, path))
    nan = tmp_path / "nan.wav"
    samples = sine(1.0, 16000)
    samples[100] = np.nan
    soundfile.write(nan, samples, 16000, subtype="FLOAT")
    short = tmp_path / "short.wav"
    soundfile.write(short, sine(0.05, 16000), 16000)
    long = tmp_path / "long.wav"
    soundfile.write(long, np.zeros(int(validation.MAX_TAKE_SECONDS.high * 4000) + 4000, np.float32), 4000)
    rate = tmp_path / "absurd-rate.wav"
    data = bytearray(question.read_bytes())
    data[24:28] = (999_999_937).to_bytes(4, "little")  # the fmt chunk's sample rate
    rate.write_bytes(bytes(data))
    odd_name = Path(os.fsdecode(bytes(tmp_path / "missing") + b"-\xff\xfe.wav"))
    cases += [("NaN samples", nan), ("too short", short), ("too long", long), ("absurd sample rate", rate),
              ("missing", tmp_path / "missing.wav"), ("missing, name not UTF-8", odd_name)]
    return cases


def test_every_bad_recording_and_output_path(question: Path, tmp_path: Path, capsys, isolated_user_dirs: Path, japanese) -> None:  # noqa: ANN001
    inputs = wav_cases(question, tmp_path / "inputs") if (tmp_path / "inputs").mkdir() is None else []
    answer = tmp_path / "answer.wav"
    for label, path in inputs:
        before = path.read_bytes() if path.is_file() else None
        code, err = run_reply([os.fspath(path), str(answer), "--demo", "--greedy", "--max-answer-seconds", "0.5"], capsys)
        if label == "truncated" and code == 0:
            # Half a WAV is still half a recording (libsndfile reads what is there): it is answered.
            assert answer.is_file() and "Traceback" not in err
            answer.unlink()
        else:
            assert_one_error_line(code, err, label)
            assert not answer.exists(), label
        if before is not None:
            assert path.read_bytes() == before, label

    (tmp_path / "a-file.txt").write_text("x", encoding="utf-8")
    (tmp_path / "out-folder").mkdir()
    (tmp_path / "out-link.wav").symlink_to(tmp_path / "gone" / "x.wav")
    (tmp_path / "same.wav").symlink_to(question)
    outputs = {
        "same as input": question,
        "same as input, other spelling": tmp_path / "." / "inputs" / ".." / question.name,
        "a link to the input": tmp_path / "same.wav",
        "under /proc": Path("/proc/voicechat-answer.wav"),
        "under an existing file": tmp_path / "a-file.txt" / "answer.wav",
        "a folder": tmp_path / "out-folder",
        "a dangling link": tmp_path / "out-link.wav",
    }
    if os.geteuid() != 0:  # permission bits do not stop root
        (tmp_path / "read-only").mkdir(mode=0o555)
        outputs["in a read-only folder"] = tmp_path / "read-only" / "answer.wav"
    original = question.read_bytes()
    for label, output in outputs.items():
        code, err = run_reply([str(question), str(output), "--demo", "--greedy"], capsys)
        assert_one_error_line(code, err, label)
        assert question.read_bytes() == original, label
    assert not (tmp_path / "gone").exists()

    from engine.validation import check_output_path

    for label, output in outputs.items():
        with pytest.raises(UserFacingError) as caught:
            check_output_path(output, inputs=(question,))
        assert_clear(caught.value)


def test_an_answer_that_cannot_be_written_is_kept_elsewhere_and_not_longer_than_asked(
        tiny_model_dir: Path, question: Path, tmp_path: Path, isolated_user_dirs: Path, monkeypatch: pytest.MonkeyPatch, japanese) -> None:  # noqa: ANN001, E501
    from engine.tools import reply

    target = tmp_path / "answer.wav"
    real_write = reply.write_wav

    def failing_write(path: Path, wave: np.ndarray, rate: int) -> None:
        if Path(path) == target:  # the disk filled up (or the folder vanished) after the check
            raise OSError(28, "No space left on device")
        real_write(path, wave, rate)

    monkeypatch.setattr(reply, "write_wav", failing_write)
    with pytest.raises(UserFacingError) as caught:
        reply.reply_file(question, target, source=str(tiny_model_dir), sampling=p.SamplingSettings(greedy=True),
                           max_answer_seconds=1.2, device="cpu", log=lambda _line: None)
    assert_clear(caught.value)
    saved = Path(caught.value.values["saved"])
    assert saved.is_file() and saved.parent == reply.rescue_folder() and str(saved) in caught.value.message
    pcm, rate = soundfile.read(saved)
    assert rate == 24000 and 0 < len(pcm) <= 1.2 * 24000  # kept, and never longer than max_answer_seconds
    assert saved.with_suffix(".txt").is_file()


def test_max_answer_seconds_is_never_overshot(tiny_loaded, tiny_model_dir: Path) -> None:  # noqa: ANN001
    from engine.chat.session import ChatSession

    session = ChatSession.open(str(tiny_model_dir), device="cpu")
    for seconds in (0.5, 1.2, 1.0):
        for _ in session.respond(sine(0.5, 16000), p.SamplingSettings(), max_answer_seconds=seconds):
            pass
        turn_audio = session.conversation.turns[-1]
        frames = sum(1 for piece in turn_audio.pieces if type(piece).__name__ == "AudioOutPiece")
        assert frames <= seconds / 0.08 + 1  # +1: the end-of-audio frame carries no sound
    session.close()


# ============================================================================ real processes


@pytest.mark.parametrize("case", ["top-k 99999", "output is the input", "voice with r 0"])
def test_real_cli_process_exits_with_one_clear_line(case: str, question: Path, good_voice: Path, tmp_path: Path,
                                                    isolated_user_dirs: Path) -> None:
    r0 = copy_folder(good_voice, tmp_path / "r0")
    config = json.loads((r0 / "adapter_config.json").read_text(encoding="utf-8"))
    write_json(r0 / "adapter_config.json", {**config, "r": 0})
    answer = tmp_path / "answer.wav"
    args = {
        "top-k 99999": [str(question), str(answer), "--demo", "--top-k", "99999"],
        "output is the input": [str(question), str(question), "--demo"],
        "voice with r 0": [str(question), str(answer), "--demo", "--lora", str(r0)],
    }[case]
    original = question.read_bytes()
    result = subprocess.run([sys.executable, "-m", "app", "reply", *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert_one_error_line(result.returncode, result.stderr, case)
    assert question.read_bytes() == original and not answer.exists()


# ============================================================================ the settings dialog


def test_the_dialog_offers_exactly_the_ranges_the_cli_and_the_settings_file_accept(qtbot, japanese) -> None:  # noqa: ANN001
    from app.settings_dialog import SettingsDialog
    from engine.settings import Settings

    dialog = SettingsDialog(Settings(), None)
    qtbot.addWidget(dialog)
    for box, allowed in ((dialog.audio_temperature, validation.TEMPERATURE), (dialog.text_temperature, validation.TEMPERATURE),
                         (dialog.audio_top_k, validation.TOP_K), (dialog.text_top_k, validation.TOP_K),
                         (dialog.max_answer, validation.MAX_ANSWER_SECONDS)):
        assert (box.minimum(), box.maximum()) == (allowed.low, allowed.high)
    ok = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    dialog.system_prompt.setPlainText("あ" * (validation.MAX_SYSTEM_PROMPT_CHARS + 1))
    assert not ok.isEnabled() and not dialog.prompt_error.isHidden() and "長すぎ" in dialog.prompt_error.text()
    dialog.accept()  # Enter, or anything else that accepts: still refused while the prompt is too long
    assert dialog.result() != dialog.DialogCode.Accepted
    dialog.system_prompt.setPlainText("あ" * validation.MAX_SYSTEM_PROMPT_CHARS)
    assert ok.isEnabled() and dialog.prompt_error.isHidden()


# ============================================================================ random input (hypothesis)

from hypothesis import HealthCheck, given, settings as hypothesis_settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@hypothesis_settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(st.binary(max_size=400), st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")),
                     st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=20),
                                  lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=6),
                                  max_leaves=20).map(lambda v: json.dumps(v, ensure_ascii=False).encode("utf-8", "surrogatepass"))))
def test_any_bytes_as_settings_never_crash_and_are_kept(raw: bytes, tmp_path_factory: pytest.TempPathFactory) -> None:
    from engine.settings import from_json_dict, load_settings, to_json_dict

    folder = tmp_path_factory.mktemp("random-settings")
    path = folder / "settings.json"
    path.write_bytes(raw)
    result = load_settings(path)
    again, problems = from_json_dict(json.loads(json.dumps(to_json_dict(result.settings))))
    assert problems == [] and again == result.settings
    if result.problem is not None:
        assert "\n" not in result.problem.message and translated(result.problem.template)
        assert result.moved_to is not None and result.moved_to.read_bytes() == raw
    if path.exists():
        assert path.read_bytes() == raw


@hypothesis_settings(max_examples=300, deadline=None)
@given(value=st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(min_value=-10**6, max_value=10**6)),
       which=st.sampled_from(["audio_temperature", "audio_top_k", "max_answer_seconds", "context_tokens"]))
def test_the_settings_file_and_the_cli_accept_the_same_values(value: float, which: str) -> None:
    """One range for both: a value the settings file keeps is one the CLI check accepts, and back."""
    from engine.settings import from_json_dict

    allowed = {"audio_temperature": validation.TEMPERATURE, "audio_top_k": validation.TOP_K,
               "max_answer_seconds": validation.MAX_ANSWER_SECONDS, "context_tokens": validation.CONTEXT_TOKENS}[which]
    data = {"sampling": {which: value}} if which.startswith("audio") else {which: value}
    _, problems = from_json_dict(data)
    try:
        validation.check_range("--flag", value, allowed)
        cli_ok = True
    except UserFacingError:
        cli_ok = False
    assert cli_ok == (problems == [])


def test_every_bad_export_path_is_refused_clearly_and_writes_nothing(tmp_path: Path, japanese, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001, E501
    """A conversation exported where its files cannot go (a file where the folder should be, a folder where one of
    the three files should be, a full disk): the export's own error, one line with Japanese, and no file of the
    export written (not a .wav without its transcripts), nothing already there touched."""
    from engine.files import write_atomically
    from engine.history.turn_record import TurnRecord
    from engine.worker import records as worker_records

    conversation = [TurnRecord(1, "user", np.zeros(1600, np.float32), 16000),
                    TurnRecord(2, "assistant", np.zeros(2400, np.float32), 24000, text="はい")]
    (tmp_path / "a-file.txt").write_text("x", encoding="utf-8")
    for name in ("wav-is-a-folder", "txt-is-a-folder", "json-is-a-folder"):
        (tmp_path / name).mkdir()
    (tmp_path / "wav-is-a-folder" / "talk.wav").mkdir()
    (tmp_path / "txt-is-a-folder" / "talk.txt").mkdir()
    (tmp_path / "json-is-a-folder" / "talk.json").mkdir()
    cases = {
        "under an existing file": tmp_path / "a-file.txt" / "talk.wav",
        "under a file, deeper": tmp_path / "a-file.txt" / "more" / "talk.wav",
        "the .wav is a folder": tmp_path / "wav-is-a-folder" / "talk.wav",
        "the .txt is a folder": tmp_path / "txt-is-a-folder" / "talk.wav",
        "the .json is a folder": tmp_path / "json-is-a-folder" / "talk.wav",
    }

    def snapshot() -> dict[str, bytes | None]:
        return {str(f): f.read_bytes() if f.is_file() else None for f in sorted(tmp_path.rglob("*"))}

    for label, target in cases.items():
        before = snapshot()
        with pytest.raises(UserFacingError) as caught:
            worker_records.export_conversation(conversation, target)
        assert caught.value.kind == "export", label
        assert_clear(caught.value)
        assert snapshot() == before, label

    def full_disk(path: Path, data: bytes) -> None:
        if path.suffix == ".json":  # the last of the three files: the disk filled up after the first two
            raise OSError(28, "No space left on device")
        write_atomically(path, data)

    monkeypatch.setattr(worker_records, "write_atomically", full_disk)
    (tmp_path / "full").mkdir()
    with pytest.raises(UserFacingError) as caught:
        worker_records.export_conversation(conversation, tmp_path / "full" / "talk.wav")
    assert caught.value.kind == "export"
    assert_clear(caught.value, "No space left on device")
    assert caught.value.values["path"] == str(tmp_path / "full" / "talk.json")  # the file that could not be written
    assert list((tmp_path / "full").iterdir()) == []  # the .wav and .txt that did land are taken back
