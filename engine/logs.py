"""Logging to a file in the platform log dir, and a last-resort handler for unhandled exceptions.

The installed app is a windowed (console-less) PyInstaller bundle: on Windows `sys.stdout` and
`sys.stderr` are None there, so anything not written to a file is lost. `setup_logging()` therefore
always writes to a rotating file, and adds a stderr handler only when a stderr exists.

This module is plain Python (no Qt): the Qt dialog for crashes lives in `app/crash.py` and is
passed in as a callback.
"""

from __future__ import annotations

import faulthandler
import logging
import logging.handlers
import os
import platform
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO

from engine import paths

APP_NAME = paths.APP_NAME
LOG_FILE_NAME = "voicechat.log"
# Native crashes (a segfault in a CUDA or PortAudio library) never reach Python's excepthook;
# faulthandler dumps the Python stacks of all threads to this file instead. It is a separate file
# because faulthandler writes to a raw file descriptor: sharing the rotating log would break
# rotation on Windows (an open file cannot be renamed there).
NATIVE_CRASH_FILE_NAME = "native-crash.log"
MAX_LOG_BYTES = 5 * 1024 * 1024
LOG_BACKUPS = 3
LOG_FORMAT = "%(asctime)s %(levelname)-8s [%(threadName)s] %(name)s: %(message)s"

logger = logging.getLogger("voicechat")

# Marks the handlers this module added, so that a second setup_logging() replaces them instead of
# writing every line twice (tests and the self-test may set up logging more than once).
_HANDLER_MARK = "_voicechat_handler"
_state_lock = threading.Lock()
_log_path: Path | None = None
_native_crash_file: IO[str] | None = None


def default_log_dir() -> Path:
    """The per-user log folder, e.g. %LOCALAPPDATA%\\VoiceChat\\VoiceChat\\Logs on Windows."""
    return paths.log_dir()


def current_log_path() -> Path | None:
    """The file `setup_logging()` writes to, or None before it was called."""
    return _log_path


def _usable_log_dir(preferred: Path) -> Path:
    """`preferred` if it can be created and written, else a folder in the temp dir.

    A log that cannot be opened must not stop the app from starting (e.g. a roaming profile on a
    full or read-only share); the temp dir is the one place that is practically always writable.
    """
    for candidate in (preferred, Path(tempfile.gettempdir()) / APP_NAME / "log"):
        try:
            candidate.mkdir(parents=True, exist_ok=True)
            probe = candidate / ".write-test"
            probe.write_text("ok", encoding="utf-8")
            probe.unlink()
            return candidate
        except OSError:
            continue
    raise OSError(f"no writable log folder (tried {preferred} and the temp dir)")


def _not_library_chatter(record: logging.LogRecord) -> bool:
    """Drop a library's informational lines logged through the root logger (liquid-audio's conformer
    logs "PADDING: 0" each time a model loads, with `logging.info`): they say nothing to a reader of
    the log. Its warnings and errors stay, as does everything logged by name."""
    if record.name != "root" or record.levelno >= logging.WARNING:
        return True
    path = record.pathname.replace("\\", "/")
    return "/site-packages/" not in path and "/liquid_audio/" not in path


def setup_logging(app_name: str = APP_NAME, *, log_dir: Path | None = None, level: int = logging.INFO) -> Path:
    """Send all logging to a rotating file in the platform log dir (and to stderr if there is one).

    Returns the log file's path. Safe to call again: the handlers of an earlier call are replaced.
    """
    global _log_path, _native_crash_file
    directory = _usable_log_dir(log_dir if log_dir is not None else default_log_dir())
    path = directory / (LOG_FILE_NAME if app_name == APP_NAME else f"{app_name.lower()}.log")

    formatter = logging.Formatter(LOG_FORMAT)
    file_handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=MAX_LOG_BYTES, backupCount=LOG_BACKUPS, encoding="utf-8", delay=False
    )
    file_handler.setFormatter(formatter)
    file_handler.addFilter(_not_library_chatter)
    setattr(file_handler, _HANDLER_MARK, True)
    new_handlers: list[logging.Handler] = [file_handler]
    # A windowed frozen app has no stderr at all; writing to None would raise on every record.
    if sys.stderr is not None:
        console = logging.StreamHandler(sys.stderr)
        console.setFormatter(formatter)
        console.setLevel(logging.WARNING)
        setattr(console, _HANDLER_MARK, True)
        new_handlers.append(console)

    with _state_lock:
        _detach_locked()  # calling setup_logging() twice must not duplicate lines
        root = logging.getLogger()
        for handler in new_handlers:
            root.addHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(True)  # library warnings (torch, transformers) end up in the file too
        try:
            _native_crash_file = open(directory / NATIVE_CRASH_FILE_NAME, "a", encoding="utf-8")  # noqa: SIM115
            faulthandler.enable(file=_native_crash_file, all_threads=True)
        except OSError:
            logger.warning("could not enable the native crash log in %s", directory, exc_info=True)
        _log_path = path

    logger.info(
        "%s log started: pid=%d python=%s platform=%s frozen=%s executable=%s",
        app_name,
        os.getpid(),
        platform.python_version(),
        platform.platform(),
        bool(getattr(sys, "frozen", False)),
        sys.executable,
    )
    return path


