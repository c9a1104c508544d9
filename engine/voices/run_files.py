"""A training run's files in its output folder: the log (training.json), the checkpoint it resumes from, the
previews, and the hidden work folder that holds all but the log until the voice is published.

    OUT_DIR/training.json                 the run as it goes: per-step and held-out losses, seconds, memory
    OUT_DIR/.voice-training/samples.pt    the clips encoded (a cache: reused by every epoch and a resume)
    OUT_DIR/.voice-training/checkpoint.pt the adapter, optimizer and step of the last checkpoint
    OUT_DIR/.voice-training/previews/     the voice so far at each checkpoint, step-NNNNNN.wav
    OUT_DIR/adapter_config.json, adapter_model.safetensors, voice.json, preview.wav   only once finished

Every file is written whole or not at all (engine/files.py), so a crash or a full disk leaves the previous
checkpoint and log as they were.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.files import write_atomically

if TYPE_CHECKING:  # torch is imported where a checkpoint is written or read: the window reads the log and the paths
    import torch

WORK_FOLDER = ".voice-training"
LOG_FILE = "training.json"
CHECKPOINT_FILE = "checkpoint.pt"
SAMPLES_FILE = "samples.pt"
PREVIEWS_FOLDER = "previews"
CHECKPOINT_FORMAT = 1


def work_dir(out_dir: Path) -> Path:
    return out_dir / WORK_FOLDER


def checkpoint_path(out_dir: Path) -> Path:
    return work_dir(out_dir) / CHECKPOINT_FILE


def preview_path(out_dir: Path, step: int) -> Path:
    return work_dir(out_dir) / PREVIEWS_FOLDER / f"step-{step:06d}.wav"


@dataclass
class TrainingLog:
    """training.json: everything a person (or the wizard's plot) wants to know about the run."""

    status: str = "running"  # "running", "cancelled", "failed", "done"
    step: int = 0
    steps: int = 0
    losses: list[dict[str, float]] = field(default_factory=list)  # step, loss, text_loss, audio_loss, lr, seconds, tokens
    held_out: list[dict[str, float]] = field(default_factory=list)  # step, loss, text_loss, audio_loss
    previews: list[dict[str, Any]] = field(default_factory=list)  # step, file (relative to the output folder)
    seconds: float = 0.0  # training time (the steps, evaluation and checkpoints; not loading)
    tokens: int = 0  # positions trained on (padding excluded)
    peak_memory_bytes: int | None = None  # by the driver's count (CUDA only)
    peak_allocated_bytes: int | None = None
    device: str = ""
    precision: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)  # clips, held-out clips, minutes
    error: str | None = None
    updated: float = field(default_factory=time.time)

    @property
    def tokens_per_second(self) -> float | None:
        return self.tokens / self.seconds if self.seconds > 0 else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "tokens_per_second": self.tokens_per_second}

    def write(self, out_dir: Path) -> None:
        self.updated = time.time()
        write_atomically(out_dir / LOG_FILE, json.dumps(self.as_dict(), ensure_ascii=False, indent=1).encode("utf-8"))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainingLog:
        known = {name for name in cls.__dataclass_fields__}
        return cls(**{key: value for key, value in data.items() if key in known})

    @classmethod
    def read(cls, out_dir: Path) -> TrainingLog | None:
        try:
            return cls.from_dict(json.loads((out_dir / LOG_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return None


@dataclass
class Checkpoint:
    """What a run needs to go on exactly where it stopped."""

    step: int
    fingerprint: str  # the samples, the plan and the options: a resume with other data or options is refused
    adapter: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any]
    log: dict[str, Any]

    def save(self, out_dir: Path) -> None:
        import torch

        buffer = io.BytesIO()
        torch.save({"format": CHECKPOINT_FORMAT, **asdict(self)}, buffer)
        write_atomically(checkpoint_path(out_dir), buffer.getvalue())

    @classmethod
    def load(cls, out_dir: Path) -> Checkpoint | None:
        path = checkpoint_path(out_dir)
        if not path.is_file():
            return None
        import torch

        stored = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(stored, dict) or stored.get("format") != CHECKPOINT_FORMAT:
            raise ValueError("unknown checkpoint format")
        return cls(**{key: stored[key] for key in cls.__dataclass_fields__})
