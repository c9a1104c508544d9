"""Latency meter: the waterfall of the last turn and p50/p95 over the session.

Every stage is measured in milliseconds from the push-to-talk release (hands-free: from the end of speech,
the last voiced 10 ms frame, with the wait for the end-of-speech silence as its own first bar), so the bars of the waterfall
start at 0 and each one ends where that stage completed; the gaps between bar ends are the cost of
each step. "First sample audible" includes the output device's latency as reported by PortAudio.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPaintEvent
from PySide6.QtWidgets import QGridLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from engine.protocol import TurnMetrics

# (attribute of TurnMetrics, colour). The labels are in LatencyMeter.stage_names() for translation.
STAGES: tuple[tuple[str, str], ...] = (
    # Hands-free: the silence waited for before the take ended (the figures count from the end of speech,
    # so this wait is part of every bar below; push-to-talk turns show "—").
    ("end_of_speech_wait_ms", "#9e9e9e"),
    ("audio_encoded_ms", "#8e24aa"),
    ("prefill_done_ms", "#3949ab"),
    ("first_text_ms", "#00897b"),
    ("first_audio_frame_ms", "#f4511e"),
    ("first_audible_ms", "#c0ca33"),
)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (the same definition as numpy's default); None when empty."""
    data = sorted(values)
    if not data:
        return None
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


@dataclass
class _Bar:
    name: str
    ms: float | None
    color: str


class WaterfallChart(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bars: list[_Bar] = []
        self.setMinimumHeight(100)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)

    def set_bars(self, bars: list[_Bar]) -> None:
        self.bars = bars
        self.update()

    def sizeHint(self) -> QSize:
        return QSize(360, 110)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        fm = QFontMetrics(self.font())
        label_w = max([fm.horizontalAdvance(b.name) for b in self.bars] + [60]) + 8
        value_w = fm.horizontalAdvance("99999 ms") + 6
        area = QRectF(self.rect()).adjusted(label_w, 2, -value_w, -2)
        known = [b.ms for b in self.bars if b.ms is not None]
        scale_max = max(known + [1.0])
        n = max(1, len(self.bars))
        row_h = min(22.0, area.height() / n)
        for i, bar in enumerate(self.bars):
            top = area.top() + i * row_h
            painter.setPen(self.palette().text().color())
            painter.drawText(QRectF(0, top, label_w - 6, row_h), int(Qt.AlignmentFlag.AlignRight
                             | Qt.AlignmentFlag.AlignVCenter), bar.name)
            if bar.ms is None:
                painter.drawText(QRectF(area.left() + 4, top, 80, row_h), int(Qt.AlignmentFlag.AlignVCenter), "—")
                continue
            width = max(2.0, area.width() * bar.ms / scale_max)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(bar.color))
            painter.drawRoundedRect(QRectF(area.left(), top + 3, width, row_h - 6), 2, 2)
            painter.setPen(self.palette().text().color())
            painter.drawText(QRectF(area.left() + width + 4, top, value_w + 40, row_h),
                             int(Qt.AlignmentFlag.AlignVCenter), f"{bar.ms:.0f} ms")
        painter.end()


class StageName(QLabel):
    """A stage's name in the table: in a narrow panel it wraps between words ("First sample / audible"), never
    inside one. A Japanese name has no spaces, so it stays on one line: wrapped anywhere, it broke even before
    its last character (「完/了」「フレー/ム」). The panel keeps the width its names need (it scrolls instead)."""

    def __init__(self, color: str, name: str, parent: QWidget | None = None) -> None:
        super().__init__(f'<span style="color:{color}">■</span>&nbsp;{name}', parent)
        self.setWordWrap(True)
        # Where a line may break: at spaces, and after a hyphen ("End-of-speech").
        self.words = [word for word in re.split(r" +|(?<=-)", f"■\u00a0{name}") if word]

    def minimumSizeHint(self) -> QSize:  # noqa: N802 - as wide as its widest word
        hint = super().minimumSizeHint()
        margins = self.contentsMargins()
        widest = max(self.fontMetrics().horizontalAdvance(word) for word in self.words) + 1
        return QSize(max(hint.width(), widest + margins.left() + margins.right()), hint.height())