def shutdown_logging() -> None:
    """Undo setup_logging(): remove its handlers, stop the native crash log, close the files."""
    global _log_path
    with _state_lock:
        _detach_locked()
        _log_path = None


def _detach_locked() -> None:
    """Remove this module's handlers and stop the native crash log (caller holds _state_lock)."""
    global _native_crash_file
    root = logging.getLogger()
    for handler in list(root.handlers):
        if getattr(handler, _HANDLER_MARK, False):
            root.removeHandler(handler)
            handler.close()
    if _native_crash_file is not None:
        faulthandler.disable()
        _native_crash_file.close()
        _native_crash_file = None


def format_exception(
    exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None, where: str
) -> str:
    """The text shown in the crash dialog and written to the log: where it happened plus the traceback."""
    body = "".join(traceback.format_exception(exc_type, exc, tb))
    return f"Unhandled exception in {where}:\n{body}".rstrip("\n")


def _flush_log() -> None:
    for handler in logging.getLogger().handlers:
        try:
            handler.flush()
        except Exception:  # noqa: BLE001 - flushing is best effort while crashing
            pass


def _report(
    show_dialog: Callable[[str], None] | None,
    exc_type: type[BaseException],
    exc: BaseException | None,
    tb: TracebackType | None,
    where: str,
) -> None:
    message = format_exception(exc_type, exc, tb, where)
    logger.critical("%s", message)
    # Flush before the dialog: the process may be killed while the dialog is open.
    _flush_log()
    if show_dialog is None:
        return
    try:
        show_dialog(message)
    except Exception:  # noqa: BLE001 - a broken dialog must not hide the original error
        logger.exception("the crash dialog itself failed")
        _flush_log()


def install_excepthook(show_dialog: Callable[[str], None] | None) -> None:
    """Log every unhandled exception (main thread, other threads) and pass it to `show_dialog`.

    `show_dialog` gets the text of `format_exception()`; it is called in the thread that failed,
    so a GUI callback must marshal itself to the GUI thread (see app/crash.py). Ctrl+C keeps
    Python's default behaviour, and a thread ending with SystemExit is not an error.
    """

    def sys_hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            sys.__excepthook__(exc_type, exc, tb)
            return
        _report(show_dialog, exc_type, exc, tb, "the main thread")

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if issubclass(args.exc_type, SystemExit):
            return
        name = args.thread.name if args.thread is not None else "an unknown thread"
        _report(show_dialog, args.exc_type, args.exc_value, args.exc_traceback, f"thread {name!r}")

    def unraisable_hook(unraisable: sys.UnraisableHookArgs) -> None:
        # Errors in __del__ or garbage collection: worth a log line, not a dialog.
        text = "".join(
            traceback.format_exception(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback)
        )
        logger.error("Unraisable exception (%s): %s", unraisable.err_msg or "", text.rstrip("\n"))

    sys.excepthook = sys_hook
    threading.excepthook = thread_hook
    sys.unraisablehook = unraisable_hook


def attach_parent_console() -> bool:
    """Windows only: let a console-less exe started from cmd/PowerShell print to that console.

    `VoiceChat.exe --selftest` is a GUI-subsystem program, so it gets no stdout; attaching to the
    parent's console (if there is one) and opening CONOUT$ makes its summary visible. Does nothing
    where stdout/stderr already exist (console build, output redirected to a file) or off Windows.
    Returns True when a console was attached.
    """
    if sys.platform != "win32" or (sys.stdout is not None and sys.stderr is not None):
        return False
    import ctypes

    attach_parent_process = ctypes.c_uint32(-1 & 0xFFFFFFFF)  # ATTACH_PARENT_PROCESS = (DWORD)-1
    if not ctypes.windll.kernel32.AttachConsole(attach_parent_process):  # type: ignore[attr-defined]
        return False
    try:
        # CPython opens CONOUT$ through its console writer, which takes UTF-8 and writes wide
        # characters, so Japanese text shows correctly whatever the console's code page is.
        stream = open("CONOUT$", "w", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
    except OSError:
        return False
    if sys.stdout is None:
        sys.stdout = stream
    if sys.stderr is None:
        sys.stderr = stream
    return True
