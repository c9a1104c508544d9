"""The limits on what a user may ask for, and the one check of each value against them.

The command line (`voicechat reply`), the settings file (engine/settings.py) and the settings dialog
(app/settings_dialog.py) all take their ranges from here, so a value one of them accepts the others
accept too. Each check raises `SettingsError` with an English template and its values, which the app
translates (app/engine_messages.py) and the CLI prints as it is.

Where the other kinds of input are checked (one place each):
- model folder: `engine.model.store.check_model_folder`
- voice folder: `engine.model.lora.load_voice`
- audio file and take: `engine.audio.wav.read_wav_mono`, `engine.chat.session.check_take`
- output path: `check_output_path` below (an export's folder: `make_export_folder`)
- settings file: `engine.settings.load_settings`
- sampling and limits (CLI flags, settings, dialog): `check_range` with the ranges below
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from engine.errors import OutputPathError, SettingsError
from engine.protocol import MAX_TOP_K


@dataclass(frozen=True)
class Range:
    """An inclusive range of a number the user sets; `integer` ranges take whole numbers only."""

    low: float
    high: float
    integer: bool = False


# The weights' precision (engine/model/quantized.py): "bf16" as trained, or "int8" weight-only.
PRECISIONS = ("bf16", "int8")

TEMPERATURE = Range(0.05, 2.0)
TOP_K = Range(1, MAX_TOP_K, integer=True)
MAX_ANSWER_SECONDS = Range(0.5, 600.0)
MAX_TAKE_SECONDS = Range(1.0, 600.0)
# Hands-free: the silence that ends a take, and the speech that starts one.
END_OF_SPEECH_SECONDS = Range(0.2, 3.0)
MIN_SPEECH_SECONDS = Range(0.05, 1.0)
CONTEXT_TOKENS = Range(512, 131072, integer=True)
# Training a voice (engine/voices): the optimizer steps and the LoRA rank a user may ask for.
TRAINING_STEPS = Range(1, 200_000, integer=True)
LORA_RANK = Range(1, 256, integer=True)
# History retention (engine/history): 0 means keep everything.
HISTORY_KEEP_DAYS = Range(0, 36500, integer=True)
HISTORY_MAX_MEGABYTES = Range(0, 10_000_000, integer=True)

# A prompt this long is already far beyond any sensible instruction; longer ones are refused before
# they are tokenized (a multi-megabyte prompt would take the window to gigabytes of memory).
MAX_SYSTEM_PROMPT_CHARS = 4000
# The system prompt must leave most of the context to the conversation: at most this share of it.
MAX_SYSTEM_PROMPT_SHARE = 0.5
# settings.json holds a few short strings and numbers; a file larger than this is not ours.
MAX_SETTINGS_BYTES = 256 * 1024
# Folder names, device names and Hub ids in the settings.
MAX_NAME_CHARS = 4096


def _number_text(value: float) -> str:
    return f"{value:g}"


def check_range(name: str, value: object, allowed: Range) -> float | int:
    """`value` as a number inside `allowed`, or SettingsError naming the setting and the range."""
    number: float | int | None = None
    if not isinstance(value, bool) and isinstance(value, (int, float)):
        number = value
    ok = number is not None and math.isfinite(number) and allowed.low <= number <= allowed.high
    if ok and allowed.integer and not float(number).is_integer():  # type: ignore[arg-type]
        ok = False
    if not ok:
        template = (
            "{name} must be a whole number from {low} to {high} (got {value})."
            if allowed.integer
            else "{name} must be a number from {low} to {high} (got {value})."
        )
        raise SettingsError.of(
            template, name=name, low=_number_text(allowed.low), high=_number_text(allowed.high), value=value
        )
    assert number is not None
    return int(number) if allowed.integer else float(number)


def check_system_prompt(prompt: object) -> str:
    """A system prompt the app can use: text, not empty, at most MAX_SYSTEM_PROMPT_CHARS characters."""
    if not isinstance(prompt, str):
        raise SettingsError.of("The system prompt must be text.")
    if len(prompt) > MAX_SYSTEM_PROMPT_CHARS:
        raise SettingsError.of(
            "The system prompt is too long ({length} characters; at most {limit}).",
            length=len(prompt), limit=MAX_SYSTEM_PROMPT_CHARS,
        )
    if "\x00" in prompt:
        raise SettingsError.of("The system prompt contains a NUL character.")
    return prompt


def check_system_prompt_fits(tokens: int, context_tokens: int) -> None:
    """The system prompt's tokens must leave room for the conversation (else every answer is empty)."""
    limit = int(context_tokens * MAX_SYSTEM_PROMPT_SHARE)
    if tokens > limit:
        raise SettingsError.of(
            "The system prompt is too long for the context: {tokens} tokens, at most {limit} fit in a context "
            "of {context} tokens. Shorten it or choose a larger context.",
            tokens=tokens, limit=limit, context=context_tokens,
        )


