"""The int8 check's verdict per model, kept so that it runs once per model and GPU, not at every start.

A verdict is keyed by the checkpoint it was measured on (the model.safetensors' resolved path, size and
modification time: a changed file is a different model) and the GPU's name. The file is one JSON object
written whole or not at all (engine/files.py); a damaged file is treated as empty (the check runs again,
costing seconds), never as a pass. So is a verdict kept before the check compared the audio decoders
(`load_verdict`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from engine.files import write_atomically
from engine.paths import precision_verdicts_file

log = logging.getLogger(__name__)


def checkpoint_key(folder: Path, gpu: str) -> str:
    weights = Path(folder).resolve() / "model.safetensors"
    stat = weights.stat()
    return f"{weights}|{stat.st_size}|{stat.st_mtime_ns}|{gpu}"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as error:
        log.warning("int8 verdicts unreadable (%s); the check runs again", error)
        return {}
    return data if isinstance(data, dict) else {}


def load_verdict(folder: Path, gpu: str, path: Path | None = None) -> dict[str, Any] | None:
    """The stored report of the int8 check for this checkpoint on this GPU, or None."""
    entry = _read(path or precision_verdicts_file()).get(checkpoint_key(folder, gpu))
    valid = isinstance(entry, dict) and isinstance(entry.get("passed"), bool) and isinstance(entry.get("streams"), dict)
    # A verdict kept before the check compared the audio decoders (int8 now runs the detokenizer's transformer in
    # bf16) has no "decoder" entry (PrecisionReport.as_dict writes one, null where Mimi decodes): it was measured
    # on what int8 no longer is, pass or fail, so the check runs again, once (its new verdict replaces it).
    return entry if valid and "decoder" in entry else None


def store_verdict(folder: Path, gpu: str, report: dict[str, Any], path: Path | None = None) -> None:
    """Keep `report` (PrecisionReport.as_dict()) for this checkpoint and GPU. A disk error only costs a re-check."""
    target = path or precision_verdicts_file()
    data = _read(target)
    data[checkpoint_key(folder, gpu)] = {**report, "checked_at": time.strftime("%Y-%m-%dT%H:%M:%S")}
    try:
        write_atomically(target, json.dumps(data, ensure_ascii=False, indent=1).encode("utf-8"))
    except OSError as error:
        log.warning("could not keep the int8 verdict: %s", error)
