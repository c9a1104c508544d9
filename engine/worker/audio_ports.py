"""The engine thread's sound devices: the microphone side (`Takes`), the speaker (`StreamingPlayer`), which
devices the user chose, their re-scans, and the hands-free listener bound to both.

Owned by the engine thread (engine/worker/thread.py), which decides when each of these runs (its command
table); this module only knows how: open, look again, close, and keep the listener on the current streams.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from engine import protocol as p
from engine.worker.records import ANSWER_RATE
from engine.worker.table import VoiceStarted, VoiceTurnOver
from engine.worker.takes import TakeReady, Takes

log = logging.getLogger(__name__)


def is_listed(device: str | None, kind: str) -> bool:
    """Whether PortAudio lists the device called `device` (None: any, for the system default) for `kind`."""
    from engine.audio.devices import AudioDeviceError, find_device

    try:
        find_device(device, kind)  # type: ignore[arg-type]
    except AudioDeviceError:
        return False
    return True


class AudioPorts:
    def __init__(
        self,
        post: Callable[[p.Event], None],
        put_command: Callable[[Any], None],
        recorder_options: dict[str, Any],
        player_options: dict[str, Any],
    ) -> None:
        self._post = post
        self._put_command = put_command  # the listener's VoiceStarted goes through the command table
        self._player_options = player_options
        self.takes = Takes(post, recorder_options)
        self.player: Any = None
        self.input_device: str | None = None
        self.output_device: str | None = None
        self.listener: Any = None
        self._reconciled: Any = None  # the listener the last reconcile_listener left running
        self._listener_key: tuple | None = None
        self._hands_free_posted: p.HandsFreeState | None = None
        self._echo_advised: tuple | None = None  # the devices the user was last advised on

    # ------------------------------------------------------------------ devices

    def open(self) -> None:
        """(Re)open both devices. Each one reports its own failure as an EngineError(audio_device) and
        is retried on the next press / answer, so a missing speaker does not stop the microphone."""
        self.close()
        self.takes.device = self.input_device
        self.takes.open()
        self.need_player()

    def rescan(self) -> None:
        """Look again for devices (one plugged in since PortAudio last looked, or one gone), post the new list and
        reopen the streams on the chosen devices (None: the system default, which may now be another one).

        Only while the engine rests (no take, no sound): re-initialising PortAudio ends every open stream,
        so both are closed first. A stream that was open is reopened (a failure says why); one that was not
        only if its device is listed now, so that a device still missing is not reported once more (it was
        when it failed, and the next press or answer says it again)."""
        from engine.audio.devices import rescan_devices

        recorder_was_open = self.takes.is_open()
        player_was_open = self.player is not None and self.player.is_open
        self.close()
        rescan_devices()
        self.post_devices()
        self.takes.device = self.input_device
        if recorder_was_open or is_listed(self.input_device, "input"):
            self.takes.open()
        if player_was_open or is_listed(self.output_device, "output"):
            self.need_player()

    def close(self) -> None:
        self.stop_listener()
        self.takes.close()
        player, self.player = self.player, None
        if player is not None:
            try:
                player.close()
            except Exception:  # noqa: BLE001 - closing a broken device must not hide the real error
                log.exception("closing the player failed")

    def need_player(self) -> Any:
        if self.player is None:
            from engine.audio.playback import StreamingPlayer

            self.player = StreamingPlayer(self.output_device, on_event=self._post, **self._player_options)
            self.player.open()
        return self.player

    def post_devices(self) -> None:
        from engine.audio.devices import list_devices

        # Names, deduplicated in PortAudio order: settings store names, and on Windows one device is
        # listed once per host API (find_device picks the best one for a name).
        inputs = list(dict.fromkeys(d.name for d in list_devices("input")))
        outputs = list(dict.fromkeys(d.name for d in list_devices("output")))
        self._post(p.Devices(tuple(inputs), tuple(outputs), self.input_device, self.output_device))

    def died(self) -> bool:
        """A stream stopped under us (its device was unplugged)."""
        return self.takes.died() or (self.player is not None and self.player.died)

    # ------------------------------------------------------------------ what the speaker played

    def playback_finished(self) -> bool:
        player = self.player
        # A stream that died (unplugged) never drains: count that as finished, the player reported it.
        return player is None or not player.is_open or not player.is_speaking

    def first_audible(self, utterance_id: int | None) -> float | None:
        """Monotonic time at which the first sample of the utterance reached the speaker, if known."""
        if self.player is None or utterance_id is None:
            return None
        stats = self.player.utterance_stats()
        if stats is None or stats.uid != utterance_id:
            return None
        return stats.first_audible_monotonic

    def underruns_since(self, before: int) -> int:
        return max(0, self.player.underruns - before) if self.player is not None else 0

    def queued_samples(self) -> int | None:
        """Answer samples (at ANSWER_RATE) queued but not heard (not yet played, or played silenced: the listener
        fades out an answer the user's speech will stop); None without a player."""
        player = self.player
        if player is None:
            return None
        return int(player.unheard_frames * ANSWER_RATE / max(1, player.samplerate))

    # ------------------------------------------------------------------ hands-free

    def reconcile_listener(self, hands_free: p.SetHandsFree, want: bool) -> bool:
        """Run the listener exactly when `want` (hands-free on, a model loaded), bound to the current recorder
        and player (they are replaced when devices change). Returns whether a listener that was there has been
        stopped or replaced: a voice take it had begun will never be delivered."""
        previous, self._reconciled = self._reconciled, None
        if not want:
            self.stop_listener()
            self.post_hands_free(hands_free)
            return previous is not None
        recorder = self.takes.open()
        player = self.need_player()
        recorder.reference = player
        key = (id(recorder), id(player), hands_free.end_of_speech_s, hands_free.min_speech_s, hands_free.echo_cancellation)
        replaced = False
        if self.listener is None or key != self._listener_key or not self.listener.running:
            replaced = self.listener is not None
            self.stop_listener()
            from engine.audio.voice import VoiceListener, VoiceOptions

            options = VoiceOptions(end_silence_s=hands_free.end_of_speech_s,
                                   min_speech_s=hands_free.min_speech_s,
                                   echo_cancellation=hands_free.echo_cancellation,
                                   max_take_s=float(self.takes._options.get("max_take_s", 60.0)))
            self.listener = VoiceListener(
                recorder, player, options,
                on_start=lambda seq, event, continues: self._put_command(VoiceStarted(seq, time.monotonic(), continues)),
                on_take=lambda take: self.takes.channel.put(TakeReady(take)),
                on_turn=lambda seq, settled: self._put_command(VoiceTurnOver(seq, settled)),
                on_error=lambda exc: self._post(p.EngineError(kind="take", message="Hands-free listening failed.",
                                                              details=repr(exc))))
            self._listener_key = key
            self.listener.start()
            if hands_free.echo_cancellation:
                self._advise_on_echo(recorder, player)
        self.listener.set_muted(hands_free.muted)
        self.post_hands_free(hands_free)
        # Replaced here, or stopped elsewhere since the last call (a device change closes the streams and the
        # listener with them): either way the listener that may have begun a take is not the one running now.
        self._reconciled = self.listener
        return replaced or (previous is not None and previous is not self.listener)

    def _advise_on_echo(self, recorder: Any, player: Any) -> None:
        """Tell the user (once per pair of devices) when they make echo cancellation unreliable."""
        from engine.audio.echo_advice import echo_risks

        risks = echo_risks(recorder.device, player.device, input_latency_s=recorder.stream_latency_s,
                           output_latency_s=player.stream_latency_s)
        key = (getattr(recorder.device, "name", None), getattr(player.device, "name", None))
        if risks and key != self._echo_advised:
            template, values = risks[0]
            self._post(p.EngineNotice(template.format(**values), template, tuple(sorted(values.items()))))
        self._echo_advised = key

    def stop_listener(self) -> None:
        listener, self.listener = self.listener, None
        self._listener_key = None
        if listener is not None:
            listener.stop()
            if listener.recorder is not None:
                listener.recorder.reference = None

    def post_hands_free(self, hands_free: p.SetHandsFree) -> None:
        state = p.HandsFreeState(enabled=hands_free.enabled, listening=self.listener is not None, muted=hands_free.muted)
        if state != self._hands_free_posted:
            self._hands_free_posted = state
            self._post(state)
