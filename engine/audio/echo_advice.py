"""Whether the chosen microphone and speaker suit echo cancellation (hands-free), and what to tell the user if not.

WebRTC's AEC3 (engine/audio/voice.py) subtracts an estimate of the speaker's sound from the microphone's. It
copes with a fixed delay, but not with a delay that wanders: two devices on their own clocks drift apart (the
echo slides away from its estimate), Bluetooth links buffer by varying amounts (and a Bluetooth headset's
microphone switches the link to its narrow-band hands-free profile), and large buffers put the echo far from
the reference. On Windows, WASAPI gives PortAudio the capture timing that MME and DirectSound do not, so
devices.py prefers it; a device that only another host API offers is named here.

Pure: devices and stream latencies in, the English templates (translated in the EngineMessages context) out.
"""

from __future__ import annotations

import re
from typing import Any

WASAPI = "Windows WASAPI"
WINDOWS_HOST_APIS = ("MME", "Windows DirectSound", "Windows WDM-KS", WASAPI)
LARGE_BUFFER_S = 0.1  # a stream latency above this puts the echo far behind its reference
_BLUETOOTH = re.compile(r"bluetooth|hands-free|handsfree|\bbt\b|airpods|buds|headset \(", re.IGNORECASE)

NOT_WASAPI = ('Echo cancellation may be unreliable: "{name}" is used through {host_api}, which gives no capture '
              "timing. Choose its WASAPI entry in the settings if there is one.")
TWO_CLOCKS = ('Echo cancellation may be unreliable: the microphone "{input}" and the speaker "{output}" are '
              "different devices with clocks of their own. Headphones, or a headset's own microphone and "
              "speaker, work best.")
BLUETOOTH = ('Echo cancellation may be unreliable over Bluetooth ("{name}"): its delay varies. Wired headphones '
             "work best.")
LARGE_BUFFER = ('Echo cancellation may be unreliable: "{name}" buffers {ms} ms of sound. Choose another device or '
                "driver with less delay.")
TEMPLATES = (NOT_WASAPI, TWO_CLOCKS, BLUETOOTH, LARGE_BUFFER)


def _device_key(name: str) -> str:
    """A device's name without the parts that differ between its input and output endpoints on the same card
    ("Microphone (Realtek Audio)" / "Speakers (Realtek Audio)": one card, one clock)."""
    inside = re.match(r"^[^(]*\((.*)\)\s*$", name)
    return (inside.group(1) if inside else name).strip().lower()


def echo_risks(microphone: Any, speaker: Any, *, input_latency_s: float | None = None,
               output_latency_s: float | None = None) -> list[tuple[str, dict[str, str]]]:
    """What makes echo cancellation unreliable with these devices (engine.audio.devices.AudioDevice each, None:
    not open): (template, values) pairs, the most likely cause first."""
    risks: list[tuple[str, dict[str, str]]] = []
    devices = [d for d in (microphone, speaker) if d is not None]
    for device in devices:
        if device.host_api in WINDOWS_HOST_APIS and device.host_api != WASAPI:
            risks.append((NOT_WASAPI, {"name": device.name, "host_api": device.host_api}))
    for device in devices:
        if _BLUETOOTH.search(device.name):
            risks.append((BLUETOOTH, {"name": device.name}))
            break
    if microphone is not None and speaker is not None and _device_key(microphone.name) != _device_key(speaker.name):
        risks.append((TWO_CLOCKS, {"input": microphone.name, "output": speaker.name}))
    for device, latency in ((microphone, input_latency_s), (speaker, output_latency_s)):
        if device is not None and latency is not None and latency > LARGE_BUFFER_S:
            risks.append((LARGE_BUFFER, {"name": device.name, "ms": str(round(latency * 1000))}))
    return risks
