"""The voice menu (the toolbar's 「声」 button): the model's own voice, every voice in the app's voices folder with
its minutes of speech, the current voice checked; a folder chosen by hand; the wizard; a shared voice imported or
the current one exported. Rebuilt each time it opens, from the folders themselves."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QActionGroup
from PySide6.QtWidgets import QMenu, QWidget

from engine import paths
from engine.voices.voice_card import installed_voices


def same_folder(a: str | Path | None, b: str | Path | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    try:
        return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()
    except OSError:
        return str(a) == str(b)


class VoiceMenu(QMenu):
    chosen = Signal(object)  # a voice folder (str), or None for the model's own voice
    choose_folder = Signal()
    create = Signal()
    import_zip = Signal()
    export = Signal()

    def __init__(self, current: Callable[[], str | None], parent: QWidget | None = None, *, tools: bool = True) -> None:
        """`current`: the voice in use (None: the model's own). Without `tools` only the choices (the settings
        dialog's list)."""
        super().__init__(parent)
        self.current = current
        self.tools = tools
        self.aboutToShow.connect(self.rebuild)
        self.rebuild()

    def rebuild(self) -> None:
        self.clear()
        current = self.current()
        group = QActionGroup(self)
        group.setExclusive(True)

        def choice(text: str, folder: str | None, tooltip: str = "") -> QAction:
            action = self.addAction(text)
            action.setCheckable(True)
            action.setChecked(same_folder(folder, current))
            action.setToolTip(tooltip)
            action.setData(folder)
            action.triggered.connect(lambda _checked=False, f=folder: self.chosen.emit(f))
            group.addAction(action)
            return action

        choice(self.tr("The model's own voice"), None)
        listed = False
        voices = installed_voices(paths.voices_dir())
        names = [voice.name for voice in voices]
        for voice in voices:
            # Two voices with one name (a voice and its shared copy imported back): their folders tell them apart.
            text = voice.name if names.count(voice.name) == 1 else f"{voice.name} — {voice.folder.name}"
            if voice.card is not None:
                text = self.tr("%1 (%2 min of speech)").replace("%1", text).replace("%2", f"{voice.card.minutes:.1f}")
            choice(text, str(voice.folder), str(voice.folder))
            listed = listed or same_folder(voice.folder, current)
        if current is not None and not listed:  # a folder chosen elsewhere: shown, so that the check mark is somewhere
            choice(Path(current).name or current, current, current)
        self.setToolTipsVisible(True)
        if not self.tools:
            return
        self.addSeparator()
        self.addAction(self.tr("Choose a folder…")).triggered.connect(self.choose_folder.emit)
        self.addSeparator()
        self.addAction(self.tr("Create a voice…")).triggered.connect(self.create.emit)
        self.addAction(self.tr("Import a voice…")).triggered.connect(self.import_zip.emit)
        export = self.addAction(self.tr("Export this voice…"))
        export.setEnabled(current is not None)
        export.triggered.connect(self.export.emit)

    def choice_actions(self) -> list[QAction]:
        return [action for action in self.actions() if action.isCheckable()]
