"""`voicechat --selftest`: check this PC and run one demo turn through the whole pipeline.

The turn goes WAV file → 16 kHz take → ChatSession on the tiny demo model (real loading code,
static-cache backend, CUDA graphs when a GPU is there) → streaming audio decoder → 24 kHz WAV, and
its output is checked, not just produced. `engine.tools.diagnostics` adds the system report and writes
the file a user can attach to a bug report.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from engine.tools.diagnostics import selftest_main
from engine.constants import FRAME_SAMPLES


def run_demo_turn(precision: str = "bf16") -> dict[str, Any]:
    """One demo turn in `precision` ("bf16" or "int8": `voicechat --selftest --precision int8` runs the int8
    engine, its kernels included on a GPU)."""
    import soundfile

    from engine.audio.wav import write_wav
    from engine.tools.reply import quiet_library_logs, reply_file
    from engine.protocol import SamplingSettings

    quiet_library_logs()
    with tempfile.TemporaryDirectory(prefix="voicechat-selftest-") as folder:
        question = Path(folder) / "question.wav"
        answer = Path(folder) / "answer.wav"
        t = np.arange(16000) / 16000
        write_wav(question, (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
        summary = reply_file(
            question, answer, source=None, demo=True, sampling=SamplingSettings(greedy=True),
            max_answer_seconds=1.0, log=lambda _line: None, precision=precision,
        )
        pcm, rate = soundfile.read(str(answer), dtype="float32")
    if rate != 24000 or summary.frames == 0 or len(pcm) != summary.frames * FRAME_SAMPLES:
        raise RuntimeError(f"the demo answer is malformed: {summary.frames} frames, {len(pcm)} samples at {rate} Hz")
    if not np.isfinite(pcm).all() or float(np.abs(pcm).max()) == 0.0:
        raise RuntimeError("the demo answer is silent or not finite")
    return {
        "device": summary.device,
        "precision": summary.precision,
        "fallback": summary.fallback_reason or "CUDA graphs ready",
        "frames": summary.frames,
        "audio_seconds": round(summary.audio_seconds, 3),
        "load_s": round(summary.load_s, 2),
        "prefill_ms": round(summary.prefill_s * 1e3, 1),
        "rtf": None if summary.rtf is None else round(summary.rtf, 3),
    }


def main(precision: str = "bf16") -> int:
    return selftest_main(lambda: run_demo_turn(precision))
