"""The main window: it places push-to-talk, the transcript, the meters and the status bar, turns engine events
into widget updates and user actions into commands, and never waits for the engine.

Its other concerns live in modules of their own, each a small class holding the window: the settings dialog and
applying it (app/settings_flow.py), errors in the banner (app/engine_problems.py), a new conversation and export
(app/conversation_flow.py), the status bar (app/widgets/status_bar.py), hands-free (app/widgets/hands_free.py),
the history (app/widgets/history.py) and voices (app/voices/)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import shiboken6
from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QSplitter,
    QToolBar,
    QVBoxLayout,
    QWidget,
)

from engine.protocol import (
    ApplySettings,
    AssistantTurnFinished,
    AssistantTurnStarted,
    AudioChunkQueued,
    Cancel,
    ChangeDeferred,
    ContextTrimmed,
    ContextUsage,
    ConversationCleared,
    Devices,
    DownloadCancelled,
    EndTake,
    EngineError,
    EngineInfo,
    EngineNotice,
    EngineState,
    Event,
    Exported,
    InputLevel,
    ListDevices,
    LiveRtf,
    Load,
    ModelMissing,
    PrecisionInUse,
    Progress,
    ReplayTurn,
    SelectDevices,
    StartTake,
    StateChanged,
    TakeRejected,
    TextDelta,
    TurnMetrics,
    UserTakeAdded,
)
from engine.model.store import looks_like_repo_id
from engine.settings import DEFAULT_MODEL_SOURCE, LoadResult, Settings, save_settings

from app.bridge import EngineBridge
from app.conversation_flow import ConversationFlow
from app.engine_messages import engine_text, library_words
from app.engine_problems import EngineProblems
from app.first_run import FirstRunDialog
from app.settings_dialog import SettingsDialog, looks_like_path
from app.settings_flow import SettingsFlow
from app.voices.ui import VoiceUi
from app.widgets.banner import MessageBanner
from app.widgets.global_ptt import GlobalKeys
from app.widgets.hands_free import HandsFreeUi
from app.widgets.history import HistoryUi
from app.widgets.latency import LatencyMeter
from app.widgets.meters import ContextGauge, LevelMeter, RtfReadout, StateIndicator
from app.widgets.ptt import PttButton, PttKeyFilter, key_from_text, key_to_text
from app.widgets.scrolling import VerticalScrollArea
from app.widgets.status_bar import StatusBarUi
from app.widgets.transcript import TranscriptView


class MainWindow(QMainWindow):
    def __init__(self, bridge: EngineBridge, loaded: LoadResult, settings_path: Path | None = None) -> None:
        super().__init__()
        self.bridge = bridge
        self.settings: Settings = loaded.settings
        self.settings_path = settings_path
        self.state = EngineState.LOADING
        self.info: EngineInfo | None = None
        self.devices: Devices | None = None
        self.first_run: FirstRunDialog | None = None
        self.settings_dialog: SettingsDialog | None = None
        # The engine's precision after the last load with its costs per precision, and the last answer's RTF
        # with that precision (the settings dialog's 精度 section shows them).
        self.precision_status: PrecisionInUse | None = None
        self.measured_rtf: float | None = None
        self.last_error: EngineError | None = None
        self.engine_dead = False
        self.engine_unresponsive = False  # alive but not answering pings (the bridge's watchdog)
        self.audio_chunks = 0  # answer audio chunks queued for playback in this session
        self.demo_override = False  # `--demo` on the command line: demo model, not saved
        # Turns the engine holds (what an export would write): the transcript may show more, e.g.
        # turns from before an engine restart.
        self.engine_turns = 0
        # The model settings that last loaded (and whether that was `--demo`'s demo): a model is saved only once it
        # has loaded, so a broken or untried one never becomes the model of the next start. A Hub model being
        # downloaded is the exception: it is saved, so that the download can resume after a restart.
        self.confirmed_model = (self.settings.model_source, self.settings.model_revision, self.settings.demo)
        self.confirmed_demo_override = False
        self.downloading_model: tuple[str | None, str | None, bool] | None = None
        # The same for the voice: the one the engine runs with. A voice the engine refuses is never saved
        # nor shown as current; the dialog then shows the voice that is really in use.
        self.confirmed_lora = self.settings.lora
        self.mic_missing = False
        self._voice_refused = False  # the engine refused the voice of the load under way
        # The system-wide keys (push-to-talk, mute), one hook for both; None while neither is system-wide.
        self.global_key: GlobalKeys | None = None
        # The platform adds the application's display name ("VoiceChat") to the title itself.
        self.setWindowTitle(self.tr("Japanese voice chat"))
        self.resize(1100, 760)
        self.conversation = ConversationFlow(self)  # a new conversation, the question before an erase, export
        self._build_ui()
        self.problems = EngineProblems(self)  # the banner's errors, and what takes them down
        self.settings_flow = SettingsFlow(self)  # the settings dialog, and applying its result
        self._restore_layout()
        self.bridge.event_received.connect(self.on_event)
        self.bridge.engine_stopped.connect(self.on_engine_stopped)
        self.bridge.engine_unresponsive.connect(self.on_engine_unresponsive)
        self.bridge.engine_responsive.connect(self.on_engine_responsive)
        self.key_filter = PttKeyFilter(self, self.ptt, key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space)
        QApplication.instance().installEventFilter(self.key_filter)
        self._apply_ptt_key_label()
        self._apply_global_keys()
        self.set_state(EngineState.LOADING)
        if loaded.problem is not None:
            problem = loaded.problem
            text = engine_text(problem.message, problem.template, problem.values.items())
            self.banner.show_message("warning", self.tr("Settings problem: %1").replace("%1", text),
                                     details=problem.message if library_words(problem.values.items()) else "")

    # ================================================================== layout

    def _build_ui(self) -> None:
        toolbar = QToolBar(self.tr("Conversation"), self)
        toolbar.setObjectName("conversation")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
        self.addToolBar(toolbar)
        self.settings_action = QAction(self.tr("Settings…"), self)
        self.settings_action.setShortcut(QKeySequence.StandardKey.Preferences)
        self.settings_action.triggered.connect(self.open_settings)
        self.stop_action = QAction(self.tr("Stop answer"), self)
        self.stop_action.setShortcut(QKeySequence(Qt.Key.Key_Escape))
        self.stop_action.triggered.connect(lambda: self.bridge.send(Cancel()))
        self.reset_action = QAction(self.tr("New conversation"), self)
        self.reset_action.setShortcut(QKeySequence.StandardKey.New)
        self.reset_action.triggered.connect(self.conversation.ask_new_conversation)
        self.export_action = QAction(self.tr("Export…"), self)
        self.export_action.setShortcut(QKeySequence.StandardKey.Save)
        self.export_action.triggered.connect(self.conversation.choose_export_path)
        self.hands_free = HandsFreeUi(self, self.bridge.send, self._on_hands_free_switched)
        self.hands_free_action, self.mute_action = self.hands_free.switch_action, self.hands_free.mute_action
        for action in (self.stop_action, self.reset_action, self.export_action, self.hands_free_action,
                       self.mute_action, self.settings_action):
            toolbar.addAction(action)
            self.addAction(action)  # shortcuts work without a menu

        central = QWidget(self)
        self.banner = MessageBanner(central)
        self.banner.action_triggered.connect(self._on_banner_action)

        self.state_indicator = StateIndicator(central)
        self.rtf = RtfReadout(central)
        self.context_gauge = ContextGauge(central)
        top = QHBoxLayout()
        top.addWidget(self.state_indicator, 1)
        top.addWidget(self.rtf)
        top.addSpacing(16)
        top.addWidget(self.context_gauge)

        self.transcript = TranscriptView(central)
        self.transcript.replay_requested.connect(lambda turn_id: self.bridge.send(ReplayTurn(turn_id)))
        latency_box = QGroupBox(self.tr("Latency"), central)
        # In a scroll area: in a low window its labels keep the lines they need (it scrolls) instead of
        # being squeezed; it is never narrower than its content, so it never scrolls sideways.
        self.latency = LatencyMeter()
        latency_scroll = VerticalScrollArea(self.latency, latency_box)
        lb = QVBoxLayout(latency_box)
        lb.addWidget(latency_scroll, 1)
        # The history: a dock beside the conversation, and saved conversations read behind the live one.
        self.history = HistoryUi(self, self.bridge.send, self.transcript, self._on_retention_changed,
                                 on_live_deleted=self.conversation.start_new)
        toolbar.addAction(self.history.toggle_action)
        self.voices = VoiceUi(self)  # the 声 menu, the voice wizard, a voice's zip (app/voices)
        self.voices.add_to(toolbar)
        splitter = self.splitter = QSplitter(Qt.Orientation.Horizontal, central)
        splitter.setObjectName("conversation_and_latency")
        splitter.setChildrenCollapsible(False)  # a pane dragged too small would cut its text
        splitter.addWidget(self.history.stack)
        splitter.addWidget(latency_box)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)

        self.level = LevelMeter(central)
        mic_row = QHBoxLayout()
        mic_row.addWidget(QLabel(self.tr("Microphone"), central))
        mic_row.addWidget(self.level, 1)

        self.ptt = PttButton(central)
        self.ptt.talk_pressed.connect(self.start_take)
        self.ptt.talk_released.connect(self.end_take)

        layout = QVBoxLayout(central)
        layout.addWidget(self.banner)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        layout.addLayout(mic_row)
        layout.addWidget(self.ptt)
        self.setCentralWidget(central)

        # Status bar: what runs where, so a user can tell a slow CPU fallback from a GPU at a glance.
        self.status_bar = StatusBarUi(self)
        self._show_info(None)

    def _apply_ptt_key_label(self) -> None:
        key = key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space
        self.ptt.set_key_name(key_to_text(key, native=True))

    def _mute_key(self) -> Qt.Key | None:
        """The mute key, or None when it has none or is the push-to-talk key (a file edited by hand: then
        push-to-talk keeps the key; the dialog and apply_settings never let the two be equal)."""
        key = key_from_text(self.settings.mute_key)
        return None if key is None or key == (key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space) else key

    def _apply_global_keys(self) -> None:
        """Start, change or stop the system-wide keys (push-to-talk, mute) as the settings say, and give the
        mute key to the window while the hook does not watch it (never both: one press would toggle twice)."""
        keys: dict[str, Qt.Key] = {}
        if self.settings.global_ptt:
            keys["ptt"] = key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space
        mute_key = self._mute_key()
        if self.settings.global_mute and mute_key is not None:
            keys["mute"] = mute_key
        if not keys:
            if self.global_key is not None:
                self.global_key.stop()
                self.global_key = None
        elif self.global_key is None:
            hook = GlobalKeys(keys, self)
            # Emitted on the hook's thread: queued into the Qt thread (push-to-talk into the same hold and
            # debounce as the in-window key).
            hook.pressed.connect(self._on_global_key_pressed, Qt.ConnectionType.QueuedConnection)
            hook.released.connect(self._on_global_key_released, Qt.ConnectionType.QueuedConnection)
            problem = hook.start()
            if problem is None:
                self.global_key = hook
            else:
                keys = {}
                if self.settings.global_ptt:
                    text = self.tr("The push-to-talk key cannot work outside this window on this system. It "
                                   "works while VoiceChat is the active window.")
                else:
                    text = self.tr("The mute key cannot work outside this window on this system. It works "
                                   "while VoiceChat is the active window.")
                self.banner.show_message("warning", text, details=problem)
        else:
            self.global_key.set_keys(keys)
        self.key_filter.global_hook_active = "ptt" in keys
        shortcuts = [QKeySequence(Qt.Modifier.CTRL | Qt.Key.Key_M)]
        if mute_key is not None and "mute" not in keys:
            shortcuts.append(QKeySequence(mute_key))
        self.mute_action.setShortcuts(shortcuts)

    def _on_global_key_pressed(self, name: str) -> None:
        if name == "ptt":
            self.key_filter.key_pressed()
        elif name == "mute":
            self.mute_action.trigger()  # a toggle; nothing while hands-free is off (the action is disabled)

    def _on_global_key_released(self, name: str) -> None:
        if name == "ptt":
            self.key_filter.key_released()

    # ================================================================== start-up

    def start_engine(self) -> None:
        """Start the engine thread and send it everything it needs; returns at once."""
        self.bridge.start()
        self._send_setup()

    def _send_setup(self) -> None:
        s = self.settings
        self.bridge.send(SelectDevices(s.input_device, s.output_device))
        self.bridge.send(ListDevices())
        self.bridge.send(ApplySettings(s.sampling, s.system_prompt, s.max_answer_seconds))
        self.bridge.send(self._load_command(allow_download=False))
        self.hands_free.send_settings()
        self.history.start(s.history_keep_days, s.history_max_megabytes)

    def _on_hands_free_switched(self, enabled: bool) -> None:
        """The toolbar switch: on or off, remembered across restarts."""
        if enabled != self.settings.hands_free:
            self.settings = dataclasses.replace(self.settings, hands_free=enabled)
            self._save_settings()

    def _on_retention_changed(self, keep_days: int, max_megabytes: int) -> None:
        if (keep_days, max_megabytes) != (self.settings.history_keep_days, self.settings.history_max_megabytes):
            self.settings = dataclasses.replace(self.settings, history_keep_days=keep_days,
                                                history_max_megabytes=max_megabytes)
            self._save_settings()

    def _load_command(self, *, allow_download: bool) -> Load:
        s = self.settings
        if s.demo or self.demo_override:
            return Load(source="demo", lora=s.lora, demo=True, context_tokens=s.context_tokens, precision=s.precision)
        return Load(source=s.model_source or DEFAULT_MODEL_SOURCE, lora=s.lora, revision=s.model_revision,
                    context_tokens=s.context_tokens, allow_download=allow_download, precision=s.precision)

    def _save_settings(self) -> None:
        settings = self.settings
        chosen = (settings.model_source, settings.model_revision, settings.demo)
        if chosen != self.confirmed_model and chosen != self.downloading_model:
            # A model that has not loaded yet is not saved: if it is broken, the next start must not try it again.
            model_source, model_revision, demo = self.confirmed_model
            settings = dataclasses.replace(settings, model_source=model_source, model_revision=model_revision,
                                           demo=demo)
        if settings.lora != self.confirmed_lora:
            settings = dataclasses.replace(settings, lora=self.confirmed_lora)  # saved once the engine took it
        try:
            save_settings(settings, self.settings_path)
        except OSError as exc:
            self.banner.show_message("error", self.tr("The settings could not be saved: %1").replace("%1", str(exc)))

    # ================================================================== first run

    def show_first_run(self, message: str | None = None, *, resume: bool = False) -> FirstRunDialog:
        from huggingface_hub import constants as hf_constants  # constants only: no network, no torch

        if self.first_run is None:
            source = self.settings.model_source
            hub_id = source if source and looks_like_repo_id(source) else DEFAULT_MODEL_SOURCE
            dialog = FirstRunDialog(hub_id, offline=bool(hf_constants.HF_HUB_OFFLINE), resume=resume, parent=self)
            dialog.download_requested.connect(self._on_download_chosen)
            dialog.folder_chosen.connect(self._on_folder_chosen)
            dialog.demo_chosen.connect(self._on_demo_chosen)
            dialog.cancel_download.connect(lambda: self.bridge.send(Cancel()))
            dialog.quit_requested.connect(self.close)
            dialog.rejected.connect(self._on_first_run_closed)
            self.first_run = dialog
        self.first_run.show_choices(message)
        # open(): window-modal but asynchronous, the event loop (and the engine's events) keep running.
        self.first_run.open()
        return self.first_run

    def _close_first_run(self) -> None:
        if self.first_run is not None:
            dialog, self.first_run = self.first_run, None
            dialog.rejected.disconnect(self._on_first_run_closed)
            dialog.accept()
            dialog.deleteLater()

    def _on_first_run_closed(self) -> None:
        self.first_run = None
        self.banner.show_message("warning", self.tr("No model is loaded."), action_id="choose_model",
                                 action_text=self.tr("Choose a model…"))

    def _on_download_chosen(self, hub_id: str) -> None:
        # Remembered before the download starts, so that after an interruption (even a restart) the
        # app offers to resume this download.
        self.settings = dataclasses.replace(self.settings, model_source=hub_id, demo=False)
        self.demo_override = False  # chosen over `--demo`'s demo: this model is what loads now
        self.downloading_model = (hub_id, self.settings.model_revision, False)
        self._save_settings()
        assert self.first_run is not None
        self.first_run.show_downloading()
        self.bridge.send(self._load_command(allow_download=True))

    def _on_folder_chosen(self, folder: str) -> None:
        self.settings = dataclasses.replace(self.settings, model_source=folder, model_revision=None, demo=False)
        self.demo_override = False
        self._save_settings()
        self._close_first_run()
        self.bridge.send(self._load_command(allow_download=False))

    def _on_demo_chosen(self) -> None:
        self.settings = dataclasses.replace(self.settings, demo=True)
        self._save_settings()
        self._close_first_run()
        self.bridge.send(self._load_command(allow_download=False))

    # ================================================================== user actions

    def start_take(self) -> None:
        self.bridge.send(StartTake())

    def end_take(self) -> None:
        # When the button or the key went up: the key's release is acted on after its debounce, but the take
        # ends where the finger lifted, so a tap of the key and a click of the button are measured alike.
        self.bridge.send(EndTake(at=self.ptt.released_at))

    def open_settings(self) -> SettingsDialog:
        return self.settings_flow.open_dialog()

    def apply_settings(self, new: Settings) -> None:
        """Apply the settings dialog's result (app/settings_flow.py)."""
        self.settings_flow.apply(new)

    def restart_engine(self) -> None:
        self.engine_dead = False
        self.engine_unresponsive = False
        self.banner.hide()
        self.problems.engine_restarted()
        for item in [*self.transcript.user_items.values(), *self.transcript.assistant_items.values()]:
            item.replay_button.setEnabled(False)  # the old engine took their audio with it
        if self.conversation.has_turns():
            self.transcript.add_notice(self.tr("The engine was restarted; earlier turns cannot be replayed or "
                                               "exported, and the model does not remember them."))
        self.engine_turns = 0
        self.set_state(EngineState.LOADING)
        self.bridge.restart()
        self._send_setup()

    def _on_banner_action(self, action_id: str) -> None:
        if action_id == "restart":
            self.restart_engine()
        elif action_id == "choose_model":
            self.banner.hide()
            self.show_first_run()
        elif action_id == "settings":
            self.open_settings()

    # ================================================================== engine events

    def set_state(self, state: EngineState) -> None:
        self.state = state
        self.state_indicator.set_state(state)
        usable = state not in (EngineState.LOADING, EngineState.NO_MODEL) and not self.engine_dead
        self.ptt.set_recording(state is EngineState.RECORDING)
        # Also without a microphone: a press makes the engine look again (one may have been plugged in).
        self.ptt.setEnabled(usable)
        self.stop_action.setEnabled(state in (EngineState.THINKING, EngineState.SPEAKING))
        self.export_action.setEnabled(not self.engine_dead)
        self.reset_action.setEnabled(usable)
        if state is not EngineState.LOADING:
            self.status_bar.clear_progress()

    def on_event(self, event: Event) -> None:  # noqa: C901 (a flat dispatch reads best here)
        if self.history.handles(event):
            self.history.on_event(event)
        elif self.voices.take(event):
            pass
        elif isinstance(event, InputLevel):
            self.level.set_level(event.rms, event.peak, event.clipping)
        elif self.hands_free.handles(event):
            self.hands_free.on_event(event)
        elif isinstance(event, StateChanged):
            self.set_state(event.state)
        elif isinstance(event, TextDelta):
            self.transcript.append_text(event.turn_id, event.text)
        elif isinstance(event, AudioChunkQueued):
            self.audio_chunks += 1
        elif isinstance(event, LiveRtf):
            self.rtf.set_rtf(event.rtf, live=True)
        elif isinstance(event, UserTakeAdded):
            self.engine_turns += 1
            self.problems.take_arrived()
            self.rtf.clear_value()  # the previous answer's figure is not this turn's
            self.transcript.add_user_take(event.turn_id, event.duration_s)
            self.latency.start_turn()  # the "this turn" column is about the new turn from now on
        elif isinstance(event, AssistantTurnStarted):
            self.transcript.start_assistant(event.turn_id, event.greedy)
            self.latency.start_turn()
        elif isinstance(event, AssistantTurnFinished):
            self.transcript.finish_assistant(event.turn_id, event.text, event.duration_s, event.cancelled)
        elif isinstance(event, TurnMetrics):
            self.latency.add_turn(event)
            if event.cancelled:
                # A stopped answer's figure (a few frames' start-up over a fraction of a second) is no RTF.
                self.rtf.set_stopped()
            elif event.rtf is not None:
                self.rtf.set_rtf(event.rtf, live=False)
                self.measured_rtf = event.rtf
        elif isinstance(event, ContextUsage):
            self.context_gauge.set_usage(event.used_tokens, event.capacity_tokens)
        elif isinstance(event, ContextTrimmed):
            self.context_gauge.set_usage(event.used_tokens, self.context_gauge.capacity)
            self.transcript.add_notice(self.tr("The context was full: the %1 oldest turns were dropped from the "
                                               "model's memory (they stay in this transcript and in exports).")
                                       .replace("%1", str(event.dropped_turns)))
        elif isinstance(event, TakeRejected):
            self._on_take_rejected(event)
        elif isinstance(event, Progress):
            self._on_progress(event)
        elif isinstance(event, EngineInfo):
            self._show_info(event)
            if self.first_run is not None:
                self._close_first_run()  # a model is loaded: the first run is over
            self.problems.model_loaded(self._voice_refused)  # an earlier load's (or voice's) error: this one worked
            self.confirmed_model = (self.settings.model_source, self.settings.model_revision, self.settings.demo)
            self.confirmed_demo_override = self.demo_override
            if not self._voice_refused:
                self.confirmed_lora = self.settings.lora
            self._voice_refused = False
            self._save_settings()  # now a folder (or voice) chosen for this load is known to work
        elif isinstance(event, Devices):
            self._on_devices(event)
        elif isinstance(event, ModelMissing):
            self.show_first_run(resume=self.settings.model_source is not None and not self.settings.demo)
        elif isinstance(event, DownloadCancelled):
            if self.first_run is not None:
                self.first_run.show_choices(self.tr("Download cancelled. The files already downloaded are kept for next time."))
        elif isinstance(event, Exported):
            self.conversation.exported(event)
        elif isinstance(event, EngineError):
            self._on_error(event)
        elif isinstance(event, PrecisionInUse):
            self._on_precision_in_use(event)
        elif isinstance(event, EngineNotice):
            self.banner.show_message("info", engine_text(event.message, event.template, event.values))
        elif isinstance(event, ChangeDeferred):
            self._on_change_deferred(event)
        elif isinstance(event, ConversationCleared):
            if event.cause == "system_prompt":
                self.problems.prompt_applied()
            self.settings_flow.conversation_cleared(event.cause)

    def _on_precision_in_use(self, event: PrecisionInUse) -> None:
        """After a load: the precision it has (int8 refused: the setting goes back to what is loaded) and its costs."""
        if self.precision_status is None or self.precision_status.precision != event.precision:
            self.measured_rtf = None  # an RTF measured with the other precision says nothing about this one
        self.precision_status = event
        if event.precision != event.requested and self.settings.precision == event.requested:
            self.settings = dataclasses.replace(self.settings, precision=event.precision)
            self._save_settings()
        self._show_info(self.info)
        dialog = self.settings_dialog
        if dialog is not None and shiboken6.isValid(dialog) and dialog.isVisible():
            dialog.precision.set_status(event, self.measured_rtf)

    def _on_change_deferred(self, event: ChangeDeferred) -> None:
        if event.change == "system_prompt":
            text = self.tr("The new system prompt applies after this answer.")
        elif event.change == "voice":
            text = self.tr("The new voice applies after this answer.")
        elif event.change == "model":
            text = self.tr("The model is loaded after this answer.")
        else:
            text = self.tr("The new audio devices apply after this answer.")
        self.transcript.add_notice(text)

    def _on_devices(self, event: Devices) -> None:
        self.devices = event
        dialog = self.settings_dialog
        if dialog is not None and shiboken6.isValid(dialog) and dialog.isVisible():
            dialog.set_devices(event)  # the engine's list after it looked again, while the dialog is open
        self.mic_missing = not event.inputs
        self.ptt.set_missing(self.tr("No microphone found") if self.mic_missing else "")
        if self.mic_missing:
            self.ptt.cancel_hold()
            self.key_filter.end_hold()
        self.problems.devices_listed(event, self.mic_missing)
        self.set_state(self.state)

    def _on_take_rejected(self, event: TakeRejected) -> None:
        if event.reason == "too_short":
            # The length the button was held, to the hundredth: rounded to tenths, 0.06 s read as "0.1 s",
            # which looked like the minimum rather than what was measured.
            text = self.tr("That take was too short: the button was held for only %1 s. Hold it for as long as "
                           "you speak.").replace("%1", f"{event.duration_s:.2f}")
        else:
            text = self.tr("That take was too long and was cut at %1 s.").replace("%1", f"{event.duration_s:.1f}")
        self.transcript.add_notice(text)

    def _on_progress(self, event: Progress) -> None:
        if event.stage == "download" and self.first_run is not None:
            self.first_run.set_progress(event)
        self.status_bar.show_progress(event)

    def _on_error(self, event: EngineError) -> None:
        self.last_error = event
        self._undo_refused_choice(event)
        self.problems.show_error(event)

    def _undo_refused_choice(self, event: EngineError) -> None:
        """What the engine refused is neither kept as the current choice nor saved."""
        if event.kind == "lora":
            if self.state is EngineState.LOADING:
                # A load whose voice could not be merged: the model runs with its own voice.
                self._voice_refused = True
                self.confirmed_lora = None
            if self.settings.lora != self.confirmed_lora:
                self.settings = dataclasses.replace(self.settings, lora=self.confirmed_lora)
                self._save_settings()
        elif event.kind in ("model", "gpu_memory"):
            source, revision, demo = self.confirmed_model
            current = (self.settings.model_source, self.settings.model_revision, self.settings.demo)
            chosen = self.settings.model_source
            if current != self.confirmed_model and (self.settings.demo or (chosen and looks_like_path(chosen))):
                # A folder (or the demo) that did not load; a Hub id stays, so that its download can resume. Under
                # `--demo`, the demo is what runs again.
                self.settings = dataclasses.replace(self.settings, model_source=source, model_revision=revision,
                                                    demo=demo)
                self.demo_override = self.confirmed_demo_override
                self._save_settings()

    def on_engine_stopped(self, error: str) -> None:
        if not error:
            return  # a requested shutdown
        self.engine_dead = True
        self.set_state(EngineState.NO_MODEL)
        self.state_indicator.label.setText(self.tr("Engine stopped"))
        self.banner.show_message("error", self.tr("The engine stopped: %1").replace("%1", error),
                                 action_id="restart", action_text=self.tr("Restart engine"))

    def on_engine_unresponsive(self, seconds: float) -> None:
        self.engine_unresponsive = True
        self.banner.show_message("error", self.tr("The engine has not responded for %1 s. You can wait, or "
                                                  "restart it (the conversation is lost).").replace("%1", f"{seconds:.0f}"),
                                 action_id="restart", action_text=self.tr("Restart engine"))

    def on_engine_responsive(self) -> None:
        if self.engine_unresponsive and self.banner._action_id == "restart" and not self.engine_dead:
            self.banner.hide()
        self.engine_unresponsive = False

    def _show_info(self, info: EngineInfo | None) -> None:
        self.info = info
        self.status_bar.show_info(info, self.precision_status)
        if info is not None:
            self.context_gauge.set_usage(self.context_gauge.used, info.context_tokens)

    def bring_to_front(self) -> None:
        """Another start of VoiceChat asked for this window (app/single_instance.py)."""
        if self.isMinimized():
            self.showNormal()
        self.show()
        self.raise_()
        self.activateWindow()

    # ================================================================== closing

    def _layout_store(self) -> QSettings:
        """The window's size, docks and splitter, next to the settings file (window.ini): how the window
        looked is no setting the engine or the tools read, and Qt's own state blobs stay Qt's."""
        from engine.settings import default_settings_path

        folder = (self.settings_path or default_settings_path()).parent
        return QSettings(str(folder / "window.ini"), QSettings.Format.IniFormat)

    def _restore_layout(self) -> None:
        store = self._layout_store()
        geometry, state, splitter = (store.value(key) for key in ("geometry", "state", "splitter"))
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)  # Qt keeps a window that was on a missing screen on a present one
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        if isinstance(splitter, QByteArray) and not splitter.isEmpty():
            self.splitter.restoreState(splitter)

    def save_layout(self) -> None:
        store = self._layout_store()
        store.setValue("geometry", self.saveGeometry())
        store.setValue("state", self.saveState())
        store.setValue("splitter", self.splitter.saveState())
        store.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_layout()
        QApplication.instance().removeEventFilter(self.key_filter)
        self.voices.close()
        if self.global_key is not None:
            self.global_key.stop()
            self.global_key = None
        self._save_settings()
        # Let the engine close its audio streams; it is a daemon thread, so a hung engine cannot keep
        # the process alive.
        self.bridge.shutdown(wait_s=3.0)
        super().closeEvent(event)
        QTimer.singleShot(0, QApplication.instance().quit)
