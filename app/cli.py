"""The `voicechat` command: the desktop app, or a subcommand (reply, bench) without any window.

Qt is imported only when the window is started, so `voicechat reply` and `voicechat bench` work on
machines without a display.
"""

from __future__ import annotations

import argparse
import sys
import typing


class _OneLineErrors(argparse.ArgumentParser):
    """A bad flag is one clear line (`error: ...`) and exit status 2, like every other reply error."""

    def error(self, message: str) -> "typing.NoReturn":
        self.exit(2, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    from engine.tools.reply import add_precision_argument, add_reply_arguments

    parser = argparse.ArgumentParser(prog="voicechat", description="Push-to-talk voice chat with LFM2.5-Audio-1.5B-JP.")
    parser.add_argument("--selftest", action="store_true", help="check this PC, run one demo turn, write a diagnostics file")
    parser.add_argument("--demo", action="store_true", help="start the app on the tiny random demo model")
    # The app's own precision is its 精度 setting; the flag is for the self-test's demo turn.
    add_precision_argument(parser, default=None, help_suffix=" for --selftest's demo turn")
    sub = parser.add_subparsers(dest="command", parser_class=_OneLineErrors)
    reply = sub.add_parser("reply", help="answer one WAV file with a spoken WAV file")
    add_reply_arguments(reply)
    voice_train = sub.add_parser("voice-train", help="train a LoRA voice from recorded or imported speech (GPU)")
    from engine.tools.voice_train import add_voice_train_arguments

    add_voice_train_arguments(voice_train)
    bench = sub.add_parser("bench", help="measure eager / recipe / engine speed side by side (GPU)")
    bench.add_argument("--model", default=None, help="a real model folder (default: full-size random weights)")
    bench.add_argument("--out", default=None,
                       help="where to write bench.json and bench.md (default: a new folder bench/results/run-<UTC date>-<commit>)")
    bench.add_argument("--modes", default="engine,engine-int8,recipe,eager", help="comma-separated modes, run in this order")
    bench.add_argument("--long-turns", type=int, default=48, help="turns of the long-conversation scenario (0: skip it)")
    bench.add_argument("--no-small-cards", dest="small_cards", action="store_false",
                       help="skip the small_cards section (a full-size checkpoint on disk opened under 6/8 GB caps)")
    bench.add_argument("--no-voice-training", dest="voice_training", action="store_false",
                       help="skip the voice_training section (LoRA training speed and memory under 6/8 GB caps, the learning check)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, qt_args = parser.parse_known_args(argv)
    if args.selftest:
        from engine.tools.selftest import main as selftest_main

        return selftest_main(args.precision or "bf16")  # sets up its own console, log file and excepthook
    if args.precision is not None and args.command is None:
        print("error: --precision goes with --selftest or reply; the app's precision is chosen in its settings "
              "(Settings > Precision)", file=sys.stderr)
        return 2
    from engine.logs import install_excepthook, setup_logging

    # Every run logs to a file in the platform log folder, start-up failures included.
    setup_logging()
    install_excepthook(None)
    if args.command in ("reply", "bench", "voice-train") and qt_args:
        print(f"error: unrecognized arguments: {' '.join(qt_args)} (see `voicechat {args.command} --help`)", file=sys.stderr)
        return 2
    if args.command == "reply":
        from engine.tools.reply import run_reply

        return run_reply(args)
    if args.command == "voice-train":
        from engine.tools.voice_train import run_voice_train

        return run_voice_train(args)
    if args.command == "bench":
        from engine.bench import run_bench

        return run_bench(args)
    from app.main import run_gui

    return run_gui([sys.argv[0], *qt_args] + (["--demo"] if args.demo else []))


if __name__ == "__main__":
    sys.exit(main())
