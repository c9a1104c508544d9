"""The engine thread and what it keeps, by concern:

- `thread`: `EngineWorker`, the thread's loops and one handler per command;
- `table`: what each command does in each phase (the one table every loop reads);
- `audio_ports`: the microphone, the speaker, the chosen devices and the hands-free listener;
- `loading`: a Load command's work (the folder found or downloaded, the session opened);
- `precision`: the precision a Load gets (bf16, or int8 after its one-time check against bf16) and its costs;
- `takes`: the recorder, its own channel to the engine, the take in progress;
- `turn`: one answer, from respond() to its end, streamed to the player and the window, and its metrics;
- `helper_thread`: work handed to a helper thread while the engine thread reads commands;
- `records`: the kept conversation (`RecordBook` of `TurnRecord`s, the history's value type from
  engine/history/turn_record.py, with the turn-finished seam) and export.
"""

from engine.worker.records import ANSWER_RATE, EXPORT_GAP_S, USER_RATE, RecordBook, TurnRecord, export_conversation
from engine.worker.table import TABLE, Outcome, Phase
from engine.worker.thread import EngineWorker

__all__ = [
    "ANSWER_RATE",
    "EXPORT_GAP_S",
    "TABLE",
    "USER_RATE",
    "EngineWorker",
    "Outcome",
    "Phase",
    "RecordBook",
    "TurnRecord",
    "export_conversation",
]
