"""What the recorder and the player share about their one PortAudio stream: opening it (a failure is
reported as an event and retried later), closing it on purpose, noticing that it died under us (unplugged
device), and reporting an exception caught in the audio callback from a thread where reporting is allowed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.audio.devices import AudioDevice, AudioDeviceError, DeviceKind, open_stream
from engine.protocol import EngineError, Event


class DeviceStream:
    """Base of `PushToTalkRecorder` and `StreamingPlayer`. Subclasses set `device_name`,
    `requested_samplerate` and `_on_event`, call `_init_device_stream` in `__init__`, `_reset_stream_flags`
    before a stream starts, and hold their own lock around the `_locked` methods."""

    _kind: DeviceKind
    device_name: str | None
    requested_samplerate: int | None
    _on_event: Callable[[Event], None]

    def _init_device_stream(self) -> None:
        self._stream: Any = None
        self._device: AudioDevice | None = None
        self._callback_error: str | None = None  # the first exception caught in the audio callback
        self._reset_stream_flags()

    def _reset_stream_flags(self) -> None:
        self._closing_stream = False
        self._stream_died = False

    @property
    def device(self) -> AudioDevice | None:
        return self._device

    @property
    def stream_latency_s(self) -> float | None:
        """The latency PortAudio reports for the open stream (None: none open)."""
        stream = self._stream
        return float(stream.latency) if stream is not None else None

    @property
    def died(self) -> bool:
        """The stream stopped without being closed (its device went away) and was not reopened since."""
        return self._stream_died

    @property
    def is_open(self) -> bool:
        stream = self._stream
        return stream is not None and stream.active and not self._stream_died

    def _open_stream_locked(self, prepare: Callable[[int, int], dict[str, Any]], **settings: Any) -> bool:
        """Open and start the stream unless it is running; a failure is reported (EngineError of kind
        "audio_device") and gives False."""
        if self.is_open:
            return True
        self._close_stream_locked()
        try:
            stream, device = open_stream(
                self._kind,
                self.device_name,
                self.requested_samplerate,
                prepare,
                finished_callback=self._on_stream_finished,
                **settings,
            )
        except AudioDeviceError as exc:
            self._on_event(EngineError.from_exception("audio_device", exc))
            return False
        self._stream = stream
        self._device = device
        return True

    def _close_stream_locked(self) -> None:
        stream = self._stream
        self._stream = None
        if stream is None:
            return
        self._closing_stream = True
        try:
            # abort, not stop: closing means now (stop() would wait for the device to play or deliver).
            stream.abort(ignore_errors=True)
            stream.close(ignore_errors=True)
        finally:
            self._stream_closed()

    def _stream_closed(self) -> None:
        """Called once a stream is closed on purpose (the recorder hands on a take cut off by it)."""

    def _on_stream_finished(self) -> None:
        # PortAudio calls this when the stream stops; if we did not stop it, the device went away.
        if not self._closing_stream:
            self._stream_died = True

    def _keep_callback_error(self, exc: Exception) -> None:
        """In the audio callback: remember the first exception (reporting happens on another thread)."""
        if self._callback_error is None:
            self._callback_error = repr(exc)

    def _report_callback_error(self, message: str) -> None:
        if self._callback_error is not None:
            details, self._callback_error = self._callback_error, None
            self._on_event(EngineError(kind="internal", message=message, details=details))

    def _report_stream_died(self, template: str) -> None:
        """`template` names the device as {name}."""
        self._on_event(EngineError.templated("audio_device", template, name=self.device_name or "(system default)"))
