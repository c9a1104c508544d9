"""`voicechat reply IN.wav OUT.wav`: one spoken answer from the command line, with timings."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine import validation
from engine.audio.wav import read_wav_mono, write_wav
from engine.errors import OutputPathError, UserFacingError
from engine.model.store import default_model_source
from engine.protocol import SamplingSettings
from engine.validation import check_output_path, check_range


@dataclass
class ReplySummary:
    text: str
    load_s: float
    audio_encoded_s: float
    prefill_s: float
    generation_s: float
    decode_s: float
    frames: int
    audio_seconds: float
    rtf: float | None
    device: str
    fallback_reason: str | None
    token_ids: list[int]
    precision: str = "bf16"

    def lines(self) -> list[str]:
        rtf = f"{self.rtf:.3f}" if self.rtf is not None else "n/a"
        lines = [
            f"answer: {self.text}",
            f"device: {self.device}" + (f" ({self.fallback_reason})" if self.fallback_reason else ""),
            f"precision: {self.precision}",
            f"load {self.load_s:.2f} s | audio encoded {self.audio_encoded_s * 1e3:.0f} ms | "
            f"prefill {self.prefill_s * 1e3:.0f} ms | generation {self.generation_s:.2f} s "
            f"(decode {self.decode_s:.2f} s) | frames {self.frames} | audio {self.audio_seconds:.2f} s | RTF {rtf}",
        ]
        return lines


def add_reply_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="the question: a WAV file (any rate, mono or stereo)")
    parser.add_argument("output", help="where to write the spoken answer (24 kHz WAV)")
    parser.add_argument("--model", default=None, help=f"model folder or Hub repo id (default {default_model_source()})")
    parser.add_argument("--revision", default=None, help="pin a Hub revision (commit, branch or tag)")
    parser.add_argument("--lora", default=None, help="a LoRA voice folder (PEFT adapter)")
    parser.add_argument("--demo", action="store_true", help="use the tiny random demo model (noise; for checking the app)")
    decoding = parser.add_mutually_exclusive_group()
    decoding.add_argument("--greedy", action="store_true", help="greedy decoding for text and audio")
    decoding.add_argument("--temperature", type=float, default=None, help="sampling temperature (text and audio; default 1.0)")
    parser.add_argument("--top-k", type=int, default=None, help="sampling top-k (text and audio; default 4)")
    parser.add_argument("--max-seconds", type=float, default=60.0, help="longest accepted input (default 60 s)")
    parser.add_argument("--max-answer-seconds", type=float, default=30.0, help="longest answer (default 30 s)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--no-graphs", action="store_true", help="run eagerly, without CUDA graphs")
    add_precision_argument(parser, default="bf16")


def add_precision_argument(parser: argparse.ArgumentParser, *, default: str | None, help_suffix: str = "") -> None:
    """`--precision {bf16,int8}`: the weights' precision, as the app's 精度 setting (int8: weight-only, about half
    the memory and the bytes per frame; run as asked here: the app's one-time check against bf16 is the app's)."""
    parser.add_argument("--precision", choices=validation.PRECISIONS, default=default,
                        help="the weights' precision: bf16 (standard) or int8 (less memory, faster on GPUs)"
                             + help_suffix + " (default bf16)")


def sampling_from_args(args: argparse.Namespace) -> SamplingSettings:
    """The decoding flags, checked against the same ranges as the settings (engine.validation)."""
    temperature = 1.0 if args.temperature is None else check_range("--temperature", args.temperature, validation.TEMPERATURE)
    top_k = 4 if args.top_k is None else int(check_range("--top-k", args.top_k, validation.TOP_K))
    if args.greedy:
        return SamplingSettings(greedy=True)
    return SamplingSettings(False, temperature, top_k, temperature, top_k)


def check_reply_args(args: argparse.Namespace) -> SamplingSettings:
    """Every flag and path checked before anything slow happens; raises SettingsError / OutputPathError."""
    sampling = sampling_from_args(args)
    check_range("--max-seconds", args.max_seconds, validation.MAX_TAKE_SECONDS)
    check_range("--max-answer-seconds", args.max_answer_seconds, validation.MAX_ANSWER_SECONDS)
    check_output_path(args.output, inputs=(args.input,))
    return sampling


def reply_file(
    input_path: Path,
    output_path: Path,
    *,
    source: str | None,
    lora: str | None = None,
    demo: bool = False,
    revision: str | None = None,
    sampling: SamplingSettings = SamplingSettings(),
    max_seconds: float = 60.0,
    max_answer_seconds: float = 30.0,
    device: str | None = None,
    use_cuda_graphs: bool = True,
    log: Callable[[str], None] = print,
    precision: str = "bf16",
) -> ReplySummary:
    """Read a take, answer it, write the answer; raises UserFacingError for anything the user can fix."""
    from engine.chat.session import SAMPLE_RATE_IN, SAMPLE_RATE_OUT, AudioPieceOut, ChatSession, TurnDone, check_take

    # Everything the user gave is checked before the (slow) model load.
    check_output_path(output_path, inputs=(input_path,))
    wave = read_wav_mono(input_path, SAMPLE_RATE_IN)
    check_take(wave, SAMPLE_RATE_IN, max_seconds)
    if lora:
        from engine.model.lora import load_voice

        load_voice(lora)  # a broken voice is refused now, not after the load
    started = time.perf_counter()
    session = ChatSession.open(
        source or default_model_source(),
        lora=lora,
        demo=demo,
        revision=revision,
        device=device,
        use_cuda_graphs=use_cuda_graphs,
        progress=lambda p: log(f"[{p.stage}] {p.detail}") if p.stage != "download" else None,
        precision=precision,  # type: ignore[arg-type]
    )
    load_s = time.perf_counter() - started
    if session.voice_problem is not None:
        # The session fell back to the model's own voice; here the user asked for this voice by name.
        session.close()
        raise session.voice_problem
    chunks: list[np.ndarray] = []
    stats = None
    progress = AnswerProgress(log, SAMPLE_RATE_OUT, max_answer_seconds)
    for output in session.respond(wave, sampling, max_answer_seconds=max_answer_seconds, max_take_seconds=max_seconds):
        if isinstance(output, AudioPieceOut):
            chunks.append(output.pcm)
            progress.audio(len(output.pcm))
        elif isinstance(output, TurnDone):
            stats = output.stats
    assert stats is not None
    answer = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
    info = session.info
    session.close()
    summary = ReplySummary(
        text=stats.text,
        load_s=load_s,
        audio_encoded_s=stats.audio_encoded_s,
        prefill_s=stats.prefill_done_s - stats.audio_encoded_s,
        generation_s=stats.generation_s,
        decode_s=stats.decode_s,
        frames=stats.frames,
        audio_seconds=stats.audio_seconds,
        rtf=stats.rtf,
        device=info.device_name,
        fallback_reason=info.fallback_reason,
        token_ids=stats.token_ids,
        precision=session.loaded.precision,
    )
    save_answer(output_path, answer, SAMPLE_RATE_OUT, summary.text)
    return summary


class AnswerProgress:
    """Progress lines while the answer is made (on a CPU that takes about a minute): one at once, one when the first
    audio comes, then one every few seconds with how much audio there is, in the same `[stage] detail` form as the
    load's lines."""

    EVERY_S = 2.0

    def __init__(self, log: Callable[[str], None], rate: int, max_answer_seconds: float) -> None:
        self.log, self.rate, self.max_answer_seconds = log, rate, max_answer_seconds
        self.started = time.perf_counter()
        self.last = self.started
        self.samples = 0
        log(f"[answer] listening to the question and thinking (answers up to {max_answer_seconds:g} s)")

    def audio(self, samples: int) -> None:
        now = time.perf_counter()
        if not self.samples:
            self.log(f"[answer] first audio after {now - self.started:.1f} s")
            self.last = now
        self.samples += samples
        if now - self.last >= self.EVERY_S:
            self.last = now
            self.log(f"[answer] {self.samples / self.rate:.1f} s of audio after {now - self.started:.0f} s")


class _SaidByReply(logging.Filter):
    """The session logs a voice it could not merge and goes on with the model's own voice; `reply` stops with that
    problem as its error line instead, so the console must not say it twice (once as a warning)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "engine.chat.opening" and str(record.msg).startswith("voice ")
                    and "not merged" in str(record.msg))


def rescue_folder() -> Path:
    """Where an answer goes when the path the user gave cannot be written after all."""
    from engine import paths

    return paths.answers_dir()


def save_answer(path: Path, answer: np.ndarray, rate: int, text: str) -> None:
    """Write the answer; if that fails, keep it (WAV and text) in the app's folder and say where."""
    try:
        write_wav(path, answer, rate)
        return
    except Exception as error:  # soundfile/OS errors alike: the answer must not be lost
        reason = getattr(error, "strerror", None) or str(error)
    import tempfile

    name = time.strftime("answer-%Y%m%d-%H%M%S")
    for folder in (rescue_folder(), Path(tempfile.gettempdir())):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{name}.wav"
            n = 1
            while target.exists():
                target = folder / f"{name}-{n}.wav"
                n += 1
            write_wav(target, answer, rate)
            target.with_suffix(".txt").write_text(text + "\n", encoding="utf-8")
        except Exception:  # noqa: BLE001 - try the next place
            continue
        raise OutputPathError.of(
            "The answer could not be written to {path} ({error}); it was saved to {saved} instead.",
            path=path, error=reason, saved=target,
        )
    raise OutputPathError.of("The answer could not be written to {path} ({error}) nor anywhere else.", path=path, error=reason)


def quiet_library_logs() -> None:
    """transformers warns about optional CUDA kernels on every load; the CLI prints its own summary."""
    import warnings

    from transformers.utils import logging as transformers_logging

    transformers_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)


def run_reply(args: argparse.Namespace) -> int:
    # A path that is not valid text (bytes from another encoding) must print, not crash the message.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(errors="backslashreplace")
    try:
        sampling = check_reply_args(args)
    except UserFacingError as error:
        print(f"error: {error.message}", file=sys.stderr)
        return 2
    quiet_library_logs()
    said_here = _SaidByReply()
    logging.getLogger("engine.chat.opening").addFilter(said_here)  # where ChatSession.open says it
    try:
        summary = reply_file(
            Path(args.input),
            Path(args.output),
            source=args.model,
            lora=args.lora,
            demo=args.demo,
            revision=args.revision,
            sampling=sampling,
            max_seconds=args.max_seconds,
            max_answer_seconds=args.max_answer_seconds,
            device=args.device,
            use_cuda_graphs=not args.no_graphs,
            log=lambda line: print(line, file=sys.stderr),
            precision=args.precision,
        )
    except UserFacingError as error:
        print(f"error: {error.message}", file=sys.stderr)
        if error.kind == "model" and not args.demo:
            print("hint: add --demo to try the app with the tiny random demo model.", file=sys.stderr)
        return 2
    finally:
        logging.getLogger("engine.chat.opening").removeFilter(said_here)
    for line in summary.lines():
        print(line)
    return 0
