"""From the settings dialog to the running app: the dialog opens on what is in use, and OK sends only what
changed (decoding from the next turn, a voice in place, devices, keys). Only a real change of the model, its
precision or the context size reloads; a reload or a new system prompt starts a new conversation, so with a
conversation on screen the window asks first, and says so once the engine has started it.

`SettingsFlow` works on the main window's state (its settings, its bridge, its transcript): it is the window's
settings concern in a module of its own."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from PySide6.QtCore import QObject, Qt

from engine.protocol import ApplySettings, Cancel, EngineState, ListDevices, SelectDevices, SwitchVoice
from engine.settings import DEFAULT_MODEL_SOURCE, Settings

from app.settings_dialog import SettingsDialog, keys_clash
from app.widgets.ptt import key_from_text, key_to_text

if TYPE_CHECKING:
    from app.main_window import MainWindow

# What a reload keeps or changes: the model, and what is fixed when it is loaded.
RELOAD_FIELDS = ("model_source", "model_revision", "demo", "context_tokens", "precision")


def model_in_use(settings: Settings, demo_override: bool) -> tuple[str, str | None, bool]:
    """The model these settings load: no model source yet means the default Hub model (the dialog shows its id),
    and `voicechat --demo` means the demo model whatever is saved."""
    if settings.demo or demo_override:
        return ("demo", None, True)
    return (settings.model_source or DEFAULT_MODEL_SOURCE, settings.model_revision, False)


class SettingsFlow(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window

    # ------------------------------------------------------------------ the dialog

    def open_dialog(self) -> SettingsDialog:
        w = self.window
        # The engine looks again for devices plugged in since (PortAudio lists them only after a re-scan);
        # the dialog shows what we have now, the new list is there for the next time.
        w.bridge.send(ListDevices(rescan=True))
        dialog = SettingsDialog(w.settings, w.devices, w, demo_in_use=w.demo_override)
        dialog.precision.set_status(w.precision_status, w.measured_rtf)
        dialog.accepted.connect(lambda: self.apply(dialog.result_settings()))
        dialog.create_voice_requested.connect(w.voices.open_wizard)
        dialog.finished.connect(dialog.deleteLater)
        w.settings_dialog = dialog
        dialog.open()
        return dialog

    # ------------------------------------------------------------------ applying

    def _resolve_demo(self, new: Settings) -> tuple[Settings, bool]:
        """Under `voicechat --demo`: the demo still chosen leaves the saved model alone; another model chosen ends
        the demo of this run and is tried (and saved once it has loaded). Returns the settings and the override."""
        if not self.window.demo_override:
            return new, False
        if new.demo:
            return dataclasses.replace(new, demo=self.window.settings.demo), True
        return new, False

    def reloads(self, new: Settings) -> bool:
        """Whether applying `new` loads the model again (which starts a new conversation)."""
        w = self.window
        new, override = self._resolve_demo(new)
        return (model_in_use(new, override), new.context_tokens, new.precision) != (
            model_in_use(w.settings, w.demo_override), w.settings.context_tokens, w.settings.precision)

    def apply(self, new: Settings) -> None:
        """Apply the dialog's settings. A new system prompt or a reload erases the conversation in the model (the
        history keeps it): with a conversation on screen the window asks first."""
        w = self.window
        old = w.settings
        reloads = self.reloads(new)
        if (reloads or new.system_prompt != old.system_prompt) and w.conversation.has_turns():
            if reloads:
                question = self.tr("The model is loaded again for the new model, precision or context size, and starts "
                               "a new conversation: it does not remember the current one.")
            else:
                question = self.tr("The new system prompt starts a new conversation: the model starts afresh, without "
                               "the current conversation.")
            kept = dataclasses.replace(new, system_prompt=old.system_prompt,
                                       **{name: getattr(old, name) for name in RELOAD_FIELDS})
            if w.demo_override:
                kept = dataclasses.replace(kept, demo=True)  # still the demo of this run
            # If the user keeps the conversation, the rest is applied; the prompt and the model stay as they were.
            w.conversation.confirm_erase(question, lambda: self._apply_erasing(new), lambda: self._apply(kept))
            return
        self._apply(new)

    def _apply_erasing(self, new: Settings) -> None:
        """The user chose to start a new conversation: the answer that is being given or played belongs to the old
        one, so it stops now (as for a new conversation) rather than playing on."""
        if self.window.state in (EngineState.THINKING, EngineState.SPEAKING):
            self.window.bridge.send(Cancel())
        self._apply(new)

    def _apply(self, new: Settings) -> None:
        """Send only what changed: decoding from the next turn, voice in place, reload only if needed."""
        w = self.window
        if keys_clash(new):
            # One key cannot both talk and mute: the keys stay as they were, the rest applies.
            w.banner.show_message("warning", self.key_clash_text(new))
            new = dataclasses.replace(new, ptt_key=w.settings.ptt_key, mute_key=w.settings.mute_key)
        reloads = self.reloads(new)
        new, override = self._resolve_demo(new)
        old, w.settings = w.settings, new
        w.demo_override = override
        w._save_settings()
        # A new prompt starts a new conversation in the engine (the prompt is the start of the model's context); the
        # window follows when the engine says so (ConversationCleared), after the answer it may be giving now.
        if (new.sampling, new.system_prompt, new.max_answer_seconds) != (
                old.sampling, old.system_prompt, old.max_answer_seconds):
            w.bridge.send(ApplySettings(new.sampling, new.system_prompt, new.max_answer_seconds))
        if (new.input_device, new.output_device) != (old.input_device, old.output_device):
            w.problems.devices_chosen()  # new devices: the old ones' problems no longer apply
            w.bridge.send(SelectDevices(new.input_device, new.output_device))
        if reloads:
            w.bridge.send(w._load_command(allow_download=False))
        elif new.lora != old.lora:
            w.bridge.send(SwitchVoice(new.lora))
        if new.ptt_key != old.ptt_key:
            w.key_filter.set_key(key_from_text(new.ptt_key) or Qt.Key.Key_Space)
            w._apply_ptt_key_label()
        if (new.ptt_key, new.global_ptt, new.mute_key, new.global_mute) != (
                old.ptt_key, old.global_ptt, old.mute_key, old.global_mute):
            w._apply_global_keys()
        if new.language != old.language:
            w.banner.show_message("info", self.tr("The language changes the next time VoiceChat starts."))
        if (new.hands_free, new.end_of_speech_s, new.min_speech_s, new.echo_cancellation) != (
                old.hands_free, old.end_of_speech_s, old.min_speech_s, old.echo_cancellation):
            w.hands_free.follow(new)

    def key_clash_text(self, settings: Settings) -> str:
        key = key_from_text(settings.ptt_key) or Qt.Key.Key_Space
        return self.tr("The push-to-talk key and the mute key cannot be the same key (%1). The keys were left as they "
                   "were.").replace("%1", key_to_text(key, native=True))

    # ------------------------------------------------------------------ the engine started a new conversation

    def conversation_cleared(self, cause: str) -> None:
        """After a new prompt or a reload (the user was asked first): the window shows the new, empty conversation
        and says why, so that the next turn is not read as a continuation."""
        if cause not in ("system_prompt", "model"):
            return  # a reset: the window cleared itself when it sent it
        w = self.window
        had_conversation = w.conversation.has_turns()
        w.transcript.clear()
        w.engine_turns = 0
        w.conversation.reset_statistics()
        if had_conversation:
            if cause == "system_prompt":
                w.transcript.add_notice(self.tr("The new system prompt starts a new conversation."))
            else:
                w.transcript.add_notice(self.tr("The model was loaded again: a new conversation starts."))
