"""What goes wrong, in the window's banner: the engine's errors and the audio devices' problems, in the user's
language, with a library's own (English) words kept in the details; and each problem taken down when it is no
longer true (a voice that works after a refused one, a model that loads after a broken one, a device that is back).

`EngineProblems` works on the main window's banner and first-run dialog: it is the window's error concern in a
module of its own."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QObject

from engine.protocol import Devices, EngineError, EngineState

from app.engine_messages import TEMPLATES, engine_parts, engine_text, library_words

if TYPE_CHECKING:
    from app.main_window import MainWindow

# The engine's templates for "no device at all" (engine/audio/devices.py): a device list that has
# devices again makes them stale.
NO_MICROPHONE_TEMPLATE = "No microphone was found. Connect one and try again."
NO_SPEAKER_TEMPLATE = "No speaker was found. Connect one and try again."
# engine/errors.py ModelFilesError: a folder that does not hold a usable model.
MODEL_FOLDER_TEMPLATE = "The model folder {folder} cannot be used: {problems}"


class EngineProblems(QObject):
    def __init__(self, window: MainWindow) -> None:
        super().__init__(window)
        self.window = window
        self.banner = window.banner
        self.kind = ""  # the kind of the EngineError the banner shows ("" for none)
        self.audio_problems: dict[str, str] = {}  # audio device problems shown together in the banner

    # ------------------------------------------------------------------ showing

    def show_error(self, event: EngineError) -> None:
        message = engine_text(event.message, event.template, event.values, event.part_lists)
        if event.kind == "audio_device":
            # Several device problems at once (no microphone and no speaker) are all shown, together.
            if event.template == NO_MICROPHONE_TEMPLATE:
                self.audio_problems.pop("no-microphone", None)  # the same problem, in the engine's words
            self.audio_problems[event.template or event.message] = message
            self._show_audio_problems(self._details(event))
            if self.window.state is not EngineState.RECORDING:
                # A press that could not open the microphone: the button must not go on looking
                # pressed. (While the engine records, e.g. a speaker problem, the take goes on.)
                self.window.ptt.cancel_hold()
                self.window.key_filter.end_hold()
            return
        titles = {
            "model": self.tr("Model"),
            "lora": self.tr("Voice"),
            "audio_device": self.tr("Audio device"),
            "take": self.tr("Recording"),
            "gpu_memory": self.tr("GPU memory"),
            "settings": self.tr("Settings"),
            "export": self.tr("Export"),
            "history": self.tr("History"),
            "precision": self.tr("Precision"),
        }
        title = titles.get(event.kind, self.tr("Internal error"))
        details = self._details(event)
        library = not event.template and event.message not in TEMPLATES
        if library:
            # A library's own words (an exception's text), in English whatever the language: said in
            # ours, with what to do; the library's text stays in the details (the banner's tooltip).
            message = self.tr("Something went wrong that VoiceChat has no explanation for. Try again; if it "
                              "happens again, restart the engine (the details and the log file say more).")
        text = f"<b>{title}:</b> {message}"
        # A failed load leaves no model: the first-run choices are offered again, with the reason,
        # and the reason is said there only (not twice, in the banner behind the dialog too).
        first_run = self.window.first_run
        no_model = event.kind in ("model", "gpu_memory") and self.window.state is EngineState.NO_MODEL
        if no_model or (first_run is not None and first_run.downloading):
            self.kind = ""
            if self.banner.level == "error":
                self.banner.hide()
            reason = self.plain_load_error(event, message)
            if details != event.details:  # a library's words: kept, as the detail they are
                reason += "\n" + self.tr("Details: %1").replace("%1", event.message)
            self.window.show_first_run(reason)
            return
        self.kind = event.kind
        if event.fatal:
            self.banner.show_message("error", text, details=details, action_id="restart",
                                     action_text=self.tr("Restart engine"))
        else:
            self.banner.show_message("error", text, details=details)

    def _details(self, event: EngineError) -> str:
        """The banner's details: the engine's English message where a library's words were left out of ours (or
        where the message is a library's own), then the engine's details (a traceback)."""
        words = library_words(event.values, event.part_lists)
        untranslated = not event.template and event.message not in TEMPLATES
        if not (words or untranslated):
            return event.details
        return event.message + ("\n\n" + event.details if event.details else "")

    def plain_load_error(self, event: EngineError, message: str) -> str:
        """A failed load in words a new user follows: a broken folder says what to do first, and lists
        what is wrong after that (the engine's message names file formats and tensors)."""
        if event.template != MODEL_FOLDER_TEMPLATE:
            return message
        folder = dict(event.values).get("folder", "")
        parts = dict(event.part_lists).get("problems", ())
        problems = engine_parts(parts) if parts else dict(event.values).get("problems", "")
        return (self.tr("The folder %1 does not hold a usable model. Choose the folder that holds all of the model's "
                        "files (config.json, model.safetensors and the others), or download the model.")
                .replace("%1", folder) + "\n" + self.tr("What is wrong: %1").replace("%1", problems))

    def _show_audio_problems(self, details: str = "") -> None:
        title = self.tr("Audio device")
        text = "<br>".join(f"<b>{title}:</b> {problem}" for problem in self.audio_problems.values())
        self.kind = "audio_device"
        self.banner.show_message("error", text, details=details, action_id="settings",
                                 action_text=self.tr("Settings…"))

    # ------------------------------------------------------------------ taking down what is no longer true

    def _take_down(self, *kinds: str) -> None:
        if self.kind in kinds and not self.banner.isHidden() and self.banner.level == "error":
            self.banner.hide()
        if self.kind in kinds:
            self.kind = ""

    def devices_listed(self, event: Devices, mic_missing: bool) -> None:
        """The engine's device list: a missing microphone is said at once (not only when push-to-talk is pressed);
        "none found" problems go once devices are there again."""
        no_mic = self.tr("No microphone was found. Connect one, then choose it in Settings.")
        if mic_missing:
            if NO_MICROPHONE_TEMPLATE not in self.audio_problems:  # not twice, in the engine's words and ours
                self.audio_problems["no-microphone"] = no_mic
        else:
            self.audio_problems.pop("no-microphone", None)
            self.audio_problems.pop(NO_MICROPHONE_TEMPLATE, None)
        if event.outputs:
            self.audio_problems.pop(NO_SPEAKER_TEMPLATE, None)
        if self.audio_problems:
            self._show_audio_problems()
        else:
            self._take_down("audio_device")

    def devices_chosen(self) -> None:
        """Other devices were chosen: the old ones' problems no longer apply."""
        self.audio_problems.clear()
        self._take_down("audio_device")

    def engine_restarted(self) -> None:
        self.audio_problems.clear()  # the new engine reports its devices afresh
        self.kind = ""

    def model_loaded(self, voice_refused: bool) -> None:
        """A load or a voice switch worked (EngineInfo): an earlier load's error is stale, and so is a refused
        voice's, unless this load refused the voice again."""
        if self.banner.level == "warning" and self.banner._action_id == "choose_model":
            self.banner.hide()
        self._take_down("model", "gpu_memory", *(() if voice_refused else ("lora",)))

    def prompt_applied(self) -> None:
        """A new system prompt was taken: an earlier refused prompt's error (too long for the context) is stale."""
        self._take_down("settings")

    def take_arrived(self) -> None:
        """A take reached the engine: an earlier take's error (lost, the microphone failed) is stale."""
        self._take_down("take")