class LatencyMeter(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history: list[TurnMetrics] = []
        self.last: TurnMetrics | None = None
        # True from the start of a turn until its metrics arrive: "this turn" then shows that it is
        # being measured, not the previous turn's figures.
        self.measuring = False
        self.chart = WaterfallChart(self)
        # Numbers also as labels: readable by screen readers and by tests.
        self.table = QGridLayout()
        self.table.setHorizontalSpacing(6)
        self.table.setVerticalSpacing(1)
        headers = (self.tr("Since release"), self.tr("This turn"), self.tr("p50"), self.tr("p95"))
        self.start_header: QLabel | None = None  # "since release" / hands-free: "since you stopped speaking"
        for col, text in enumerate(headers):
            header = QLabel(f"<b>{text}</b>", self)
            self.start_header = self.start_header or header
            header.setWordWrap(True)  # like the stage names: two lines in a narrow window rather than cut
            self.table.addWidget(header, 0, col, Qt.AlignmentFlag.AlignRight if col else Qt.AlignmentFlag.AlignLeft)
        self.cells: dict[str, tuple[QLabel, QLabel, QLabel]] = {}
        for row, ((attr, color), name) in enumerate(zip(STAGES, self.stage_names()), start=1):
            name_label = StageName(color, name, self)
            self.table.addWidget(name_label, row, 0)
            cells = (QLabel("—", self), QLabel("—", self), QLabel("—", self))
            for col, cell in enumerate(cells, start=1):
                cell.setAlignment(Qt.AlignmentFlag.AlignRight)
                self.table.addWidget(cell, row, col)
            self.cells[attr] = cells
        self.turns_label = QLabel(self)
        self.turns_label.setWordWrap(True)
        # Times playback ran dry (the answer was made slower than it played): heard as gaps.
        self.underruns_label = QLabel(self)
        self.underruns_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.chart)
        layout.addLayout(self.table)
        layout.addWidget(self.turns_label)
        layout.addWidget(self.underruns_label)
        self._refresh()

    def stage_names(self) -> list[str]:
        return [
            self.tr("End-of-speech wait"),
            self.tr("Audio encoded"),
            self.tr("Prefill done"),
            self.tr("First text"),
            self.tr("First audio frame"),
            self.tr("First sample audible"),
        ]

    def set_hands_free(self, hands_free: bool) -> None:
        """Hands-free turns are measured from the end of speech, push-to-talk ones from the release."""
        text = self.tr("Since you stopped speaking") if hands_free else self.tr("Since release")
        if self.start_header is not None:
            self.start_header.setText(f"<b>{text}</b>")

    def start_turn(self) -> None:
        self.last = None
        self.measuring = True
        self._refresh()

    def add_turn(self, metrics: TurnMetrics) -> None:
        self.last = metrics
        self.measuring = False
        self.history.append(metrics)
        self._refresh()

    def clear(self) -> None:
        self.history.clear()
        self.last = None
        self.measuring = False
        self._refresh()

    def values(self, attr: str) -> list[float]:
        # Cancelled turns are kept out of the statistics: a barge-in cuts them short at random points.
        return [v for m in self.history if not m.cancelled and (v := getattr(m, attr)) is not None]

    @staticmethod
    def _fmt(ms: float | None) -> str:
        if ms is None:
            return "—"
        # From 10 s on (a slow CPU) in seconds: a figure is never wider than "9999 ms", so the panel's width (its
        # stage names stay on one line) keeps the window within 800 px.
        return f"{ms:.0f} ms" if ms < 9999.5 else f"{ms / 1000:.1f} s"

    def _refresh(self) -> None:
        names = self.stage_names()
        bars = []
        for (attr, color), name in zip(STAGES, names):
            ms = getattr(self.last, attr) if self.last is not None else None
            if attr != "end_of_speech_wait_ms" or ms is not None:  # a push-to-talk turn has no such wait
                bars.append(_Bar(name, ms, color))
            values = self.values(attr)
            this_cell, p50_cell, p95_cell = self.cells[attr]
            this_cell.setText("…" if self.measuring else self._fmt(ms))
            p50_cell.setText(self._fmt(percentile(values, 50)))
            p95_cell.setText(self._fmt(percentile(values, 95)))
        self.chart.set_bars(bars)
        counted = sum(1 for m in self.history if not m.cancelled)
        turns_text = self.tr("Turns measured: %1").replace("%1", str(counted))
        if self.last is not None and self.last.cancelled:
            turns_text += self.tr(" (the last answer was stopped and is not counted)")
        self.turns_label.setText(turns_text)
        this_turn = "…" if self.measuring else str(self.last.underruns) if self.last is not None else "—"
        total = sum(m.underruns for m in self.history)
        self.underruns_label.setText(self.tr("Playback underruns: %1 this turn, %2 in this conversation")
                                     .replace("%1", this_turn).replace("%2", str(total)))
        self.underruns_label.setStyleSheet("color: #c62828;" if total else "")
        self.underruns_label.setToolTip(self.tr("How often the speaker ran out of audio because the answer was "
                                                "generated slower than it played (heard as gaps)."))
