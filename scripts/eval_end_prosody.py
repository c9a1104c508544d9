"""Could the end-of-speech wait adapt to how a take ends? Simple prosodic cues of a take's last voiced 300 ms, on
Japanese Open JTalk speech: the halves before a thinking pause after a particle (「今度の週末は、」) against the
finished sentences (tests/japanese_speech.py).

Cues: the final pitch (semitones against the take's median, librosa's pYIN), its slope over the last 200 ms, how
long the take runs on unvoiced after its last voiced frame (a devoiced final mora: です・ます), the level of the last
voiced frame, and how far the loud part reaches past it. Prints each cue's values and its AUC (how well it alone
separates the two sets; 0.5 = not at all, 1.0 = perfectly, either way round).

    PYTHONPATH=$PWD python scripts/eval_end_prosody.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

RATE = 16_000


def cues(x: np.ndarray) -> dict[str, float] | None:
    import librosa

    from japanese_speech import _frame_levels

    f0, voiced_flag, _ = librosa.pyin(x.astype(np.float64), fmin=70, fmax=400, sr=RATE, frame_length=1024,
                                      hop_length=160)
    levels = _frame_levels(x, RATE)
    voiced = np.flatnonzero(voiced_flag)
    if len(voiced) == 0:
        return None
    last = voiced[-1]
    tail = f0[max(0, last - 30): last + 1]
    tail = tail[~np.isnan(tail)]
    semitones = 12 * np.log2(tail / np.median(f0[~np.isnan(f0)]))
    k = min(20, len(semitones))
    slope = np.polyfit(np.arange(k), semitones[-k:], 1)[0] * 10 if k > 2 else 0.0
    loud = np.flatnonzero(levels > levels.max() - 30)
    return {
        "final pitch (st)": float(np.mean(semitones[-5:])),
        "pitch slope (st/100 ms)": float(slope),
        "unvoiced after the last voiced frame (ms)": float((len(f0) - 1 - last) * 10),  # (pYIN's frames)
        "level of the last voiced frame (dB)": float(levels[min(last, len(levels) - 1)] - levels.max()),
        "loud part past the last voiced frame (ms)": float((loud[-1] - last) * 10),
    }


def main() -> None:
    from japanese_speech import COMPLETE_SENTENCES, PAUSED_SENTENCES, paused_sentence, say

    halves = []
    for before, after in PAUSED_SENTENCES:
        audio, pause_start, _ = paused_sentence(before, after, 0.8, rate=RATE)
        halves.append(cues(audio[:pause_start]))
    finished = [cues(say(text, rate=RATE)) for text in COMPLETE_SENTENCES]
    print(f"{len(halves)} halves before a thinking pause, {len(finished)} finished sentences")
    for name in halves[0]:
        h = np.array([c[name] for c in halves if c is not None])
        f = np.array([c[name] for c in finished if c is not None])
        auc = float(np.mean([(a > b) + 0.5 * (a == b) for a in h for b in f]))
        print(f"{name}: AUC {max(auc, 1 - auc):.2f}\n  halves   {np.round(np.sort(h), 1)}\n  finished {np.round(np.sort(f), 1)}")


if __name__ == "__main__":
    main()
