"""Training a voice through the engine thread, with real PortAudio (the ALSA test microphone speaking Japanese from
Open JTalk) and the real `voice-train` process on the demo model: clips recorded and redone at the microphone's own
rate, the plan, the chat model unloaded for the training (TRAINING: takes refused with a reason) and brought back
with the conversation, a cancel that keeps a resumable checkpoint, the finished voice switched in."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import soundfile

from alsa_env import PacedMicrophone
from engine import protocol as p
from engine.voices.dataset import VoiceData
from engine.worker import voice_training
from engine_helpers import SPEAKER, Engine, alsa_devices
from voice_training_helpers import speech

pytestmark = [pytest.mark.timeout(300), pytest.mark.filterwarnings("ignore::DeprecationWarning:sounddevice")]

SENTENCES = ("今日はいい天気ですね。", "駅まで歩いて行きます。", "お茶をどうぞ。", "また明日話しましょう。")


class SpeakingMicrophone(PacedMicrophone):
    """The test microphone hearing Open JTalk read a sentence (2.6 s), then 0.4 s of silence, over and over."""

    def __init__(self, env: object) -> None:
        super().__init__(env)  # type: ignore[arg-type]
        import soxr

        voice = speech("今日はいい天気ですね、散歩に行きましょう。", 24_000)
        self.loop = np.concatenate([soxr.resample(voice, 24_000, self.rate).astype(np.float32), np.zeros(int(0.4 * self.rate), np.float32)])

    def next_feed(self, first: int, frames: int) -> np.ndarray:
        index = (np.arange(frames) + first) % len(self.loop)
        return self.loop[index]


def record(engine: Engine, data_dir: Path, index: int, *, replaces: str | None = None) -> p.ClipRecorded:
    mark = len(engine.seen)
    engine.send(p.StartClip(str(data_dir), SENTENCES[index % len(SENTENCES)], script_index=index, replaces=replaces))
    engine.wait_state(p.EngineState.RECORDING, after=mark)
    time.sleep(3.4)  # a whole reading of the sentence (2.6 s) and its pause: every clip is over the 1.5 s minimum
    engine.send(p.StopClip())
    return engine.wait_for(lambda e: isinstance(e, p.ClipRecorded), after=mark)


def test_clips_a_training_with_the_gpu_handed_over_a_cancel_a_resume_and_the_voice(isolated_user_dirs: Path, tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # This PC has no GPU, so the chat model never needs to make room; the plan is made to say it must, as on a
    # 6 GB card, and everything after it is real.
    plan = voice_training.VoiceTrainingHost.plan
    monkeypatch.setattr(voice_training.VoiceTrainingHost, "plan",
                        lambda self, command: __import__("dataclasses").replace(plan(self, command), unload_needed=True))
    data_dir, out_dir = tmp_path / "data", tmp_path / "voices" / "mine"
    with alsa_devices(tmp_path / "alsa", SpeakingMicrophone):
        engine = Engine()
        try:
            engine.send(p.SelectDevices(None, SPEAKER), p.Load(source="demo", demo=True))
            engine.wait_state(p.EngineState.IDLE, timeout=120)

            # Clips: recorded at the microphone's rate, kept at 24 kHz with their sentence; a redo keeps the name.
            clips = [record(engine, data_dir, index) for index in range(3)]
            assert all(c.saved and c.name and 1.5 < c.duration_s < 4.0 for c in clips), clips
            first = VoiceData(data_dir).clip(clips[0].name)
            assert first.text == SENTENCES[0] and soundfile.info(first.path).samplerate == 24_000
            before = first.path.read_bytes()
            redo = record(engine, data_dir, 0, replaces=clips[0].name)
            assert redo.name == clips[0].name and first.path.read_bytes() != before
            assert len(VoiceData(data_dir).clips()) == 3

            mark = len(engine.seen)
            engine.send(p.TranscribeClip(str(data_dir), clips[1].name), p.PlanVoiceTraining(str(data_dir)))
            assert isinstance(engine.wait_for(lambda e: isinstance(e, p.ClipTranscribed), after=mark).text, str)
            planned = engine.wait_for(lambda e: isinstance(e, p.VoiceTrainingPlan), after=mark)
            assert planned.clips == 3 and planned.fits and planned.need_bytes > 0 and planned.device_name == "CPU"
            assert VoiceData(data_dir).clip(clips[1].name).text == SENTENCES[1]  # the transcript was only shown

            # A training that is stopped: the chat model makes room (TRAINING), comes back after it.
            mark = len(engine.seen)
            engine.send(p.StartVoiceTraining(str(data_dir), str(out_dir), steps=12))
            engine.wait_state(p.EngineState.TRAINING, after=mark)
            engine.send(p.StartTake())
            refused = engine.wait_for(lambda e: isinstance(e, p.EngineError) and e.kind == "take", after=mark)
            assert "training" in refused.message
            engine.wait_for(lambda e: isinstance(e, p.VoiceTrainingProgress) and e.stage == "train", after=mark, timeout=180)
            engine.send(p.CancelVoiceTraining())
            ended = engine.wait_for(lambda e: isinstance(e, p.VoiceTrainingEnded), after=mark, timeout=120)
            assert ended.status == "cancelled" and 1 <= ended.step < 12
            engine.wait_state(p.EngineState.IDLE, after=mark, timeout=120)
            assert not (out_dir / "adapter_config.json").exists()
            assert json.loads((out_dir / "training.json").read_text())["status"] == "cancelled"

            # Resumed to the end: the voice is published and switches in.
            mark = len(engine.seen)
            engine.send(p.StartVoiceTraining(str(data_dir), str(out_dir), resume=True))
            ended = engine.wait_for(lambda e: isinstance(e, p.VoiceTrainingEnded), after=mark, timeout=240)
            assert ended.status == "done" and ended.step == 12, ended
            steps = [e.done for e in engine.of(p.VoiceTrainingProgress, mark) if e.stage == "train"]
            assert steps and steps[-1] == 12 and steps[0] > 1  # it went on where it stopped
            assert engine.of(p.VoiceTrainingPreview, mark) and engine.of(p.VoiceTrainingHeldOut, mark)
            engine.wait_state(p.EngineState.IDLE, after=mark, timeout=120)
            engine.send(p.SwitchVoice(str(out_dir)))
            info = engine.wait_for(lambda e: isinstance(e, p.EngineInfo) and e.voice_name == "mine", after=mark)
            assert info.voice_name == "mine"
            assert not [e for e in engine.errors(mark) if e.kind not in ("take",)]
        finally:
            engine.stop()
