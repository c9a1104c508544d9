"""The command table itself (engine/worker/table.py): complete, and safe by construction."""

from __future__ import annotations

import typing
from pathlib import Path

from engine import protocol as p
from engine.worker.table import (
    BUSY,
    DEFERRED_CHANGE,
    PUBLIC_STATE,
    RESTING,
    RUNS_WHILE_CANCELLING,
    TABLE,
    TRANSITIONS,
    Outcome,
    Phase,
    SetPrompt,
    TrainingProcessEnded,
    VoiceStarted,
    VoiceTurnOver,
    describe,
    public_transitions,
)

COMMANDS = [*typing.get_args(p.Command), SetPrompt, VoiceStarted, VoiceTurnOver, TrainingProcessEnded]
# What takes the session's lock (ChatSession.reset / set_system_prompt / switch_voice / close + open).
LOCKING = (SetPrompt, p.Reset, p.SwitchVoice, p.Load)
TURN = (Phase.THINKING, Phase.SPEAKING)


def test_every_command_has_a_rule_in_every_phase() -> None:
    assert {(c, ph) for c in COMMANDS for ph in Phase} == set(TABLE)


def test_nothing_that_takes_the_lock_runs_during_a_turn() -> None:
    for command in LOCKING:
        for phase in TURN:
            assert TABLE[(command, phase)].outcome in (Outcome.AFTER_TURN, Outcome.CANCEL_THEN_RUN), (command, phase)
            assert command not in RUNS_WHILE_CANCELLING


def test_only_commands_that_leave_the_turn_alone_run_between_its_pieces() -> None:
    running = {c for c in COMMANDS if TABLE[(c, Phase.SPEAKING)].outcome is Outcome.RUN}
    # SetHandsFree only sets the listener's flags (mute, on/off): it touches neither the session nor the answer.
    # StopClip ends a voice clip being recorded (none is, during an answer); CancelVoiceTraining writes a line to
    # the training process. VoiceTurnOver lets a held hands-free answer be heard (the player's hold) and makes its
    # records final: it must act at once, and it touches neither the session nor the answer's generation.
    assert running == {p.Ping, p.ListDevices, p.ApplySettings, p.SetHandsFree, p.StopClip, p.CancelVoiceTraining,
                       VoiceTurnOver}


def test_the_engine_rests_only_where_nothing_waits() -> None:
    # A command waiting for "after the turn" must have something to wait for.
    for (command, phase), rule in TABLE.items():
        if phase in RESTING:
            assert rule.outcome is not Outcome.AFTER_TURN, (command, phase)


def test_ping_is_answered_in_every_phase() -> None:
    assert all(TABLE[(p.Ping, phase)].outcome is Outcome.RUN for phase in Phase)


def test_refusals_carry_a_translated_message() -> None:
    ts = (Path(__file__).resolve().parents[1] / "app" / "translations" / "voicechat_ja.ts").read_text(encoding="utf-8")
    refusals = [rule for rule in TABLE.values() if rule.outcome is Outcome.REFUSE]
    assert refusals
    for rule in refusals:
        assert rule.kind and f"<source>{rule.message}</source>" in ts


def test_transitions_and_public_states() -> None:
    assert set(TRANSITIONS) == set(Phase) == set(PUBLIC_STATE)
    steps = public_transitions()
    assert (p.EngineState.SPEAKING, p.EngineState.IDLE) in steps
    assert (p.EngineState.IDLE, p.EngineState.THINKING) not in steps  # a turn starts with a take
    assert all(old is not new for old, new in steps)
    # Every busy phase can end.
    for phase in BUSY:
        assert TRANSITIONS[phase] & (RESTING | {Phase.PLAYING_OUT}), phase


def test_deferred_changes_are_the_ones_the_window_names() -> None:
    assert set(DEFERRED_CHANGE.values()) == {"system_prompt", "voice", "model", "devices"}
    for command in DEFERRED_CHANGE:
        assert TABLE[(command, Phase.SPEAKING)].outcome is Outcome.AFTER_TURN


def test_the_table_prints() -> None:
    text = describe()
    assert "SetPrompt" in text and "cancel+run" in text and len(text.splitlines()) == len(COMMANDS) + 2


def test_barge_in_by_voice_stops_an_answer_as_the_talk_button_does() -> None:
    for phase in Phase:
        voice, button = TABLE[(VoiceStarted, phase)], TABLE[(p.StartTake, phase)]
        if button.outcome is Outcome.REFUSE:
            assert voice.outcome is Outcome.RUN  # not acted on, and no message for a voice nobody asked for
        else:
            assert voice == button, phase
