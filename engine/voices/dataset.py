"""The voice data folder: the clips the wizard collects (recorded or imported) and the trainer reads.

    DATA_DIR/wavs/<name>.wav      24 kHz mono 16-bit, the silence before and after the speech trimmed
    DATA_DIR/transcripts.list     wavs/<name>.wav|text, one clip a line, UTF-8, in the order the clips came
    DATA_DIR/clips.json           where each clip came from and how long it is (the wizard's bookkeeping)

It is itself a folder that scan_folder reads (a `file|text` list beside the audio), so a user can edit the text,
add or delete clips by hand, or hand it to another tool. The files are the state: nothing is cached between
calls, and the list file is the one owner of the text. Every write goes through engine.files.write_atomically,
so a crash or a full disk leaves each file whole, old or new; a new clip's audio lands before the list names it,
and a redo replaces the old take only once the new one is on the disk.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.audio.wav import resample
from engine.errors import Message, VoiceDataError
from engine.files import write_atomically
from engine.voices.clip_check import MAX_TRAINING_CLIP_SECONDS, trim_silence
from engine.protocol import MessagePart
from engine.voices.importing import (
    DATA_SAMPLE_RATE,
    FileProblem,
    FolderScan,
    ScannedClip,
    clean_transcript,
    error_message,
    parse_list,
    read_audio,
    read_text_file,
    walk_folder,
)

WAVS_DIR = "wavs"
LIST_NAME = "transcripts.list"
CLIPS_NAME = "clips.json"
_NAME_CHARS = re.compile(r"[^\w\-]+")
# Imported clips are saved this many at a time: one write of the list for each batch, not for each clip (a crash
# in a batch leaves at most this many clips without their text, never a list line without its audio).
IMPORT_BATCH = 50
_MAX_NAME_CHARS = 60
_SCRIPT_NAME = re.compile(r"script-0*([1-9][0-9]*)")

# How much speech makes a voice (the wizard's verdict). Under 10 minutes a LoRA voice learns the timbre but not a
# steady manner of speaking; 20 to 60 minutes is what speech LoRA recipes use; beyond an hour training takes
# longer for little gain.
MIN_MINUTES = 10.0
RECOMMENDED_MINUTES = (20.0, 60.0)


# ----------------------------------------------------------------------------------------------- clips


@dataclass(frozen=True)
class ScriptLine:
    """A clip recorded from the reading script: READING_SCRIPT[index]."""

    index: int


@dataclass(frozen=True)
class SourceSpan:
    """A clip imported from a file: the whole file, or the piece from `start_seconds` to `end_seconds`."""

    path: str
    start_seconds: float
    end_seconds: float


ClipOrigin = ScriptLine | SourceSpan | None


@dataclass(frozen=True)
class DataClip:
    name: str  # the file name in wavs/ without .wav
    text: str  # "" when it has none yet
    seconds: float
    origin: ClipOrigin
    path: Path


def _origin_json(origin: ClipOrigin) -> dict | None:
    if isinstance(origin, ScriptLine):
        return {"script_index": origin.index}
    if isinstance(origin, SourceSpan):
        return {"source": origin.path, "start_s": round(origin.start_seconds, 3), "end_s": round(origin.end_seconds, 3)}
    return None


def _origin_of(data: object) -> ClipOrigin:
    """The origin clips.json records, or None for anything it does not recognise (a hand-edited file)."""
    if not isinstance(data, dict):
        return None
    index = data.get("script_index")
    if isinstance(index, int) and not isinstance(index, bool) and index >= 0:
        return ScriptLine(index)
    source, start, end = data.get("source"), data.get("start_s"), data.get("end_s")
    if isinstance(source, str) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (start, end)):
        return SourceSpan(source, float(start), float(end))  # type: ignore[arg-type]
    return None


def _wav_bytes(samples: np.ndarray, sample_rate: int) -> tuple[bytes, float]:
    """A clip as the data folder keeps it (16-bit WAV at DATA_SAMPLE_RATE, clipped rather than wrapped), and its
    length in seconds."""
    import soundfile

    data = resample(np.asarray(samples, dtype=np.float32).reshape(-1), sample_rate, DATA_SAMPLE_RATE)
    buffer = io.BytesIO()
    soundfile.write(buffer, np.clip(data, -1.0, 1.0), DATA_SAMPLE_RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue(), len(data) / DATA_SAMPLE_RATE


@dataclass(frozen=True)
class _ListLine:
    name: str | None  # the clip it names, None for any other line
    text: str
    raw: str


def _clip_name(written: str) -> str | None:
    """The clip a list line names (`wavs/<name>.wav`, with or without the folder and the extension)."""
    name = written.strip().replace("\\", "/")
    name = name.removeprefix(f"{WAVS_DIR}/").removesuffix(".wav")
    return name if name and "/" not in name else None


class VoiceData:
    """The data folder of one voice in the making. Every method reads the folder's files afresh and writes them
    atomically; a failed write raises VoiceDataError and leaves the folder as it was."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)

    @property
    def wavs_dir(self) -> Path:
        return self.folder / WAVS_DIR

    @property
    def list_path(self) -> Path:
        return self.folder / LIST_NAME

    @property
    def clips_path(self) -> Path:
        return self.folder / CLIPS_NAME

    def wav_path(self, name: str) -> Path:
        return self.wavs_dir / f"{name}.wav"

    # ------------------------------------------------------------------------------------------- reading

    def _lines(self) -> list[_ListLine]:
        """The list file's lines, each with the clip it names (None for a line that names no clip of wavs/: it
        is written back as it was, so nothing a user wrote there is lost)."""
        if not self.list_path.is_file():
            return []
        lines: list[_ListLine] = []
        named: set[str] = set()
        for raw in read_text_file(self.list_path).splitlines():
            entries, _ = parse_list(raw)
            name = _clip_name(entries[0].name) if entries else None
            if name is not None and not entries[0].name.startswith(f"{WAVS_DIR}/") and not self.wav_path(name).is_file():
                name = None  # "notes|..." is not a clip, "take1|..." is one where wavs/take1.wav is
            if name is None or name in named:
                lines.append(_ListLine(None, "", raw))
            else:
                named.add(name)
                lines.append(_ListLine(name, entries[0].text, raw))
        return lines

    def _entries(self) -> dict[str, str]:
        """name -> text of the clips the list names, in its order."""
        return {line.name: line.text for line in self._lines() if line.name is not None}

    def _records(self) -> dict[str, dict]:
        try:
            data = json.loads(self.clips_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}

    def clips(self) -> list[DataClip]:
        """Every clip: those the list names, in its order, then any .wav in wavs/ the list does not name (a take
        whose list write was cut short, or one added by hand), without text."""
        entries = self._entries()
        records = self._records()
        on_disk = {path.stem for path in self.wavs_dir.glob("*.wav")} if self.wavs_dir.is_dir() else set()
        names = [name for name in entries if name in on_disk] + sorted(on_disk - set(entries))
        return [self._clip(name, entries.get(name, ""), records.get(name, {})) for name in names]

    def _clip(self, name: str, text: str, record: dict) -> DataClip:
        path = self.wav_path(name)
        seconds = record.get("seconds")
        try:
            size = path.stat().st_size
        except OSError:
            size = -1
        if not isinstance(seconds, (int, float)) or record.get("bytes") != size:
            seconds = _wav_seconds(path)
        script = _SCRIPT_NAME.fullmatch(name)
        origin = _origin_of(record.get("origin")) or (ScriptLine(int(script[1]) - 1) if script else None)
        return DataClip(name, text, float(seconds), origin, path)

    def clip(self, name: str) -> DataClip:
        for clip in self.clips():
            if clip.name == name:
                return clip
        raise VoiceDataError.of("There is no clip {name} in {folder}.", name=name, folder=self.folder)

    def script_clip(self, index: int) -> DataClip | None:
        """The take of the reading script's sentence `index`, if one was recorded."""
        return next((clip for clip in self.clips() if clip.origin == ScriptLine(index)), None)

    def total_seconds(self) -> float:
        return sum(clip.seconds for clip in self.clips())

    def read_clip(self, name: str) -> np.ndarray:
        """A clip's samples (float32 at DATA_SAMPLE_RATE), e.g. to play it back."""
        return read_audio(self.wav_path(name))

    # ------------------------------------------------------------------------------------------- writing

    def _save_list(self, entries: dict[str, str]) -> None:
        """Write the list with these clips' texts: lines of clips still there keep their place, lines that name
        no clip stay as they were, new clips come at the end."""
        lines: list[str] = []
        written: set[str] = set()
        for line in self._lines():
            if line.name is None:
                lines.append(line.raw)
            elif line.name in entries:
                lines.append(f"{WAVS_DIR}/{line.name}.wav|{clean_transcript(entries[line.name])}")
                written.add(line.name)
        lines += [f"{WAVS_DIR}/{name}.wav|{clean_transcript(text)}" for name, text in entries.items() if name not in written]
        self._write(self.list_path, "".join(f"{line}\n" for line in lines).encode("utf-8"))

    def _save_records(self, records: dict[str, dict]) -> None:
        self._write(self.clips_path, (json.dumps(records, ensure_ascii=False, indent=1) + "\n").encode("utf-8"))

    def _write(self, path: Path, data: bytes) -> None:
        try:
            write_atomically(path, data)
        except OSError as error:
            raise VoiceDataError.of(
                "{file} could not be saved in {folder} ({error}). Free some space on the disk and try again; "
                "the clips saved before are kept.",
                file=path.name, folder=self.folder, error=error.strerror or error) from error

    def _free_name(self, origin: ClipOrigin, taken: set[str]) -> str:
        if isinstance(origin, ScriptLine):
            return f"script-{origin.index + 1:03d}"  # the same name for every take of a sentence (_SCRIPT_NAME): a redo
        if isinstance(origin, SourceSpan):
            stem = _NAME_CHARS.sub("_", Path(origin.path.replace("\\", "/")).stem).strip("_")[:_MAX_NAME_CHARS] or "clip"
            base = stem if origin.start_seconds == 0 else f"{stem}-{round(origin.start_seconds * 1000):08d}"
            candidates = (base if number == 1 else f"{base}-{number}" for number in range(1, len(taken) + 2))
        else:
            candidates = (f"clip-{number:04d}" for number in range(1, len(taken) + 2))
        return next(name for name in candidates if name not in taken)

    def _taken(self) -> set[str]:
        on_disk = {path.stem for path in self.wavs_dir.glob("*.wav")} if self.wavs_dir.is_dir() else set()
        return set(self._entries()) | set(self._records()) | on_disk

    def add_clip(self, samples: np.ndarray, sample_rate: int, text: str = "", origin: ClipOrigin = None) -> DataClip:
        """Save a clip (float32 mono at any rate, already trimmed: clip_check.trim_silence) with its text and where
        it came from. A take of a script sentence that has one already is a redo: see `_redo`."""
        name = self._free_name(origin, self._taken())
        if self.wav_path(name).exists():
            return self._redo(name, samples, sample_rate, text, origin)
        (clip,) = self._add_new([(name, *_wav_bytes(samples, sample_rate), clean_transcript(text), origin)])
        return clip

    def _add_new(self, batch: list[tuple[str, bytes, float, str, ClipOrigin]]) -> list[DataClip]:
        """New clips' audio first, then the bookkeeping, then the list that names them. A failed write takes back
        what this batch wrote, so the folder is as it was."""
        written: list[Path] = []
        entries, records = self._entries(), self._records()
        before = dict(records)
        try:
            for name, wav, seconds, text, origin in batch:
                self._write(self.wav_path(name), wav)
                written.append(self.wav_path(name))
                records[name] = {"origin": _origin_json(origin), "seconds": round(seconds, 3), "bytes": len(wav)}
                entries[name] = text
            self._save_records(records)
            try:
                self._save_list(entries)
            except VoiceDataError:
                with contextlib.suppress(VoiceDataError):  # a record of a clip that is not there is ignored anyway
                    self._save_records(before)
                raise
        except VoiceDataError:
            for path in written:
                path.unlink(missing_ok=True)
            raise
        return [DataClip(name, text, seconds, origin, self.wav_path(name)) for name, _, seconds, text, origin in batch]

    def _redo(self, name: str, samples: np.ndarray, sample_rate: int, text: str, origin: ClipOrigin) -> DataClip:
        """A new take of clip `name`. The new audio replaces the old one in one rename, once it is on the disk
        whole: until then the old take stays. A changed text is written first and put back if the take fails."""
        entries = self._entries()
        text = clean_transcript(text)
        old_text = entries.get(name)
        if old_text != text:
            self._save_list({**entries, name: text})
        wav, seconds = _wav_bytes(samples, sample_rate)
        try:
            self._write(self.wav_path(name), wav)
        except VoiceDataError:
            if old_text != text:
                with contextlib.suppress(VoiceDataError):
                    self._save_list(entries)
            raise
        records = self._records()
        records[name] = {"origin": _origin_json(origin), "seconds": round(seconds, 3), "bytes": len(wav)}
        with contextlib.suppress(VoiceDataError):  # the take is saved; its length is read from the file meanwhile
            self._save_records(records)
        return DataClip(name, text, seconds, origin, self.wav_path(name))

    def replace_clip(self, name: str, samples: np.ndarray, sample_rate: int) -> DataClip:
        """A redo of clip `name` keeping its text and origin (see `_redo`)."""
        current = self.clip(name)
        return self._redo(name, samples, sample_rate, current.text, current.origin)

    def set_text(self, name: str, text: str) -> None:
        entries = self._entries()
        if name not in entries and not self.wav_path(name).is_file():
            raise VoiceDataError.of("There is no clip {name} in {folder}.", name=name, folder=self.folder)
        entries[name] = clean_transcript(text)
        self._save_list(entries)

    def remove_clip(self, name: str) -> None:
        """The list stops naming the clip first (an interrupted removal leaves a clip without text, never a list
        line without its audio), then its audio is deleted."""
        entries = self._entries()
        if name not in entries and not self.wav_path(name).is_file():
            raise VoiceDataError.of("There is no clip {name} in {folder}.", name=name, folder=self.folder)
        entries.pop(name, None)
        self._save_list(entries)
        records = self._records()
        if records.pop(name, None) is not None:
            try:
                self._save_records(records)
            except VoiceDataError:
                pass  # a record without its clip is ignored
        try:
            self.wav_path(name).unlink(missing_ok=True)
        except OSError as error:
            raise VoiceDataError.of("{file} could not be deleted ({error}).", file=self.wav_path(name),
                                    error=error.strerror or error) from error

    def import_clips(
        self, clips: Sequence[ScannedClip], progress: Callable[[int, int], None] | None = None
    ) -> tuple[list[DataClip], list[FileProblem]]:
        """Add scanned clips (those the user kept in the wizard's table), each source file read once, each clip
        trimmed, the list written once per IMPORT_BATCH clips. Returns the clips added and the files that could no
        longer be read (moved or changed since the scan). `progress(done, total)` after each clip; an exception it
        raises stops the import, and the clips read so far are saved first."""
        by_source: dict[Path, list[ScannedClip]] = {}
        for clip in clips:
            by_source.setdefault(clip.source, []).append(clip)
        added: list[DataClip] = []
        problems: list[FileProblem] = []
        batch: list[tuple[str, bytes, float, str, ClipOrigin]] = []
        taken = self._taken()
        done = 0
        try:
            for source, pieces in by_source.items():
                try:
                    samples = read_audio(source)
                except VoiceDataError as error:
                    problems.append(FileProblem(source, error_message(error)))
                    done += len(pieces)
                    continue
                for clip in pieces:
                    piece = trim_silence(samples[clip.start:clip.end], DATA_SAMPLE_RATE)
                    if len(piece):
                        origin = SourceSpan(str(source), clip.start / DATA_SAMPLE_RATE, clip.end / DATA_SAMPLE_RATE)
                        name = self._free_name(origin, taken)
                        taken.add(name)
                        batch.append((name, *_wav_bytes(piece, DATA_SAMPLE_RATE), clean_transcript(clip.transcript or ""), origin))
                    if len(batch) >= IMPORT_BATCH:
                        full, batch = batch, []
                        added += self._add_new(full)
                    done += 1
                    if progress is not None:
                        progress(done, len(clips))
        finally:
            if batch:  # also when progress() stopped the import: what was read is kept
                added += self._add_new(batch)
        return added, problems


