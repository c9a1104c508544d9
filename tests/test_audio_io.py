"""Audio I/O against real PortAudio streams on ALSA (no mocks): see tests/alsa_env.py for the environment.

Nothing here is paced in real time, so the tests assert on content and counts only. Waits are on stream
counters (frames captured / played); their timeouts only stop a hang and never decide a result.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if not sys.platform.startswith("linux"):
    pytest.skip("the audio tests drive ALSA through an asoundrc (Linux only)", allow_module_level=True)

import sounddevice as sd  # noqa: E402  (PortAudio missing? install Debian's libportaudio2)

sys.path.insert(0, str(Path(__file__).parent))
import alsa_env  # noqa: E402

from engine.audio.capture import PushToTalkRecorder  # noqa: E402
from engine.audio.devices import AudioDeviceError, find_device, list_devices, rescan_devices  # noqa: E402
from engine.audio.playback import StreamingPlayer  # noqa: E402
from engine.audio.resample import StreamingResampler, resample  # noqa: E402
from engine.protocol import EngineError, InputLevel, TakeRejected  # noqa: E402

pytestmark = [
    # sounddevice 0.5.6 reshapes each callback buffer with `arr.shape = ...`, deprecated in numpy 2.5: noise.
    pytest.mark.filterwarnings("ignore:Setting the shape on a NumPy array:DeprecationWarning"),
    # A stream stuck inside PortAudio blocks the main thread in C, where the default (signal) timeout cannot
    # interrupt it; the thread method dumps the stacks and ends the run instead of hanging CI.
    pytest.mark.timeout(120, method="thread"),
]

HANG_GUARD_S = 20.0
SPEAKER = "vc_test_speaker"


# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="module")
def alsa(tmp_path_factory: pytest.TempPathFactory) -> Iterator[alsa_env.AlsaTestEnv]:
    env = alsa_env.install(tmp_path_factory.mktemp("alsa"))
    try:
        yield env
    finally:
        env.uninstall()


@pytest.fixture
def closing(alsa: alsa_env.AlsaTestEnv) -> Iterator[Callable[[Any], Any]]:
    """Register recorders/players to close after the test, with the speaker FIFO drained so a playback
    stream blocked on it can stop. Leftover FIFO data is dropped before and after each test."""
    alsa.drain_mic()
    alsa.drain_speaker()
    opened: list[Any] = []
    yield lambda thing: opened.append(thing) or thing
    with alsa.speaker_running(), alsa.mic_running():
        for thing in reversed(opened):
            thing.close()
    alsa.drain_mic()
    alsa.drain_speaker()


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + HANG_GUARD_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"stream stalled waiting for {what}")
        time.sleep(0.001)


def wait_frames(recorder: PushToTalkRecorder, frames: int) -> None:
    """Wait until the recorder has consumed everything fed so far (the stream then parks on the empty FIFO)."""
    wait_until(lambda: recorder.frames_captured >= frames, f"{frames} captured frames")
    assert recorder.frames_captured == frames, "the stream read past what was fed"


def next_event(events: Any, kind: type, *, where: Callable[[Any], bool] = lambda e: True) -> Any:
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        try:
            event = events.get(timeout=0.05)
        except Exception:  # noqa: BLE001 - queue.Empty
            continue
        if isinstance(event, kind) and where(event):
            return event
    raise AssertionError(f"no {kind.__name__} event arrived")


def tone(freq: float, seconds: float, rate: int, amplitude: float = 0.5) -> np.ndarray:
    n = round(seconds * rate)
    return (amplitude * np.sin(2 * np.pi * freq * np.arange(n) / rate)).astype(np.float32)


def dominant_frequency(signal: np.ndarray, rate: int) -> float:
    """Peak of the windowed spectrum, refined by parabolic interpolation (sub-bin accuracy)."""
    spectrum = np.abs(np.fft.rfft(signal * np.hanning(len(signal))))
    k = int(np.argmax(spectrum[1:-1])) + 1
    a, b, c = np.log(spectrum[k - 1 : k + 2] + 1e-20)
    shift = 0.5 * (a - c) / (a - 2 * b + c)
    return (k + shift) * rate / len(signal)


def make_recorder(closing: Callable[[Any], Any], device: str | None = "default", **options: Any) -> PushToTalkRecorder:
    return closing(PushToTalkRecorder(device, **options))


# --------------------------------------------------------------------------- devices


def test_lists_devices_with_host_api_and_rate(alsa: alsa_env.AlsaTestEnv) -> None:
    devices = {d.name: d for d in list_devices()}
    assert {"default", SPEAKER, "vc_test_mic"} <= devices.keys()
    default = devices["default"]
    assert default.host_api == "ALSA"
    assert default.max_input_channels > 0 and default.max_output_channels > 0
    assert default.default_samplerate > 0
    assert find_device("default", "input") == default
    assert find_device("DEFAULT", "output") == default  # case-insensitive fallback
    assert find_device(None, "input").max_input_channels > 0


def test_unknown_device_gives_error_naming_it_and_app_keeps_running(closing: Callable[[Any], Any]) -> None:
    with pytest.raises(AudioDeviceError) as raised:
        find_device("Imaginary USB Mic", "input")
    assert "Imaginary USB Mic" in raised.value.message

    recorder = make_recorder(closing, "Imaginary USB Mic")
    assert recorder.open() is False
    error = next_event(recorder.events, EngineError)
    assert error.kind == "audio_device" and "Imaginary USB Mic" in error.message and not error.fatal
    assert recorder.press() is False  # the next take retries, fails again, and says so again
    assert "Imaginary USB Mic" in next_event(recorder.events, EngineError).message

    player_events: list[Any] = []
    player = closing(StreamingPlayer("Imaginary Speaker", on_event=player_events.append))
    assert player.begin_utterance() is None
    assert player.enqueue(np.zeros(2400, np.float32)) is False
    assert [e.kind for e in player_events] == ["audio_device"] and "Imaginary Speaker" in player_events[0].message

    # Once a device that exists is chosen, the same objects work.
    assert recorder.select_device("default") is True
    assert player.select_device(SPEAKER) is True


def test_unplugged_device_reports_error_and_next_take_reopens(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]
) -> None:
    alsa.unplug()  # still listed (PortAudio scanned it), but opening it fails like an unplugged USB mic
    try:
        assert "vc_test_unplugged_mic" in {d.name for d in list_devices("input")}
        recorder = make_recorder(closing, "vc_test_unplugged_mic")
        assert recorder.open() is False
        error = next_event(recorder.events, EngineError)
        assert error.kind == "audio_device" and "vc_test_unplugged_mic" in error.message
    finally:
        alsa.replug()
    assert recorder.press() is True  # reopened on the push-to-talk press
    block = recorder.block_frames
    alsa.feed_mic(tone(440, 0.5, recorder.samplerate), block=block)
    wait_frames(recorder, round(0.5 * recorder.samplerate))
    recorder.release()
    alsa.feed_mic(np.zeros(block * 30, np.float32), block=block)
    take = recorder.takes.get(timeout=HANG_GUARD_S)
    assert take.pressed_s == pytest.approx(0.5)


def test_a_rescan_finds_a_replugged_mic_on_the_next_press(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]
) -> None:
    events: list[Any] = []
    name = "vc_test_unplugged_mic"
    recorder = closing(PushToTalkRecorder(name, on_event=events.append))
    alsa.unplug()
    try:
        # Listed (scanned before the unplug), but it cannot be opened.
        assert name in {d.name for d in list_devices("input")}
        assert recorder.open() is False
        assert [e.kind for e in events] == ["audio_device"] and name in events[0].message
        recorder.close_stream()  # re-initialising PortAudio invalidates open streams
        rescan_devices()  # now it is not even listed
        assert recorder.press() is False
        assert len(events) == 2 and name in events[1].message
        assert name not in {d.name for d in list_devices("input")}
    finally:
        alsa.replug()
    rescan_devices()  # plugged back in: the re-scan finds it and the take starts
    assert recorder.press() is True
    assert len(events) == 2 and recorder.is_open and recorder.is_recording
    assert name in {d.name for d in list_devices("input")}


# --------------------------------------------------------------------------- capture


@pytest.mark.parametrize("rate", [None, 48_000], ids=["native-44k1", "48k"])
def test_take_has_preroll_before_press_and_tail_after_release(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any], rate: int | None
) -> None:
    recorder = make_recorder(closing, samplerate=rate, preroll_s=0.3, tail_s=0.15)
    assert recorder.open()
    fs, block = recorder.samplerate, recorder.block_frames
    assert fs == (rate or 44_100)
    before, pressed, after = tone(300, 1.0, fs), tone(1000, 1.0, fs), tone(2500, 0.5, fs)
    source = np.concatenate((before, pressed, after))

    alsa.feed_mic(before, block=block)
    wait_frames(recorder, len(before))
    recorder.press()
    alsa.feed_mic(pressed, block=block)
    wait_frames(recorder, len(before) + len(pressed))
    recorder.release()
    alsa.feed_mic(after, block=block)
    take = recorder.takes.get(timeout=HANG_GUARD_S)

    preroll, tail = round(0.3 * fs), round(0.15 * fs)
    assert (take.press_frame, take.release_frame) == (len(before), len(before) + len(pressed))
    assert (take.start_frame, take.end_frame) == (len(before) - preroll, len(before) + len(pressed) + tail)
    assert take.sample_rate == 16_000 and take.audio.dtype == np.float32
    assert take.preroll_s == pytest.approx(0.3) and take.tail_s == pytest.approx(0.15)
    assert take.pressed_s == pytest.approx(1.0) and not take.truncated
    # Exactly the stream's audio from 0.3 s before the press to 0.15 s after the release, at 16 kHz.
    expected = resample(source[take.start_frame : take.end_frame], fs, 16_000)
    np.testing.assert_allclose(take.audio, expected, atol=1e-6)
    # ...which means: the pre-roll is the 300 Hz heard before the press, the tail the 2.5 kHz after release.
    audio = take.audio
    assert dominant_frequency(audio[200:4600], 16_000) == pytest.approx(300, abs=10)
    assert dominant_frequency(audio[5000:20000], 16_000) == pytest.approx(1000, abs=10)
    assert dominant_frequency(audio[-2200:-200], 16_000) == pytest.approx(2500, abs=15)
    assert len(audio) == pytest.approx(16_000 * 1.45, abs=1)


@pytest.mark.parametrize("rate", [44_100, 48_000])
def test_capture_resamples_1khz_to_16k_and_downmixes(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any], rate: int
) -> None:
    recorder = make_recorder(closing, samplerate=rate, preroll_s=0.0, tail_s=0.0)
    assert recorder.open()
    block = recorder.block_frames
    recorder.press()
    left = tone(1000, 2.0, rate, amplitude=0.6)
    alsa.feed_mic(left, 0.5 * left, block=block)  # mono is the mean of the two channels: amplitude 0.45
    wait_frames(recorder, len(left))
    recorder.release()
    alsa.feed_mic(np.zeros(block, np.float32), block=block)  # one more block for the release to land on
    take = recorder.takes.get(timeout=HANG_GUARD_S)
    assert take.device_rate == rate and take.sample_rate == 16_000
    assert len(take.audio) == 32_000
    assert dominant_frequency(take.audio, 16_000) == pytest.approx(1000, abs=10)
    assert np.max(np.abs(take.audio[1000:-1000])) == pytest.approx(0.45, abs=0.005)


def test_too_short_take_is_dropped_with_event(alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]) -> None:
    recorder = make_recorder(closing, samplerate=48_000, min_take_s=0.1)
    assert recorder.open()
    block = recorder.block_frames
    alsa.feed_mic(tone(440, 0.5, 48_000), block=block)
    wait_frames(recorder, 24_000)
    recorder.press()
    alsa.feed_mic(tone(440, 0.05, 48_000), block=block)  # held for 50 ms
    wait_frames(recorder, 26_400)
    recorder.release()
    alsa.feed_mic(np.zeros(24_000, np.float32), block=block)
    rejected = next_event(recorder.events, TakeRejected)
    assert rejected.reason == "too_short" and rejected.duration_s == pytest.approx(0.05)
    wait_frames(recorder, 50_400)
    assert recorder.takes.empty() and not recorder.is_recording

    # The recorder is still usable: a proper take afterwards is delivered.
    recorder.press()
    alsa.feed_mic(tone(440, 0.2, 48_000), block=block)
    wait_frames(recorder, 60_000)
    recorder.release()
    alsa.feed_mic(np.zeros(9_600, np.float32), block=block)
    assert recorder.takes.get(timeout=HANG_GUARD_S).pressed_s == pytest.approx(0.2)


def test_late_presses_and_releases_land_where_they_were_made(alsa: alsa_env.AlsaTestEnv,
                                                            closing: Callable[[Any], Any]) -> None:
    """A press and release the engine acts on late (queued behind an export, a model load, the end of a turn)
    carry how late they are; the recorder places them that far back in the stream. Both often reach it within
    one block: a hold made while the engine was busy used to be refused as too short (press and release on one
    frame). Generated holds: the take is exactly the stream's audio from the pre-roll before the press to the
    tail after the release, a hold under `min_take_s` is refused with its true length, and a press is never
    placed back into the take before it (nor further back than the recorder's backdate limit, 2 s here: a
    press made longer ago moves its release as much, so the hold keeps its length; cutting both to the limit
    made every hold acted on that late a refused zero-length take)."""
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st

    from engine.audio.capture import LATE_TOLERANCE_S

    rate = 48_000
    limit_s = 2.0
    recorder = make_recorder(closing, samplerate=rate, preroll_s=0.3, tail_s=0.15, min_take_s=0.1,
                             backdate_limit_s=limit_s)
    assert recorder.open()
    block = recorder.block_frames
    fed: list[np.ndarray] = []
    state = {"frames": 0, "last_end": 0, "seed": 0}

    def feed(samples: np.ndarray) -> None:
        for start in range(0, len(samples), 4800 * 5):  # within the FIFO, each piece taken before the next
            piece = samples[start : start + 4800 * 5]
            alsa.feed_mic(piece, block=block)
            state["frames"] += len(piece)
            wait_frames(recorder, state["frames"])
        fed.append(samples)

    def noise(blocks: int) -> np.ndarray:  # distinct audio everywhere, so any misplaced frame shows
        state["seed"] += 1
        return (0.3 * np.random.default_rng(state["seed"]).standard_normal(blocks * block)).astype(np.float32)

    @settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(lead=st.integers(0, 60), held=st.integers(0, 80), after=st.integers(6, 80),
           extra_late=st.sampled_from((0, 0, 4_000)))
    @example(lead=10, held=50, after=10, extra_late=4_000)  # a 0.5 s hold acted on 4 s after the limit
    def hold_made_while_busy(lead: int, held: int, after: int, extra_late: int) -> None:
        # The stream runs on: `lead` blocks, then the user holds for `held` blocks and releases `after` blocks
        # before the engine acts on both (blocks of 10 ms; `extra_late` ms more for both: beyond the ring).
        feed(noise(lead))
        press_at = state["frames"]
        feed(noise(held))
        release_at = state["frames"]
        feed(noise(after))
        now = state["frames"]
        extra = extra_late / 1000
        recorder.press(late_s=(now - press_at) / rate + extra)
        recorder.release(late_s=(now - release_at) / rate + extra)
        feed(noise(20))  # the block they land on, and room for the tail
        press_late = (now - press_at) / rate + extra
        release_late = (now - release_at) / rate + extra - max(0.0, press_late - limit_s)

        def placed(late: float) -> int:
            return now if late <= LATE_TOLERANCE_S else now - round(min(late, limit_s) * rate)

        want_press = max(placed(press_late), state["last_end"])
        want_release = max(placed(release_late), want_press)
        if want_release - want_press < round(0.1 * rate):
            rejected = next_event(recorder.events, TakeRejected)
            assert rejected.reason == "too_short"
            assert rejected.duration_s == pytest.approx((want_release - want_press) / rate)
            state["last_end"] = want_release
            wait_until(lambda: not recorder.is_recording, "the refused take to end")
            return
        take = recorder.takes.get(timeout=HANG_GUARD_S)
        assert (take.press_frame, take.release_frame) == (want_press, want_release)
        assert take.start_frame == max(want_press - round(0.3 * rate), 0)
        assert take.end_frame == want_release + round(0.15 * rate)
        assert take.pressed_s == pytest.approx((want_release - want_press) / rate)
        source = np.concatenate(fed)
        np.testing.assert_allclose(take.audio, resample(source[take.start_frame : take.end_frame], rate, 16_000),
                                   atol=1e-6)
        state["last_end"] = take.end_frame

    hold_made_while_busy()
    assert recorder.takes.empty()


def test_too_long_take_is_cut_at_the_cap_and_still_delivered(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]
) -> None:
    recorder = make_recorder(closing, samplerate=48_000, max_take_s=1.0, preroll_s=0.3)
    assert recorder.open()
    block = recorder.block_frames
    source = np.concatenate((tone(300, 0.5, 48_000), tone(1000, 1.5, 48_000)))
    alsa.feed_mic(source[:24_000], block=block)
    wait_frames(recorder, 24_000)
    recorder.press()
    alsa.feed_mic(source[24_000:], block=block)  # held for 1.5 s, longer than the 1 s cap
    take = recorder.takes.get(timeout=HANG_GUARD_S)
    rejected = next_event(recorder.events, TakeRejected)
    assert rejected.reason == "too_long" and rejected.duration_s == pytest.approx(1.0)
    assert take.truncated and take.release_frame is None
    assert len(take.audio) == 16_000  # the cap includes the pre-roll
    np.testing.assert_allclose(take.audio, resample(source[9_600:57_600], 48_000, 16_000), atol=1e-6)
    wait_frames(recorder, len(source))
    recorder.release()  # the user lets go later: nothing more happens
    alsa.feed_mic(np.zeros(9_600, np.float32), block=block)
    wait_frames(recorder, len(source) + 9_600)
    time.sleep(0.1)  # give a wrongly produced take/event a chance to show up (not a timing assertion)
    assert recorder.takes.empty()
    assert not any(isinstance(e, TakeRejected) for e in list(recorder.events.queue))


def test_input_level_reports_rms_peak_and_clipping(alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]) -> None:
    recorder = make_recorder(closing, samplerate=48_000, level_interval_s=0.01)
    assert recorder.open()
    block = recorder.block_frames
    alsa.feed_mic(tone(1000, 0.5, 48_000, amplitude=0.5), block=block)
    wait_frames(recorder, 24_000)
    level = next_event(recorder.events, InputLevel)
    assert level.rms == pytest.approx(0.5 / np.sqrt(2), abs=0.005)
    assert level.peak == pytest.approx(0.5, abs=0.005) and not level.clipping

    square = np.where(tone(1000, 0.2, 48_000) >= 0, 1.0, -1.0).astype(np.float32)
    alsa.feed_mic(square, block=block)
    level = next_event(recorder.events, InputLevel, where=lambda e: e.peak > 0.9)
    assert level.clipping and level.peak == pytest.approx(1.0)


# --------------------------------------------------------------------------- playback


RATE_PAIRS = [(24_000, 48_000), (24_000, 44_100), (48_000, 16_000), (44_100, 16_000), (24_000, 24_000)]


@pytest.mark.parametrize(("src", "dst"), RATE_PAIRS)
def test_resampler_chunked_output_equals_one_shot(src: int, dst: int) -> None:
    rng = np.random.default_rng(7)
    signal = (rng.standard_normal(30_011) * 0.1).astype(np.float32)
    whole = resample(signal, src, dst)
    assert whole.dtype == np.float32 and len(whole) == round(len(signal) * dst / src)
    resampler = StreamingResampler(src, dst)
    for _ in range(2):  # reset() starts a new signal: the second pass gives the same samples
        pieces, start = [], 0
        while start < len(signal):
            size = int(rng.integers(1, 2_500))
            pieces.append(resampler.process(signal[start : start + size]))
            start += size
        pieces.append(resampler.flush())
        np.testing.assert_array_equal(np.concatenate(pieces), whole)
        resampler.reset()


@pytest.mark.parametrize(("src", "dst"), [pair for pair in RATE_PAIRS if pair[0] != pair[1]])
def test_resampler_keeps_a_tone_and_removes_what_the_new_rate_cannot_hold(src: int, dst: int) -> None:
    seconds = 1.0
    kept = tone(1000, seconds, src)  # well inside both bands
    out = resample(kept, src, dst)
    middle = out[len(out) // 4 : 3 * len(out) // 4]  # away from the edges' filter transients
    assert dominant_frequency(middle, dst) == pytest.approx(1000, abs=1)
    reference = tone(1000, seconds, dst)[len(out) // 4 : 3 * len(out) // 4]
    assert np.sqrt(np.mean(middle**2)) == pytest.approx(np.sqrt(np.mean(reference**2)), rel=1e-3)  # gain 1
    np.testing.assert_allclose(middle, reference, atol=2e-3)  # same phase: no delay left in the output
    if dst < src:  # a tone above the new Nyquist frequency must not alias into the band
        above = tone(0.45 * src if src < 2 * dst else 0.6 * dst, seconds, src)
        aliased = resample(above, src, dst)[len(out) // 4 : 3 * len(out) // 4]
        assert np.sqrt(np.mean(aliased**2)) < 1e-3 * np.sqrt(np.mean(above**2))  # at least 60 dB down


@pytest.mark.parametrize("rate", [None, 48_000], ids=["native-44k1", "48k"])
def test_playback_is_gap_free_and_keeps_frequency(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any], rate: int | None
) -> None:
    # A 1 s safety margin is more than the speaker FIFO holds, so the stream stalls on the FIFO before the
    # speech starts, and every chunk is queued before any is played: no underrun can hide a gap.
    player = closing(StreamingPlayer(SPEAKER, samplerate=rate, safety_margin_s=1.0))
    assert player.begin_utterance() == 1
    fs = player.samplerate
    speech = (0.5 * np.cos(2 * np.pi * 1000 * np.arange(24_000) / 24_000)).astype(np.float32)
    rng = np.random.default_rng(3)
    start = 0
    while start < len(speech):  # irregular chunks, like the model's frames
        size = int(rng.integers(200, 4_000))
        assert player.enqueue(speech[start : start + size])
        start += size
    player.mark_end_of_stream()
    assert player.output_latency_s is not None and player.output_latency_s > 0

    expected = resample(speech, 24_000, fs)
    out = alsa.read_speaker(3 * fs)
    assert np.array_equal(out[:, 0], out[:, 1])  # mono on both channels
    heard = out[:, 0]
    first = int(np.flatnonzero(np.abs(heard) > 1e-4)[0])
    lead = int(np.flatnonzero(np.abs(expected) > 1e-4)[0])
    played = heard[first - lead : first - lead + len(expected)]
    np.testing.assert_allclose(played, expected, atol=1e-6)  # sample-exact: no gap, no click, no repeat
    assert not np.any(heard[first - lead + len(expected) :])  # silence after the end
    assert dominant_frequency(played, fs) == pytest.approx(1000, abs=10)

    stats = player.utterance_stats()
    assert stats is not None and stats.started and stats.drained
    assert stats.underruns == 0 and player.underruns == 0
    assert stats.first_audible_frame is not None and stats.first_audible_monotonic is not None
    assert not player.is_speaking


def test_underruns_are_counted_when_the_buffer_starves(closing: Callable[[Any], Any]) -> None:
    events: list[Any] = []
    # `default` plays into ALSA's null sink, which takes audio as fast as it comes: one chunk is gone at once.
    player = closing(StreamingPlayer("default", on_event=events.append, safety_margin_s=0.02))
    assert player.begin_utterance() is not None
    assert player.enqueue(tone(440, 0.1, 24_000))

    def stats() -> Any:
        return player.utterance_stats()

    wait_until(lambda: stats() is not None and stats().underruns >= 1, "an underrun")
    played = player.frames_played
    wait_until(lambda: player.frames_played > played + 10_000, "more silence played")
    assert stats().underruns == 1  # one starvation episode, however many empty blocks it lasted
    assert stats().underrun_frames > 10_000
    assert player.is_open and player.is_speaking and events == []

    assert player.enqueue(tone(440, 0.1, 24_000))  # more speech arrives late, plays, starves again
    wait_until(lambda: stats().underruns == 2, "the second underrun")
    player.mark_end_of_stream()
    wait_until(lambda: stats().drained, "the utterance to drain")
    played = player.frames_played
    wait_until(lambda: player.frames_played > played + 10_000, "silence after the end")
    assert stats().underruns == 2 and player.underruns == 2  # draining the end is not an underrun
    assert not player.is_speaking and events == []


def test_barge_in_flushes_playback_and_starts_the_take(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]
) -> None:
    """A press while the answer plays, as the engine thread handles it: flush the player, then press."""
    recorder = closing(PushToTalkRecorder("default", samplerate=48_000))
    player = closing(StreamingPlayer(SPEAKER, samplerate=48_000, safety_margin_s=0.0))
    assert recorder.open() and player.open()

    def press() -> bool:
        barge_in = player.is_speaking
        if barge_in:
            player.flush()
        assert recorder.press()
        return barge_in

    block = recorder.block_frames
    assert press() is False  # nothing playing: a plain press, no barge-in
    recorder.release()
    alsa.feed_mic(np.zeros(block, np.float32), block=block)  # press and release land on the same frame
    assert next_event(recorder.events, TakeRejected).reason == "too_short"
    wait_until(lambda: not recorder.is_recording, "the empty take to end")

    player.begin_utterance()
    answer = tone(1000, 3.0, 24_000)
    assert player.enqueue(answer)
    heard = alsa.read_speaker(12_000)  # the answer is playing...
    wait_until(lambda: player.utterance_stats() is not None and player.utterance_stats().started, "playback")
    assert player.is_speaking and player.buffered_frames > 0

    frames_fed = recorder.frames_captured
    assert press() is True  # ...when the user talks over it
    assert player.buffered_frames == 0 and not player.is_speaking
    assert player.enqueue(answer[:2400]) is False  # late chunks of the cancelled answer are dropped
    after = alsa.read_speaker(48_000)[:, 0]
    # What the device had already taken (the FIFO and ALSA buffers) still comes out, then only silence.
    audible = np.concatenate((heard[:, 0], after))
    assert np.count_nonzero(audible) < 48_000  # far less than the 3 s (144 000 frames) that were queued
    assert not np.any(after[-24_000:])

    # The press also started a take.
    alsa.feed_mic(tone(440, 0.5, 48_000), block=block)
    wait_frames(recorder, frames_fed + 24_000)
    recorder.release()
    alsa.feed_mic(np.zeros(9_600, np.float32), block=block)
    assert recorder.takes.get(timeout=HANG_GUARD_S).pressed_s == pytest.approx(0.5)


def envelope(signal: np.ndarray, period: int) -> np.ndarray:
    """The peak of each `period` (one cycle of the tone)."""
    n = len(signal) // period
    return np.abs(signal[: n * period]).reshape(n, period).max(axis=1)


def test_the_answer_is_ducked_restored_and_silenced_smoothly_and_the_silenced_part_is_not_heard(
    alsa: alsa_env.AlsaTestEnv, closing: Callable[[Any], Any]
) -> None:
    """Hands-free (issue 44): the listener turns the answer down by DUCK_DB while the user talks over it, back up
    after a backchannel, and out when the speech stops it; each change is a ramp of GAIN_RAMP_S, no step (no
    click), and what plays silenced counts as not heard."""
    from engine.audio.playback import DUCK_DB, GAIN_RAMP_S

    player = closing(StreamingPlayer(SPEAKER, samplerate=48_000, safety_margin_s=0.0))
    player.begin_utterance()
    assert player.enqueue(tone(1000, 6.0, 24_000))  # 48 samples a cycle at 48 kHz
    heard = [alsa.read_speaker(9_600)[:, 0]]
    player.duck()
    heard.append(alsa.read_speaker(24_000)[:, 0])
    player.restore()
    heard.append(alsa.read_speaker(24_000)[:, 0])
    player.silence()
    heard.append(alsa.read_speaker(24_000)[:, 0])
    out = np.concatenate(heard)
    level = envelope(out[np.flatnonzero(np.abs(out) > 1e-3)[0]:], 48)
    ducked = 0.5 * 10 ** (DUCK_DB / 20)
    ramp = int(np.ceil(GAIN_RAMP_S * 1000)) + 2  # cycles a ramp may touch
    full, low, off = np.isclose(level, 0.5, rtol=0.02), np.isclose(level, ducked, rtol=0.05), level < 1e-4
    # Full, ducked, full, silent: four plateaus (a ramp passes the ducked level in a cycle or two), and nothing
    # between them but the ramps.
    kinds = np.select([full, low, off], [0, 1, 2], -1)
    edges = np.flatnonzero(np.diff(kinds)) + 1
    runs_of = [(int(k[0]), len(k)) for k in np.split(kinds, edges)]
    assert [k for k, n in runs_of if k >= 0 and n >= 10] == [0, 1, 0, 2], runs_of
    steady = np.zeros(len(kinds), bool)
    for (k, n), at in zip(runs_of, np.concatenate(([0], edges))):
        steady[at:at + n] = k >= 0 and n >= 10
    between = np.flatnonzero(~steady)
    runs = np.split(between, np.flatnonzero(np.diff(between) > 1) + 1) if len(between) else []
    assert len(runs) == 3 and all(len(r) <= ramp for r in runs), [len(r) for r in runs]
    for run in runs:  # each ramp goes one way
        changes = np.diff(level[run[0] - 1: run[-1] + 2])
        assert np.all(changes <= 1e-3) or np.all(changes >= -1e-3)
    start = np.flatnonzero(np.abs(out) > 1e-3)[0] + 480  # (past the resampler's first samples)
    assert np.max(np.abs(np.diff(out[start:]))) < 0.07  # no step: a 1 kHz tone at 0.5 moves 0.065 a sample at most
    # Faded out: what is still queued and what played silenced are not heard (the history keeps what was).
    assert player.gain == 0.0 and player.unheard_frames > player.buffered_frames > 0
    player.flush()
    assert player.unheard_frames == 0


def test_an_answer_is_audible_from_its_first_sample_until_it_has_played_out_its_pauses_included(
    closing: Callable[[Any], Any]
) -> None:
    """What the hands-free listener takes for "the answer is heard" (speech over it must outlast a backchannel):
    not while it is held or before its first sample, yes through a pause inside it, not once it has played out."""
    player = closing(StreamingPlayer("default", samplerate=48_000, safety_margin_s=0.02))
    player.begin_utterance()
    player.hold()
    assert player.enqueue(tone(440, 0.3, 24_000))
    time.sleep(0.1)
    assert player.is_speaking and not player.is_audible  # held: prepared, not heard
    player.release_hold()
    wait_until(lambda: player.is_audible, "the answer to be heard")
    assert player.enqueue(np.zeros(24_000, np.float32))  # a pause between its sentences
    assert player.enqueue(tone(440, 0.3, 24_000))
    assert player.is_audible
    player.mark_end_of_stream()
    wait_until(lambda: not player.is_speaking, "the answer to play out")
    assert not player.is_audible
    player.begin_utterance()
    assert player.enqueue(tone(440, 0.5, 24_000))
    wait_until(lambda: player.is_audible, "the next answer to be heard")
    player.flush()
    assert not player.is_audible


GAIN_CALLBACKS = """
import sys, tracemalloc
import numpy as np, sounddevice as sd
from engine.audio.playback import StreamingPlayer
player = StreamingPlayer("default", samplerate=48_000, safety_margin_s=0.0)
player.begin_utterance()
player.enqueue((0.5 * np.sin(np.arange(96_000) * 0.1)).astype(np.float32))
player.close()  # the callback is driven by hand, on the same state
outdata, status = np.zeros((480, 2), np.float32), sd.CallbackFlags()
player._on_audio(outdata, 480, None, status)  # warm up
tracemalloc.start()
base, _ = tracemalloc.get_traced_memory()
tracemalloc.reset_peak()
for step in range(200):
    if sys.argv[1] == "ramps" and step % 20 == 0:
        (player.duck, player.restore, player.silence)[step // 20 % 3]()
    player._on_audio(outdata, 480, None, status)
_, peak = tracemalloc.get_traced_memory()
assert player._callback_error is None
print(peak - base)
"""


def test_the_gain_ramp_allocates_nothing_in_the_audio_callback(alsa: alsa_env.AlsaTestEnv) -> None:
    """The callback's gain ramp works in place (views of preallocated arrays): 200 callbacks that duck, restore
    and silence the answer hold no more memory at their peak than 200 at full level (a fresh interpreter: no other
    thread allocates meanwhile); a block's samples would be 1920 bytes and more."""

    def peak(mode: str) -> int:
        done = subprocess.run([sys.executable, "-c", GAIN_CALLBACKS, mode], capture_output=True, text=True,
                              timeout=120, cwd=Path(__file__).parent.parent)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.split()[-1])

    steady, ramps = peak("steady"), peak("ramps")
    assert ramps - steady < 512, f"{ramps} bytes at the peak with ramps, {steady} without"


def test_audio_package_imports_neither_qt_nor_torch() -> None:
    code = (
        "import sys, engine.audio\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'PySide6', 'PyQt6', 'scipy'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent)
