"""Smart Turn v3.2 (an end-of-turn classifier, BSD-2) on Japanese Open JTalk speech: does it tell a finished
sentence from one that stops at a particle for a thinking pause?

Evaluation only: the model ships inside the `pipecat-ai` wheel, which is downloaded here with `pip download`
(no install, no dependency of the app) and the .onnx read out of it; onnxruntime must be importable (install it
anywhere, e.g. `pip install --target /tmp/ort onnxruntime` and pass `--ort-path /tmp/ort`). The features are
Whisper's log-mel of the last 8 s at 16 kHz (transformers' WhisperFeatureExtractor, as pipecat's own copy of
it), left-padded with zeros, as pipecat's LocalSmartTurnAnalyzerV3 feeds the model.

Cases (tests/japanese_speech.py): every finished sentence, and every paused sentence cut at its thinking pause,
each followed by `--silence` of silence (what a VAD that stops after that long hands over), clean and in
room noise. Prints P(complete) per case, and the rates a threshold gives.

    PYTHONPATH=$PWD python scripts/eval_smart_turn.py --ort-path /tmp/ort
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

MODEL_IN_WHEEL = "pipecat/audio/turn/smart_turn/data/smart-turn-v3.2-cpu.onnx"
RATE = 16_000


def fetch_model(folder: Path, version: str) -> Path:
    target = folder / "smart-turn-v3.2-cpu.onnx"
    if target.exists():
        return target
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(folder),
                    f"pipecat-ai=={version}" if version else "pipecat-ai"], check=True)
    wheel = next(folder.glob("pipecat_ai-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        target.write_bytes(archive.read(MODEL_IN_WHEEL))
    return target


class SmartTurn:
    def __init__(self, model: Path) -> None:
        import onnxruntime as ort
        from transformers import WhisperFeatureExtractor

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), sess_options=options, providers=["CPUExecutionProvider"])
        self.features = WhisperFeatureExtractor(chunk_length=8)

    def probability(self, audio: np.ndarray) -> float:
        n = 8 * RATE
        audio = audio[-n:] if len(audio) > n else np.pad(audio, (n - len(audio), 0))
        mel = self.features(audio, sampling_rate=RATE, return_tensors="np", padding="max_length", max_length=n,
                            truncation=True, do_normalize=True).input_features.astype(np.float32)
        return float(np.asarray(self.session.run(None, {"input_features": mel})[0]).reshape(-1)[0])


def cases(silence_s: float, noise_db: float | None) -> list[tuple[str, bool, np.ndarray]]:
    from japanese_speech import COMPLETE_SENTENCES, PAUSED_SENTENCES, paused_sentence, say
    from voice_signals import room_noise

    tail = np.zeros(int(silence_s * RATE), np.float32)
    out = []
    for text in COMPLETE_SENTENCES:
        out.append((text, True, np.concatenate((say(text), tail))))
    for before, after in PAUSED_SENTENCES:
        audio, pause_start, _ = paused_sentence(before, after, 1.0)
        out.append((before, False, np.concatenate((audio[:pause_start], tail))))
    if noise_db is not None:
        out = [(t, c, a + room_noise(len(a), level_db=noise_db, seed=i)) for i, (t, c, a) in enumerate(out)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ort-path", help="a folder to import onnxruntime from (appended to sys.path)")
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "smart-turn-eval"))
    parser.add_argument("--pipecat-version", default="1.14.0")
    parser.add_argument("--silence", type=float, default=0.2)
    args = parser.parse_args()
    if args.ort_path:
        sys.path.append(args.ort_path)  # after the venv's own packages (numpy stays the venv's)
    folder = Path(args.cache)
    folder.mkdir(parents=True, exist_ok=True)
    model = SmartTurn(fetch_model(folder, args.pipecat_version))
    for noise in (None, -50.0):
        rows = [(text, complete, model.probability(audio)) for text, complete, audio in cases(args.silence, noise)]
        print(f"\n== {'clean' if noise is None else f'room noise {noise:.0f} dBFS'}, {args.silence:.1f} s silence after ==")
        for text, complete, prob in rows:
            print(f"{'complete  ' if complete else 'incomplete'} {prob:6.3f}  {text}")
        done = np.array([p for _, c, p in rows if c])
        cut = np.array([p for _, c, p in rows if not c])
        auc = float(np.mean([(a > b) + 0.5 * (a == b) for a in done for b in cut]))
        print(f"complete: median {np.median(done):.3f}, incomplete: median {np.median(cut):.3f}, AUC {auc:.3f}")
        for threshold in (0.5, 0.3, 0.1):
            print(f"  threshold {threshold}: complete rated complete {np.mean(done >= threshold):.0%}, "
                  f"incomplete rated complete {np.mean(cut >= threshold):.0%}")


if __name__ == "__main__":
    main()
