"""A message strip at the top of the window: errors are shown here, never raised at the user.

Not a modal QMessageBox: a modal box would block interaction (and keyboard push-to-talk) until
dismissed, and several engine errors in a row would stack up boxes.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

STYLES = {
    "error": "QFrame#banner { background: #ffebee; border: 1px solid #e57373; border-radius: 6px; }",
    "warning": "QFrame#banner { background: #fff8e1; border: 1px solid #ffb74d; border-radius: 6px; }",
    "info": "QFrame#banner { background: #e8f5e9; border: 1px solid #81c784; border-radius: 6px; }",
}


class MessageBanner(QFrame):
    action_triggered = Signal(str)  # the action id given to show()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("banner")
        self.level = "info"
        self.message = QLabel(self)
        self.message.setWordWrap(True)
        self.message.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action_button = QPushButton(self)
        self.action_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.action_button.clicked.connect(lambda: self.action_triggered.emit(self._action_id))
        self.close_button = QToolButton(self)
        self.close_button.setText("✕")
        self.close_button.setToolTip(self.tr("Dismiss"))
        self.close_button.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.close_button.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self.message, 1)
        layout.addWidget(self.action_button)
        layout.addWidget(self.close_button)
        self._action_id = ""
        self.hide()

    def show_message(self, level: str, text: str, *, details: str = "", action_id: str = "",
                     action_text: str = "") -> None:
        self.level = level
        self.setStyleSheet(STYLES.get(level, STYLES["info"]))
        self.message.setText(text)
        # Technical details (a traceback) go to the tooltip: there for a bug report, not in the way.
        self.message.setToolTip(details)
        self._action_id = action_id
        self.action_button.setVisible(bool(action_id))
        self.action_button.setText(action_text)
        self.show()

    @property
    def text(self) -> str:
        return "" if self.isHidden() else self.message.text()
