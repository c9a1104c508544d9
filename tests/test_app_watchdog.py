"""The window and an engine that stops answering, or that says a change waits for the answer.

On a scripted engine (tests/app_helpers.py) that can be told to stop answering pings, like a hung
engine thread that is still alive."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from app_helpers import ScriptedWorker, scripted_window

from app.bridge import EngineBridge
from engine import protocol as p


def _worker() -> ScriptedWorker:
    return ScriptedWorker.instances[-1]


@pytest.fixture
def window(qtbot, tmp_path: Path):  # noqa: ANN001, ANN201
    yield from scripted_window(qtbot, tmp_path, bridge=EngineBridge(ScriptedWorker, deadline_s=1.5, loading_deadline_s=60.0))


def test_a_hung_engine_is_noticed_and_can_be_restarted(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE))
    qtbot.waitUntil(lambda: window.state_indicator.label.text() == "待機中")
    qtbot.wait(2500)  # longer than the deadline: an engine that answers is never reported
    assert not window.bridge.unresponsive and not window.banner.isVisible()

    hung = _worker()
    hung.answer_pings.clear()  # alive, but no longer reading commands
    qtbot.waitUntil(lambda: window.banner.isVisible(), timeout=5000)
    assert window.bridge.unresponsive
    assert "応答していません" in window.banner.text and window.banner.action_button.text() == "エンジンを再起動"

    window.banner.action_button.click()
    qtbot.waitUntil(lambda: _worker() is not hung and len(_worker().received) >= 4)
    assert [type(c) for c in _worker().received[:4]] == [p.SelectDevices, p.ListDevices, p.ApplySettings, p.Load]
    assert not window.bridge.unresponsive
    hung.die_silently.set()


def test_an_engine_that_answers_again_clears_the_warning(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE))
    _worker().answer_pings.clear()
    qtbot.waitUntil(lambda: window.bridge.unresponsive, timeout=5000)
    assert window.banner.isVisible()
    _worker().answer_pings.set()
    qtbot.waitUntil(lambda: not window.bridge.unresponsive, timeout=5000)
    assert not window.banner.isVisible()


def test_loading_gets_the_longer_deadline(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.LOADING))
    _worker().answer_pings.clear()  # ChatSession.open reads no commands
    qtbot.wait(2500)
    assert not window.bridge.unresponsive


def test_a_new_prompt_during_an_answer_is_announced_and_applied_after_it(qtbot, window) -> None:  # noqa: ANN001
    _worker().post(p.StateChanged(p.EngineState.IDLE), p.UserTakeAdded(1, 1.0), p.StateChanged(p.EngineState.SPEAKING),
                   p.AssistantTurnStarted(2), p.TextDelta(2, "こんにちは"))
    qtbot.waitUntil(lambda: 2 in window.transcript.assistant_items)
    window.apply_settings(dataclasses.replace(window.settings, system_prompt="短く答えてください。"))
    window.conversation.confirm_box.erase_button.click()  # the window asks before a new prompt erases the conversation
    qtbot.waitUntil(lambda: window.conversation.confirm_box is None)
    sent = [c for c in window.bridge.sent if isinstance(c, p.ApplySettings)][-1]
    assert sent.system_prompt == "短く答えてください。"
    assert 2 in window.transcript.assistant_items  # the answer being given stays in view

    _worker().post(p.ChangeDeferred("system_prompt"))
    qtbot.waitUntil(lambda: any("この応答の後" in n.text() for n in window.transcript.notices))
    _worker().post(p.AssistantTurnFinished(2, "こんにちは", 1.0, False), p.StateChanged(p.EngineState.IDLE),
                   p.ConversationCleared("system_prompt"))
    qtbot.waitUntil(lambda: not window.transcript.assistant_items)
    assert [n.text() for n in window.transcript.notices] == ["新しいシステムプロンプトで新しい会話を始めます。"]
