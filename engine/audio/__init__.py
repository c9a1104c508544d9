"""Audio I/O for the engine: push-to-talk capture, streaming playback, devices. numpy, soxr and sounddevice only:
no Qt, no torch (the audio callbacks must stay lean and import nothing heavy)."""

from engine.audio.capture import MODEL_SAMPLE_RATE, CapturedTake, PushToTalkRecorder
from engine.audio.devices import (
    AudioDevice,
    AudioDeviceError,
    AudioError,
    find_device,
    list_devices,
    rescan_devices,
)
from engine.audio.playback import MODEL_OUTPUT_RATE, StreamingPlayer, UtteranceStats
from engine.audio.resample import StreamingResampler, resample

__all__ = [
    "MODEL_OUTPUT_RATE",
    "MODEL_SAMPLE_RATE",
    "AudioDevice",
    "AudioDeviceError",
    "AudioError",
    "CapturedTake",
    "PushToTalkRecorder",
    "StreamingPlayer",
    "StreamingResampler",
    "UtteranceStats",
    "find_device",
    "list_devices",
    "rescan_devices",
    "resample",
]
