"""The clip checks on real Japanese speech (Open JTalk's synthesis, pyopenjtalk-plus), made worse in generated ways:
gain (with the converter's clipping), added noise, inserted silence, cut or joined length, at the common rates.
Each problem is found when it is present and not when it is absent; near a limit, where a fair measurement could
say either, the test asks nothing.

The default suite runs a few dozen examples per property; VOICECHAT_CLIP_EXAMPLES=500 runs more.
"""

from __future__ import annotations

import functools
import os

import numpy as np
import pyopenjtalk
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from engine.audio.resample import resample
from engine.voices import clip_check as cc

EXAMPLES = int(os.environ.get("VOICECHAT_CLIP_EXAMPLES", "30"))
RATE = 24_000
RATES = (16_000, 24_000, 44_100, 48_000)
SENTENCES = (
    "こんにちは、今日はいい天気ですね。",
    "はい、わかりました。すぐに調べてみますね。",
    "駅の近くの小さなカフェで、コーヒーを飲みながら本を読みました。",
    "ありがとう。",
    "ええと、たしか先週の金曜日だったと思います。",
)


@functools.cache
def speech(index: int) -> np.ndarray:
    """A sentence read by Open JTalk: float32 at 24 kHz, with its own short silence before and after, peaking at
    -6 dBFS (Open JTalk's own level goes past full scale on some sentences)."""
    samples, rate = pyopenjtalk.tts(SENTENCES[index])
    return resample((samples * (0.5 / np.abs(samples).max())).astype(np.float32), rate, RATE)


@functools.cache
def clean_level(index: int) -> float:
    return cc.check_clip(speech(index), RATE).speech_dbfs


def noise(count: int, dbfs: float, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(count) * 10 ** (dbfs / 20)).astype(np.float32)


def degrade(clean: np.ndarray, level: float, rate: int, gain_db: float, snr_db: float | None, seed: int) -> np.ndarray:
    """`clean` (24 kHz, speech at `level` dBFS) at `rate`, amplified, with white noise `snr_db` below the speech,
    through a converter that cannot go past full scale."""
    signal = resample(clean, RATE, rate) * np.float32(10 ** (gain_db / 20))
    if snr_db is not None:
        signal = signal + noise(len(signal), level + gain_db - snr_db, seed)
    return signal


