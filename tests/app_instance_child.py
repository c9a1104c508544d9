"""A real VoiceChat start for tests/test_app_careful_user.py's single-instance tests.

    python tests/app_instance_child.py

runs `app.main.run_gui` (the app's own start-up) on the scripted engine of tests/app_helpers.py, so it
loads no model. It prints READY once its window is shown and ACTIVATED each time its window is brought
to the front, and flushes, so the parent can follow it. The user folders come from XDG_* variables.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import app_helpers  # noqa: E402 - sets the offscreen platform first
from PySide6.QtCore import QTimer  # noqa: E402

from app import main  # noqa: E402
from app.bridge import EngineBridge  # noqa: E402
from app.main_window import MainWindow  # noqa: E402


def _say(text: str) -> None:
    print(text, flush=True)


main.EngineBridge = lambda: EngineBridge(app_helpers.ScriptedWorker)  # type: ignore[assignment]
_original_show = MainWindow.show


def _show(self: MainWindow) -> None:
    _original_show(self)
    QTimer.singleShot(0, lambda: _say("READY"))


MainWindow.show = _show  # type: ignore[method-assign]
if hasattr(MainWindow, "bring_to_front"):
    _bring = MainWindow.bring_to_front

    def _bring_to_front(self: MainWindow) -> None:
        _bring(self)
        _say("ACTIVATED")

    MainWindow.bring_to_front = _bring_to_front  # type: ignore[method-assign]

sys.exit(main.run_gui([sys.argv[0]]))
