"""Japanese test speech from Open JTalk (pyopenjtalk-plus), for the hands-free turn-taking tests and the
measurements (scripts/measure_turn_taking.py, scripts/eval_smart_turn.py).

A sentence with a thinking pause is synthesised whole, with a comma after the particle ("今度の週末は、どこに
行こうかな。"): Open JTalk pauses there with the prosody of a phrase that goes on, and that pause is then
stretched to the thinking pause wanted. Backchannels are said on their own.
"""

from __future__ import annotations

import functools

import numpy as np

# Sentences with a particle followed by a comma, where a speaker may stop to think: (before, after).
PAUSED_SENTENCES = (
    ("今度の週末は、", "どこに行こうかな。"),
    ("明日の会議では、", "新しい計画について話します。"),
    ("駅の近くに、", "おいしいラーメン屋があるんだけど。"),
    ("この本を、", "図書館に返しておいてください。"),
    ("昨日の夜は、", "友達と映画を見に行きました。"),
    ("子供のころから、", "ずっと絵を描くのが好きでした。"),
    ("来年の春には、", "京都に旅行したいと思っています。"),
    ("最近の天気は、", "なんだか変ですよね。"),
    ("あのレストランで、", "誕生日のお祝いをしましょう。"),
    ("私の兄が、", "新しい車を買いました。"),
    ("夏休みの宿題を、", "まだ全然やっていないんです。"),
    ("週に三回くらい、", "ジムに通っています。"),
    ("日本語の勉強は、", "毎日少しずつ続けています。"),
    ("この辺りで、", "安いホテルを知りませんか。"),
    ("冷蔵庫の中に、", "牛乳が残っていたかな。"),
    ("お昼ご飯に、", "カレーを作ろうと思います。"),
)
# Finished sentences said in one go.
COMPLETE_SENTENCES = tuple(a.rstrip("、") + b for a, b in PAUSED_SENTENCES) + (
    "今日はいい天気ですね。",
    "おすすめの本を教えてください。",
    "それはどういう意味ですか。",
    "ありがとう、とても助かりました。",
)
BACKCHANNELS = ("うん", "はい", "へえ", "そうですね")
# Interruptions of the assistant, each at least a second long.
INTERRUPTIONS = ("ちょっと待ってください、質問があります。", "すみません、もう一度説明してもらえますか。")


@functools.lru_cache(maxsize=256)
def _tts(text: str) -> tuple[np.ndarray, int]:
    import pyopenjtalk

    samples, rate = pyopenjtalk.tts(text)
    return (np.asarray(samples, np.float64) / 32768.0).astype(np.float32), int(rate)


def _frame_levels(x: np.ndarray, rate: int) -> np.ndarray:
    frame = rate // 100
    n = len(x) // frame
    blocks = x[: n * frame].reshape(n, frame).astype(np.float64)
    return 10 * np.log10(np.mean(blocks ** 2, axis=1) + 1e-12)


def _trim(x: np.ndarray, rate: int, floor_db: float = -50.0) -> np.ndarray:
    """Without the leading and trailing silence Open JTalk puts around an utterance."""
    loud = np.flatnonzero(_frame_levels(x, rate) > floor_db)
    if len(loud) == 0:
        return x
    frame = rate // 100
    return x[loud[0] * frame: (loud[-1] + 1) * frame]


def _resample(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    if src == dst:
        return x
    from scipy.signal import resample_poly

    g = int(np.gcd(src, dst))
    return resample_poly(x, dst // g, src // g).astype(np.float32)


def say(text: str, *, rate: int = 16_000, level: float = 0.3) -> np.ndarray:
    """`text` spoken (silence trimmed), its peak at `level`."""
    x, src = _tts(text)
    x = _trim(x, src)
    x = _resample(x, src, rate)
    return (x / (np.max(np.abs(x)) or 1.0) * level).astype(np.float32)


def paused_sentence(before: str, after: str, pause_s: float, *, rate: int = 16_000,
                    level: float = 0.3) -> tuple[np.ndarray, int, int]:
    """`before` + `after` as one sentence with a thinking pause of `pause_s` after `before`'s particle.
    Returns the samples and where the pause starts and ends (samples)."""
    x, src = _tts(before + after)
    x = _trim(x, src)
    levels = _frame_levels(x, src)
    frame = src // 100
    # Open JTalk's pause at the comma: the longest quiet run after the first third of `before`'s share.
    quiet = levels < -50.0
    runs, i = [], 0
    while i < len(quiet):
        if quiet[i]:
            j = i
            while j < len(quiet) and quiet[j]:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    share = len(before) / (len(before) + len(after))
    expected = share * len(quiet)
    candidates = [r for r in runs if r[1] - r[0] >= 10] or runs
    start, end = min(candidates, key=lambda r: abs((r[0] + r[1]) / 2 - expected))
    head = _resample(x[: start * frame], src, rate)
    tail = _resample(x[end * frame:], src, rate)
    pause = np.zeros(int(round(pause_s * rate)), np.float32)
    out = np.concatenate((head, pause, tail))
    scale = level / (np.max(np.abs(out)) or 1.0)
    return (out * scale).astype(np.float32), len(head), len(head) + len(pause)