def _wav_seconds(path: Path) -> float:
    import soundfile

    try:
        info = soundfile.info(str(path))
    except (OSError, RuntimeError, ValueError):
        return 0.0
    return info.frames / info.samplerate if info.samplerate else 0.0


# ----------------------------------------------------------------------------------------------- how much


@dataclass(frozen=True)
class MinutesVerdict:
    minutes: float
    level: str  # "too_little", "enough", "recommended" or "plenty"
    message: Message

    @property
    def warning(self) -> bool:
        return self.level == "too_little"


def summarize_minutes(seconds: float) -> MinutesVerdict:
    """What the wizard says about the amount of speech collected."""
    minutes = seconds / 60.0
    shown = f"{minutes:.1f}"
    low, high = (f"{value:.0f}" for value in RECOMMENDED_MINUTES)
    if minutes < MIN_MINUTES:
        return MinutesVerdict(minutes, "too_little", Message(
            "{minutes} minutes of speech: too little for a steady voice. Collect at least {minimum} minutes; "
            "{low} to {high} minutes are recommended.",
            minutes=shown, minimum=f"{MIN_MINUTES:.0f}", low=low, high=high))
    if minutes < RECOMMENDED_MINUTES[0]:
        return MinutesVerdict(minutes, "enough", Message(
            "{minutes} minutes of speech: enough to train, but {low} to {high} minutes give a steadier voice.",
            minutes=shown, low=low, high=high))
    if minutes <= RECOMMENDED_MINUTES[1]:
        return MinutesVerdict(minutes, "recommended", Message(
            "{minutes} minutes of speech: a good amount for training.", minutes=shown))
    return MinutesVerdict(minutes, "plenty", Message(
        "{minutes} minutes of speech: more than needed. Training takes longer; {low} to {high} minutes are usually "
        "enough.",
        minutes=shown, low=low, high=high))


