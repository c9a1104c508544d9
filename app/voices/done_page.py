"""The last page: the finished voice (its card), its preview, 「この声を使う」 (switched in like any voice, and listed in
the voice menu from now on) and an export as one zip to share."""

from __future__ import annotations

from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout

from engine.protocol import PlayClip
from engine.voices.voice_card import PREVIEW_FILE, VoiceCard

from app.voices.pages import WizardPage


class DonePage(WizardPage):
    def __init__(self, wizard) -> None:  # noqa: ANN001
        super().__init__(wizard)
        self.setTitle(self.tr("The voice is ready"))
        self.intro.setText(self.tr("It is in the voice menu (声) from now on, like any other voice."))
        self.card_label = QLabel(self)
        self.card_label.setWordWrap(True)
        self.use_button = QPushButton(self.tr("&Use this voice"), self)
        self.play_button = QPushButton(self.tr("&Play its preview"), self)
        self.export_button = QPushButton(self.tr("&Export…"), self)
        self.use_status = QLabel(self)
        self.use_status.setWordWrap(True)
        for button in (self.use_button, self.play_button, self.export_button):
            button.setAutoDefault(False)
        self.use_button.clicked.connect(self.use)
        self.play_button.clicked.connect(self.play)
        self.export_button.clicked.connect(lambda: self.voice_wizard.host.export_voice(str(self.project.out_dir)))
        buttons = QHBoxLayout()
        for button in (self.use_button, self.play_button, self.export_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.addWidget(self.intro)
        layout.addWidget(self.card_label)
        layout.addLayout(buttons)
        layout.addWidget(self.use_status)
        layout.addWidget(self.error_label)
        layout.addStretch(1)
        self.setFinalPage(True)

    def initializePage(self) -> None:  # noqa: N802
        self.show_error("")
        self.use_status.clear()
        card = VoiceCard.read(self.project.out_dir)
        if card is None:
            self.card_label.setText(self.tr("The voice %1 is in %2.").replace("%1", self.project.name)
                                    .replace("%2", str(self.project.out_dir)))
        else:
            text = (self.tr("%1: trained on %2 min of speech (%3 clips) in %4 steps.").replace("%1", card.name)
                    .replace("%2", f"{card.minutes:.1f}").replace("%3", str(card.clips)).replace("%4", str(card.steps)))
            if card.held_out_loss is not None:
                text += " " + self.tr("Loss on the held-out clips: %1.").replace("%1", f"{card.held_out_loss:.3f}")
            self.card_label.setText(text)
        self.play_button.setEnabled((self.project.out_dir / PREVIEW_FILE).is_file())

    def use(self) -> None:
        self.voice_wizard.host.choose_voice(str(self.project.out_dir))
        self.use_status.setText(self.tr("Switching to the voice… the status bar shows it once the model speaks with it."))

    def play(self) -> None:
        self.send(PlayClip(str(self.project.out_dir / PREVIEW_FILE)))
