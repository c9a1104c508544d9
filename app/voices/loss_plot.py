"""The loss curves of a training: the training loss at every step (a line) and the held-out clips' loss at each
evaluation (points joined by a line), against the step. Drawn with QPainter; the axes start at step 0 and loss 0."""

from __future__ import annotations

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen, QPolygonF
from PySide6.QtWidgets import QSizePolicy, QWidget

TRAIN_COLOR = QColor("#1565c0")
HELD_OUT_COLOR = QColor("#ef6c00")


class LossPlot(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.steps = 0  # the run's last step (the x axis' end); 0 until known
        self.training: list[tuple[int, float]] = []
        self.held_out: list[tuple[int, float]] = []
        self.setMinimumSize(260, 150)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self._describe()

    def clear(self) -> None:
        self.training.clear()
        self.held_out.clear()
        self.steps = 0
        self._changed()

    def set_steps(self, steps: int) -> None:
        self.steps = max(0, int(steps))
        self._changed()

    def add_training(self, step: int, loss: float) -> None:
        if self.training and step <= self.training[-1][0]:  # a resumed run repeats nothing; a new one starts over
            self.training = [point for point in self.training if point[0] < step]
        self.training.append((int(step), float(loss)))
        self._changed()

    def add_held_out(self, step: int, loss: float) -> None:
        self.held_out = [point for point in self.held_out if point[0] < step] + [(int(step), float(loss))]
        self._changed()

    def _changed(self) -> None:
        self._describe()
        self.update()

    def _describe(self) -> None:
        parts = [self.tr("Loss curves")]
        if self.training:
            parts.append(self.tr("training loss at step %1: %2").replace("%1", str(self.training[-1][0]))
                         .replace("%2", f"{self.training[-1][1]:.3f}"))
        if self.held_out:
            parts.append(self.tr("held-out loss at step %1: %2").replace("%1", str(self.held_out[-1][0]))
                         .replace("%2", f"{self.held_out[-1][1]:.3f}"))
        self.setAccessibleName(parts[0])
        self.setAccessibleDescription("; ".join(parts[1:]))
        self.setToolTip("\n".join(parts[1:]))

    def sizeHint(self) -> QSize:
        return QSize(420, 200)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        metrics = painter.fontMetrics()
        points = self.training + self.held_out
        top_loss = max((loss for _, loss in points), default=1.0) * 1.1 or 1.0
        last_step = max(self.steps, max((step for step, _ in points), default=0), 1)
        left = metrics.horizontalAdvance(f"{top_loss:.1f}") + 8
        legend_height = metrics.height() + 6
        area = QRectF(left, legend_height + 4, self.width() - left - 10, self.height() - legend_height - metrics.height() - 14)
        painter.fillRect(self.rect(), self.palette().base())
        painter.setPen(QPen(self.palette().mid().color(), 1))
        painter.drawRect(area)
        text = self.palette().text().color()
        painter.setPen(text)
        painter.drawText(QRectF(0, area.top() - metrics.height() / 2, left - 4, metrics.height()),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, f"{top_loss:.1f}")
        painter.drawText(QRectF(0, area.bottom() - metrics.height() / 2, left - 4, metrics.height()),
                         Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter, "0")
        painter.drawText(QRectF(area.left(), area.bottom() + 2, area.width(), metrics.height()),
                         Qt.AlignmentFlag.AlignLeft, "0")
        painter.drawText(QRectF(area.left(), area.bottom() + 2, area.width(), metrics.height()),
                         Qt.AlignmentFlag.AlignRight, self.tr("step %1").replace("%1", str(last_step)))

        def at(step: int, loss: float) -> QPointF:
            return QPointF(area.left() + area.width() * step / last_step,
                           area.bottom() - area.height() * max(0.0, loss) / top_loss)

        for series, color in ((self.training, TRAIN_COLOR), (self.held_out, HELD_OUT_COLOR)):
            if not series:
                continue
            painter.setPen(QPen(color, 1.6))
            painter.drawPolyline(QPolygonF([at(step, loss) for step, loss in series]))
            if series is self.held_out:
                painter.setBrush(color)
                for step, loss in series:
                    painter.drawEllipse(at(step, loss), 3, 3)
        x = area.left()
        for label, color in ((self.tr("training"), TRAIN_COLOR), (self.tr("held-out clips"), HELD_OUT_COLOR)):
            painter.setPen(QPen(color, 3))
            painter.drawLine(QPointF(x, legend_height / 2 + 2), QPointF(x + 16, legend_height / 2 + 2))
            painter.setPen(text)
            painter.drawText(QPointF(x + 20, legend_height / 2 + 2 + metrics.ascent() / 2 - 1), label)
            x += 20 + metrics.horizontalAdvance(label) + 18
        painter.end()
