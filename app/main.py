"""GUI entry point: `run_gui(argv)` is what `app/cli.py` calls."""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtWidgets import QApplication

from engine.constants import APP_AUTHOR, APP_NAME
from engine.settings import load_settings

from app.bridge import EngineBridge
from app.i18n import choose_language, install_translator
from app.main_window import MainWindow


def create_app(argv: list[str]) -> QApplication:
    app = QApplication.instance() or QApplication(argv)
    assert isinstance(app, QApplication)
    app.setApplicationName(APP_NAME)
    app.setOrganizationName(APP_AUTHOR)
    app.setApplicationDisplayName(APP_NAME)
    return app


def build_window(app: QApplication, settings_path: Path | None = None,
                 bridge: EngineBridge | None = None, *, demo: bool = False) -> MainWindow:
    """Load settings, install the language, make the window; the engine is not started yet."""
    loaded = load_settings(settings_path)
    install_translator(app, choose_language(preference=loaded.settings.language))
    window = MainWindow(bridge or EngineBridge(), loaded, settings_path)
    # `voicechat --demo`: the demo model for this run only; the saved choice is left alone.
    window.demo_override = demo
    return window


def run_gui(argv: list[str]) -> int:
    demo = "--demo" in argv
    argv = [a for a in argv if a != "--demo"]
    app = create_app(argv)
    from app.crash import CrashReporter
    from engine.logs import current_log_path, install_excepthook

    # An unhandled exception anywhere (GUI or engine thread) is logged and shown in a dialog.
    crash_reporter = CrashReporter(current_log_path())
    install_excepthook(crash_reporter.show)
    # One instance per user: a second start shows the running window instead of loading the model again.
    from app.single_instance import SingleInstance

    instance = SingleInstance()
    if not instance.claim():
        if instance.activate_running():
            return 0
        install_translator(app, choose_language(preference=load_settings().settings.language))
        from PySide6.QtWidgets import QMessageBox

        QMessageBox.warning(None, APP_NAME, QCoreApplication.translate(
            "SingleInstance", "VoiceChat is already running, but its window does not respond. Close it (or end "
            "it in the task manager), then start VoiceChat again."))
        return 1
    window = build_window(app, demo=demo)
    instance.activation_requested.connect(window.bring_to_front)
    window.show()
    # Start the engine once the window is on screen: the user sees 読み込み中 at once, and torch is
    # imported in the engine thread, not here.
    QTimer.singleShot(0, window.start_engine)
    exit_code = app.exec()
    instance.release()
    del crash_reporter
    return exit_code


if __name__ == "__main__":
    sys.exit(run_gui(sys.argv))
