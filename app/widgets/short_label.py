"""A one-line label with a short form: the whole text where it fits, the short text where it does not (a narrow
window's status bar), never a text cut at the side. The whole text is always its tooltip."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget


class ShortLabel(QLabel):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.full_text = ""
        self.short_text = ""

    def set_texts(self, full: str, short: str = "") -> None:
        self.full_text, self.short_text = full, short or full
        self.setToolTip(full if self.short_text != full else "")
        self._choose()
        self.updateGeometry()

    def clear(self) -> None:
        self.set_texts("")

    def _width_of(self, text: str) -> int:
        margins = self.contentsMargins()
        return self.fontMetrics().horizontalAdvance(text) + margins.left() + margins.right() + 2 * self.margin()

    def sizeHint(self) -> QSize:  # noqa: N802 - room for the whole text
        return QSize(self._width_of(self.full_text), super().sizeHint().height())

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - the short text is the least it needs
        return QSize(self._width_of(self.short_text), super().minimumSizeHint().height())

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._choose()

    def _choose(self) -> None:
        text = self.full_text if self.width() >= self._width_of(self.full_text) else self.short_text
        if text != self.text():
            self.setText(text)
