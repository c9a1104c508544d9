"""User settings: one small dataclass, persisted as JSON in the platform's config folder.

The file is written atomically (temp file in the same folder, fsync, `os.replace`) so a crash or a
full disk never leaves half a file behind. A file that cannot be read as settings (bad JSON, not an
object) is moved aside to `settings.json.corrupt-<timestamp>` so the user's data is kept for
inspection, defaults are used, and the caller gets a warning string to show. Single fields with a
wrong type or an out-of-range value fall back to their default and are reported the same way, so
one bad value does not throw away the rest.

Plain Python only: the Qt front end and the engine both import this module.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.protocol import MAX_TOP_K, SamplingSettings

APP_NAME = "VoiceChat"
SETTINGS_VERSION = 1

# The prompt liquid-audio's own chat demo uses; it asks for interleaved text and speech, which is
# what the app shows (text) and plays (audio).
DEFAULT_SYSTEM_PROMPT = "Respond with interleaved text and audio."
DEFAULT_MODEL_SOURCE = "LiquidAI/LFM2.5-Audio-1.5B-JP"

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
    language: str = "auto"  # "auto" follows the system locale; see app/i18n.py
    # Conversation history retention (engine/history): 0 keeps everything, the default.
    history_keep_days: int = 0
    history_max_megabytes: int = 0


def default_settings_path() -> Path:
    # Imported here so that merely importing the dataclass costs nothing.
    from platformdirs import user_config_dir

    return Path(user_config_dir(APP_NAME, APP_NAME)) / "settings.json"


def to_json_dict(settings: Settings) -> dict[str, Any]:
    data = dataclasses.asdict(settings)
    data["version"] = SETTINGS_VERSION
    return data


# --------------------------------------------------------------------------- validation


def _check_float(value: Any, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    value = float(value)
    if not math.isfinite(value) or not lo <= value <= hi:
        raise ValueError(f"outside {lo}..{hi}")
    return value


def _check_int(value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"not an integer in {lo}..{hi}")
    return value


def _check_opt_str(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value or None  # an empty field means "not set"


def _check_str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("not a string")
    return value


def _check_bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("not true/false")
    return value


def _check_key(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("not a key name")
    return value


def _check_language(value: Any) -> str:
    if value not in LANGUAGES:
        raise ValueError("unknown language")
    return value


def _sampling_from(value: Any, problems: list[str]) -> SamplingSettings:
    default = SamplingSettings()
    if not isinstance(value, dict):
        problems.append("sampling")
        return default
    checks = {
        "greedy": _check_bool,
        "audio_temperature": lambda v: _check_float(v, 0.0, 5.0),
        "audio_top_k": lambda v: _check_int(v, 1, MAX_TOP_K),
        "text_temperature": lambda v: _check_float(v, 0.0, 5.0),
        "text_top_k": lambda v: _check_int(v, 1, MAX_TOP_K),
    }
    kwargs: dict[str, Any] = {}
    for name, check in checks.items():
        if name in value:
            try:
                kwargs[name] = check(value[name])
            except ValueError:
                problems.append(f"sampling.{name}")
    return dataclasses.replace(default, **kwargs)


_FIELD_CHECKS: dict[str, Any] = {
    "system_prompt": _check_str,
    "input_device": _check_opt_str,
    "output_device": _check_opt_str,
    "model_source": _check_opt_str,
    "model_revision": _check_opt_str,
    "demo": _check_bool,
    "lora": _check_opt_str,
    "max_answer_seconds": lambda v: _check_float(v, 1.0, 600.0),
    "context_tokens": lambda v: _check_int(v, 512, 131072),
    "ptt_key": _check_key,
    "language": _check_language,
    "history_keep_days": lambda v: _check_int(v, 0, 36500),
    "history_max_megabytes": lambda v: _check_int(v, 0, 10_000_000),
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
    # Something the user should be told (corrupt file moved aside, invalid values reset), or None.
    warning: str | None = None
    moved_to: Path | None = None
    first_run: bool = False  # no settings file existed


def load_settings(path: Path | None = None) -> LoadResult:
    path = path or default_settings_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return LoadResult(Settings(), first_run=True)
    except OSError as exc:
        # Unreadable (permissions, I/O error): keep the file where it is, it may be fine later.
        return LoadResult(Settings(), warning=f"Could not read {path}: {exc}. Default settings are used.")
    try:
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("the top level is not a JSON object")
    except ValueError as exc:
        moved = _move_aside(path)
        where = f" It was moved to {moved}." if moved else ""
        return LoadResult(
            Settings(), warning=f"The settings file {path} was corrupt ({exc}).{where} Default settings are used.",
            moved_to=moved,
        )
    settings, problems = from_json_dict(data)
    warning = None
    if problems:
        warning = f"Some settings in {path} were invalid and were reset to their defaults: {', '.join(problems)}."
    return LoadResult(settings, warning=warning)


def _move_aside(path: Path) -> Path | None:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():  # two corrupt files within one second must not overwrite each other
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
        n += 1
    try:
        os.replace(path, target)
    except OSError:
        return None
    return target


def save_settings(settings: Settings, path: Path | None = None) -> Path:
    """Write atomically: readers see either the old file or the new one, never a partial one."""
    path = path or default_settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_json_dict(settings), ensure_ascii=False, indent=2) + "\n"
    fd, tmp_name = tempfile.mkstemp(prefix=".settings-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        raise
    return path
