"""The conversation as the engine keeps it (every take and every answer's PCM), and its export.

Nothing the user made is lost: the records stay when the model's context drops old turns, and only
a new conversation (Reset, a new system prompt) clears them.

The seam for a history store: `RecordBook.on_finished` is called exactly once per record, on the
engine thread, when the record is complete: a user take when it arrives, an answer when its metrics
are known (or when it ended without any). Do not block in it for long (it runs between turns).
"""

from __future__ import annotations

import io
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import OutputPathError, UserFacingError
from engine.files import write_atomically
from engine.validation import check_output_path, make_export_folder
from engine.protocol import TranscriptLabels
from engine.history.turn_record import TurnRecord  # the history's value type: the worker keeps its turns as it
from engine.constants import ANSWER_SAMPLE_RATE as ANSWER_RATE
from engine.constants import USER_SAMPLE_RATE as USER_RATE

log = logging.getLogger(__name__)

EXPORT_GAP_S = 0.4  # silence between turns in the exported WAV, so the turns are audible as turns


RecordListener = Callable[[TurnRecord], None]


class RecordBook:
    """The records of the current conversation, in order, and the one point where a turn is finished."""

    def __init__(self, on_finished: RecordListener | None = None) -> None:
        self.records: list[TurnRecord] = []
        self.conversation = 1  # counts conversations: a new one starts at every clear()
        self.on_finished = on_finished
        self._finished: set[int] = set()
        # Hands-free (engine/worker/voice_turns.py): the records from this index on are provisional (a take the
        # user may still continue, and its answer): finishing them waits for settle(), withdraw() drops them.
        self._provisional_from: int | None = None
        self._deferred: list[TurnRecord] = []

    def __iter__(self) -> Iterator[TurnRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def add(self, record: TurnRecord) -> TurnRecord:
        record.conversation = self.conversation
        self.records.append(record)
        return record

    def find(self, turn_id: int) -> TurnRecord | None:
        return next((r for r in self.records if r.turn_id == turn_id), None)

    def finish(self, record: TurnRecord) -> None:
        """The record is complete (audio, text, metrics): hand it to the listener, once (a provisional one when
        it is settled)."""
        if record.turn_id in self._finished:
            return
        if self._provisional_from is not None and any(r is record for r in self.records[self._provisional_from:]):
            if not any(r is record for r in self._deferred):
                self._deferred.append(record)
            return
        self._finished.add(record.turn_id)
        if self.on_finished is not None:
            try:
                self.on_finished(record)
            except Exception:  # noqa: BLE001 - a history problem must not stop the conversation
                log.exception("the record listener failed for turn %d", record.turn_id)

    def begin_provisional(self) -> None:
        """The records added from now on are provisional (settled before, if some were)."""
        self.settle()
        self._provisional_from = len(self.records)

    @property
    def provisional(self) -> list[TurnRecord]:
        return [] if self._provisional_from is None else self.records[self._provisional_from:]

    def settle(self) -> None:
        """The provisional records are final: those finished meanwhile go to the listener now, in order."""
        deferred, self._deferred, self._provisional_from = self._deferred, [], None
        for record in deferred:
            self.finish(record)

    def withdraw(self) -> list[TurnRecord]:
        """Drop the provisional records as if they had never been made (none reaches the listener)."""
        if self._provisional_from is None:
            return []
        withdrawn = self.records[self._provisional_from:]
        del self.records[self._provisional_from:]
        self._deferred, self._provisional_from = [], None
        return withdrawn

    def clear(self) -> None:
        self.settle()
        self.records.clear()
        self.conversation += 1

    def snapshot(self) -> list[TurnRecord]:
        return list(self.records)


def resample(pcm: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Band-limited resampling for replay/export (user takes are 16 kHz, the player runs at 24 kHz)."""
    from engine.audio.wav import resample as _resample

    return _resample(np.asarray(pcm, dtype=np.float32), src, dst)


def export_conversation(records: list[TurnRecord], wav_path: Path, labels: TranscriptLabels = TranscriptLabels()) -> list[Path]:
    """One WAV with both sides in order (24 kHz mono, 16-bit), plus .txt (worded with `labels`) and .json
    transcripts."""
    import soundfile as sf

    if not records:
        raise UserFacingError("There is nothing to export yet.")
    wav_path = wav_path.with_suffix(".wav")
    txt_path = wav_path.with_suffix(".txt")
    json_path = wav_path.with_suffix(".json")
    # Every file checked before any is written, so that a path in the way never leaves a .wav without its transcripts.
    make_export_folder(wav_path)
    for path in (wav_path, txt_path, json_path):
        check_output_path(path)
    gap = np.zeros(int(EXPORT_GAP_S * ANSWER_RATE), np.float32)
    parts: list[np.ndarray] = []
    turns_json: list[dict[str, Any]] = []
    lines: list[str] = []
    position = 0
    for record in records:
        pcm = resample(record.pcm, record.sample_rate, ANSWER_RATE)
        start_s = position / ANSWER_RATE
        parts.append(pcm)
        parts.append(gap)
        position += len(pcm) + len(gap)
        entry: dict[str, Any] = {
            "turn_id": record.turn_id,
            "role": record.role,
            "start_s": round(start_s, 3),
            "duration_s": round(record.duration_s, 3),
            "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(record.started_at)),
        }
        if record.role == "assistant":
            entry["text"] = record.text
            entry["cancelled"] = record.cancelled
            entry["greedy"] = record.greedy
            entry["metrics"] = asdict(record.metrics) if record.metrics is not None else None
            lines.append(f"[{_clock(start_s)}] {labels.assistant}: {record.text}" + (f" {labels.interrupted}" if record.cancelled else ""))
        else:
            lines.append(f"[{_clock(start_s)}] {labels.user}: " + labels.voice.replace("{seconds}", f"{record.duration_s:.1f}"))
        turns_json.append(entry)
    audio = np.concatenate(parts[:-1]) if parts else np.zeros(0, np.float32)
    # Clip rather than wrap: a sample over full scale must not become a loud click in PCM_16.
    audio = np.clip(audio, -1.0, 1.0)
    wav = io.BytesIO()
    sf.write(wav, audio, ANSWER_RATE, subtype="PCM_16", format="WAV")
    doc = {"sample_rate": ANSWER_RATE, "gap_s": EXPORT_GAP_S, "duration_s": round(len(audio) / ANSWER_RATE, 3),
           "turns": turns_json}
    files = {
        wav_path: wav.getvalue(),
        txt_path: ("\n".join(lines) + "\n").encode("utf-8"),
        json_path: (json.dumps(doc, ensure_ascii=False, indent=2) + "\n").encode("utf-8"),
    }
    added: list[Path] = []  # the files this export created (not those it replaced)
    for path, data in files.items():
        existed = path.exists()
        try:
            write_atomically(path, data)
        except OSError as error:  # e.g. the disk filled up: what this export added is taken back
            for earlier in added:
                earlier.unlink(missing_ok=True)
            raise OutputPathError.of("The output file {path} cannot be written: {error}", path=path, error=error.strerror or error) from error
        if not existed:
            added.append(path)
    return list(files)


def _clock(seconds: float) -> str:
    minutes, secs = divmod(seconds, 60.0)
    return f"{int(minutes):02d}:{secs:05.2f}"
