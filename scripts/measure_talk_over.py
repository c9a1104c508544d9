"""Speech over a playing answer, offline and frame-exact: when is the answer ducked, when is it stopped, and does
a backchannel ever stop it?

The hands-free listener's real per-frame decisions (engine/audio/voice.py VoiceProcessor: AEC3, the spectral
double-talk check, the VADs; engine/audio/turn_taking.py Segmenter) run on a simulated room, 10 ms at a time: the
answer (Japanese from Open JTalk, another voice: half a tone lower... or higher, `--answer-tone`) plays through the
player's gain (ducked by DUCK_DB on `TalkOver`, restored on `TalkOverEnded`, faded out on `SpeechStarted`, each a
GAIN_RAMP_S ramp, `--latency` after the decision: the device's buffer), its echo (delay, attenuation, reflections)
and room noise reach the microphone, and the user says a backchannel or an interruption (tests/japanese_speech.py)
at a random moment of it. The answer's own sound is fed back as it was played (ducked or not), as in a room.

Prints, per kind of utterance, how often the answer was stopped, and from the utterance's first sample the time
until the answer was ducked and until it was stopped (median, 90th percentile), with the settings given.

    PYTHONPATH=$PWD python scripts/measure_talk_over.py --trials 8
    PYTHONPATH=$PWD python scripts/measure_talk_over.py --barge-in 0.7 --no-duck
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from engine.audio.playback import DUCK_DB, GAIN_RAMP_S  # noqa: E402
from engine.audio.turn_taking import Segmenter, SpeechStarted, TalkOver, TalkOverEnded  # noqa: E402
from engine.audio.voice import FRAME, RATE, VoiceOptions, VoiceProcessor  # noqa: E402

ANSWER = ("今日は天気がいいので、公園を散歩するのはいかがでしょうか。午後からは少し雲が出てきますが、雨の心配はありません。"
          "お弁当を持って出かけるのもいいですね。近くの公園には大きな池があって、ボートに乗ることもできます。")


def answer_audio(tone: float, kind: str = "speech") -> np.ndarray:
    """The answer: Open JTalk speech, or ("noise") steady noise at -33 dBFS like the demo model's random voice."""
    if kind == "noise":
        from voice_signals import room_noise

        return room_noise(14 * RATE, level_db=-33.0, seed=7)
    import pyopenjtalk

    from japanese_speech import _resample, _trim

    x, src = pyopenjtalk.tts(ANSWER, half_tone=tone)
    x = _trim((np.asarray(x, np.float64) / 32768.0).astype(np.float32), src)
    x = _resample(x, src, RATE)
    return (x / np.max(np.abs(x)) * 0.3).astype(np.float32)


