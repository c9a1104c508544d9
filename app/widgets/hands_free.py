"""The window's hands-free parts (engine/audio/voice.py, engine/audio/turn_taking.py): the toolbar's switch and
mute, what the engine is told (SetHandsFree), how the state indicator, the latency meter and the talk button show
it, and the hands-free events (the listener waiting for the model, a take and its half-answer withdrawn because
the user went on after a pause, an answer stopped after some seconds of it were heard).

The window owns the settings: a flip of the switch goes to it through `on_switched`, which saves it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, Qt
from PySide6.QtGui import QAction, QKeySequence

from engine.protocol import AnswerInterrupted, HandsFreeState, SetHandsFree, TurnsWithdrawn
from engine.settings import Settings


class HandsFreeUi(QObject):
    def __init__(self, window: Any, send: Callable[[object], None], on_switched: Callable[[bool], None]) -> None:
        """`window`: the MainWindow (its settings, state indicator, latency meter, talk button and transcript
        are read when they are needed: they are made after the toolbar's actions)."""
        super().__init__(window)
        self.window = window
        self.send = send
        self.on_switched = on_switched
        # A switch beside push-to-talk, remembered, and a mute.
        self.switch_action = QAction(self.tr("Hands-free"), window)
        self.switch_action.setCheckable(True)
        self.switch_action.setChecked(window.settings.hands_free)
        self.switch_action.setToolTip(self.tr("Talk without holding the button: the app listens, answers when "
                                              "you pause, and stops its answer when you speak."))
        self.switch_action.toggled.connect(self._on_switch_toggled)
        self.mute_action = QAction(self.tr("Mute microphone"), window)
        self.mute_action.setCheckable(True)
        self.mute_action.setShortcut(QKeySequence(Qt.Modifier.CTRL | Qt.Key.Key_M))
        self.mute_action.toggled.connect(lambda _checked: self.send_settings())

    def _on_switch_toggled(self, enabled: bool) -> None:
        self.on_switched(enabled)
        self.send_settings()

    def follow(self, settings: Settings) -> None:
        """The settings dialog changed hands-free settings: the switch follows, the engine is told."""
        self.switch_action.setChecked(settings.hands_free)
        self.send_settings()

    def send_settings(self) -> None:
        """Tell the engine (hands-free on or off, muted, its timings) and show it."""
        window, s = self.window, self.window.settings
        muted = self.mute_action.isChecked()
        self.send(SetHandsFree(enabled=s.hands_free, muted=muted, end_of_speech_s=s.end_of_speech_s,
                               min_speech_s=s.min_speech_s, echo_cancellation=s.echo_cancellation))
        self.mute_action.setEnabled(s.hands_free)
        self.mute_action.setText(self.tr("Microphone muted (unmute)") if muted else self.tr("Mute microphone"))
        window.state_indicator.set_hands_free(s.hands_free, muted)
        window.latency.set_hands_free(s.hands_free)
        window.ptt.setToolTip(self.tr("Hands-free is on: just speak. Holding the button still records a take.")
                              if s.hands_free else "")

    # ------------------------------------------------------------------ engine events

    @staticmethod
    def handles(event: object) -> bool:
        return isinstance(event, (HandsFreeState, TurnsWithdrawn, AnswerInterrupted))

    def on_event(self, event: object) -> None:
        window = self.window
        if isinstance(event, HandsFreeState):
            if event.enabled and not event.listening and window.settings.hands_free:
                window.state_indicator.label.setText(self.tr("Hands-free waits for the model"))
        elif isinstance(event, TurnsWithdrawn):
            # The engine holds these turns no more (an export would not write them).
            window.engine_turns -= sum(1 for turn_id in event.turn_ids if turn_id in window.transcript.user_items)
            window.transcript.on_turn_taking(event)
        elif isinstance(event, AnswerInterrupted):
            window.transcript.on_turn_taking(event)
