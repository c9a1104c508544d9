"""The history commands as the engine thread runs them (engine/worker/thread.py dispatches here).

Each function gets the worker and a command from engine/protocol.py and posts the answer event. None
of them needs the session's lock except `continue_history`, which the command loop runs only between
turns (it is deferred while a turn is being generated).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from engine import protocol as p
from engine.history.service import views_with_ids
from engine.history.store import HistoryError, SavedConversation
from engine.history.turn_record import TurnRecord


def list_history(worker: Any, command: p.ListHistory) -> None:
    worker.history.post_listing()


def open_history(worker: Any, command: p.OpenHistory) -> None:
    # To read: the sound of each turn is read when it is replayed, not now (a file's absence is checked).
    worker._post(worker.history.opened(worker.history.load(command.conversation_id, with_audio=False)))


def delete_history(worker: Any, command: p.DeleteHistory) -> None:
    worker.history.delete(command)


def history_options(worker: Any, command: p.HistoryOptions) -> None:
    worker.history.set_options(command)


def continue_history(worker: Any, command: p.ContinueHistory) -> None:
    """The saved conversation becomes the live one: the model's context, the records (replay, export)
    and the window's transcript; later turns are saved into it."""
    session = worker.session
    if session is None:
        raise HistoryError.of("Load a model to continue a conversation.")
    saved = worker.history.load(command.conversation_id)
    loaded_model = session.info.model_name
    if saved.summary.model != loaded_model:
        raise HistoryError.of(
            "This conversation was held with the model {saved}, not {loaded}: load that model to continue it. "
            "It can still be read, replayed and exported.", saved=saved.summary.model, loaded=loaded_model)
    from engine.history.context import saved_exchanges  # torch: the engine thread has it loaded by now

    plan = saved_exchanges(saved, vocabulary=session.text_vocabulary)
    # The table (engine/worker/table.py) has stopped any answer, replay or take before this runs.
    dropped = session.restore(plan)
    worker.book.clear()
    restored = [worker.book.add(record) for record in records_of(saved, worker._new_id)]  # saved already: not finished
    worker.history.continue_into(saved)
    worker._post(p.HistoryContinued(saved.summary.id, views_with_ids(saved, [r.turn_id for r in restored]),
                                    dropped, plan.skipped))
    worker._post_context()


def replay_history_turn(worker: Any, command: p.ReplayHistoryTurn) -> None:
    audio = worker.history.turn_audio(command.conversation_id, command.turn_id)
    if audio is None or len(audio[0]) == 0:
        raise HistoryError.of("That turn has no audio to replay.")
    worker._play_recorded(*audio)


def export_history(worker: Any, command: p.ExportHistory) -> None:
    saved = worker.history.load(command.conversation_id)
    counter = iter(range(1, len(saved.turns) + 1))
    worker._export(records_of(saved, lambda: next(counter)), command.wav_path, command.labels)  # as Export writes the live one


def records_of(saved: SavedConversation, new_id: Any) -> list[TurnRecord]:
    """The TurnRecords the worker keeps for a saved conversation (a turn without audio gets an empty one)."""
    records = []
    for turn in saved.turns:
        metrics = None
        if turn.metrics:
            try:
                metrics = p.TurnMetrics(**turn.metrics)
            except TypeError:  # saved by another version with other fields
                metrics = None
        greedy = bool(turn.sampling.get("greedy")) if turn.sampling else None
        pcm = turn.pcm if turn.pcm is not None else np.zeros(0, np.float32)
        records.append(TurnRecord(new_id(), turn.role, pcm, turn.sample_rate, text=turn.text, cancelled=turn.cancelled,
                                  metrics=metrics, greedy=greedy if turn.role == "assistant" else None,
                                  started_at=turn.created_at))
    return records


HANDLERS = {
    p.ListHistory: list_history,
    p.OpenHistory: open_history,
    p.DeleteHistory: delete_history,
    p.HistoryOptions: history_options,
    p.ContinueHistory: continue_history,
    p.ReplayHistoryTurn: replay_history_turn,
    p.ExportHistory: export_history,
}
