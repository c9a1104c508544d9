"""The settings dialog's 精度 section: 標準 (bf16) or 省メモリ・高速 (int8), each with what it costs on this card.

The figures are the engine's (`PrecisionInUse`, posted after every load: the memory each precision needs and the
card has free, and the weight bytes one audio frame reads); nothing here knows about models. The expected speed
is the bytes-per-frame ratio, which is what the real-time rate follows on the cards users own (bound by memory
bandwidth): where an answer's RTF was measured with the loaded precision, the other one's is that RTF scaled by
the ratio, labelled as an estimate.
"""

from __future__ import annotations

from PySide6.QtWidgets import QButtonGroup, QLabel, QRadioButton, QVBoxLayout, QWidget

from engine.protocol import PrecisionCost, PrecisionInUse

GB = 1e9
# int8 is recommended on cards with less memory than this (decimal GB: an "8 GB" card has 8 GiB, above it).
RECOMMEND_BELOW_BYTES = 8 * GB


def _gb(n: int) -> str:
    return f"{n / GB:.1f}"


def recommends_int8(status: PrecisionInUse | None) -> bool:
    """int8 is recommended on a card under 8 GB, or where bf16 does not fit and int8 does."""
    if status is None or status.total_bytes is None:
        return False
    costs = {c.precision: c for c in status.costs}
    fits_only_int8 = "int8" in costs and costs["int8"].fits and "bf16" in costs and not costs["bf16"].fits
    return status.total_bytes < RECOMMEND_BELOW_BYTES or fits_only_int8


class PrecisionBox(QWidget):
    """The dialog's 精度 tab: the two choices, each with its costs under it, and what a change does."""

    def __init__(self, precision: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bf16 = QRadioButton(self)
        self.int8 = QRadioButton(self)
        group = QButtonGroup(self)
        group.addButton(self.bf16)
        group.addButton(self.int8)
        (self.int8 if precision == "int8" else self.bf16).setChecked(True)
        self.bf16_cost = self._cost_label()
        self.int8_cost = self._cost_label()
        self.note = QLabel(self)
        self.note.setWordWrap(True)
        self.note.setStyleSheet("color: #666;")
        layout = QVBoxLayout(self)
        layout.setSpacing(4)
        for widget in (self.bf16, self.bf16_cost, self.int8, self.int8_cost):
            layout.addWidget(widget)
        layout.addSpacing(8)
        layout.addWidget(self.note)
        layout.addStretch(1)
        self.status: PrecisionInUse | None = None
        self.rtf: float | None = None
        self.set_status(None, None)

    def _cost_label(self) -> QLabel:
        label = QLabel(self)
        label.setWordWrap(True)
        label.setContentsMargins(22, 0, 0, 2)  # under its radio button's text
        return label

    def chosen(self) -> str:
        return "int8" if self.int8.isChecked() else "bf16"

    def set_status(self, status: PrecisionInUse | None, rtf: float | None) -> None:
        """The engine's figures after the last load, and the RTF measured with the loaded precision (or None)."""
        self.status, self.rtf = status, rtf
        recommended = recommends_int8(status)
        self.bf16.setText(self.tr("Standard (bf16)"))
        int8_name = self.tr("Memory-saving, faster (int8)")
        self.int8.setText(self.tr("%1 (recommended)").replace("%1", int8_name) if recommended else int8_name)
        costs = {c.precision: c for c in status.costs} if status is not None else {}
        gpu = status is not None and status.free_bytes is not None
        self.int8.setEnabled(status is None or gpu or self.int8.isChecked())
        notes = [self.tr("Changing the precision reloads the model. The first time int8 is chosen for a model, it is "
                         "checked against bf16 on this GPU, which makes that load longer.")]
        if recommended:
            notes.insert(0, self.tr("int8 is recommended on this card: it needs about half the memory for the "
                                    "weights and reads about half the bytes per frame."))
        if not costs:
            for label in (self.bf16_cost, self.int8_cost):
                label.setText("")
                label.hide()
            if status is None:
                notes.append(self.tr("What each costs on this card is shown once a model is loaded."))
            self.note.setText("\n\n".join(notes))
            return
        for option, label in (("bf16", self.bf16_cost), ("int8", self.int8_cost)):
            cost = costs.get(option)
            label.setVisible(cost is not None)
            if cost is not None:
                label.setText(self._cost_text(status, cost, costs.get("bf16")))
                label.setStyleSheet("" if cost.fits else "color: #c62828;")
        self.note.setText("\n\n".join(notes))

    def _cost_text(self, status: PrecisionInUse, cost: PrecisionCost, bf16: PrecisionCost | None) -> str:
        parts = []
        if status.free_bytes is None:
            if cost.precision == "int8":
                return self.tr("Needs an NVIDIA GPU.")
        elif cost.fits:
            parts.append(self.tr("Memory: %1 GB needed, %2 GB free").replace("%1", _gb(cost.need_bytes))
                         .replace("%2", _gb(status.free_bytes)))
        else:
            parts.append(self.tr("Does not fit on this card: %1 GB needed, %2 GB free")
                         .replace("%1", _gb(cost.need_bytes)).replace("%2", _gb(status.free_bytes)))
        if cost.precision == "bf16" or bf16 is None or bf16.frame_bytes <= 0:
            parts.append(self.tr("1 frame reads %1 GB").replace("%1", f"{cost.frame_bytes / GB:.2f}"))
        else:
            share = round(100 * cost.frame_bytes / bf16.frame_bytes)
            parts.append(self.tr("1 frame reads %1 GB (%2% of bf16)").replace("%1", f"{cost.frame_bytes / GB:.2f}")
                         .replace("%2", str(share)))
        loaded = next((c for c in status.costs if c.precision == status.precision), None)
        if self.rtf is not None and loaded is not None and loaded.frame_bytes > 0:
            if cost.precision == status.precision:
                parts.append(self.tr("RTF %1 (measured)").replace("%1", f"{self.rtf:.2f}"))
            else:
                expected = self.rtf * cost.frame_bytes / loaded.frame_bytes
                parts.append(self.tr("RTF about %1 (estimate)").replace("%1", f"{expected:.2f}"))
        return self.tr(" · ").join(parts)
