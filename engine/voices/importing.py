"""Speech brought in from files: reading audio files, finding their transcripts, splitting long recordings at
their pauses, and the scan of a whole folder that the wizard shows as a table before anything is imported.

Transcripts come from a same-name .txt beside the audio file, or from a list file in the form the Japanese voice
tools use: `file|text`, or `file|speaker|lang|text` (Style-Bert-VITS2's esd.list, GPT-SoVITS's .list), one clip a
line, UTF-8 with or without a BOM (Shift_JIS, which older Windows tools write, is read too). A file in a list is
named with or without its extension, relative to the list's folder or its `wavs/` subfolder; a path from another
machine (C:\\...\\vocal_0001.wav) is found by its name. LJSpeech's `metadata.csv` (`file|text|normalized text`)
is read as well.

Nothing here raises for one bad file: every problem is collected with the file it concerns (FolderScan), so the
wizard can show them all at once. Only a folder that cannot be used at all raises VoiceDataError.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from engine.audio.resample import StreamingResampler
from engine.audio.wav import MAX_RATE, MIN_RATE
from engine.constants import ANSWER_SAMPLE_RATE
from engine.errors import Message, VoiceDataError
from engine.voices.clip_check import (
    MAX_CLIP_SECONDS,
    MAX_INNER_SILENCE_SECONDS,
    MIN_CLIP_SECONDS,
    TRIM_PAD_SECONDS,
    ClipCheck,
    SpeechActivity,
    check_clip,
    speech_activity,
)

# What the voice data is kept at: the rate the model speaks (its audio codec's), mono.
DATA_SAMPLE_RATE = ANSWER_SAMPLE_RATE
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3")
LIST_SUFFIXES = (".list", ".txt", ".csv")
# One file of a folder is read whole into memory (at 24 kHz, 350 MB an hour); longer recordings are to be split
# first. An hour is far more than one voice needs (20-60 minutes in all are recommended).
MAX_SOURCE_SECONDS = 3600.0
# A long recording is cut in the middle of pauses at least this long: between phrases, never inside a word (the
# hold of a geminate ッ or a stop is under 0.2 s).
MIN_SPLIT_PAUSE_SECONDS = 0.25
# The languages of a `file|speaker|lang|text` line (Style-Bert-VITS2 writes JP, GPT-SoVITS ja).
LIST_LANGUAGES = frozenset({"jp", "ja", "en", "zh", "ko", "yue", "all_ja", "all_zh", "all_ko", "all_yue", "auto"})
# A folder with more files than this is not a folder of recordings (a home folder chosen by mistake): it is
# refused before it is read.
MAX_FOLDER_FILES = 50_000
_READ_BLOCK_FRAMES = 1 << 18


# ----------------------------------------------------------------------------------------------- audio files


def read_audio(path: Path, rate: int = DATA_SAMPLE_RATE) -> np.ndarray:
    """An audio file (wav, flac, ogg, mp3; any rate and channel count) as mono float32 at `rate`, not clipped
    (a float file's overshoot stays for the clip check to see). Raises VoiceDataError naming the file."""
    import soundfile

    path = Path(path)
    if not path.exists():
        raise VoiceDataError.of("{path} does not exist.", path=path)
    if not path.is_file():
        raise VoiceDataError.of("{path} is not a file.", path=path)
    try:
        if path.stat().st_size == 0:
            raise VoiceDataError.of("{path} is empty: it holds no audio.", path=path)
        try:
            sound = soundfile.SoundFile(str(path))
        except (soundfile.LibsndfileError, RuntimeError, TypeError, ValueError) as error:
            if not _has_audio_signature(path):
                raise VoiceDataError.of("{path} is not an audio file (wav, flac, ogg or mp3).", path=path) from error
            raise VoiceDataError.of("{path} is damaged and cannot be read ({error}).", path=path, error=error) from error
        with sound:
            source_rate = int(sound.samplerate)
            if not MIN_RATE <= source_rate <= MAX_RATE:
                raise VoiceDataError.of(
                    "{path} has a sample rate of {rate} Hz; only {low} to {high} Hz are supported.",
                    path=path, rate=source_rate, low=MIN_RATE, high=MAX_RATE)
            if sound.frames > MAX_SOURCE_SECONDS * source_rate:
                raise VoiceDataError.of(
                    "{path} is too long ({minutes} minutes; at most {maximum} minutes a file). Split it into "
                    "shorter files.",
                    path=path, minutes=f"{sound.frames / source_rate / 60:.0f}", maximum=f"{MAX_SOURCE_SECONDS / 60:.0f}")
            pieces = _read_mono(sound, path, source_rate, rate)
    except OSError as error:
        raise VoiceDataError.of("{path} cannot be read ({error}).", path=path, error=error.strerror or error) from error
    samples = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
    if not len(samples):
        raise VoiceDataError.of("{path} is empty: it holds no audio.", path=path)
    if not np.isfinite(samples).all():
        raise VoiceDataError.of("{path} is damaged: it holds invalid samples (NaN or infinity).", path=path)
    return samples


def _has_audio_signature(path: Path) -> bool:
    """Whether the file starts like one of the formats read here (so that a file libsndfile refuses is told
    apart as damaged audio rather than something else with an audio file's name)."""
    with path.open("rb") as f:
        head = f.read(12)
    return (head[:4] in (b"RIFF", b"RIFX", b"RF64", b"fLaC", b"OggS") or head[:3] == b"ID3"
            or (len(head) >= 2 and head[0] == 0xFF and head[1] & 0xE0 == 0xE0))  # an MPEG audio frame


def _read_mono(sound, path: Path, source_rate: int, rate: int) -> list[np.ndarray]:  # noqa: ANN001
    """The file's frames, a block at a time, downmixed and resampled (a long stereo file never sits in memory
    whole at its own rate)."""
    import soundfile

    resampler = StreamingResampler(source_rate, rate) if source_rate != rate else None
    pieces: list[np.ndarray] = []
    try:
        while True:
            block = sound.read(_READ_BLOCK_FRAMES, dtype="float32", always_2d=True)
            if not len(block):
                break
            mono = block.mean(axis=1, dtype=np.float32) if block.shape[1] > 1 else np.ascontiguousarray(block[:, 0])
            pieces.append(resampler.process(mono) if resampler else mono)
    except (soundfile.LibsndfileError, RuntimeError, ValueError) as error:
        raise VoiceDataError.of("{path} is damaged and cannot be read ({error}).", path=path, error=error) from error
    if resampler is not None and pieces:
        pieces.append(resampler.flush())
    return pieces


def _is_audio(path: Path) -> bool:
    return path.suffix.lower() in AUDIO_SUFFIXES


# ----------------------------------------------------------------------------------------------- text files


def read_text_file(path: Path) -> str:
    """A transcript or list file's text: UTF-8 (a BOM is dropped), else Shift_JIS. Raises VoiceDataError."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise VoiceDataError.of("{path} cannot be read ({error}).", path=path, error=error.strerror or error) from error
    for encoding in ("utf-8-sig", "cp932"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise VoiceDataError.of("{path} is neither UTF-8 nor Shift_JIS text. Save it as UTF-8 and scan again.", path=path)


def clean_transcript(text: str) -> str:
    """One line of text as a list file can hold it: lines joined, spaces collapsed, `|` (the field separator)
    written as the full-width ｜."""
    return " ".join(text.split()).replace("|", "｜")


@dataclass(frozen=True)
class ListEntry:
    line: int  # 1-based
    name: str  # as written: with or without extension, relative or absolute
    text: str  # may be empty


def parse_list(text: str) -> tuple[list[ListEntry], list[tuple[int, str]]]:
    """The entries of a list file, and its damaged lines as (line number, line). Blank lines are skipped."""
    entries: list[ListEntry] = []
    damaged: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        fields = line.split("|")
        name = fields[0].strip()
        if len(fields) < 2 or not name:
            damaged.append((number, line))
            continue
        if len(fields) >= 4 and fields[2].strip().lower() in LIST_LANGUAGES:
            text_field = "|".join(fields[3:])  # file|speaker|lang|text
        elif len(fields) == 3:
            text_field = fields[1]  # LJSpeech: file|text|normalized text
        else:
            text_field = "|".join(fields[1:])  # file|text
        entries.append(ListEntry(number, name, clean_transcript(text_field)))
    return entries, damaged


def _looks_like_list(path: Path, audio_stems: set[str]) -> bool:
    suffix = path.suffix.lower()
    if suffix == ".list":
        return True
    if suffix not in LIST_SUFFIXES or path.stem in audio_stems:
        return False  # a same-name .txt is a transcript, not a list
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    first = next((line for line in head.splitlines() if line.strip()), b"")
    return b"|" in first


# ----------------------------------------------------------------------------------------------- splitting


def split_at_pauses(activity: SpeechActivity) -> list[tuple[int, int]]:
    """Sample spans of a long recording's pieces, cut in the middle of its pauses: first at every silence longer
    than a clip may hold, then each piece still over MAX_CLIP_SECONDS at its longest pause (preferring pauses that
    leave both sides at least MIN_CLIP_SECONDS), until every piece fits or has no pause left. Each span keeps up to
    TRIM_PAD_SECONDS of silence around its speech, never past the middle of the pause next to it."""
    runs = activity.speech_runs()
    if not runs:
        return []
    rate, hop = activity.sample_rate, activity.hop
    min_pause = max(1, round(MIN_SPLIT_PAUSE_SECONDS * rate / hop))
    segments: list[list[int]] = [list(runs[0])]
    for start, end in runs[1:]:
        if start - segments[-1][1] < min_pause:
            segments[-1][1] = end
        else:
            segments.append([start, end])

    def seconds(first: int, last: int) -> float:
        return (activity.frame_end(segments[last][1] - 1) - activity.frame_start(segments[first][0])) / rate

    def gap(k: int) -> int:  # frames of pause before segment k
        return segments[k][0] - segments[k - 1][1]

    groups: list[tuple[int, int]] = []  # (first segment, last segment)
    first = 0
    for k in range(1, len(segments)):
        if activity.silence_seconds(gap(k)) > MAX_INNER_SILENCE_SECONDS:  # as check_clip measures it
            groups.append((first, k - 1))
            first = k
    groups.append((first, len(segments) - 1))

    pieces: list[tuple[int, int]] = []
    while groups:
        first, last = groups.pop(0)
        if first == last or seconds(first, last) <= MAX_CLIP_SECONDS:
            pieces.append((first, last))
            continue
        cuts = range(first + 1, last + 1)
        balanced = [k for k in cuts if seconds(first, k - 1) >= MIN_CLIP_SECONDS and seconds(k, last) >= MIN_CLIP_SECONDS]
        cut = max(balanced or cuts, key=gap)
        groups[:0] = [(first, cut - 1), (cut, last)]

    pad = round(TRIM_PAD_SECONDS * rate)
    spans: list[tuple[int, int]] = []
    for first, last in pieces:
        start = activity.frame_start(segments[first][0])
        end = activity.frame_end(segments[last][1] - 1)
        before = activity.frame_end(segments[first - 1][1] - 1) if first > 0 else None
        after = activity.frame_start(segments[last + 1][0]) if last + 1 < len(segments) else None
        low = (before + start) // 2 if before is not None else 0
        high = (end + after) // 2 if after is not None else activity.sample_count
        spans.append((max(low, start - pad), min(high, end + pad)))
    return spans


# ----------------------------------------------------------------------------------------------- the scan


@dataclass(frozen=True)
class ScannedClip:
    """One clip found by a scan: a whole audio file, or a piece of a long one."""

    source: Path
    start: int  # samples at DATA_SAMPLE_RATE in the source
    end: int
    transcript: str | None  # None: unknown (the model transcribes it, the user corrects it)
    check: ClipCheck
    part: int = 0  # 1-based piece number of a split file; 0 for a whole file
    parts: int = 0
    notes: tuple[Message, ...] = ()  # about the transcript (where it came from, why it is missing)

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / DATA_SAMPLE_RATE

    @property
    def speech_seconds(self) -> float:
        return self.check.speech_seconds

    @property
    def span_label(self) -> str:
        """" [0:12.5-0:25.0]" for a piece of a long file, "" for a whole file."""
        return f" [{_clock(self.start)}-{_clock(self.end)}]" if self.parts else ""

    @property
    def label(self) -> str:
        """The file's name, with the piece's time span for a piece of a long file (for tables and messages)."""
        return self.source.name + self.span_label

    @property
    def problems(self) -> tuple[Message, ...]:
        return tuple(problem.message for problem in self.check.problems) + self.notes


def _clock(sample: int) -> str:
    minutes, seconds = divmod(sample / DATA_SAMPLE_RATE, 60.0)
    return f"{int(minutes)}:{seconds:04.1f}"


@dataclass(frozen=True)
class FileProblem:
    """A file that gave nothing (not audio, damaged, empty), or a list file's line that could not be used."""

    path: Path
    message: Message


@dataclass(frozen=True)
class FolderScan:
    folder: Path
    clips: tuple[ScannedClip, ...]
    problems: tuple[FileProblem, ...]
    audio_files: int

    @property
    def usable_clips(self) -> tuple[ScannedClip, ...]:
        return tuple(clip for clip in self.clips if clip.check.usable)

    @property
    def usable_seconds(self) -> float:
        """The speech of the clips that can be trained on: what the wizard counts as minutes collected."""
        return sum(clip.speech_seconds for clip in self.usable_clips)


def error_message(error: VoiceDataError) -> Message:
    """A per-file error as the Message a scan collects (translatable as the error was)."""
    return Message(error.template, **error.values) if error.template else Message("{text}", text=error.message)


def check_folder(folder: Path) -> list[Path]:
    """Every audio and text file under `folder` (recursively, hidden ones left out), or VoiceDataError for a
    folder that is missing, not a folder, empty or unreadable."""
    folder = Path(folder).absolute()
    if not folder.exists():
        raise VoiceDataError.of("The folder {folder} does not exist.", folder=folder)
    if not folder.is_dir():
        raise VoiceDataError.of("{folder} is not a folder.", folder=folder)
    files: list[Path] = []
    errors: list[OSError] = []
    for root, dirs, names in os.walk(folder, onerror=errors.append):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        files += [Path(root) / name for name in sorted(names) if not name.startswith(".")]
        if len(files) > MAX_FOLDER_FILES:
            raise VoiceDataError.of(
                "The folder {folder} holds more than {count} files; choose the folder that holds the recordings.",
                folder=folder, count=MAX_FOLDER_FILES)
    if errors and not files:
        raise VoiceDataError.of("The folder {folder} cannot be read ({error}).", folder=folder,
                                error=errors[0].strerror or errors[0])
    if not files:
        raise VoiceDataError.of("The folder {folder} is empty.", folder=folder)
    return files


class _Transcripts:
    """Who says what each audio file's text is: its same-name .txt first, then the list files."""

    def __init__(self, files: list[Path], audio: list[Path], problems: list[FileProblem]) -> None:
        self.text: dict[Path, str] = {}
        self.notes: dict[Path, list[Message]] = {}
        self._audio = set(audio)
        self._folded = {str(path).casefold(): path for path in audio}
        stems_by_folder: dict[Path, set[str]] = {}
        for path in audio:
            stems_by_folder.setdefault(path.parent, set()).add(path.stem)
        texts = {path for path in files if path.suffix.lower() == ".txt" and path.stem in stems_by_folder.get(path.parent, ())}
        by_stem: dict[tuple[Path, str], list[Path]] = {}
        for path in audio:
            by_stem.setdefault((path.parent, path.stem), []).append(path)
        for path in sorted(texts):
            for sibling in by_stem[(path.parent, path.stem)]:
                self._set_from_file(sibling, path, problems)
        for path in files:
            if not _is_audio(path) and path not in texts and _looks_like_list(path, stems_by_folder.get(path.parent, set())):
                self._read_list(path, problems)

    def _set_from_file(self, audio: Path, text_path: Path, problems: list[FileProblem]) -> None:
        try:
            text = clean_transcript(read_text_file(text_path))
        except VoiceDataError as error:
            problems.append(FileProblem(text_path, error_message(error)))
            return
        if text:
            self.text[audio] = text
        else:
            self.notes.setdefault(audio, []).append(
                Message("The transcript {file} is empty; the model will write one for you to check.", file=text_path.name))

    def _find(self, name: str, list_folder: Path) -> Path | None:
        windows = "\\" in name or (len(name) > 1 and name[1] == ":")
        written = PureWindowsPath(name) if windows else PurePosixPath(name)
        candidates = []
        if not written.is_absolute():
            candidates.append(Path(os.path.normpath(list_folder.joinpath(*written.parts))))
        elif not windows:
            candidates.append(Path(os.path.normpath(name)))
        candidates += [list_folder / written.name, list_folder / "wavs" / written.name]  # moved from elsewhere
        for candidate in candidates:
            for path in (candidate, *(candidate.with_name(candidate.name + s) for s in AUDIO_SUFFIXES)):
                if path in self._audio:
                    return path
                found = self._folded.get(str(path).casefold())
                if found is not None:
                    return found
        return None

    def _read_list(self, path: Path, problems: list[FileProblem]) -> None:
        try:
            entries, damaged = parse_list(read_text_file(path))
        except VoiceDataError as error:
            problems.append(FileProblem(path, error_message(error)))
            return
        for number, line in damaged:
            problems.append(FileProblem(path, Message(
                "Line {line} of {file} is not in the form file|text and was skipped: {text}",
                line=number, file=path.name, text=line[:80])))
        listed: dict[Path, int] = {}
        for entry in entries:
            audio = self._find(entry.name, path.parent)
            if audio is None:
                problems.append(FileProblem(path, Message(
                    "Line {line} of {file} names {name}, which is not an audio file in the folder.",
                    line=entry.line, file=path.name, name=entry.name)))
                continue
            if audio in listed:
                problems.append(FileProblem(path, Message(
                    "Line {line} of {file} lists {name} again; the text of line {first} is used.",
                    line=entry.line, file=path.name, name=entry.name, first=listed[audio])))
                continue
            listed[audio] = entry.line
            if audio in self.text:
                continue  # its own .txt, or a list read before, has said it already
            if entry.text:
                self.text[audio] = entry.text
            else:
                self.notes.setdefault(audio, []).append(Message(
                    "Line {line} of {file} has no text for {name}; the model will write one for you to check.",
                    line=entry.line, file=path.name, name=entry.name))


def scan_folder(folder: Path, progress: Callable[[int, int], None] | None = None) -> FolderScan:
    """Every audio file under `folder` with its transcript and its check; long recordings as their pieces.

    `progress(done, total)` is called after each audio file (reading takes a while for long files); an exception
    it raises stops the scan (the wizard's cancel). Raises VoiceDataError only for a folder that cannot be used
    at all: missing, not a folder, empty, unreadable, or without any audio file."""
    return walk_folder(folder, progress)


def walk_folder(
    folder: Path,
    progress: Callable[[int, int], None] | None = None,
    on_clip: Callable[[ScannedClip, np.ndarray], None] | None = None,
) -> FolderScan:
    """scan_folder, handing each clip's samples (at DATA_SAMPLE_RATE) to `on_clip` as it is found: one reading
    of each file for a caller that needs the audio too (the trainer's load_training_set)."""
    files = check_folder(folder)
    folder = Path(folder).absolute()
    audio = [path for path in files if _is_audio(path)]
    if not audio:
        raise VoiceDataError.of("The folder {folder} holds no audio files (wav, flac, ogg or mp3).", folder=folder)
    problems: list[FileProblem] = []
    transcripts = _Transcripts(files, audio, problems)
    clips: list[ScannedClip] = []
    for done, path in enumerate(audio, start=1):
        try:
            samples = read_audio(path)
        except VoiceDataError as error:
            problems.append(FileProblem(path, error_message(error)))
        else:
            found = scan_file(path, samples, transcripts.text.get(path), tuple(transcripts.notes.get(path, ())))
            clips += found
            if on_clip is not None:
                for clip in found:
                    on_clip(clip, samples[clip.start:clip.end])
        if progress is not None:
            progress(done, len(audio))
    return FolderScan(folder, tuple(clips), tuple(problems), len(audio))


def scan_file(path: Path, samples: np.ndarray, transcript: str | None, notes: tuple[Message, ...] = ()) -> list[ScannedClip]:
    """The clips of one file's audio (at DATA_SAMPLE_RATE): the whole file, or its pieces when its speech is longer
    than a clip may be (their transcript unknown)."""
    whole = check_clip(samples, DATA_SAMPLE_RATE)
    if whole.speech_seconds <= MAX_CLIP_SECONDS:
        if transcript is None and not notes:
            notes = (Message("{file} has no transcript; the model will write one for you to check.", file=path.name),)
        return [ScannedClip(path, 0, len(samples), transcript, whole, notes=notes)]
    spans = split_at_pauses(speech_activity(samples, DATA_SAMPLE_RATE))
    note = Message(
        "{file} is longer than {maximum} s, so it was split at its pauses into {count} pieces; the model will write "
        "their transcripts for you to check.",
        file=path.name, maximum=f"{MAX_CLIP_SECONDS:.0f}", count=len(spans))
    return [ScannedClip(path, start, end, None, check_clip(samples[start:end], DATA_SAMPLE_RATE), part, len(spans), (note,))
            for part, (start, end) in enumerate(spans, start=1)]