# ----------------------------------------------------------------------------------------------- for the trainer

# How many names a message lists before "and N more".
LISTED_NAMES = 5


@dataclass(frozen=True)
class TrainingClip:
    name: str  # the file (and the piece) it came from, relative to the data folder
    samples: np.ndarray  # float32 mono at DATA_SAMPLE_RATE, trimmed, at most MAX_TRAINING_CLIP_SECONDS
    text: str


@dataclass(frozen=True)
class TrainingSet:
    clips: tuple[TrainingClip, ...]
    # Clips left out, each with the reason: audio with a blocking problem (no speech, too short, too long), files
    # that could not be read, list lines that could not be used. The trainer reports them; none stops it.
    skipped: tuple[tuple[str, Message], ...]

    @property
    def seconds(self) -> float:
        return sum(len(clip.samples) for clip in self.clips) / DATA_SAMPLE_RATE


def _names(names: list[str]) -> dict[str, str]:
    shown = ", ".join(names[:LISTED_NAMES])
    return {"count": str(len(names)), "names": shown, "more": str(len(names) - LISTED_NAMES)}


def load_training_set(data_dir: Path, progress: Callable[[int, int], None] | None = None) -> TrainingSet:
    """The clips the trainer learns from: every clip of `data_dir` (a data folder, or any folder scan_folder
    reads) with a transcript and no blocking problem, trimmed.

    Raises VoiceDataError with one clear message for a missing or empty folder, a folder without audio files,
    clips without a transcript (named, a few, then how many more), or no usable clip at all."""
    found: list[tuple[ScannedClip, np.ndarray]] = []

    def keep(clip: ScannedClip, samples: np.ndarray) -> None:
        if clip.check.usable and clip.transcript:
            found.append((clip, trim_silence(samples, DATA_SAMPLE_RATE)[: int(MAX_TRAINING_CLIP_SECONDS * DATA_SAMPLE_RATE)]))

    scan: FolderScan = walk_folder(data_dir, progress, keep)
    folder = scan.folder

    def label(clip: ScannedClip) -> str:
        return clip.source.relative_to(folder).as_posix() + clip.span_label

    untranscribed = [label(clip) for clip in scan.clips if clip.check.usable and not clip.transcript]
    if untranscribed:
        if len(untranscribed) > LISTED_NAMES:
            raise VoiceDataError.of(
                "{count} clips have no transcript: {names} and {more} more. Write their text in the wizard or in "
                "the list file, or remove them.", **_names(untranscribed))
        raise VoiceDataError.of(
            "{count} clips have no transcript: {names}. Write their text in the wizard or in the list file, or "
            "remove them.", **{k: v for k, v in _names(untranscribed).items() if k != "more"})
    skipped = [(label(clip), problem.message) for clip in scan.clips for problem in clip.check.problems
               if problem.blocking]
    skipped += [(problem.path.name, problem.message) for problem in scan.problems]
    if not found:
        name, reason = skipped[0]
        error = VoiceDataError.of(
            "No clip in {folder} can be used for training: all {count} were left out. The first, {name}: {reason}",
            folder=folder, count=len(skipped), name=name, reason=reason)
        error.part_lists = {"reason": [MessagePart(reason.template, tuple(sorted(reason.values.items())))]}
        raise error
    clips = tuple(TrainingClip(label(clip), samples, clip.transcript or "") for clip, samples in found)
    return TrainingSet(clips, tuple(skipped))


def load_training_clips(data_dir: Path) -> list[TrainingClip]:
    """load_training_set's clips (see there for what is refused)."""
    return list(load_training_set(data_dir).clips)