def trial(answer: np.ndarray, words: np.ndarray, at: int, options: VoiceOptions, *, duck: bool, latency: int,
          delay_s: float, attenuation_db: float, seed: int) -> dict[str, int | None]:
    from voice_signals import room_noise

    rng = np.random.default_rng(seed)
    taps = np.zeros(int(0.03 * RATE) + 1, np.float32)
    taps[0] = 1.0
    for _ in range(6):
        taps[rng.integers(int(0.002 * RATE), len(taps))] += rng.uniform(-0.3, 0.3)
    delay = int(round(delay_s * RATE))
    attenuation = 10 ** (-attenuation_db / 20)
    n_frames = len(answer) // FRAME
    noise = room_noise(n_frames * FRAME, level_db=-60.0, seed=seed)
    user = np.zeros(n_frames * FRAME, np.float32)
    user[at: at + len(words)] = words[: max(0, len(user) - at)]
    pad = len(taps) - 1
    played = np.zeros(pad + n_frames * FRAME + delay, np.float32)  # what the speaker played, as it reaches the mic
    processor = VoiceProcessor(options)
    segmenter = Segmenter(options)
    ramp = max(1, round(GAIN_RAMP_S * RATE))
    gain, target = 1.0, 1.0
    pending: list[tuple[int, float]] = []  # (frame from which, target)
    result: dict[str, int | None] = {"ducked": None, "stopped": None}
    for i in range(n_frames):
        while pending and pending[0][0] <= i:
            target = pending.pop(0)[1]
        far = answer[i * FRAME:(i + 1) * FRAME].copy()
        if gain != target or target != 1.0:  # the player's ramp (a linear one: the same length, close enough)
            steps = np.clip(np.arange(1, FRAME + 1) / ramp, 0.0, 1.0)
            curve = gain + (target - gain) * steps
            far *= curve
            gain = gain + (target - gain) * min(1.0, FRAME / ramp)
        played[pad + delay + i * FRAME: pad + delay + (i + 1) * FRAME] = far
        echo = np.convolve(played[i * FRAME: pad + (i + 1) * FRAME], taps, mode="valid") * attenuation
        near = (echo + noise[i * FRAME:(i + 1) * FRAME] + user[i * FRAME:(i + 1) * FRAME]).astype(np.float32)
        _, speech, talk_over = processor.process(near, far)
        event = segmenter.push(i, speech, talk_over, True)  # the answer is heard (VoiceListener: is_audible)
        if isinstance(event, TalkOver) and duck:
            pending.append((i + 1 + latency, 10 ** (DUCK_DB / 20)))
            result["ducked"] = result["ducked"] if result["ducked"] is not None else i + 1 + latency
        elif isinstance(event, TalkOverEnded) and duck:
            pending.append((i + 1 + latency, 1.0))
        elif isinstance(event, SpeechStarted):
            pending.append((i + 1 + latency, 0.0))
            result["stopped"] = i + 1 + latency
            break
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=6, help="moments in the answer per utterance")
    parser.add_argument("--barge-in", type=float, default=VoiceOptions.barge_in_s)
    parser.add_argument("--no-duck", action="store_true")
    parser.add_argument("--latency", type=int, default=3, help="frames (10 ms) from a decision to the speaker")
    parser.add_argument("--answer-tone", type=float, default=-4.0, help="the answer's voice, half tones")
    parser.add_argument("--echo-db", type=float, default=12.0, help="the echo's attenuation")
    parser.add_argument("--answer", choices=("speech", "noise"), default="speech",
                        help="the answer's sound: Open JTalk speech, or steady noise (the demo model's)")
    args = parser.parse_args()
    from japanese_speech import BACKCHANNELS, INTERRUPTIONS, say

    options = replace(VoiceOptions(), barge_in_s=args.barge_in)
    answer = answer_audio(args.answer_tone, args.answer)
    extra = ("うんうん", "はいはい", "なるほど", "そうなんだ", "ええ", "そうそう")
    rows = []
    for kind, texts in (("backchannel", BACKCHANNELS + extra), ("interruption", INTERRUPTIONS + (
            "待って", "ちょっと待ってください", "いや、そうじゃなくて", "それより明日の予定を教えて"))):
        for text in texts:
            words = say(text, rate=RATE, level=0.35)
            for k in range(args.trials):
                at = int((1.5 + k * (len(answer) / RATE - 5.0) / max(1, args.trials)) * RATE)
                r = trial(answer, words, at, options, duck=not args.no_duck, latency=args.latency,
                          delay_s=0.12, attenuation_db=args.echo_db, seed=k)
                onset = at / FRAME
                rows.append((kind, text, len(words) / RATE,
                             None if r["ducked"] is None else (r["ducked"] - onset) * 10,
                             None if r["stopped"] is None else (r["stopped"] - onset) * 10))
    for kind in ("backchannel", "interruption"):
        mine = [r for r in rows if r[0] == kind]
        stopped = [r for r in mine if r[4] is not None]
        ducked = [r[3] for r in mine if r[3] is not None]
        print(f"{kind}: stopped {len(stopped)}/{len(mine)}", end="")
        if stopped:
            s = np.array([r[4] for r in stopped])
            print(f"; speech -> stopped median {np.median(s):.0f} ms, p90 {np.percentile(s, 90):.0f} ms", end="")
        if ducked:
            d = np.array(ducked)
            print(f"; ducked {len(d)}/{len(mine)}, speech -> ducked median {np.median(d):.0f} ms, "
                  f"p90 {np.percentile(d, 90):.0f} ms", end="")
        print()
        for text in dict.fromkeys(r[1] for r in mine):
            these = [r for r in mine if r[1] == text]
            print(f"  {text} ({these[0][2]:.2f} s): stopped {sum(r[4] is not None for r in these)}/{len(these)}"
                  f"  ducked at {[None if r[3] is None else round(r[3]) for r in these]}"
                  f"  stopped at {[None if r[4] is None else round(r[4]) for r in these]}")


if __name__ == "__main__":
    main()