def inside_a_word(clean: np.ndarray, where: float = 0.5, after: float = 0.0) -> int:
    """A sample in the middle of a run of speech of 0.15 s or more (not in a pause), `where` along such runs, and
    `after` seconds into the clip where there is one that far."""
    activity = cc.speech_activity(clean, RATE)
    runs = activity.speech_runs()
    middles = [activity.frame_start((a + b) // 2) for a, b in runs if b - a >= 15] or [
        activity.frame_start(sum(max(runs, key=lambda r: r[1] - r[0])) // 2)]
    middles = [m for m in middles if m >= after * RATE] or middles[-1:]
    return middles[min(int(where * len(middles)), len(middles) - 1)]


def test_the_message_of_each_problem_says_the_measured_value_and_what_to_do() -> None:
    quiet = cc.check_clip(speech(0) * np.float32(0.03), RATE)
    (problem,) = quiet.problems
    assert problem.code == cc.TOO_QUIET and not problem.blocking and quiet.usable
    assert f"{quiet.speech_dbfs:.0f} dBFS" in problem.message and "microphone" in problem.message
    assert problem.message.template.startswith("The voice is too quiet") and problem.message.values["minimum"] == "-40"


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    index=st.sampled_from([0, 1, 2, 4]),
    rate=st.sampled_from(RATES),
    gain_db=st.floats(-75.0, 24.0),
    snr_db=st.none() | st.floats(0.0, 60.0),
    seed=st.integers(0, 2**16),
)
@example(index=4, rate=16_000, gain_db=11.5, snr_db=None, seed=0)  # peaks cut two samples wide
@example(index=0, rate=16_000, gain_db=3.0, snr_db=0.0, seed=0)  # clipped noise, no speech to be heard
@example(index=1, rate=48_000, gain_db=-30.0, snr_db=12.0, seed=0)  # quiet and noisy
def test_level_clipping_and_noise_are_found_when_present_and_not_when_absent(
    index: int, rate: int, gain_db: float, snr_db: float | None, seed: int
) -> None:
    level = clean_level(index)
    signal = degrade(speech(index), level, rate, gain_db, snr_db, seed)
    over = float(np.mean(np.abs(signal) > 1.0))
    peak = float(np.abs(signal).max())
    check = cc.check_clip(np.clip(signal, -1.0, 1.0), rate)
    codes = check.codes
    speech_level = level + gain_db
    noise_level = speech_level - snr_db if snr_db is not None else -200.0

    if max(speech_level, noise_level) < cc.SILENCE_DBFS - 12:  # nothing a microphone would call sound
        assert codes == {cc.NO_SPEECH}
        assert check.problems[0].code == cc.NO_SPEECH
        assert not check.usable
        return
    # Speech that stands out: loud enough, above the noise, and not flattened together with the noise.
    clear = speech_level > cc.SILENCE_DBFS + 10 and (snr_db is None or snr_db >= 10) and over < 0.02
    if clear:
        assert cc.NO_SPEECH not in codes
    # The speech's level: noise lifts the loud frames it is measured on by a few dB when it is strong.
    margin = 3.0 if snr_db is None or snr_db >= cc.MIN_SNR_DB else 6.0
    if clear and speech_level < cc.MIN_SPEECH_DBFS - margin:
        assert cc.TOO_QUIET in codes
    if speech_level > cc.MIN_SPEECH_DBFS + margin:
        assert cc.TOO_QUIET not in codes
    # Clipping: at the rate it happens, as a sound card's converter does it.
    if over > 3 * cc.MAX_CLIPPED_FRACTION:
        assert cc.CLIPPED in codes
    if peak < 0.98:
        assert cc.CLIPPED not in codes and check.clipped_fraction < cc.MAX_CLIPPED_FRACTION / 10
    # Noise: the measured SNR follows the true one.
    if clear and snr_db is not None and snr_db < cc.MIN_SNR_DB - 5:
        assert cc.NOISY in codes
    if (snr_db is None or snr_db > cc.MIN_SNR_DB + 5) and over < 0.01 and speech_level > cc.SILENCE_DBFS + 10:
        assert cc.NOISY not in codes
    if snr_db is not None and 10 <= snr_db <= 40 and over < 0.001 and clear:
        assert abs(check.snr_db - snr_db) < 4.0, (check.snr_db, snr_db)
    # The sentences are 1.9-6 s with pauses under 0.6 s: nothing about their length or pauses is wrong.
    if clear and (snr_db is None or snr_db >= cc.MIN_SNR_DB):
        assert not codes & {cc.TOO_SHORT, cc.TOO_LONG, cc.SILENCE_INSIDE}, check


@settings(max_examples=EXAMPLES, deadline=None)
@given(
    indices=st.lists(st.sampled_from(range(len(SENTENCES))), min_size=1, max_size=5),
    cut=st.none() | st.floats(0.0, 1.0),
    silence=st.none() | st.tuples(st.floats(0.05, 3.0), st.floats(0.1, 0.9)),
    rate=st.sampled_from(RATES),
    gain_db=st.floats(-15.0, 0.0),
    snr_db=st.none() | st.floats(35.0, 60.0),
    seed=st.integers(0, 2**16),
)
def test_length_and_silence_inside_are_found_when_present_and_not_when_absent(
    indices: list[int], cut: float | None, silence: tuple[float, float] | None, rate: int, gain_db: float,
    snr_db: float | None, seed: int,
) -> None:
    """Sentences joined (a short pause between them), cut short, with a silence put inside a word: the length and
    the longest pause come from the clean construction, and the degraded clip must show the same."""
    pause = np.zeros(int(0.3 * RATE), np.float32)
    parts = [cc.trim_silence(speech(i), RATE, 0.0) for i in indices]
    clean = np.concatenate([np.concatenate((part, pause)) for part in parts][:-1] + [parts[-1]])
    if cut is not None:  # the take stopped in the middle of a word
        clean = clean[:inside_a_word(clean, cut, after=0.5)]
    inserted = 0.0
    if silence is not None:
        inserted, where = silence
        at = inside_a_word(clean, where)
        clean = np.concatenate((clean[:at], np.zeros(int(inserted * RATE), np.float32), clean[at:]))
    truth = cc.check_clip(clean, RATE)
    assert truth.longest_silence_seconds >= inserted - 0.03  # the inserted silence is measured as at least itself
    level = clean_level(indices[0])
    check = cc.check_clip(np.clip(degrade(clean, level, rate, gain_db, snr_db, seed), -1.0, 1.0), rate)

    # A quieter copy loses a little of the last mora's fading tail under the speech threshold.
    assert abs(check.speech_seconds - truth.speech_seconds) < 0.15, (check, truth)
    for code, value, low, high in (
        (cc.TOO_SHORT, truth.speech_seconds, None, cc.MIN_CLIP_SECONDS),
        (cc.TOO_LONG, truth.speech_seconds, cc.MAX_CLIP_SECONDS, None),
        (cc.SILENCE_INSIDE, truth.longest_silence_seconds, cc.MAX_INNER_SILENCE_SECONDS, None),
    ):
        present = (high is not None and value < high - 0.25) or (low is not None and value > low + 0.25)
        absent = (high is not None and value > high + 0.25) or (low is not None and value < low - 0.25)
        if present:
            assert code in check.codes, (code, value, check)
        if absent:
            assert code not in check.codes, (code, value, check)
    assert not check.codes & {cc.NO_SPEECH, cc.TOO_QUIET, cc.CLIPPED, cc.NOISY}, check
    assert check.usable == (not check.codes & {cc.TOO_SHORT, cc.TOO_LONG})


def test_silence_is_measured_in_seconds() -> None:
    """Leading, trailing and inner silence, put in at known lengths around and inside a tightly cut sentence."""
    tight = cc.trim_silence(speech(2), RATE, 0.0)
    inner = cc.check_clip(tight, RATE).longest_silence_seconds
    middle = inside_a_word(tight)
    gap = np.zeros(int(1.5 * RATE), np.float32)
    clip = np.concatenate((np.zeros(RATE, np.float32), tight[:middle], gap, tight[middle:], np.zeros(RATE // 2, np.float32)))
    check = cc.check_clip(clip, RATE)
    assert inner < 0.9
    assert check.leading_silence_seconds == pytest.approx(1.0, abs=0.03)
    assert check.trailing_silence_seconds == pytest.approx(0.5, abs=0.03)
    assert check.longest_silence_seconds == pytest.approx(1.5, abs=0.03)
    assert check.codes == {cc.SILENCE_INSIDE}
    assert "1.5 s" in check.problems[0].message


def test_the_noise_floor_and_the_snr_are_the_levels_put_in() -> None:
    clip = np.concatenate((np.zeros(RATE // 2, np.float32), speech(1), np.zeros(RATE // 2, np.float32)))
    level = cc.check_clip(clip, RATE).speech_dbfs
    check = cc.check_clip(clip + noise(len(clip), -55.0, 1), RATE)
    assert check.noise_floor_dbfs == pytest.approx(-55.0, abs=1.5)
    assert check.snr_db == pytest.approx(level + 55.0, abs=2.0)
    assert check.ok


def test_trimming_keeps_the_speech_and_a_little_silence_around_it() -> None:
    clip = np.concatenate((np.zeros(2 * RATE, np.float32), speech(0), np.zeros(3 * RATE, np.float32)))
    clip = clip + noise(len(clip), -70.0, 2)
    before = cc.check_clip(clip, RATE)
    trimmed = cc.trim_silence(clip, RATE)
    after = cc.check_clip(trimmed, RATE)
    assert after.speech_seconds == pytest.approx(before.speech_seconds, abs=0.02)
    assert after.leading_silence_seconds == pytest.approx(cc.TRIM_PAD_SECONDS, abs=0.02)
    assert after.trailing_silence_seconds == pytest.approx(cc.TRIM_PAD_SECONDS, abs=0.02)
    assert after.ok and len(trimmed) < len(clip) - 4 * RATE
    assert len(cc.trim_silence(np.zeros(RATE, np.float32), RATE)) == 0


def test_a_click_in_the_silence_is_not_speech() -> None:
    clip = np.concatenate((np.zeros(RATE, np.float32), speech(0)))
    clip[RATE // 3:RATE // 3 + 48] = 0.8  # 2 ms: a tap on the microphone
    check = cc.check_clip(clip, RATE)
    assert check.leading_silence_seconds > 0.9 and check.ok


@pytest.mark.parametrize("samples", [np.zeros(0, np.float32), np.zeros(RATE, np.float32), noise(RATE, -80.0, 3)],
                         ids=["empty", "digital silence", "hiss"])
def test_nothing_but_silence_is_no_speech(samples: np.ndarray) -> None:
    check = cc.check_clip(samples, RATE)
    assert check.codes == {cc.NO_SPEECH} and not check.usable
    assert "microphone" in check.problems[0].message


def test_a_recording_peak_normalized_to_full_scale_is_not_clipped_and_invalid_samples_are_silence() -> None:
    clip = speech(2) / np.abs(speech(2)).max()
    assert cc.check_clip(clip, RATE).clipped_fraction < cc.MAX_CLIPPED_FRACTION / 10
    assert cc.check_clip(clip, RATE).ok
    damaged = speech(0).copy()
    damaged[:RATE // 2] = np.nan
    assert cc.check_clip(damaged, RATE).ok
