"""User settings: one small dataclass, persisted as JSON in the platform's config folder.

The file is written atomically (temp file in the same folder, fsync, `os.replace`) so a crash or a
full disk never leaves half a file behind. A file that cannot be read as settings (bad JSON, not an
object, not UTF-8, larger than engine.validation.MAX_SETTINGS_BYTES, a link to nothing) is moved aside
to `settings.json.corrupt-<timestamp>` with its bytes intact (never deleted), defaults are used, and
the caller gets a `SettingsError` to show. Single fields with a wrong type or an out-of-range value
fall back to their default and are reported the same way, so one bad value does not throw away the
rest; the file as it was is then copied to `settings.json.invalid-<timestamp>`.

Plain Python only: the Qt front end and the engine both import this module.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine import validation
from engine.errors import SettingsError
from engine.files import write_atomically
from engine.protocol import SamplingSettings
from engine.constants import DEFAULT_SYSTEM_PROMPT
from engine.constants import MODEL_REPO_ID as DEFAULT_MODEL_SOURCE

SETTINGS_VERSION = 1

# The prompt liquid-audio's own chat demo uses; it asks for interleaved text and speech, which is
# what the app shows (text) and plays (audio).

CONTEXT_CHOICES = (2048, 4096, 8192, 16384)
LANGUAGES = ("auto", "ja", "en")


@dataclass(frozen=True)
class Settings:
    sampling: SamplingSettings = field(default_factory=SamplingSettings)
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    input_device: str | None = None  # None = system default
    output_device: str | None = None
    # Hub repo id or a local folder. None until the first-run dialog has been answered, which is how
    # the app tells a first start from a later one.
    model_source: str | None = None
    model_revision: str | None = None
    demo: bool = False  # the tiny random demo model instead of model_source
    lora: str | None = None  # voice adapter folder, None = the model's own voice
    max_answer_seconds: float = 30.0
    context_tokens: int = 4096
    ptt_key: str = "Space"  # QKeySequence text (portable form)
    # The push-to-talk key also works while another application has the focus (a system-wide key
    # hook, app/widgets/global_ptt.py); off by default, since it watches every key press.
    global_ptt: bool = False
    # Toggles the microphone's mute in hands-free mode: in the window, and, if `global_mute`, system-wide
    # through the same hook as the push-to-talk key (off by default for the same reason). It must differ
    # from `ptt_key`; the window refuses a clash and keeps the keys it had.
    mute_key: str = "F8"
    global_mute: bool = False
    language: str = "auto"  # "auto" follows the system locale; see app/i18n.py
    # Conversation history retention (engine/history): 0 keeps everything, the default.
    history_keep_days: int = 0
    history_max_megabytes: int = 0
    # Hands-free conversation (engine/audio/voice.py): off by default, push-to-talk stays the default.
    hands_free: bool = False
    end_of_speech_s: float = 0.3  # before the answer is heard (engine/audio/turn_taking.py)
    min_speech_s: float = 0.1
    echo_cancellation: bool = True
    # The weights' precision: "bf16" (標準) or "int8" (省メモリ・高速, checked against bf16 once per model and GPU).
    precision: str = "bf16"


def default_settings_path() -> Path:
    # Imported here so that merely importing the dataclass costs nothing.
    from engine import paths

    return paths.settings_file()


def to_json_dict(settings: Settings) -> dict[str, Any]:
    data = dataclasses.asdict(settings)
    data["version"] = SETTINGS_VERSION
    return data


# --------------------------------------------------------------------------- validation
# The ranges are engine.validation's, shared with the CLI and the settings dialog.


def _in(allowed: validation.Range) -> Any:
    def check(value: Any) -> float | int:
        try:
            return validation.check_range("", value, allowed)
        except SettingsError as error:
            raise ValueError(error.message) from error

    return check


def _check_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _check_prompt(value: Any) -> str:
    try:
        return validation.check_system_prompt(value)
    except SettingsError as error:
        raise ValueError(error.message) from error


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not true/false")
    return value


def _check_key(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > 64:
        raise ValueError("not a key name")
    return value


def _check_precision(value: Any) -> str:
    if not isinstance(value, str) or value not in validation.PRECISIONS:
        raise ValueError("unknown precision")
    return value


def _check_language(value: Any) -> str:
    if not isinstance(value, str) or value not in LANGUAGES:
        raise ValueError("unknown language")
    return value


_SAMPLING_CHECKS: dict[str, Any] = {
    "greedy": _check_bool,
    "audio_temperature": _in(validation.TEMPERATURE),
    "audio_top_k": _in(validation.TOP_K),
    "text_temperature": _in(validation.TEMPERATURE),
    "text_top_k": _in(validation.TOP_K),
}


def _sampling_from(value: Any, problems: list[str]) -> SamplingSettings:
    default = SamplingSettings()
    if not isinstance(value, dict):
        problems.append("sampling")
        return default
    kwargs: dict[str, Any] = {}
    for name, check in _SAMPLING_CHECKS.items():
        if name in value:
            try:
                kwargs[name] = check(value[name])
            except ValueError:
                problems.append(f"sampling.{name}")
    return dataclasses.replace(default, **kwargs)


_FIELD_CHECKS: dict[str, Any] = {
    "system_prompt": _check_prompt,
    "input_device": validation.check_name,
    "output_device": validation.check_name,
    "model_source": validation.check_name,
    "model_revision": validation.check_name,
    "demo": _check_bool,
    "lora": validation.check_name,
    "max_answer_seconds": _in(validation.MAX_ANSWER_SECONDS),
    "context_tokens": _in(validation.CONTEXT_TOKENS),
    "ptt_key": _check_key,
    "global_ptt": _check_bool,
    "mute_key": _check_key,
    "global_mute": _check_bool,
    "language": _check_language,
    "history_keep_days": _in(validation.HISTORY_KEEP_DAYS),
    "history_max_megabytes": _in(validation.HISTORY_MAX_MEGABYTES),
    "hands_free": _check_bool,
    "end_of_speech_s": _in(validation.END_OF_SPEECH_SECONDS),
    "min_speech_s": _in(validation.MIN_SPEECH_SECONDS),
    "echo_cancellation": _check_bool,
    "precision": _check_precision,
}


def from_json_dict(data: dict[str, Any]) -> tuple[Settings, list[str]]:
    """Build settings from parsed JSON; returns the fields that were invalid (and defaulted)."""
    problems: list[str] = []
    kwargs: dict[str, Any] = {}
    if "sampling" in data:
        kwargs["sampling"] = _sampling_from(data["sampling"], problems)
    for name, check in _FIELD_CHECKS.items():
        if name in data:
            try:
                kwargs[name] = check(data[name])
            except ValueError:
                problems.append(name)
    # Unknown keys (from a newer version) are ignored rather than treated as corruption.
    return Settings(**kwargs), problems


# --------------------------------------------------------------------------- load / save


@dataclass(frozen=True)
class LoadResult:
    settings: Settings
    # What the user should be told (corrupt file moved aside, invalid values reset), or None. It
    # carries an English template and values that the app translates.
    problem: SettingsError | None = None
    # Where the original bytes of a bad file are kept (moved aside, or copied when only some values
    # were reset and the rest is used).
    moved_to: Path | None = None
    first_run: bool = False  # no settings file existed

    @property
    def warning(self) -> str | None:
        """The problem in English (logs, the CLI)."""
        return self.problem.message if self.problem is not None else None


def load_settings(path: Path | None = None) -> LoadResult:
    """Read the settings; a file that cannot be used is moved aside (its bytes kept) and defaults are used."""
    path = path or default_settings_path()
    if path.is_symlink() and not path.exists():
        # A link to nothing: moved aside like a corrupt file, so that saving does not silently drop it.
        moved = _move_aside(path)
        return _bad_file(path, moved, "link")
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return LoadResult(Settings(), first_run=True)
    except OSError as exc:
        return _unreadable(path, exc)
    if path.is_file() and size > validation.MAX_SETTINGS_BYTES:
        moved = _move_aside(path)
        return _bad_file(path, moved, "too_large", size=size, limit=validation.MAX_SETTINGS_BYTES)
    try:
        with path.open("rb") as f:
            raw = f.read(validation.MAX_SETTINGS_BYTES + 1)
    except FileNotFoundError:
        return LoadResult(Settings(), first_run=True)
    except OSError as exc:
        # Unreadable (permissions, a folder, an I/O error): keep it where it is, it may be fine later.
        return _unreadable(path, exc)
    if len(raw) > validation.MAX_SETTINGS_BYTES:  # grew while we looked, or not a regular file
        moved = _move_aside(path)
        return _bad_file(path, moved, "too_large", size=len(raw), limit=validation.MAX_SETTINGS_BYTES)
    try:
        text = raw.decode("utf-8-sig")  # a BOM (Windows Notepad) is still UTF-8
    except UnicodeDecodeError as exc:
        moved = _move_aside(path)
        return _bad_file(path, moved, "not_utf8", position=exc.start)
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("the top level is not a JSON object")
    except (ValueError, RecursionError) as exc:
        moved = _move_aside(path)
        return _bad_file(path, moved, "corrupt", error=exc)
    settings, problems = from_json_dict(data)
    if not problems:
        return LoadResult(settings)
    # The valid values are used; the file as it was is kept next to it, since the next save rewrites
    # the reset values.
    kept = _copy_aside(path, raw)
    values = {"path": path, "fields": ", ".join(problems)}
    if kept is not None:
        template = ("Some settings in {path} were invalid and were reset to their defaults: {fields}. "
                    "The original file was kept as {moved}.")
        values["moved"] = kept
    else:
        template = "Some settings in {path} were invalid and were reset to their defaults: {fields}."
    return LoadResult(settings, problem=SettingsError.of(template, **values), moved_to=kept)


def _unreadable(path: Path, exc: OSError) -> LoadResult:
    problem = SettingsError.of(
        "The settings file {path} could not be read ({error}). Default settings are used.",
        path=path, error=exc.strerror or exc,
    )
    return LoadResult(Settings(), problem=problem)


# What was wrong with a settings file: (the message when it was moved aside, when it could not be).
_BAD_FILE_TEMPLATES = {
    "link": (
        "The settings file {path} is a link to a missing file. It was moved to {moved}. Default settings are used.",
        "The settings file {path} is a link to a missing file. Default settings are used.",
    ),
    "too_large": (
        "The settings file {path} is too large ({size} bytes; at most {limit}). It was moved to {moved}. "
        "Default settings are used.",
        "The settings file {path} is too large ({size} bytes; at most {limit}). Default settings are used.",
    ),
    "not_utf8": (
        "The settings file {path} is not UTF-8 text (byte {position}). It was moved to {moved}. Default settings are used.",
        "The settings file {path} is not UTF-8 text (byte {position}). Default settings are used.",
    ),
    "corrupt": (
        "The settings file {path} was corrupt ({error}). It was moved to {moved}. Default settings are used.",
        "The settings file {path} was corrupt ({error}). Default settings are used.",
    ),
}


def _bad_file(path: Path, moved: Path | None, reason: str, **values: object) -> LoadResult:
    """Defaults, and a message naming what was wrong and where the file's bytes are now."""
    moved_template, kept_template = _BAD_FILE_TEMPLATES[reason]
    if moved is not None:
        problem = SettingsError.of(moved_template, path=path, moved=moved, **values)
    else:
        problem = SettingsError.of(kept_template, path=path, **values)
    return LoadResult(Settings(), problem=problem, moved_to=moved)


def _aside_name(path: Path, label: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.{label}-{stamp}")
    n = 1
    while target.exists() or target.is_symlink():  # two bad files within one second must not overwrite each other
        target = path.with_name(f"{path.name}.{label}-{stamp}-{n}")
        n += 1
    return target


def _move_aside(path: Path) -> Path | None:
    target = _aside_name(path, "corrupt")
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target


def _copy_aside(path: Path, raw: bytes) -> Path | None:
    target = _aside_name(path, "invalid")
    try:
        with target.open("xb") as f:
            f.write(raw)
    except OSError:
        return None
    return target


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write atomically: readers see either the old file or the new one, never a partial one."""
    path = path or default_settings_path()
    text = json.dumps(to_json_dict(settings), ensure_ascii=False, indent=2) + "\n"
    write_atomically(path, text.encode("utf-8"))
    return path
