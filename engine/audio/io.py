"""The engine's one handle on audio: a push-to-talk recorder, a streaming player, barge-in and the persisted
device choice.

All methods are meant for the engine thread except `press`/`release`, which are cheap and safe from any thread
(the player's flush never waits). `on_take`/`on_event` run on the recorder's worker thread or on the caller's
thread (device errors from open/select), so they should just put onto a queue.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.audio.capture import CapturedTake, PushToTalkRecorder
from engine.audio.devices import AudioDeviceError, find_device, rescan_devices
from engine.audio.playback import StreamingPlayer
from engine.protocol import EngineError, Event


@dataclass(frozen=True)
class DeviceChoice:
    """Device names as the user picked them (None: follow the system default)."""

    input_device: str | None = None
    output_device: str | None = None


def default_choice_path() -> Path:
    from engine import paths

    return paths.audio_devices_file()


def load_device_choice(path: Path) -> DeviceChoice:
    """The saved choice, or the defaults if the file is missing or unreadable (a bad file must not stop the app)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return DeviceChoice()
    if not isinstance(data, dict):
        return DeviceChoice()

    def name(key: str) -> str | None:
        value = data.get(key)
        return value if isinstance(value, str) and value else None

    return DeviceChoice(input_device=name("input_device"), output_device=name("output_device"))


def save_device_choice(path: Path, choice: DeviceChoice) -> None:
    """Write atomically (temp file + rename) so a crash never leaves a half-written settings file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".audio-devices.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(asdict(choice), file, ensure_ascii=False, indent=2)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class AudioIO:
    """Recorder + player with barge-in. Device names come from the persisted choice at `choice_path`."""

    def __init__(
        self,
        *,
        choice_path: Path | None = None,
        on_take: Callable[[CapturedTake], None] | None = None,
        on_event: Callable[[Event], None] | None = None,
        on_barge_in: Callable[[], None] | None = None,
        recorder_options: dict[str, Any] | None = None,
        player_options: dict[str, Any] | None = None,
    ) -> None:
        """`on_barge_in` is called (on the caller's thread) when a press interrupts playback: the engine cancels
        the answer being generated. `recorder_options`/`player_options` go to PushToTalkRecorder/StreamingPlayer."""
        self.choice_path = choice_path or default_choice_path()
        self.choice = load_device_choice(self.choice_path)
        self._on_event = on_event or (lambda event: None)
        self._on_barge_in = on_barge_in or (lambda: None)
        self.recorder = PushToTalkRecorder(
            self.choice.input_device, on_take=on_take, on_event=on_event, **(recorder_options or {})
        )
        self.player = StreamingPlayer(self.choice.output_device, on_event=on_event, **(player_options or {}))

    def start(self) -> bool:
        """Open both streams. Failures are reported as events; the app keeps running and the next take or
        answer retries. True if both opened."""
        recorder_ok = self.recorder.open()
        player_ok = self.player.open()
        return recorder_ok and player_ok

    def press(self) -> bool:
        """Push-to-talk pressed. If the assistant is speaking this is a barge-in: playback is flushed at once
        and `on_barge_in` is called. Returns True for a barge-in.

        If the microphone is not open (missing, unplugged, failed earlier) the device list is re-scanned first:
        PortAudio only sees devices present when it was initialised, so a mic plugged back in needs a re-scan
        to be found. The re-scan closes the speaker stream too; the next answer reopens it."""
        barge_in = self.player.is_speaking
        if barge_in:
            self.player.flush()
            self._on_barge_in()
        if not self.recorder.is_open:
            self.rescan()
        self.recorder.press()
        return barge_in

    def rescan(self) -> None:
        """Re-scan the devices (both streams are closed first: re-initialising PortAudio invalidates them)."""
        self.recorder.close_stream()
        self.player.close()
        rescan_devices()

    def release(self) -> None:
        self.recorder.release()

    def select_devices(self, input_device: str | None, output_device: str | None) -> bool:
        """Switch devices by name and persist the choice. A name that is not listed is refused with an
        EngineError and nothing changes; a listed device that fails to open is kept (it may be busy for a
        moment) and reported. True if both streams are open afterwards."""
        try:
            find_device(input_device, "input")
            find_device(output_device, "output")
        except AudioDeviceError as exc:
            self._on_event(EngineError.from_exception("audio_device", exc))
            return False
        self.choice = DeviceChoice(input_device=input_device, output_device=output_device)
        try:
            save_device_choice(self.choice_path, self.choice)
        except OSError as exc:
            self._on_event(EngineError(kind="settings", message="Could not save the audio device choice.",
                                       details=repr(exc)))
        recorder_ok = self.recorder.select_device(input_device)
        player_ok = self.player.select_device(output_device)
        return recorder_ok and player_ok

    def close(self) -> None:
        self.recorder.close()
        self.player.close()

    def __enter__(self) -> AudioIO:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
