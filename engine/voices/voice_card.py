"""A finished voice: peft's adapter files, its card (voice.json) and its preview, published into a folder so
that it is never seen half-written; and a voice shared as one zip file, exported and imported.

A folder is a voice once it holds adapter_config.json and adapter_model.safetensors (what the app's voice
switch reads: engine/model/lora.py); the card says what the voice is. Publishing stages the new files as
hidden files beside the old ones and renames them into place, the weights first and the card last: a crash
leaves either the previous voice, or a folder without adapter_config.json (no voice), never a config that
describes other weights.

Torch-free at import (the window reads cards and lists voices with it); exporting and importing check the voice
with engine/model/lora.py's load_voice, which needs torch, and run on the engine thread.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from engine.constants import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from engine.errors import LoraError, VoiceTrainingError
from engine.files import write_atomically

VOICE_CARD = "voice.json"
PREVIEW_FILE = "preview.wav"
CARD_FORMAT = 1
# What a shared voice's zip may hold: the files above, nothing else, each within a size that no sane voice
# exceeds (an all-linear rank-64 adapter of the full model in float32 is ~0.3 GB).
VOICE_FILES = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, VOICE_CARD, PREVIEW_FILE)
MAX_VOICE_FILE_BYTES = 2 << 30


@dataclass(frozen=True)
class VoiceCard:
    name: str
    minutes: float  # of speech it was trained on
    clips: int
    steps: int
    held_out_loss: float | None
    train_loss: float | None
    created: str  # ISO 8601, UTC
    base_model: str | None
    precision: str  # the base it was trained on ("bf16" or "int8"); the voice works in both
    rank: int
    format: int = CARD_FORMAT

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), ensure_ascii=False, indent=1).encode("utf-8")

    @classmethod
    def read(cls, folder: Path) -> VoiceCard | None:
        """The folder's card, or None when it has none or it is unreadable (a voice may come without one)."""
        try:
            data = json.loads((Path(folder) / VOICE_CARD).read_text(encoding="utf-8"))
            known = set(cls.__dataclass_fields__)
            return cls(**{key: value for key, value in data.items() if key in known})
        except (OSError, ValueError, TypeError):
            return None


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def holds_voice(folder: Path) -> bool:
    return (Path(folder) / ADAPTER_CONFIG).is_file() or (Path(folder) / ADAPTER_WEIGHTS).is_file()


@dataclass(frozen=True)
class InstalledVoice:
    folder: Path
    card: VoiceCard | None  # None: a voice without a card (an adapter copied in by hand)

    @property
    def name(self) -> str:
        return self.card.name if self.card is not None and self.card.name else self.folder.name


def installed_voices(voices_dir: Path) -> list[InstalledVoice]:
    """The voices in `voices_dir` (every folder that is a voice; hidden ones, such as an import being unpacked, left
    out), by name."""
    try:
        folders = [path for path in Path(voices_dir).iterdir() if path.is_dir() and not path.name.startswith(".")]
    except OSError:
        return []
    voices = [InstalledVoice(folder, VoiceCard.read(folder)) for folder in folders if (folder / ADAPTER_CONFIG).is_file()]
    return sorted(voices, key=lambda voice: (voice.name.casefold(), voice.folder.name))


def publish_voice(staged: Path, out_dir: Path, card: VoiceCard, preview_wav: bytes | None) -> None:
    """Move the adapter files peft wrote into `staged` (a folder on the same disk) into `out_dir`, with the
    card and the preview. An existing voice there is replaced (the caller has made sure the user wants it)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in (VOICE_CARD, ADAPTER_CONFIG):  # out_dir stops being a voice before any of its files change
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out_dir / name)
    if preview_wav is not None:
        write_atomically(out_dir / PREVIEW_FILE, preview_wav)
    for name in (ADAPTER_WEIGHTS, ADAPTER_CONFIG):
        os.replace(staged / name, out_dir / name)
    write_atomically(out_dir / VOICE_CARD, card.to_json())


def export_voice(folder: Path, zip_path: Path) -> None:
    """The voice as one zip file (its adapter, card and preview) written whole or not at all."""
    from engine.model.lora import load_voice

    folder, zip_path = Path(folder), Path(zip_path)
    load_voice(folder)  # a voice that does not load is not shared
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in VOICE_FILES:
            if (folder / name).is_file():
                archive.write(folder / name, arcname=name)
    try:
        write_atomically(zip_path, buffer.getvalue())
    except OSError as error:
        raise VoiceTrainingError.of("The voice could not be written to {file}: {error}", file=zip_path, error=error) from error


def import_voice(zip_path: Path, voices_dir: Path, *, name: str | None = None) -> Path:
    """Unpack a shared voice into a new folder of `voices_dir` (named after the zip, or `name`, made unique)
    and return it. Refused, with nothing written, when the zip is not a voice."""
    from engine.model.lora import load_voice

    zip_path = Path(zip_path)
    try:
        archive = zipfile.ZipFile(zip_path)
    except (OSError, zipfile.BadZipFile) as error:
        raise VoiceTrainingError.of("{file} is not a voice file (a zip with a voice inside): {error}", file=zip_path, error=error) from error
    with archive:
        members = {info.filename: info for info in archive.infolist() if not info.is_dir()}
        strange = [member for member in members if member not in VOICE_FILES]
        if strange:
            raise VoiceTrainingError.of("{file} holds files a voice does not have ({names}).", file=zip_path, names=", ".join(sorted(strange)[:3]))
        if ADAPTER_CONFIG not in members or ADAPTER_WEIGHTS not in members:
            raise VoiceTrainingError.of("{file} holds no voice ({names} missing).", file=zip_path, names=f"{ADAPTER_CONFIG}, {ADAPTER_WEIGHTS}")
        if any(info.file_size > MAX_VOICE_FILE_BYTES for info in members.values()):
            raise VoiceTrainingError.of("{file} holds a file too large for a voice.", file=zip_path)
        voices_dir.mkdir(parents=True, exist_ok=True)
        staging = Path(_unique(voices_dir, "." + voice_folder_name(name or zip_path.stem) + ".importing"))
        staging.mkdir()
        try:
            for member in members:
                write_atomically(staging / member, archive.read(member))
            load_voice(staging)  # the same check every voice gets before it is merged
            target = Path(_unique(voices_dir, voice_folder_name(name or zip_path.stem)))
            os.replace(staging, target)
        except (LoraError, OSError, zipfile.BadZipFile) as error:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(error, LoraError):
                raise
            raise VoiceTrainingError.of("The voice in {file} could not be imported: {error}", file=zip_path, error=error) from error
    return target


def voice_folder_name(name: str) -> str:
    """A folder name from a voice's name: what Windows and Linux both accept (the wizard names a new voice's data
    and voice folders with it)."""
    cleaned = re.sub(r'[<>:"/\\|?*\x00-\x1f]', "_", name).strip(" .")
    return cleaned[:80] or "voice"


def _unique(folder: Path, name: str) -> Path:
    candidate = folder / name
    number = 2
    while candidate.exists():
        candidate = folder / f"{name} ({number})"
        number += 1
    return candidate
