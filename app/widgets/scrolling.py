"""A scroll area that scrolls only up and down: never narrower than its content, so nothing in it is
ever cut at the side (there is no sideways scrolling to reach it)."""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


class VerticalScrollArea(QScrollArea):
    def __init__(self, content: QWidget, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(content)
        content.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # the content's minimum width may have changed (new text, new values)
        return super().eventFilter(watched, event)

    def _content_width(self) -> int:
        content = self.widget()
        width = content.minimumSizeHint().width() if content is not None else 0
        margins = self.contentsMargins()
        return width + self.verticalScrollBar().sizeHint().width() + margins.left() + margins.right()

    def minimumSizeHint(self) -> QSize:  # noqa: N802
        hint = super().minimumSizeHint()
        return QSize(max(hint.width(), self._content_width()), hint.height())

    def sizeHint(self) -> QSize:  # noqa: N802
        hint = super().sizeHint()
        content = self.widget()
        height = content.sizeHint().height() if content is not None else hint.height()
        return QSize(max(hint.width(), self._content_width()), max(hint.height(), height))
