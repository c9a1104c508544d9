"""Small status widgets: engine state, input level, live RTF, context gauge."""

from __future__ import annotations

import math
import time

from PySide6.QtCore import QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QFont, QPainter, QPaintEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QSizePolicy, QWidget

from engine.protocol import EngineState

STATE_COLORS: dict[EngineState, str] = {
    EngineState.LOADING: "#9e9e9e",
    EngineState.IDLE: "#2e7d32",
    EngineState.RECORDING: "#c62828",
    EngineState.THINKING: "#ef6c00",
    EngineState.SPEAKING: "#1565c0",
    EngineState.NO_MODEL: "#6d4c41",
    EngineState.TRAINING: "#6a1b9a",
}


class StateIndicator(QWidget):
    """A coloured dot and the state's name (読み込み中 / 待機中 / 録音中 / 考え中 / 話し中 / 声を学習中)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._state = EngineState.LOADING
        self.hands_free = False  # hands-free: "Listening" / "Hearing you" instead of "Ready" / "Recording"
        self.muted = False
        self._dot = QLabel(self)
        self._dot.setFixedSize(18, 18)
        self.label = QLabel(self)
        font = self.label.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.label.setFont(font)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self._dot)
        layout.addWidget(self.label)
        layout.addStretch(1)
        self.set_state(EngineState.LOADING)

    MUTED_COLOR = "#757575"

    def state_text(self, state: EngineState) -> str:
        text = self._state_text(state)
        if self.hands_free and self.muted and state in (EngineState.THINKING, EngineState.SPEAKING):
            return self.tr("%1 · microphone muted").replace("%1", text)
        return text

    def _state_text(self, state: EngineState) -> str:
        # Spelled out (not a dict built at import time) so lupdate sees every string.
        if state is EngineState.LOADING:
            return self.tr("Loading")
        if state is EngineState.IDLE and self.hands_free:
            return self.tr("Microphone muted") if self.muted else self.tr("Listening")
        if state is EngineState.RECORDING and self.hands_free:
            return self.tr("Hearing you")
        if state is EngineState.IDLE:
            return self.tr("Ready")
        if state is EngineState.RECORDING:
            return self.tr("Recording")
        if state is EngineState.THINKING:
            return self.tr("Thinking")
        if state is EngineState.SPEAKING:
            return self.tr("Speaking")
        if state is EngineState.TRAINING:
            return self.tr("Training a voice (the conversation pauses)")
        return self.tr("No model")

    @property
    def state(self) -> EngineState:
        return self._state

    def set_hands_free(self, hands_free: bool, muted: bool) -> None:
        self.hands_free, self.muted = hands_free, muted
        self.set_state(self._state)

    def set_state(self, state: EngineState) -> None:
        self._state = state
        self.label.setText(self.state_text(state))
        color = STATE_COLORS[state]
        if self.hands_free and self.muted:  # grey, or the state's colour in a grey ring: never "listening" green
            color = self.MUTED_COLOR if state is EngineState.IDLE else color
            self._dot.setStyleSheet(f"background: {color}; border-radius: 9px; border: 3px solid {self.MUTED_COLOR};")
        else:
            self._dot.setStyleSheet(f"background: {color}; border-radius: 9px;")
        self.setAccessibleName(self.label.text())


class LevelMeter(QWidget):
    """Microphone level in dBFS (-60 … 0) with a peak hold, and a red end when the input clips."""

    FLOOR_DB = -60.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.rms_db = self.FLOOR_DB
        self.peak_db = self.FLOOR_DB
        self._hold_db = self.FLOOR_DB
        self._hold_since = 0.0
        self._clip_until = 0.0
        self.setMinimumHeight(16)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        # The engine only sends levels while audio arrives; let the bar fall back to silence when
        # the events stop (device closed, engine busy) instead of freezing on the last value.
        self._decay = QTimer(self)
        self._decay.setInterval(100)
        self._decay.timeout.connect(self._on_decay)
        self._last_update = 0.0
        self._decay.start()

    @staticmethod
    def to_db(linear: float) -> float:
        if linear <= 1e-6:
            return LevelMeter.FLOOR_DB
        return max(LevelMeter.FLOOR_DB, min(0.0, 20.0 * math.log10(linear)))

    def set_level(self, rms: float, peak: float, clipping: bool) -> None:
        now = time.monotonic()
        self._last_update = now
        self.rms_db = self.to_db(rms)
        self.peak_db = self.to_db(peak)
        if self.peak_db >= self._hold_db or now - self._hold_since > 1.5:
            self._hold_db = self.peak_db
            self._hold_since = now
        if clipping:
            self._clip_until = now + 1.0
        self.setToolTip(self.tr("Input level: %1 dBFS (peak %2 dBFS)")
                        .replace("%1", f"{self.rms_db:.0f}").replace("%2", f"{self.peak_db:.0f}"))
        self.update()

    @property
    def clipping(self) -> bool:
        return time.monotonic() < self._clip_until

    def _on_decay(self) -> None:
        if time.monotonic() - self._last_update > 0.3 and self.rms_db > self.FLOOR_DB:
            self.rms_db = max(self.FLOOR_DB, self.rms_db - 6.0)
            self.peak_db = max(self.FLOOR_DB, self.peak_db - 6.0)
            self._hold_db = max(self.FLOOR_DB, self._hold_db - 3.0)
            self.update()

    def sizeHint(self) -> QSize:
        return QSize(300, 18)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        rect = QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5)
        painter.setPen(QColor("#888"))
        painter.setBrush(QColor("#202020"))
        painter.drawRoundedRect(rect, 3, 3)

        def x_of(db: float) -> float:
            return rect.left() + rect.width() * (db - self.FLOOR_DB) / -self.FLOOR_DB

        # Green up to -12 dB, yellow to -3 dB, red above: the usual meter colouring.
        painter.setPen(Qt.PenStyle.NoPen)
        inner = rect.adjusted(2, 2, -2, -2)
        level_x = x_of(self.rms_db)
        for lo, hi, color in ((-60.0, -12.0, "#43a047"), (-12.0, -3.0, "#fdd835"), (-3.0, 0.0, "#e53935")):
            left = max(inner.left(), x_of(lo))
            right = min(level_x, x_of(hi))
            if right > left:
                painter.setBrush(QColor(color))
                painter.drawRect(QRectF(left, inner.top(), right - left, inner.height()))
        hold_x = x_of(self._hold_db)
        painter.setBrush(QColor("#ffffff"))
        painter.drawRect(QRectF(hold_x - 1, inner.top(), 2, inner.height()))
        if self.clipping:
            painter.setBrush(QColor("#ff1744"))
            painter.drawRect(QRectF(inner.right() - 8, inner.top(), 8, inner.height()))
        painter.end()


class RtfReadout(QLabel):
    """Real-time factor (generation time / audio time): below 1.0 the answer is made faster than it plays."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        font = QFont(self.font())
        font.setPointSizeF(font.pointSizeF() * 1.6)
        font.setBold(True)
        self.setFont(font)
        self.value: float | None = None
        self.live = False
        self.setToolTip(self.tr("Real-time factor: generation time divided by the length of the audio. "
                                "Below 1.0 the answer is generated faster than it is spoken."))
        self.clear_value()

    def clear_value(self) -> None:
        self.value = None
        self.live = False
        self.setText(self.tr("RTF —"))
        self.setStyleSheet("")

    def set_stopped(self) -> None:
        """The answer was stopped: its generation time over a fraction of a second of audio is no RTF."""
        self.value = None
        self.live = False
        self.setText(self.tr("RTF — (stopped)"))
        self.setStyleSheet("color: #757575;")

    def set_rtf(self, rtf: float | None, *, live: bool) -> None:
        if rtf is None:
            self.clear_value()
            return
        self.value = rtf
        self.live = live
        text = self.tr("RTF %1").replace("%1", f"{rtf:.2f}")
        if live:
            text += " ●"  # a dot while the figure is still moving
        self.setText(text)
        self.setStyleSheet("color: #2e7d32;" if rtf < 1.0 else "color: #c62828;")


class ContextGauge(QProgressBar):
    """How much of the model's context window the conversation fills."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.used = 0
        self.capacity = 0
        self.setRange(0, 1)
        self.setValue(0)
        self.setTextVisible(True)
        self.setMinimumWidth(220)
        self._refresh()

    def set_usage(self, used: int, capacity: int) -> None:
        self.used, self.capacity = used, capacity
        self._refresh()

    def _refresh(self) -> None:
        capacity = max(1, self.capacity)
        self.setRange(0, capacity)
        self.setValue(min(self.used, capacity))
        self.setFormat(self.tr("Context %1 / %2 tokens").replace("%1", str(self.used))
                       .replace("%2", str(self.capacity) if self.capacity else "—"))
        ratio = self.used / capacity
        chunk = "#43a047" if ratio < 0.7 else "#fb8c00" if ratio < 0.9 else "#e53935"
        self.setStyleSheet("QProgressBar { border: 1px solid #9e9e9e; border-radius: 4px; text-align: center; "
                           "background: #fafafa; } "
                           f"QProgressBar::chunk {{ background: {chunk}; border-radius: 3px; }}")
