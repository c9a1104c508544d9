"""Shared pieces of the voice-training tests: Japanese speech from Open JTalk, and a tiny model with its audio
tokenizer (liquid-audio's Mimi at its real size, random weights)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.constants import ANSWER_SAMPLE_RATE

SENTENCES = (
    "こんにちは、今日はいい天気ですね。",
    "明日は雨が降るそうです。",
    "駅まで歩いて十分かかります。",
    "お茶を一杯いかがですか。",
    "この本はとても面白かったです。",
    "週末は海へ行きたいな。",
)


@dataclass(frozen=True)
class SpeechClip:
    name: str
    samples: np.ndarray
    text: str


def speech(text: str, rate: int = ANSWER_SAMPLE_RATE) -> np.ndarray:
    """`text` read by Open JTalk, mono float32 at `rate`."""
    import pyopenjtalk
    import soxr

    samples, source_rate = pyopenjtalk.tts(text)
    return soxr.resample((np.asarray(samples) / 32768.0).astype(np.float32), source_rate, rate).astype(np.float32)


def speech_clips(sentences=SENTENCES) -> list[SpeechClip]:
    return [SpeechClip(f"clip-{index:02d}", speech(text), text) for index, text in enumerate(sentences)]


def write_speech_folder(folder: Path, sentences=SENTENCES) -> Path:
    """A folder as a user would import it: wavs/ and a `file|text` list."""
    import soundfile

    (folder / "wavs").mkdir(parents=True, exist_ok=True)
    lines = []
    for clip in speech_clips(sentences):
        soundfile.write(folder / "wavs" / f"{clip.name}.wav", clip.samples, ANSWER_SAMPLE_RATE, subtype="PCM_16")
        lines.append(f"wavs/{clip.name}.wav|{clip.text}")
    (folder / "transcripts.list").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder
