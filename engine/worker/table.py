"""What the engine does with each command in each of its phases: one table, read by every loop.

The engine thread reads commands in three places: its main loop, between two pieces of an answer
(while `ChatSession.respond` holds the session's lock), and while a helper thread downloads a model or
writes an export. All three hand every command to `EngineWorker._submit`, which looks it up here.

Outcomes:
- RUN: now.
- CANCEL_THEN_RUN: stop what is running (the answer, its playback, a replay, the take, the download),
  then run: at once if that left the engine at rest, else as soon as the turn or helper has ended.
- AFTER_TURN: when the running turn, playback, take or helper is over (queued in arrival order;
  changes to the conversation or cache tell the window "applies after this answer").
- REFUSE: not now, with a message for the user.

Why the turn rows look as they do: `respond()` holds the session's (non-reentrant) lock from the take
to the last piece, so nothing that takes the lock (a new prompt, reset, voice, load) may run between
two pieces. Those changes wait (AFTER_TURN) or stop the turn first (CANCEL_THEN_RUN).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from engine import protocol as p


class Phase(enum.Enum):
    """The engine's phase; finer than the `EngineState` the window sees (see PUBLIC_STATE)."""

    NO_MODEL = "no_model"
    LOADING = "loading"  # a download/check in a helper thread, then ChatSession.open (which reads no commands)
    IDLE = "idle"
    RECORDING = "recording"  # the take is recorded (also its tail after the release)
    THINKING = "thinking"  # respond() runs and holds the session's lock; no audio queued yet
    SPEAKING = "speaking"  # respond() runs and its audio is being played
    PLAYING_OUT = "playing_out"  # the answer is complete (lock released), its audio still plays
    REPLAYING = "replaying"  # a past turn's audio is played again
    EXPORTING = "exporting"  # a helper thread writes the export files
    # A voice trains in its own process with the GPU the chat model gave up (engine/worker/voice_training.py):
    # no model until it ends; clips, replays, exports and the history still work.
    TRAINING = "training"


@dataclass(frozen=True)
class SetPrompt:
    """Internal: the prompt part of an `ApplySettings` whose prompt differs from the last one asked for.

    Sampling and limits apply at once in every phase (they are read when the next turn starts); a
    new prompt starts a new conversation, so it goes through the table on its own."""

    prompt: str


@dataclass(frozen=True)
class VoiceStarted:
    """Internal: the hands-free listener heard speech (its take `seq` has begun, pre-roll included).

    It goes through the table exactly like the talk button's StartTake, so speech during an answer
    stops it the same way (barge-in by voice); the listener puts it on the command queue."""

    seq: int
    heard_t: float  # time.monotonic() when the speech was confirmed
    continues: int | None = None  # the take (seq) this speech continues after a pause (engine/worker/voice_turns.py)


@dataclass(frozen=True)
class VoiceTurnOver:
    """Internal: the listener's silence after take `seq` says its turn is over (the answer may be heard) or,
    `settled`, that nothing continues it any more (engine/worker/voice_turns.py)."""

    seq: int
    settled: bool = False


@dataclass(frozen=True)
class TrainingProcessEnded:
    """Internal: a voice's training process ended (its reader thread puts this on the command queue, so that
    taking the GPU back runs on the engine thread at a quiet point: engine/worker/voice_training.py)."""

    exit_code: int
    out_dir: str
    last: dict  # its last event (a failure's message, or the step it stopped at)


class Outcome(enum.Enum):
    RUN = "run now"
    CANCEL_THEN_RUN = "cancel, then run"
    AFTER_TURN = "after the turn"
    REFUSE = "refuse"


@dataclass(frozen=True)
class Rule:
    outcome: Outcome
    message: str = ""  # REFUSE: the English template the window translates (EngineMessages)
    kind: str = ""  # REFUSE: the EngineError kind


RUN = Rule(Outcome.RUN)
CANCEL = Rule(Outcome.CANCEL_THEN_RUN)
AFTER = Rule(Outcome.AFTER_TURN)

NOT_LOADED = "The model is not loaded yet."
NO_VOICE_WITHOUT_MODEL = "No model is loaded, so there is no voice to switch."
NO_REPLAY_WHILE_RECORDING = "A turn cannot be replayed while you are recording."
NO_CONTINUE_WITHOUT_MODEL = "Load a model to continue a conversation."
TRAINING_HOLDS_GPU = ("A voice is training and has the GPU; the conversation goes on when the training ends (or "
                      "stop the training).")
NO_TRANSCRIPT_WITHOUT_MODEL = "Load a model to transcribe clips: the model itself hears them."
NO_TRAINING_WITHOUT_MODEL = "Load a model first: a voice is trained on the model the app talks with."

# The phases in which a loop other than the main loop reads commands (a turn between its pieces, or a
# helper wait): a command that must run at a quiet point waits for them to end.
BUSY = frozenset({Phase.LOADING, Phase.THINKING, Phase.SPEAKING, Phase.EXPORTING})
# The phases the engine rests in: nothing is waited for there, so nothing is AFTER_TURN.
RESTING = frozenset({Phase.NO_MODEL, Phase.IDLE, Phase.TRAINING})

_P = Phase
_COLUMNS = (_P.NO_MODEL, _P.LOADING, _P.IDLE, _P.RECORDING, _P.THINKING, _P.SPEAKING, _P.PLAYING_OUT, _P.REPLAYING,
            _P.EXPORTING, _P.TRAINING)
_REFUSE_TAKE = Rule(Outcome.REFUSE, NOT_LOADED, "take")
_REFUSE_VOICE = Rule(Outcome.REFUSE, NO_VOICE_WITHOUT_MODEL, "lora")
_REFUSE_REPLAY = Rule(Outcome.REFUSE, NO_REPLAY_WHILE_RECORDING, "take")
_REFUSE_CONTINUE = Rule(Outcome.REFUSE, NO_CONTINUE_WITHOUT_MODEL, "history")
_TRAINING_TAKE = Rule(Outcome.REFUSE, TRAINING_HOLDS_GPU, "take")
_TRAINING_VOICE = Rule(Outcome.REFUSE, TRAINING_HOLDS_GPU, "lora")
_TRAINING_MODEL = Rule(Outcome.REFUSE, TRAINING_HOLDS_GPU, "model")
_TRAINING_HISTORY = Rule(Outcome.REFUSE, TRAINING_HOLDS_GPU, "history")
_TRAINING_TRAINING = Rule(Outcome.REFUSE, TRAINING_HOLDS_GPU, "voice_training")
_REFUSE_TRANSCRIPT = Rule(Outcome.REFUSE, NO_TRANSCRIPT_WITHOUT_MODEL, "voice_training")
_REFUSE_TRAINING = Rule(Outcome.REFUSE, NO_TRAINING_WITHOUT_MODEL, "voice_training")

# One row per command; the columns are the phases, in the order of _COLUMNS:
#                 NO_MODEL      LOADING       IDLE RECORDING       THINKING SPEAKING PLAYING_OUT REPLAYING EXPORTING TRAINING
_ROWS: dict[type, tuple[Rule, ...]] = {
    p.Ping:          (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN, RUN),
    p.ListDevices:   (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN, RUN),
    p.ApplySettings: (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN, RUN),
    SetPrompt:       (RUN,          RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER, RUN),
    p.SelectDevices: (RUN,          RUN,          RUN, CANCEL,         AFTER,   AFTER,   CANCEL,     CANCEL,   AFTER, RUN),
    p.SwitchVoice:   (_REFUSE_VOICE, AFTER,       RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER, _TRAINING_VOICE),
    p.Reset:         (RUN,          AFTER,        RUN, CANCEL,         CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER, RUN),
    p.Load:          (RUN,          CANCEL,       RUN, CANCEL,         AFTER,   AFTER,   CANCEL,     CANCEL,   AFTER, _TRAINING_MODEL),
    p.StartTake:     (_REFUSE_TAKE, _REFUSE_TAKE, RUN, RUN,            CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER, _TRAINING_TAKE),
    p.EndTake:       (RUN,          RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER, RUN),
    # Barge-in by voice: as StartTake, but never refused (without a model it is simply not acted on).
    VoiceStarted:    (RUN,          RUN,          RUN, RUN,            CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER, RUN),
    VoiceTurnOver:   (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN, RUN),
    # Flags for the listener only: at once in every phase (a mute during a voice take drops it).
    p.SetHandsFree:  (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN, RUN),
    p.Cancel:        (RUN,          RUN,          RUN, RUN,            CANCEL,  CANCEL,  CANCEL,     CANCEL,   RUN, RUN),
    p.ReplayTurn:    (RUN,          AFTER,        RUN, _REFUSE_REPLAY, AFTER,   AFTER,   CANCEL,     CANCEL,   AFTER, RUN),
    p.Export:        (RUN,          AFTER,        RUN, AFTER,          AFTER,   AFTER,   AFTER,      AFTER,    AFTER, RUN),
    p.Shutdown:      (CANCEL,       CANCEL,       RUN, CANCEL,         CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER, RUN),
    # The history (engine/history/engine_commands.py). Reading, deleting and the options touch neither the
    # session nor the player, but they read the database: not between two pieces of an answer. Continuing
    # replaces the conversation, so it stops what runs first.
    p.ListHistory:   (RUN,          RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      RUN, RUN),
    p.OpenHistory:   (RUN,          RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      RUN, RUN),
    p.DeleteHistory: (RUN,          RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      RUN, RUN),
    p.HistoryOptions: (RUN,         RUN,          RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      RUN, RUN),
    p.ContinueHistory: (_REFUSE_CONTINUE, AFTER,  RUN, CANCEL,         CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER, _TRAINING_HISTORY),
    p.ReplayHistoryTurn: (RUN,      AFTER,        RUN, _REFUSE_REPLAY, AFTER,   AFTER,   CANCEL,     CANCEL,   AFTER, RUN),
    p.ExportHistory: (RUN,          AFTER,        RUN, AFTER,          AFTER,   AFTER,   AFTER,      AFTER,    AFTER, RUN),
    # Training a voice (engine/worker/voice_training.py). A clip needs no model; transcribing needs it; a training
    # starts between turns, and its end (TrainingProcessEnded, posted by the reader of its process) brings the
    # chat model back at a quiet point.
    p.StartClip:     (RUN,          AFTER,        RUN, RUN,            CANCEL,  CANCEL,  CANCEL,     CANCEL,   AFTER,     RUN),
    p.StopClip:      (RUN,          RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN,       RUN),
    p.PlayClip:      (RUN,          AFTER,        RUN, _REFUSE_REPLAY, AFTER,   AFTER,   CANCEL,     CANCEL,   AFTER,     RUN),
    p.TranscribeClip: (_REFUSE_TRANSCRIPT, AFTER, RUN, AFTER,          AFTER,   AFTER,   RUN,        RUN,      AFTER,     _TRAINING_TRAINING),
    p.PlanVoiceTraining: (RUN,      AFTER,        RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER,     RUN),
    p.StartVoiceTraining: (_REFUSE_TRAINING, AFTER, RUN, AFTER,        AFTER,   AFTER,   AFTER,      CANCEL,   AFTER,     _TRAINING_TRAINING),
    p.CancelVoiceTraining: (RUN,    RUN,          RUN, RUN,            RUN,     RUN,     RUN,        RUN,      RUN,       RUN),
    TrainingProcessEnded: (RUN,     AFTER,        RUN, AFTER,          AFTER,   AFTER,   AFTER,      AFTER,    AFTER,     RUN),
    # Sharing a voice: files only (the voice is read to check it), never between two pieces of an answer.
    p.ExportVoice:   (RUN,          AFTER,        RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER,     RUN),
    p.ImportVoice:   (RUN,          AFTER,        RUN, RUN,            AFTER,   AFTER,   RUN,        RUN,      AFTER,     RUN),
}
TABLE: dict[tuple[type, Phase], Rule] = {
    (command, phase): rule for command, rules in _ROWS.items() for phase, rule in zip(_COLUMNS, rules, strict=True)
}

# Commands whose CANCEL_THEN_RUN runs at once even inside a turn, because they only set flags: the
# engine stops after the turn has noticed its cancel. Every other CANCEL_THEN_RUN runs at a quiet point.
RUNS_WHILE_CANCELLING = frozenset({p.Shutdown})

# What the window is told when a change waits for the answer ("applies after this answer").
DEFERRED_CHANGE: dict[type, str] = {
    SetPrompt: "system_prompt",
    p.SwitchVoice: "voice",
    p.Load: "model",
    p.SelectDevices: "devices",
}

# Every phase change the engine may make; EngineWorker._set_phase checks each one against this.
TRANSITIONS: dict[Phase, frozenset[Phase]] = {
    _P.NO_MODEL: frozenset({_P.LOADING, _P.EXPORTING, _P.REPLAYING, _P.RECORDING}),
    _P.LOADING: frozenset({_P.IDLE, _P.NO_MODEL}),
    _P.IDLE: frozenset({_P.RECORDING, _P.LOADING, _P.REPLAYING, _P.EXPORTING, _P.TRAINING}),
    _P.RECORDING: frozenset({_P.IDLE, _P.THINKING, _P.NO_MODEL, _P.TRAINING}),
    _P.THINKING: frozenset({_P.SPEAKING, _P.IDLE}),
    _P.SPEAKING: frozenset({_P.PLAYING_OUT, _P.IDLE}),
    _P.PLAYING_OUT: frozenset({_P.IDLE}),
    _P.REPLAYING: frozenset({_P.IDLE, _P.NO_MODEL, _P.TRAINING}),
    _P.EXPORTING: frozenset({_P.IDLE, _P.NO_MODEL, _P.TRAINING}),
    _P.TRAINING: frozenset({_P.NO_MODEL, _P.RECORDING, _P.REPLAYING, _P.EXPORTING}),
}

# What the window sees. EXPORTING shows the state it came from (None: no StateChanged).
PUBLIC_STATE: dict[Phase, p.EngineState | None] = {
    _P.NO_MODEL: p.EngineState.NO_MODEL,
    _P.LOADING: p.EngineState.LOADING,
    _P.IDLE: p.EngineState.IDLE,
    _P.RECORDING: p.EngineState.RECORDING,
    _P.THINKING: p.EngineState.THINKING,
    _P.SPEAKING: p.EngineState.SPEAKING,
    _P.PLAYING_OUT: p.EngineState.SPEAKING,
    _P.REPLAYING: p.EngineState.SPEAKING,
    _P.EXPORTING: None,
    _P.TRAINING: p.EngineState.TRAINING,
}


def public_transitions() -> frozenset[tuple[p.EngineState, p.EngineState]]:
    """The `StateChanged` steps the window may see: TRANSITIONS through PUBLIC_STATE. EXPORTING is
    transparent (it returns to the phase it came from and posts nothing), and steps between phases with
    the same public state (SPEAKING -> PLAYING_OUT) post nothing."""
    steps: set[tuple[p.EngineState, p.EngineState]] = set()
    for before, afters in TRANSITIONS.items():
        for after in afters:
            old, new = PUBLIC_STATE[before], PUBLIC_STATE[after]
            if old is not None and new is not None and old is not new:
                steps.add((old, new))
    return frozenset(steps)


def rule_for(command: object, phase: Phase) -> Rule:
    return TABLE[(type(command), phase)]


def describe() -> str:
    """The table as text (for the docs and the lead's report)."""
    width = max(len(c.__name__) for c in _ROWS)
    head = " " * width + " | " + " | ".join(f"{ph.value:^11}" for ph in _COLUMNS)
    lines = [head, "-" * len(head)]
    short = {Outcome.RUN: "run", Outcome.CANCEL_THEN_RUN: "cancel+run", Outcome.AFTER_TURN: "after",
             Outcome.REFUSE: "refuse"}
    for command, rules in _ROWS.items():
        lines.append(f"{command.__name__:<{width}} | " + " | ".join(f"{short[r.outcome]:^11}" for r in rules))
    return "\n".join(lines)