def check_name(value: object) -> str | None:
    """A device name, folder or Hub id from the settings: None, or text without NUL and not huge."""
    if value is None:
        return None
    if not isinstance(value, str) or "\x00" in value or len(value) > MAX_NAME_CHARS:
        raise ValueError("not a usable name")
    return value or None  # an empty field means "not set"


def check_output_path(output: str | Path, *, inputs: tuple[str | Path, ...] = ()) -> Path:
    """Where an answer may be written: refuses a path that is one of `inputs` (never overwrite the user's
    recording), an existing folder, a file in a folder that does not exist (no folder is created), or
    one that cannot be written to.

    Checked before the (slow) model load, so the user hears about it at once.
    """
    path = Path(output)
    for given in inputs:
        if _same_file(path, Path(given)):
            raise OutputPathError.of(
                "The output file {path} is the input recording; choose another name so the recording is kept.",
                path=path,
            )
    if path.is_dir():
        raise OutputPathError.of("The output path {path} is a folder; give a file name.", path=path)
    if path.is_symlink() and not path.exists():
        raise OutputPathError.of("The output path {path} is a link to nothing.", path=path)
    folder = path.absolute().parent
    if not folder.exists() and not folder.is_symlink():
        # Not created: a typo in the path would otherwise make new folders, and the answer would be
        # somewhere the user does not look.
        raise OutputPathError.of(
            "The output file {path} cannot be written: the folder {folder} does not exist. Check the path, "
            "or create the folder first.", path=path, folder=folder)
    parent = _existing_parent(path)
    if not parent.is_dir():
        raise OutputPathError.of("The output file {path} cannot be created: {parent} is not a folder.", path=path, parent=parent)
    if path.exists() and not path.is_file():
        raise OutputPathError.of("The output path {path} is not a regular file.", path=path)
    if path.exists() and not _can_open_for_writing(path):
        raise OutputPathError.of("The output file {path} exists and cannot be overwritten.", path=path)
    if not _can_create_in(parent):
        raise OutputPathError.of("The output file {path} cannot be written: the folder {parent} is read-only.", path=path, parent=parent)
    return path


def make_export_folder(path: Path) -> None:
    """Creates the folder of export file `path` if it is missing (the window's file dialog may name a new one), or
    raises OutputPathError saying what is in the way: a file where a folder should be, or the system's reason."""
    parent = _existing_parent(path)
    if not parent.is_dir():
        raise OutputPathError.of("The output file {path} cannot be created: {parent} is not a folder.", path=path, parent=parent)
    try:
        path.absolute().parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise OutputPathError.of("The output file {path} cannot be written: {error}", path=path, error=error.strerror or error) from error


def _can_open_for_writing(path: Path) -> bool:
    try:
        with path.open("ab"):  # append mode changes nothing
            return True
    except OSError:
        return False


def _can_create_in(folder: Path) -> bool:
    """Really create (and remove) a file there: permission bits say nothing for root or for /proc."""
    import tempfile

    try:
        with tempfile.NamedTemporaryFile(prefix=".voicechat-probe-", dir=folder):
            return True
    except OSError:
        return False


def _existing_parent(path: Path) -> Path:
    """The nearest existing ancestor: the file's folder is created if it is missing."""
    parent = path.absolute().parent
    while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
        parent = parent.parent
    return parent


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.absolute() == b.absolute()
