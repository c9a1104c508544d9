"""The window's side of hands-free conversation (issue 26): the toolbar switch and the settings, remembered
across restarts, the mute, and the states the window names. The engine is scripted here; the real one is
in tests/test_worker_handsfree.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from app_helpers import commands_of, scripted_window

from engine import protocol as p
from engine.settings import Settings, load_settings


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path)


def test_push_to_talk_stays_the_default(window) -> None:  # noqa: ANN001
    assert not window.hands_free_action.isChecked() and not window.mute_action.isEnabled()
    assert commands_of(window, p.SetHandsFree)[-1] == p.SetHandsFree(enabled=False)
    window.bridge.event_received.emit(p.StateChanged(p.EngineState.IDLE))
    assert window.state_indicator.label.text() == "待機中"


def test_the_toolbar_switch_is_remembered_and_the_window_names_the_states(qtbot, window, tmp_path: Path) -> None:  # noqa: ANN001
    window.hands_free_action.trigger()
    assert commands_of(window, p.SetHandsFree)[-1].enabled is True
    assert load_settings(tmp_path / "settings.json").settings.hands_free is True
    assert window.hands_free_action.text() == "ハンズフリー"
    window.bridge.event_received.emit(p.StateChanged(p.EngineState.IDLE))
    assert window.state_indicator.label.text() == "聞き取り中"
    window.bridge.event_received.emit(p.StateChanged(p.EngineState.RECORDING))
    assert window.state_indicator.label.text() == "あなたの声を聞いています"
    window.bridge.event_received.emit(p.StateChanged(p.EngineState.THINKING))
    assert window.state_indicator.label.text() == "考え中"
    window.mute_action.trigger()
    assert commands_of(window, p.SetHandsFree)[-1] == p.SetHandsFree(enabled=True, muted=True)
    window.bridge.event_received.emit(p.StateChanged(p.EngineState.IDLE))
    assert window.state_indicator.label.text() == "マイクはミュート中"


def test_a_restart_starts_hands_free_with_the_saved_timings(qtbot, tmp_path: Path) -> None:  # noqa: ANN001
    saved = Settings(model_source="/models/lfm", hands_free=True, end_of_speech_s=1.2, min_speech_s=0.2,
                     echo_cancellation=False)
    windows = scripted_window(qtbot, tmp_path, settings=saved, startup_commands=5)
    window = next(windows)
    try:
        assert window.hands_free_action.isChecked()
        sent = commands_of(window, p.SetHandsFree)[-1]
        assert sent == p.SetHandsFree(enabled=True, muted=False, end_of_speech_s=1.2, min_speech_s=0.2,
                                      echo_cancellation=False)
        dialog = window.open_settings()
        assert dialog.hands_free.isChecked() and dialog.end_of_speech.value() == pytest.approx(1.2)
        dialog.end_of_speech.setValue(0.8)
        dialog.hands_free.setChecked(False)
        window.apply_settings(dialog.result_settings())
        dialog.reject()
        assert not window.hands_free_action.isChecked()
        assert commands_of(window, p.SetHandsFree)[-1].enabled is False
        assert load_settings(tmp_path / "settings.json").settings.end_of_speech_s == pytest.approx(0.8)
    finally:
        next(windows, None)
