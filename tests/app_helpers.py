"""Helpers for the app tests (not fixtures in conftest.py, which belongs to the lead).

Importing this module sets the Qt platform to offscreen before PySide6 creates the application.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtWidgets import QApplication  # noqa: E402

from app.bridge import EngineBridge  # noqa: E402
from app.i18n import install_translator  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from engine import protocol as p  # noqa: E402
from engine.settings import LoadResult, Settings, load_settings  # noqa: E402


class ScriptedWorker(threading.Thread):
    """A stand-in engine thread for the window's unit tests: it records commands and can be told to
    post events or to die. (The end-to-end tests use the real `EngineWorker`.)"""

    instances: list["ScriptedWorker"] = []

    def __init__(self, commands: "queue.Queue[p.Command]", events: "queue.Queue[p.Event]") -> None:
        super().__init__(daemon=True, name="scripted-engine")
        self.commands = commands
        self.events = events
        self.received: list[p.Command] = []
        self.die_silently = threading.Event()
        self.on_command: Callable[[p.Command], list[p.Event]] | None = None
        ScriptedWorker.instances.append(self)

    def run(self) -> None:
        while not self.die_silently.is_set():
            try:
                command = self.commands.get(timeout=0.02)
            except queue.Empty:
                continue
            self.received.append(command)
            if self.on_command is not None:
                for event in self.on_command(command):
                    self.events.put(event)
            if isinstance(command, p.Shutdown):
                self.events.put(p.EngineStopped())
                return

    def post(self, *events: p.Event) -> None:
        for event in events:
            self.events.put(event)


def make_window(tmp_path: Path, *, settings: Settings | None = None, language: str = "ja",
                bridge: EngineBridge | None = None) -> MainWindow:
    """A main window on a scripted engine (or the given bridge), settings in tmp_path."""
    app = QApplication.instance()
    assert app is not None
    install_translator(app, language)
    settings_path = tmp_path / "settings.json"
    if settings is not None:
        from engine.settings import save_settings

        save_settings(settings, settings_path)
    loaded: LoadResult = load_settings(settings_path)
    return MainWindow(bridge or EngineBridge(ScriptedWorker), loaded, settings_path)


def commands_of(window: MainWindow, kind: type) -> list[p.Command]:
    return [c for c in window.bridge.sent if isinstance(c, kind)]
