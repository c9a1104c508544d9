"""Audio device listing and selection by name, on top of sounddevice/PortAudio.

Devices are chosen by *name* (that is what the settings file stores): PortAudio indices change whenever a
device is plugged in or PortAudio is re-initialised. On Windows one physical device shows up once per host API
(MME, DirectSound, WASAPI, WDM-KS); WASAPI is preferred because it has the lowest shared-mode latency and,
with auto-convert, accepts any sample rate / channel count. All Windows-specific code is in
`_preferred_host_api` and `stream_extra_settings`.

Note: PortAudio scans devices once, when sounddevice is imported. `rescan_devices()` re-scans (for a device
plugged in later); it closes every open stream, so callers close theirs first and reopen them after. The engine
thread does so while it rests (`EngineWorker._rescan_audio`): when the settings dialog asks for the list, when
push-to-talk finds no open microphone, and when a stream stopped because its device went away.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Literal

import sounddevice as sd

from engine.errors import UserFacingError

DeviceKind = Literal["input", "output"]

_WASAPI_HOST_API = "Windows WASAPI"


class AudioError(UserFacingError):
    """An audio problem the user has to be told about (the one error family: `message`, `template`,
    `values` as every UserFacingError), with PortAudio's own words in `details`."""

    kind = "audio_device"

    def __init__(self, message: str, *, details: str = "", template: str = "", values: dict[str, str] | None = None) -> None:
        super().__init__(message, template=template, values=values)
        self.details = details


class AudioDeviceError(AudioError):
    """A device is missing, busy, unplugged or refuses the requested format. The message names the device."""

    def __init__(
        self,
        message: str,
        *,
        device_name: str | None,
        kind: DeviceKind,
        details: str = "",
        template: str = "",
        values: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message, details=details, template=template, values=values)
        self.device_name = device_name
        self.direction = kind


@dataclass(frozen=True)
class AudioDevice:
    name: str
    index: int
    host_api: str
    max_input_channels: int
    max_output_channels: int
    default_samplerate: float

    def channels(self, kind: DeviceKind) -> int:
        return self.max_input_channels if kind == "input" else self.max_output_channels

    @property
    def label(self) -> str:
        """What a device menu shows: the name, plus the host API so duplicates on Windows are distinguishable."""
        return f"{self.name} ({self.host_api})"


def list_devices(kind: DeviceKind | None = None) -> list[AudioDevice]:
    """All devices PortAudio knows (optionally only those with input or output channels)."""
    host_apis = sd.query_hostapis()
    devices = []
    for info in sd.query_devices():
        device = AudioDevice(
            name=str(info["name"]),
            index=int(info["index"]),
            host_api=str(host_apis[info["hostapi"]]["name"]),
            max_input_channels=int(info["max_input_channels"]),
            max_output_channels=int(info["max_output_channels"]),
            default_samplerate=float(info["default_samplerate"]),
        )
        if kind is None or device.channels(kind) > 0:
            devices.append(device)
    return devices


def _preferred_host_api() -> str | None:
    """The host API whose devices win when a name appears under several. Only Windows has a preference."""
    if sys.platform == "win32":
        return _WASAPI_HOST_API
    return None


def _default_device_index(kind: DeviceKind) -> int | None:
    """The system default device: the preferred host API's default when it has one, else PortAudio's."""
    preferred = _preferred_host_api()
    if preferred is not None:
        for api in sd.query_hostapis():
            if api["name"] == preferred:
                index = api["default_input_device" if kind == "input" else "default_output_device"]
                if index >= 0:
                    return int(index)
    try:
        info = sd.query_devices(kind=kind)
    except sd.PortAudioError:
        return None
    return int(info["index"]) if info is not None else None


