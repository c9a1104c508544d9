"""The main window: push-to-talk, transcript, meters, status bar; it turns engine events into
widget updates and user actions into commands. It never waits for the engine."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

from PySide6.QtCore import QStandardPaths, Qt, QTimer
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
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
    EngineState,
    Event,
    Export,
    Exported,
    InputLevel,
    ListDevices,
    LiveRtf,
    Load,
    ModelMissing,
    Progress,
    ReplayTurn,
    Reset,
    SelectDevices,
    StartTake,
    StateChanged,
    SwitchVoice,
    TakeRejected,
    TextDelta,
    TurnMetrics,
    UserTakeAdded,
)
from engine.settings import DEFAULT_MODEL_SOURCE, LoadResult, Settings, save_settings

from app.bridge import EngineBridge
from app.engine_messages import engine_text
from app.first_run import FirstRunDialog
from app.settings_dialog import SettingsDialog
from app.widgets.banner import MessageBanner
from app.widgets.history import HistoryUi
from app.widgets.latency import LatencyMeter
from app.widgets.meters import ContextGauge, LevelMeter, RtfReadout, StateIndicator
from app.widgets.ptt import PttButton, PttKeyFilter, key_from_text, key_to_text
from app.widgets.transcript import TranscriptView


def _format_gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


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
        self.last_error: EngineError | None = None
        self.engine_dead = False
        self.engine_unresponsive = False  # alive but not answering pings (the bridge's watchdog)
        self.exported_paths: tuple[str, ...] = ()
        self.audio_chunks = 0  # answer audio chunks queued for playback in this session
        self.demo_override = False  # `--demo` on the command line: demo model, not saved
        self.setWindowTitle(self.tr("VoiceChat — Japanese voice chat"))
        self.resize(1100, 760)
        self._build_ui()
        self.bridge.event_received.connect(self.on_event)
        self.bridge.engine_stopped.connect(self.on_engine_stopped)
        self.bridge.engine_unresponsive.connect(self.on_engine_unresponsive)
        self.bridge.engine_responsive.connect(self.on_engine_responsive)
        self.key_filter = PttKeyFilter(self, self.ptt, key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space)
        QApplication.instance().installEventFilter(self.key_filter)
        self._apply_ptt_key_label()
        self.set_state(EngineState.LOADING)
        if loaded.warning:
            self.banner.show_message("warning", self.tr("Settings problem: %1").replace("%1", loaded.warning))

    # ================================================================== layout

    def _build_ui(self) -> None:
        toolbar = QToolBar(self.tr("Conversation"), self)
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
        self.reset_action.triggered.connect(self.reset_conversation)
        self.export_action = QAction(self.tr("Export…"), self)
        self.export_action.setShortcut(QKeySequence.StandardKey.Save)
        self.export_action.triggered.connect(self.choose_export_path)
        for action in (self.stop_action, self.reset_action, self.export_action, self.settings_action):
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
        self.latency = LatencyMeter(latency_box)
        lb = QVBoxLayout(latency_box)
        lb.addWidget(self.latency)
        lb.addStretch(1)
        # The history: a dock beside the conversation, and saved conversations read behind the live one.
        self.history = HistoryUi(self, self.bridge.send, self.transcript, self._on_retention_changed)
        toolbar.addAction(self.history.toggle_action)
        splitter = QSplitter(Qt.Orientation.Horizontal, central)
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
        status = self.statusBar()
        self.progress_label = QLabel(self)
        self.progress_bar = QProgressBar(self)
        self.progress_bar.setMaximumWidth(200)
        self.progress_bar.setTextVisible(False)
        self.device_label = QLabel(self)
        self.vram_label = QLabel(self)
        self.graphs_label = QLabel(self)
        self.model_label = QLabel(self)
        self.voice_label = QLabel(self)
        status.addWidget(self.progress_label)
        status.addWidget(self.progress_bar)
        for label in (self.device_label, self.vram_label, self.graphs_label, self.model_label, self.voice_label):
            status.addPermanentWidget(label)
        self._show_info(None)

    def _apply_ptt_key_label(self) -> None:
        key = key_from_text(self.settings.ptt_key) or Qt.Key.Key_Space
        self.ptt.set_key_name(key_to_text(key, native=True))

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
        self.history.start(s.history_keep_days, s.history_max_megabytes)

    def _on_retention_changed(self, keep_days: int, max_megabytes: int) -> None:
        if (keep_days, max_megabytes) != (self.settings.history_keep_days, self.settings.history_max_megabytes):
            self.settings = dataclasses.replace(self.settings, history_keep_days=keep_days,
                                                history_max_megabytes=max_megabytes)
            self._save_settings()

    def _load_command(self, *, allow_download: bool) -> Load:
        s = self.settings
        if s.demo or self.demo_override:
            return Load(source="demo", lora=s.lora, demo=True, context_tokens=s.context_tokens)
        return Load(source=s.model_source or DEFAULT_MODEL_SOURCE, lora=s.lora, revision=s.model_revision,
                    context_tokens=s.context_tokens, allow_download=allow_download)

    def _save_settings(self) -> None:
        try:
            save_settings(self.settings, self.settings_path)
        except OSError as exc:
            self.banner.show_message("error", self.tr("The settings could not be saved: %1").replace("%1", str(exc)))

    # ================================================================== first run

    def show_first_run(self, message: str | None = None, *, resume: bool = False) -> FirstRunDialog:
        from huggingface_hub import constants as hf_constants  # constants only: no network, no torch

        if self.first_run is None:
            source = self.settings.model_source
            hub_id = source if source and "/" in source and not source.startswith(("/", ".")) else DEFAULT_MODEL_SOURCE
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
        self._save_settings()
        assert self.first_run is not None
        self.first_run.show_downloading()
        self.bridge.send(self._load_command(allow_download=True))

    def _on_folder_chosen(self, folder: str) -> None:
        self.settings = dataclasses.replace(self.settings, model_source=folder, model_revision=None, demo=False)
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
        self.bridge.send(EndTake())

    def reset_conversation(self) -> None:
        self.bridge.send(Reset())
        self.history.show_live()
        self.transcript.clear()
        self.rtf.clear_value()

    def choose_export_path(self) -> None:
        folder = QStandardPaths.writableLocation(QStandardPaths.StandardLocation.DocumentsLocation)
        default = str(Path(folder) / time.strftime("voicechat-%Y%m%d-%H%M%S.wav"))
        path, _ = QFileDialog.getSaveFileName(self, self.tr("Export conversation"), default,
                                              self.tr("WAV audio (*.wav)"))
        if path:
            self.export_to(path)

    def export_to(self, path: str) -> None:
        if not path.lower().endswith(".wav"):
            path += ".wav"
        self.bridge.send(Export(path))

    def open_settings(self) -> SettingsDialog:
        self.bridge.send(ListDevices())  # refresh for next time; the dialog uses what we have now
        dialog = SettingsDialog(self.settings, self.devices, self)
        dialog.accepted.connect(lambda: self.apply_settings(dialog.result_settings()))
        dialog.finished.connect(dialog.deleteLater)
        self.settings_dialog = dialog
        dialog.open()
        return dialog

    def apply_settings(self, new: Settings) -> None:
        """Send only what changed: decoding from the next turn, voice in place, reload only if needed."""
        old, self.settings = self.settings, new
        self._save_settings()
        # A new prompt starts a new conversation in the engine (the prompt is the start of the model's
        # context); the transcript follows when the engine says so (ConversationCleared), which is
        # after the answer it may be giving now.
        if (new.sampling, new.system_prompt, new.max_answer_seconds) != (
                old.sampling, old.system_prompt, old.max_answer_seconds):
            self.bridge.send(ApplySettings(new.sampling, new.system_prompt, new.max_answer_seconds))
        if (new.input_device, new.output_device) != (old.input_device, old.output_device):
            self.bridge.send(SelectDevices(new.input_device, new.output_device))
        model_changed = (new.model_source, new.model_revision, new.demo, new.context_tokens) != (
            old.model_source, old.model_revision, old.demo, old.context_tokens)
        if model_changed:
            self.bridge.send(self._load_command(allow_download=False))
        elif new.lora != old.lora:
            self.bridge.send(SwitchVoice(new.lora))
        if new.ptt_key != old.ptt_key:
            self.key_filter.set_key(key_from_text(new.ptt_key) or Qt.Key.Key_Space)
            self._apply_ptt_key_label()
        if new.language != old.language:
            self.banner.show_message("info", self.tr("The language changes the next time VoiceChat starts."))

    def restart_engine(self) -> None:
        self.engine_dead = False
        self.engine_unresponsive = False
        self.banner.hide()
        for item in [*self.transcript.user_items.values(), *self.transcript.assistant_items.values()]:
            item.replay_button.setEnabled(False)  # the old engine took their audio with it
        if self.transcript.user_items or self.transcript.assistant_items:
            self.transcript.add_notice(self.tr("The engine was restarted; earlier turns cannot be replayed or "
                                               "exported, and the model does not remember them."))
        self.set_state(EngineState.LOADING)
        self.bridge.restart()
        self._send_setup()

    def _on_banner_action(self, action_id: str) -> None:
        if action_id == "restart":
            self.restart_engine()
        elif action_id == "choose_model":
            self.banner.hide()
            self.show_first_run()

    # ================================================================== engine events

    def set_state(self, state: EngineState) -> None:
        self.state = state
        self.state_indicator.set_state(state)
        usable = state not in (EngineState.LOADING, EngineState.NO_MODEL) and not self.engine_dead
        self.ptt.setEnabled(usable)
        self.stop_action.setEnabled(state in (EngineState.THINKING, EngineState.SPEAKING))
        self.export_action.setEnabled(not self.engine_dead)
        self.reset_action.setEnabled(usable)
        if state is not EngineState.LOADING:
            self.progress_label.clear()
            self.progress_bar.hide()

    def on_event(self, event: Event) -> None:  # noqa: C901 (a flat dispatch reads best here)
        if self.history.handles(event):
            self.history.on_event(event)
        elif isinstance(event, InputLevel):
            self.level.set_level(event.rms, event.peak, event.clipping)
        elif isinstance(event, StateChanged):
            self.set_state(event.state)
        elif isinstance(event, TextDelta):
            self.transcript.append_text(event.turn_id, event.text)
        elif isinstance(event, AudioChunkQueued):
            self.audio_chunks += 1
        elif isinstance(event, LiveRtf):
            self.rtf.set_rtf(event.rtf, live=True)
        elif isinstance(event, UserTakeAdded):
            self.transcript.add_user_take(event.turn_id, event.duration_s)
        elif isinstance(event, AssistantTurnStarted):
            self.transcript.start_assistant(event.turn_id, event.greedy)
        elif isinstance(event, AssistantTurnFinished):
            self.transcript.finish_assistant(event.turn_id, event.text, event.duration_s, event.cancelled)
        elif isinstance(event, TurnMetrics):
            self.latency.add_turn(event)
            if event.rtf is not None:
                self.rtf.set_rtf(event.rtf, live=False)
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
            if self.banner.level == "warning" and self.banner._action_id == "choose_model":
                self.banner.hide()
        elif isinstance(event, Devices):
            self.devices = event
        elif isinstance(event, ModelMissing):
            self.show_first_run(resume=self.settings.model_source is not None and not self.settings.demo)
        elif isinstance(event, DownloadCancelled):
            if self.first_run is not None:
                self.first_run.show_choices(self.tr("Download cancelled. The files already downloaded are kept for next time."))
        elif isinstance(event, Exported):
            self.exported_paths = event.paths
            self.banner.show_message("info", self.tr("Conversation exported: %1").replace(
                "%1", ", ".join(Path(p).name for p in event.paths)), details="\n".join(event.paths))
        elif isinstance(event, EngineError):
            self._on_error(event)
        elif isinstance(event, ChangeDeferred):
            self._on_change_deferred(event)
        elif isinstance(event, ConversationCleared):
            if event.cause == "system_prompt" and (self.transcript.user_items or self.transcript.assistant_items):
                self.transcript.clear()
                self.transcript.add_notice(self.tr("The new system prompt starts a new conversation."))

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

    def _on_take_rejected(self, event: TakeRejected) -> None:
        if event.reason == "too_short":
            text = self.tr("That take was too short (%1 s): hold the button while you speak.")
        else:
            text = self.tr("That take was too long and was cut at %1 s.")
        self.transcript.add_notice(text.replace("%1", f"{event.duration_s:.1f}"))

    def stage_text(self, stage: str) -> str:
        if stage == "download":
            return self.tr("Downloading the model")
        if stage == "load_weights":
            return self.tr("Loading weights")
        if stage == "merge_voice":
            return self.tr("Merging the voice")
        if stage == "capture_graphs":
            return self.tr("Capturing CUDA graphs")
        if stage == "warm_up":
            return self.tr("Warming up (one silent turn)")
        if stage == "build_demo":
            return self.tr("Building the demo model")
        if stage == "ready":
            return self.tr("Model ready")
        return self.tr("Starting (%1)").replace("%1", stage)

    def _on_progress(self, event: Progress) -> None:
        if event.stage == "download" and self.first_run is not None:
            self.first_run.set_progress(event)
        text = self.stage_text(event.stage)
        if event.detail and event.stage != "download":
            text += f" — {event.detail}"
        self.progress_label.setText(text)
        self.progress_bar.show()
        if event.fraction is None:
            self.progress_bar.setRange(0, 0)
        else:
            self.progress_bar.setRange(0, 1000)
            self.progress_bar.setValue(int(max(0.0, min(1.0, event.fraction)) * 1000))

    def _on_error(self, event: EngineError) -> None:
        self.last_error = event
        titles = {
            "model": self.tr("Model"),
            "lora": self.tr("Voice"),
            "audio_device": self.tr("Audio device"),
            "take": self.tr("Recording"),
            "gpu_memory": self.tr("GPU memory"),
            "settings": self.tr("Settings"),
            "export": self.tr("Export"),
            "history": self.tr("History"),
        }
        title = titles.get(event.kind, self.tr("Internal error"))
        message = engine_text(event.message, event.template, event.values, event.part_lists)
        text = f"<b>{title}:</b> {message}"
        if event.fatal:
            self.banner.show_message("error", text, details=event.details, action_id="restart",
                                     action_text=self.tr("Restart engine"))
        else:
            self.banner.show_message("error", text, details=event.details)
        # A failed load leaves no model: offer the choices again, with the reason.
        no_model = event.kind in ("model", "gpu_memory") and self.state is EngineState.NO_MODEL
        if no_model or (self.first_run is not None and self.first_run.downloading):
            self.show_first_run(message)

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
        if info is None:
            for label in (self.device_label, self.vram_label, self.graphs_label, self.model_label, self.voice_label):
                label.clear()
            return
        self.device_label.setText(info.device_name)
        self.vram_label.setText(self.tr("VRAM %1").replace("%1", _format_gib(info.vram_used_bytes))
                                if info.vram_used_bytes is not None else "")
        self.vram_label.setVisible(info.vram_used_bytes is not None)
        if info.graphs_ready:
            self.graphs_label.setText(self.tr("CUDA graphs ready"))
            self.graphs_label.setStyleSheet("color: #2e7d32;")
        else:
            reason = engine_text(info.fallback_reason) if info.fallback_reason else "—"
            self.graphs_label.setText(self.tr("No CUDA graphs: %1").replace("%1", reason))
            self.graphs_label.setStyleSheet("color: #ef6c00;")
        self.model_label.setText(self.tr("Model: %1").replace("%1", info.model_name))
        self.voice_label.setText(self.tr("Voice: %1").replace("%1", info.voice_name or self.tr("default")))
        self.context_gauge.set_usage(self.context_gauge.used, info.context_tokens)

    # ================================================================== closing

    def closeEvent(self, event: QCloseEvent) -> None:
        QApplication.instance().removeEventFilter(self.key_filter)
        self._save_settings()
        # Let the engine close its audio streams; it is a daemon thread, so a hung engine cannot keep
        # the process alive.
        self.bridge.shutdown(wait_s=3.0)
        super().closeEvent(event)
        QTimer.singleShot(0, QApplication.instance().quit)
