"""Settings dialog. It edits a `Settings` value; the main window works out what changed and sends
only the commands needed (decoding changes apply from the next turn, a voice switch is done in
place, only a model/context change reloads)."""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QDir, Qt, Signal
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QKeySequenceEdit,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.voices.menu import VoiceMenu
from app.widgets.ptt import key_from_text, key_to_text
from app.widgets.precision import PrecisionBox
from engine import validation
from engine.protocol import Devices, SamplingSettings
from engine.settings import CONTEXT_CHOICES, DEFAULT_MODEL_SOURCE, DEFAULT_SYSTEM_PROMPT, Settings


def keys_clash(settings: Settings) -> bool:
    """Whether the mute key is the push-to-talk key (modifiers aside: the keyboard hook ignores them)."""
    mute = key_from_text(settings.mute_key)
    return mute is not None and mute == (key_from_text(settings.ptt_key) or Qt.Key.Key_Space)


class SettingsDialog(QDialog):
    """`demo_in_use`: the demo model runs though the settings name another (`voicechat --demo`); the model tab
    shows the demo, as the status bar does."""

    create_voice_requested = Signal()  # 「声を作る…」: the main window opens the voice wizard

    def __init__(self, settings: Settings, devices: Devices | None, parent: QWidget | None = None, *,
                 demo_in_use: bool = False) -> None:
        super().__init__(parent)
        self.setWindowTitle(self.tr("Settings"))
        self.setMinimumWidth(600)
        self.original = settings
        self.demo_in_use = demo_in_use
        self.tabs = QTabWidget(self)
        self.tabs.addTab(self._build_general_tab(settings), self.tr("General"))
        self.tabs.addTab(self._build_conversation_tab(settings), self.tr("Conversation"))
        self.tabs.addTab(self._build_audio_tab(settings, devices), self.tr("Audio"))
        self.tabs.addTab(self._build_model_tab(settings), self.tr("Model and voice"))
        # 精度: bf16 or int8, with what each costs on this card (the window hands the engine's figures over).
        self.precision = PrecisionBox(settings.precision, self)
        self.tabs.addTab(self.precision, self.tr("Precision"))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel,
                                   self)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        self.buttons = buttons
        self._check_prompt()
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs)
        layout.addWidget(buttons)

    # ------------------------------------------------------------------ tabs

    def _build_conversation_tab(self, s: Settings) -> QWidget:
        tab = QWidget(self)
        decoding = QGroupBox(self.tr("Decoding"), tab)
        self.sampling_radio = QRadioButton(self.tr("Sampling (more varied answers)"), decoding)
        self.greedy_radio = QRadioButton(self.tr("Greedy (always the most likely token; repeatable)"), decoding)
        group = QButtonGroup(decoding)
        group.addButton(self.sampling_radio)
        group.addButton(self.greedy_radio)
        (self.greedy_radio if s.sampling.greedy else self.sampling_radio).setChecked(True)

        def temp_box(value: float) -> QDoubleSpinBox:
            box = QDoubleSpinBox(decoding)
            box.setRange(validation.TEMPERATURE.low, validation.TEMPERATURE.high)
            box.setSingleStep(0.05)
            box.setDecimals(2)
            box.setValue(value)
            return box

        def topk_box(value: int, maximum: int) -> QSpinBox:
            box = QSpinBox(decoding)
            box.setRange(int(validation.TOP_K.low), maximum)
            box.setValue(value)
            return box

        self.audio_temperature = temp_box(s.sampling.audio_temperature)
        self.audio_top_k = topk_box(s.sampling.audio_top_k, int(validation.TOP_K.high))
        self.text_temperature = temp_box(s.sampling.text_temperature)
        self.text_top_k = topk_box(s.sampling.text_top_k, int(validation.TOP_K.high))
        form = QFormLayout()
        form.addRow(self.tr("Audio temperature"), self.audio_temperature)
        form.addRow(self.tr("Audio top-k"), self.audio_top_k)
        form.addRow(self.tr("Text temperature"), self.text_temperature)
        form.addRow(self.tr("Text top-k"), self.text_top_k)
        dec_layout = QVBoxLayout(decoding)
        dec_layout.addWidget(self.sampling_radio)
        dec_layout.addWidget(self.greedy_radio)
        dec_layout.addLayout(form)
        self.greedy_radio.toggled.connect(self._update_sampling_enabled)
        self._update_sampling_enabled()

        limits = QGroupBox(self.tr("Limits"), tab)
        self.max_answer = QDoubleSpinBox(limits)
        self.max_answer.setRange(validation.MAX_ANSWER_SECONDS.low, validation.MAX_ANSWER_SECONDS.high)
        self.max_answer.setDecimals(1)
        self.max_answer.setSuffix(self.tr(" s"))
        self.max_answer.setValue(s.max_answer_seconds)
        self.context_size = QComboBox(limits)
        choices = sorted(set(CONTEXT_CHOICES) | {s.context_tokens})
        for n in choices:
            self.context_size.addItem(self.tr("%1 tokens").replace("%1", str(n)), n)
        self.context_size.setCurrentIndex(choices.index(s.context_tokens))
        self.context_size.setToolTip(self.tr("Changing the context size reloads the model."))
        lim_form = QFormLayout(limits)
        lim_form.addRow(self.tr("Maximum answer length"), self.max_answer)
        lim_form.addRow(self.tr("Context size"), self.context_size)

        prompt_box = QGroupBox(self.tr("System prompt"), tab)
        self.system_prompt = QPlainTextEdit(prompt_box)
        self.system_prompt.setPlainText(s.system_prompt)
        self.system_prompt.setMinimumHeight(70)
        reset_prompt = QPushButton(self.tr("Default"), prompt_box)
        reset_prompt.clicked.connect(lambda: self.system_prompt.setPlainText(DEFAULT_SYSTEM_PROMPT))
        # The same limit as the settings file (engine.validation); OK stays disabled beyond it.
        self.prompt_error = QLabel(prompt_box)
        self.prompt_error.setWordWrap(True)
        self.prompt_error.setStyleSheet("color: #b00020;")
        self.prompt_error.hide()
        self.system_prompt.textChanged.connect(self._check_prompt)
        p_layout = QHBoxLayout(prompt_box)
        prompt_column = QVBoxLayout()
        prompt_column.addWidget(self.system_prompt, 1)
        prompt_column.addWidget(self.prompt_error)
        p_layout.addLayout(prompt_column, 1)
        p_layout.addWidget(reset_prompt, 0, Qt.AlignmentFlag.AlignTop)

        layout = QVBoxLayout(tab)
        layout.addWidget(decoding)
        layout.addWidget(limits)
        layout.addWidget(prompt_box)
        return tab

    def _check_prompt(self) -> None:
        length = len(self.system_prompt.toPlainText())
        too_long = length > validation.MAX_SYSTEM_PROMPT_CHARS
        self.prompt_error.setText(self.tr("The system prompt is too long (%1 characters; at most %2).")
                                  .replace("%1", str(length)).replace("%2", str(validation.MAX_SYSTEM_PROMPT_CHARS)))
        self.prompt_error.setVisible(too_long)
        if hasattr(self, "buttons"):
            self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(not too_long)

    def _update_sampling_enabled(self) -> None:
        sampling = not self.greedy_radio.isChecked()
        for box in (self.audio_temperature, self.audio_top_k, self.text_temperature, self.text_top_k):
            box.setEnabled(sampling)

    def _build_audio_tab(self, s: Settings, devices: Devices | None) -> QWidget:
        tab = QWidget(self)
        self.input_device = QComboBox(tab)
        self.output_device = QComboBox(tab)
        # Says plainly that nothing was found, rather than offer only "System default".
        self.devices_note = QLabel(tab)
        self.devices_note.setWordWrap(True)
        self.devices_note.setStyleSheet("color: #c62828;")
        form = QFormLayout(tab)
        form.addRow(self.tr("Microphone"), self.input_device)
        form.addRow(self.tr("Speaker"), self.output_device)
        form.addRow(self.devices_note)
        self.set_devices(devices)
        return tab

    def set_devices(self, devices: Devices | None) -> None:
        """Fill the device lists. Called again when the engine's new list comes while the dialog is open (it
        looks for devices plugged in since when the dialog opens); what is chosen stays chosen."""
        for combo, names, saved in ((self.input_device, devices.inputs if devices else (), self.original.input_device),
                                    (self.output_device, devices.outputs if devices else (), self.original.output_device)):
            current = combo.currentData() if combo.count() else saved
            combo.clear()
            combo.addItem(self.tr("System default"), None)
            # ALSA's "default" device is the system default again: listed once, as "System default".
            for name in (n for n in names if n.strip().lower() not in DEFAULT_DEVICE_ALIASES):
                combo.addItem(name, name)
            if current is not None:
                index = combo.findData(current)
                if index < 0:
                    # A saved device that is not plugged in now stays selectable rather than being
                    # silently replaced by the default.
                    combo.addItem(self.tr("%1 (not connected)").replace("%1", current), current)
                    index = combo.count() - 1
                combo.setCurrentIndex(index)
        missing = []
        if devices is not None:
            for combo, names, text in ((self.input_device, devices.inputs, self.tr("No microphone was found.")),
                                       (self.output_device, devices.outputs, self.tr("No speaker was found."))):
                if not names:
                    combo.setItemText(0, self.tr("System default (none found)"))
                    missing.append(text)
        if missing:
            missing.append(self.tr("Connect one; this list is refreshed each time the settings are opened."))
        self.devices_note.setText("\n".join(missing))
        self.devices_note.setVisible(bool(missing))

    def _build_general_tab(self, s: Settings) -> QWidget:
        tab = QWidget(self)
        self.ptt_key = QKeySequenceEdit(QKeySequence.fromString(s.ptt_key, QKeySequence.SequenceFormat.PortableText),
                                        tab)
        self.ptt_key.setMaximumSequenceLength(1)
        self.global_ptt = QCheckBox(self.tr("The key also works in other windows"), tab)
        self.global_ptt.setChecked(s.global_ptt)
        global_note = QLabel(self.tr("Hold the key while you use another program (a game, a browser) and speak. "
                                     "VoiceChat then watches this key system-wide; the key still reaches the "
                                     "program you are using, so choose one it does not need (e.g. F9 rather "
                                     "than Space)."), tab)
        global_note.setWordWrap(True)
        global_note.setStyleSheet("color: #666;")
        language = QComboBox(tab)
        language.addItem(self.tr("Automatic (system language)"), "auto")
        language.addItem("日本語", "ja")
        language.addItem("English", "en")
        language.setCurrentIndex(max(0, language.findData(s.language)))
        self.language = language
        key_box = QVBoxLayout()
        key_box.setSpacing(2)
        key_box.addWidget(self.ptt_key)
        key_box.addSpacing(6)
        key_box.addWidget(self.global_ptt)
        key_box.addWidget(global_note)
        # The mute key (hands-free): in the window, and optionally system-wide through the same hook.
        self.mute_key = QKeySequenceEdit(
            QKeySequence.fromString(s.mute_key, QKeySequence.SequenceFormat.PortableText), tab)
        self.mute_key.setMaximumSequenceLength(1)
        self.global_mute = QCheckBox(self.tr("The mute key also works in other windows"), tab)
        self.global_mute.setChecked(s.global_mute)
        self.key_problem = QLabel(tab)  # a refused key (the same key for both), in red until it is changed
        self.key_problem.setWordWrap(True)
        self.key_problem.setStyleSheet("color: #c62828;")
        self.key_problem.hide()
        mute_box = QVBoxLayout()
        mute_box.setSpacing(2)
        mute_box.addWidget(self.mute_key)
        mute_box.addWidget(self.global_mute)
        mute_box.addWidget(self.key_problem)
        # Hands-free conversation (engine/audio/voice.py).
        self.hands_free = QCheckBox(self.tr("Hands-free: listen all the time, answer when I pause"), tab)
        self.hands_free.setChecked(s.hands_free)
        self.end_of_speech = QDoubleSpinBox(tab)
        self.end_of_speech.setRange(validation.END_OF_SPEECH_SECONDS.low, validation.END_OF_SPEECH_SECONDS.high)
        self.end_of_speech.setSingleStep(0.1)
        self.end_of_speech.setDecimals(1)
        self.end_of_speech.setSuffix(self.tr(" s"))
        self.end_of_speech.setValue(s.end_of_speech_s)
        self.end_of_speech.setToolTip(self.tr("How long you are silent before the answer is heard (it is prepared "
                                              "meanwhile). Go on speaking after a pause and the whole sentence is "
                                              "answered as one."))
        self.min_speech = QDoubleSpinBox(tab)
        self.min_speech.setRange(validation.MIN_SPEECH_SECONDS.low, validation.MIN_SPEECH_SECONDS.high)
        self.min_speech.setSingleStep(0.05)
        self.min_speech.setDecimals(2)
        self.min_speech.setSuffix(self.tr(" s"))
        self.min_speech.setValue(s.min_speech_s)
        self.echo_cancellation = QCheckBox(self.tr("Echo cancellation"), tab)
        self.echo_cancellation.setChecked(s.echo_cancellation)
        hands_free_note = QLabel(self.tr("Echo cancellation keeps the app from hearing its own voice from the speakers. "
                                         "Headphones are still best. With speakers, the first seconds of the first "
                                         "answer teach the echo canceller the room; until then speak louder than "
                                         "the answer to interrupt it."), tab)
        hands_free_note.setWordWrap(True)
        hands_free_note.setStyleSheet("color: #666;")
        hands_free_box = QVBoxLayout()
        hands_free_box.addWidget(self.hands_free)
        hands_free_box.addWidget(self.echo_cancellation)
        hands_free_box.addWidget(hands_free_note)
        form = QFormLayout(tab)
        form.addRow(self.tr("Push-to-talk key"), key_box)
        form.addRow(self.tr("Mute key (hands-free)"), mute_box)
        form.addRow(self.tr("Hands-free"), hands_free_box)
        form.addRow(self.tr("Silence that ends what you say"), self.end_of_speech)
        form.addRow(self.tr("Shortest speech that counts"), self.min_speech)
        form.addRow(self.tr("Language (after restart)"), self.language)
        return tab

    def _build_model_tab(self, s: Settings) -> QWidget:
        tab = QWidget(self)
        model_box = QGroupBox(self.tr("Model"), tab)
        self.model_hub_radio = QRadioButton(self.tr("Hugging Face Hub id"), model_box)
        self.model_folder_radio = QRadioButton(self.tr("Folder"), model_box)
        self.model_demo_radio = QRadioButton(self.tr("Demo model (random weights — answers are noise)"), model_box)
        group = QButtonGroup(model_box)
        for b in (self.model_hub_radio, self.model_folder_radio, self.model_demo_radio):
            group.addButton(b)
        source = s.model_source or DEFAULT_MODEL_SOURCE
        is_folder = looks_like_path(source)
        self.model_hub_id = QLineEdit(DEFAULT_MODEL_SOURCE if is_folder else source, model_box)
        self.model_folder = QLineEdit(source if is_folder else "", model_box)
        browse_model = QPushButton(self.tr("Browse…"), model_box)
        browse_model.clicked.connect(lambda: self._browse(self.model_folder, self.tr("Choose the model folder")))
        self.revision = QLineEdit(s.model_revision or "", model_box)
        self.revision.setPlaceholderText(self.tr("latest"))
        if s.demo or self.demo_in_use:
            self.model_demo_radio.setChecked(True)
        elif is_folder:
            self.model_folder_radio.setChecked(True)
        else:
            self.model_hub_radio.setChecked(True)
        folder_row = QHBoxLayout()
        folder_row.addWidget(self.model_folder, 1)
        folder_row.addWidget(browse_model)
        m_form = QFormLayout(model_box)
        m_form.addRow(self.model_hub_radio, self.model_hub_id)
        m_form.addRow(self.model_folder_radio, folder_row)
        m_form.addRow(self.model_demo_radio)
        m_form.addRow(self.tr("Revision"), self.revision)
        self.model_shown = self._model_choice()  # as opened: OK with it unchanged keeps the model as it is
        reload_note = QLabel(self.tr("Changing the model, the precision or the context size loads the model again "
                                     "and starts a new conversation."), model_box)
        reload_note.setWordWrap(True)
        reload_note.setStyleSheet("color: #666;")
        m_form.addRow(reload_note)

        voice_box = QGroupBox(self.tr("Voice (LoRA)"), tab)
        self.voice_none = QCheckBox(self.tr("The model's own voice (no LoRA)"), voice_box)
        self.voice_folder = QLineEdit(s.lora or "", voice_box)
        self.voice_folder.setPlaceholderText(self.tr("LoRA adapter folder"))
        browse_voice = QPushButton(self.tr("Browse…"), voice_box)
        browse_voice.clicked.connect(lambda: self._browse(self.voice_folder, self.tr("Choose the voice folder")))
        self.voice_none.setChecked(s.lora is None)
        self.voice_none.toggled.connect(lambda on: (self.voice_folder.setEnabled(not on),
                                                    browse_voice.setEnabled(not on)))
        self.voice_folder.setEnabled(s.lora is not None)
        browse_voice.setEnabled(s.lora is not None)
        # The app's voices (app/voices): one is picked into the field, applied with OK like the rest.
        self.voice_list = QPushButton(self.tr("My voices"), voice_box)
        self.voice_list.setMenu(VoiceMenu(self._voice_in_field, self.voice_list, tools=False))
        self.voice_list.menu().chosen.connect(self._pick_voice)
        create_voice = QPushButton(self.tr("Create a voice…"), voice_box)
        create_voice.clicked.connect(self.create_voice_requested.emit)
        v_row = QHBoxLayout()
        v_row.addWidget(self.voice_folder, 1)
        v_row.addWidget(browse_voice)
        voices_row = QHBoxLayout()
        voices_row.addWidget(self.voice_list)
        voices_row.addWidget(create_voice)
        voices_row.addStretch(1)
        voice_note = QLabel(self.tr("Switching the voice is done in place, without reloading."), voice_box)
        voice_note.setStyleSheet("color: #666;")
        v_layout = QVBoxLayout(voice_box)
        v_layout.addWidget(self.voice_none)
        v_layout.addLayout(v_row)
        v_layout.addLayout(voices_row)
        v_layout.addWidget(voice_note)

        layout = QVBoxLayout(tab)
        layout.addWidget(model_box)
        layout.addWidget(voice_box)
        layout.addStretch(1)
        return tab

    def _model_choice(self) -> tuple[str, str, str]:
        """What the model section says: the chosen kind and its text, and the revision."""
        if self.model_demo_radio.isChecked():
            return ("demo", "", "")
        if self.model_folder_radio.isChecked():
            return ("folder", self.model_folder.text().strip(), self.revision.text().strip())
        return ("hub", self.model_hub_id.text().strip(), self.revision.text().strip())

    def _voice_in_field(self) -> str | None:
        return None if self.voice_none.isChecked() else (self.voice_folder.text().strip() or None)

    def _pick_voice(self, folder: str | None) -> None:
        self.voice_none.setChecked(folder is None)
        if folder is not None:
            self.voice_folder.setText(folder)

    def _browse(self, target: QLineEdit, title: str) -> None:
        # From the folder in the field, else the user's home (never the app's working folder).
        folder = QFileDialog.getExistingDirectory(self, title, target.text().strip() or QDir.homePath())
        if folder:
            target.setText(folder)

    # ------------------------------------------------------------------ result

    def accept(self) -> None:
        """OK: refused (the dialog stays open, nothing is applied) while the system prompt is too long (the
        message under it says why) or both keys are the same key."""
        if len(self.system_prompt.toPlainText()) > validation.MAX_SYSTEM_PROMPT_CHARS:
            return
        result = self.result_settings()
        if keys_clash(result):
            key = key_from_text(result.ptt_key) or Qt.Key.Key_Space
            self.key_problem.setText(self.tr("The push-to-talk key and the mute key cannot be the same key "
                                             "(%1). Choose another mute key.")
                                     .replace("%1", key_to_text(key, native=True)))
            self.key_problem.show()
            self.tabs.setCurrentWidget(self.mute_key.parentWidget())
            self.mute_key.setFocus()
            return
        self.key_problem.hide()
        super().accept()

    def result_settings(self) -> Settings:
        sampling = SamplingSettings(
            greedy=self.greedy_radio.isChecked(),
            audio_temperature=round(self.audio_temperature.value(), 2),
            audio_top_k=self.audio_top_k.value(),
            text_temperature=round(self.text_temperature.value(), 2),
            text_top_k=self.text_top_k.value(),
        )
        source: str | None = self.original.model_source
        revision, demo = self.original.model_revision, self.original.demo or self.demo_in_use
        if self._model_choice() != self.model_shown:  # unchanged: as it was (no model yet stays "none yet")
            demo = self.model_demo_radio.isChecked()
            revision = self.revision.text().strip() or None
            if self.model_folder_radio.isChecked() and self.model_folder.text().strip():
                source = self.model_folder.text().strip()
            elif self.model_hub_radio.isChecked() and self.model_hub_id.text().strip():
                source = self.model_hub_id.text().strip()
        lora = None if self.voice_none.isChecked() else (self.voice_folder.text().strip() or None)
        key = self.ptt_key.keySequence().toString(QKeySequence.SequenceFormat.PortableText)
        mute_key = self.mute_key.keySequence().toString(QKeySequence.SequenceFormat.PortableText)
        return dataclasses.replace(
            self.original,
            sampling=sampling,
            system_prompt=self.system_prompt.toPlainText().strip() or DEFAULT_SYSTEM_PROMPT,
            input_device=self.input_device.currentData(),
            output_device=self.output_device.currentData(),
            model_source=source,
            model_revision=revision,
            demo=demo,
            lora=lora,
            max_answer_seconds=float(self.max_answer.value()),
            context_tokens=int(self.context_size.currentData()),
            ptt_key=key.split(",")[0].strip() or self.original.ptt_key,
            global_ptt=self.global_ptt.isChecked(),
            mute_key=mute_key.split(",")[0].strip() or self.original.mute_key,
            global_mute=self.global_mute.isChecked(),
            language=self.language.currentData(),
            hands_free=self.hands_free.isChecked(),
            end_of_speech_s=round(float(self.end_of_speech.value()), 2),
            min_speech_s=round(float(self.min_speech.value()), 2),
            precision=self.precision.chosen(),
            echo_cancellation=self.echo_cancellation.isChecked(),
        )


# Device names that are the system default under another name (ALSA's "default" PCM).
DEFAULT_DEVICE_ALIASES = frozenset({"default"})


def looks_like_path(source: str) -> bool:
    # Hub ids are "owner/name"; anything absolute, relative-dotted or with a drive letter is a folder.
    return source.startswith(("/", ".", "~", "\\")) or (len(source) > 1 and source[1] == ":")