def find_device(name: str | None, kind: DeviceKind) -> AudioDevice:
    """The device called `name` (None: the system default) that can `kind`; raises AudioDeviceError if none.

    An exact name match wins over a case-insensitive one; among equal names the preferred host API wins
    (WASAPI on Windows), then the lowest index, so the choice is stable across runs.
    """
    candidates = list_devices(kind)
    if name is None:
        index = _default_device_index(kind)
        for device in candidates:
            if device.index == index:
                return device
        if candidates:
            return candidates[0]
        raise _device_error(
            "No microphone was found. Connect one and try again."
            if kind == "input"
            else "No speaker was found. Connect one and try again.",
            device_name=None,
            kind=kind,
        )
    preferred = _preferred_host_api()
    for matches in (
        [d for d in candidates if d.name == name],
        [d for d in candidates if d.name.casefold() == name.casefold()],
    ):
        if matches:
            return min(matches, key=lambda d: (d.host_api != preferred, d.index))
    available = ", ".join(sorted({d.name for d in candidates})) or "none"
    raise _device_error(
        'The microphone "{name}" was not found. It may have been unplugged. Available: {available}.'
        if kind == "input"
        else 'The speaker "{name}" was not found. It may have been unplugged. Available: {available}.',
        device_name=name,
        kind=kind,
        name=name,
        available=available,
    )


def stream_extra_settings(device: AudioDevice) -> Any:
    """Host-API specific stream settings: WASAPI shared mode with auto-convert, so PortAudio lets Windows
    convert rate and channel count instead of failing when we ask for the device's mix format loosely."""
    if device.host_api == _WASAPI_HOST_API and hasattr(sd, "WasapiSettings"):
        return sd.WasapiSettings(exclusive=False, auto_convert=True)
    return None


def open_error(device_name: str | None, kind: DeviceKind, exc: BaseException) -> AudioDeviceError:
    """Turn a PortAudio failure to open/start a stream into a message that names the device and says why."""
    named = {
        ("input", True): 'The microphone "{name}" could not be opened: it may be unplugged, in use by another '
        "application, or not support the format. ({error})",
        ("output", True): 'The speaker "{name}" could not be opened: it may be unplugged, in use by another '
        "application, or not support the format. ({error})",
        ("input", False): "The default microphone could not be opened: it may be unplugged, in use by another "
        "application, or not support the format. ({error})",
        ("output", False): "The default speaker could not be opened: it may be unplugged, in use by another "
        "application, or not support the format. ({error})",
    }
    return _device_error(
        named[(kind, bool(device_name))], device_name=device_name, kind=kind, details=repr(exc), name=device_name or "", error=exc
    )


def _device_error(template: str, *, device_name: str | None, kind: DeviceKind, details: str = "", **args: object) -> AudioDeviceError:
    values = {key: str(value) for key, value in args.items()}
    return AudioDeviceError(
        template.format(**values), device_name=device_name, kind=kind, details=details, template=template, values=values
    )


def open_stream(
    kind: DeviceKind,
    device_name: str | None,
    requested_samplerate: int | None,
    prepare: Callable[[int, int], dict[str, Any]],
    **settings: Any,
) -> tuple[Any, AudioDevice]:
    """Find the device, choose its rate (the requested one, else the device's default) and channel count
    (mono or stereo), call `prepare(rate, channels)`, then create and start a float32 PortAudio stream
    (with the platform's host-API settings, `settings`, and the settings `prepare` returned: those that
    depend on the rate). `prepare` runs before the start because the callback may run as soon as the
    stream starts. Any failure becomes an AudioDeviceError naming the device."""
    device = find_device(device_name, kind)
    rate = int(requested_samplerate or round(device.default_samplerate))
    channels = max(1, min(2, device.channels(kind)))
    settings.update(prepare(rate, channels))
    stream_class = sd.InputStream if kind == "input" else sd.OutputStream
    try:
        stream = stream_class(
            device=device.index, samplerate=rate, channels=channels, dtype="float32",
            extra_settings=stream_extra_settings(device), **settings,
        )
    except (sd.PortAudioError, ValueError) as exc:
        raise open_error(device_name, kind, exc) from exc
    try:
        stream.start()
    except sd.PortAudioError as exc:
        stream.close(ignore_errors=True)
        raise open_error(device_name, kind, exc) from exc
    return stream, device


def rescan_devices() -> None:
    """Re-initialise PortAudio so newly plugged devices appear. Every open stream becomes invalid."""
    # sounddevice has no public re-scan; its maintainer recommends this pair (python-sounddevice issue #125).
    sd._terminate()
    sd._initialize()
