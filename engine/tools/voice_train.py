"""`voicechat voice-train DATA_DIR OUT_DIR`: train a LoRA voice from recorded or imported speech.

Progress goes to stderr as lines a person reads; with --json-progress every event is also one JSON line on
stdout (what the app reads: engine/worker/voice_training.py). A run stops cleanly -- after writing a
checkpoint that --resume goes on from -- on Ctrl+C, or when a line "cancel" arrives on stdin (the app's way,
which works the same on Windows). Exit status: 0 the voice is finished, 1 a failure while training (the last
checkpoint is kept), 2 bad input (one clear line, nothing written), 130 stopped on request.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from pathlib import Path

from engine import validation
from engine.errors import SettingsError, UserFacingError
from engine.model.store import default_model_source

EXIT_DONE, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_STOPPED = 0, 1, 2, 130


def add_voice_train_arguments(parser: argparse.ArgumentParser) -> None:
    from engine.tools.reply import add_precision_argument

    parser.add_argument("data", help="the speech: a folder of audio files (wav, flac, ogg, mp3) with transcripts "
                                     "(same-name .txt files, or a list file of 'file|text' lines)")
    parser.add_argument("out", help="the voice's folder (created; its training state lives there until it is finished)")
    parser.add_argument("--model", default=None, help=f"model folder or Hub repo id (default {default_model_source()})")
    parser.add_argument("--demo", action="store_true", help="train on the tiny random demo model (for checking the pipeline)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: from the amount of speech)")
    parser.add_argument("--rank", type=int, default=None, help="LoRA rank (default 16)")
    add_precision_argument(parser, default="bf16", help_suffix=" of the frozen base; int8 fits 6 GB cards")
    parser.add_argument("--resume", action="store_true", help="go on with the unfinished training in OUT")
    parser.add_argument("--replace", action="store_true", help="replace the voice already in OUT once the new one is finished")
    parser.add_argument("--base-model", default=None, help="the model id the voice's adapter names (default: the Hub id "
                                                           "of --model, or none for a folder)")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--json-progress", action="store_true", help="also print every event as a JSON line on stdout")


def check_voice_train_args(args: argparse.Namespace) -> None:
    if args.steps is not None:
        validation.check_range("--steps", args.steps, validation.TRAINING_STEPS)
    if args.rank is not None:
        validation.check_range("--rank", args.rank, validation.LORA_RANK)
    if args.resume and args.replace:
        raise SettingsError.of("--resume and --replace cannot be given together: resume goes on with the run in {folder}.",
                               folder=args.out)
    if args.resume and (args.steps is not None or args.rank is not None):
        raise SettingsError.of("--resume goes on with the run's own settings: leave out --steps and --rank.")
    if not Path(args.data).is_dir():
        raise SettingsError.of("The speech folder {folder} does not exist.", folder=args.data)


class StopRequests:
    """Set by Ctrl+C (a second one ends at once) or a "cancel" line on stdin."""

    def __init__(self, *, read_stdin: bool) -> None:
        self.event = threading.Event()
        self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        if read_stdin:
            threading.Thread(target=self._read_stdin, name="voice-train-stdin", daemon=True).start()

    def _on_interrupt(self, signum, frame) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        print("stopping after this step (Ctrl+C again to stop at once)...", file=sys.stderr, flush=True)
        self.event.set()

    def _read_stdin(self) -> None:
        for line in sys.stdin:
            if line.strip() == "cancel":
                self.event.set()
                return
        # stdin closed: the app that started this run is gone; stop with a checkpoint rather than run on unseen.
        self.event.set()

    def __call__(self) -> bool:
        return self.event.is_set()

    def close(self) -> None:
        signal.signal(signal.SIGINT, self._previous)


class Reporter:
    def __init__(self, json_lines: bool) -> None:
        self.json_lines = json_lines
        self._last_line = 0.0

    def __call__(self, event: dict) -> None:
        if self.json_lines:
            print(json.dumps(event, ensure_ascii=False), flush=True)
        line = _human(event)
        now = time.monotonic()
        if line and (event["event"] != "step" or now - self._last_line >= 1.0 or event["step"] == event["steps"]):
            self._last_line = now
            print(line, file=sys.stderr, flush=True)


def _human(event: dict) -> str | None:
    kind = event["event"]
    if kind == "encode":
        return f"[encode] {event['done']}/{event['total']} clips" if event["done"] in (1, event["total"]) or event["done"] % 20 == 0 else None
    if kind == "start":
        return (f"[start] {event['clips']} clips ({event['minutes']:.1f} min, {event['held_out']} held out), "
                f"{event['steps']} steps, {event['precision']} base")
    if kind == "loaded":
        return f"[loaded] model ready in {event['seconds']:.1f} s" + (f", resuming at step {event['step']}" if event["step"] else "")
    if kind == "step":
        return (f"[step] {event['step']}/{event['steps']} loss {event['loss']:.3f} (text {event['text_loss']:.3f}, "
                f"audio {event['audio_loss']:.3f}), about {_duration(event['eta_seconds'])} left")
    if kind == "held_out":
        return f"[held-out] step {event['step']}: loss {event['loss']:.3f}"
    if kind == "preview":
        return f"[preview] {event['file']}"
    if kind == "checkpoint":
        return f"[checkpoint] step {event['step']}"
    if kind == "cancelled":
        return f"[stopped] at step {event['step']}; go on with --resume"
    if kind == "done":
        return f"[done] the voice is in {event['folder']}"
    if kind == "failed":
        return f"error: {event['message']}"
    return None


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 60} min {seconds % 60:02d} s" if seconds >= 60 else f"{seconds} s"


def resolve_training_model(args: argparse.Namespace) -> tuple[Path, str | None]:
    """The model folder to train on (with its audio tokenizer) and the model id the voice names."""
    from engine.model.store import fetch_audio_tokenizer, looks_like_repo_id, resolve_model

    if args.demo:
        from engine.chat.session import ensure_demo_model
        from engine.model.store import MIMI_CHECKPOINT
        from engine.model.tiny_checkpoint import write_audio_tokenizer

        folder = ensure_demo_model()
        if not (folder / MIMI_CHECKPOINT).is_file():
            write_audio_tokenizer(folder)
        return folder, None
    source = args.model or default_model_source()
    folder = fetch_audio_tokenizer(source, resolve_model(source))
    is_hub = looks_like_repo_id(source) and not Path(source).expanduser().exists()
    return folder, args.base_model or (source if is_hub else None)


def run_voice_train(args: argparse.Namespace) -> int:
    from engine.tools.reply import quiet_library_logs

    try:
        check_voice_train_args(args)
    except UserFacingError as error:
        return _fail(args, error, EXIT_BAD_INPUT)
    quiet_library_logs()
    import torch

    from engine.model.loading import default_device
    from engine.voices.dataset import load_training_clips
    from engine.voices.run import RunRequest, check_request, train_voice
    from engine.voices.trainer import TrainingOptions

    report = Reporter(args.json_progress)
    stop = StopRequests(read_stdin=args.json_progress)
    try:
        options = TrainingOptions(steps=args.steps, precision=args.precision,
                                  **({"rank": args.rank} if args.rank is not None else {}))
        device = torch.device(args.device) if args.device else default_device()
        try:
            model_folder, base_model = resolve_training_model(args)
            clips = load_training_clips(Path(args.data))
            request = RunRequest(clips, Path(args.out), model_folder, base_model, options, device, resume=args.resume,
                                 replace=args.replace)
            check_request(request)
        except UserFacingError as error:
            return _fail(args, error, EXIT_BAD_INPUT)
        try:
            record = train_voice(request, on_event=report, should_stop=stop)
        except UserFacingError as error:
            return _fail(args, error, EXIT_FAILED)
        except KeyboardInterrupt:
            return _fail(args, "stopped at once; the last checkpoint is kept (go on with --resume)", EXIT_STOPPED)
        return EXIT_STOPPED if record.status == "cancelled" else EXIT_DONE
    finally:
        stop.close()


def _fail(args: argparse.Namespace, error: UserFacingError | str, status: int) -> int:
    """One clear line on stderr; with --json-progress also the event the app translates (template and values)."""
    message = error.message if isinstance(error, UserFacingError) else error
    if getattr(args, "json_progress", False):
        event = {"event": "failed", "message": message, "exit": status, "template": getattr(error, "template", ""),
                 "values": getattr(error, "values", {})}
        print(json.dumps(event, ensure_ascii=False), flush=True)
    print(f"error: {message}", file=sys.stderr, flush=True)
    return status
