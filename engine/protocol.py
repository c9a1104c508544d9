"""Messages that cross the queues between the Qt front end and the engine thread.

The front end only ever puts a `Command` on the command queue and reads `Event`s from the event
queue. Both are small frozen dataclasses made of plain Python values (no tensors, no Qt objects),
so either side can be tested alone and nothing is shared between threads except the queues.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

from engine.chat.decoding import MAX_TOP_K, SamplingSettings  # re-exported: commands carry them


class EngineState(enum.Enum):
    """What the engine is doing; the window shows it as 読み込み中 / 待機中 / 録音中 / 考え中 / 話し中."""

    LOADING = "loading"
    IDLE = "idle"
    RECORDING = "recording"
    THINKING = "thinking"
    SPEAKING = "speaking"
    # No model is loaded (first run, a failed load or a cancelled download): the window offers the
    # first-run choices instead of push-to-talk.
    NO_MODEL = "no_model"
    # A voice is training in its own process and the chat model was unloaded to give it the GPU: the
    # conversation pauses until the training ends (then the model comes back with the conversation).
    TRAINING = "training"


# --------------------------------------------------------------------------- commands (app -> engine)


@dataclass(frozen=True)
class Load:
    """Load (or reload) a model. `source` is a folder or a Hub repo id; `demo` builds the tiny demo model."""

    source: str
    lora: str | None = None
    demo: bool = False
    revision: str | None = None
    # The KV cache is sized when the model is loaded, so a new context size needs a (re)load.
    context_tokens: int = 4096
    # False at start-up: a Hub model that is not downloaded yet is answered with `ModelMissing`
    # (the window then offers the first-run choices) instead of starting a multi-GB download unasked.
    allow_download: bool = True
    # "bf16", or "int8" (weight-only: about half the weights' memory and the bytes a frame reads). The first
    # int8 load of a model on a GPU is checked against bf16 (engine/worker/precision.py); a model that fails
    # the check, or a PC without an NVIDIA GPU, gets bf16 and `PrecisionInUse` says so.
    precision: str = "bf16"


@dataclass(frozen=True)
class StartTake:
    """Push-to-talk pressed. While the assistant is speaking this is a barge-in: playback stops."""

    # When the user pressed (`time.monotonic()`; window and engine share the process). A press the engine acts
    # on late (queued behind an export, a model load or the end of a turn) still starts where it was made.
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class EndTake:
    """Push-to-talk released: the take ends (after a short tail) and the turn is generated."""

    at: float = field(default_factory=time.monotonic)  # when the user released (as StartTake.at)


@dataclass(frozen=True)
class Cancel:
    """Stop the answer being generated/played; the conversation stays consistent."""


@dataclass(frozen=True)
class ApplySettings:
    """New decoding settings and limits; they apply from the next turn, without recapture."""

    sampling: SamplingSettings
    system_prompt: str | None = None
    max_answer_seconds: float | None = None


@dataclass(frozen=True)
class SwitchVoice:
    """Merge another LoRA voice (or none) into the loaded model, in place."""

    lora: str | None


@dataclass(frozen=True)
class SelectDevices:
    """Choose audio devices by name (None = system default)."""

    input_device: str | None
    output_device: str | None


@dataclass(frozen=True)
class ListDevices:
    """Ask for the audio devices; answered by `Devices` (the settings dialog lists them). With `rescan` the
    engine first looks again for devices plugged in since (only while it rests: no stream in use)."""

    rescan: bool = False


@dataclass(frozen=True)
class Reset:
    """Forget the conversation (the cache is reset in place)."""


@dataclass(frozen=True)
class ReplayTurn:
    """Play a past turn's audio again (user take or assistant answer)."""

    turn_id: int


@dataclass(frozen=True)
class TranscriptLabels:
    """The words of an exported transcript (.txt), in the window's language: the engine writes them as given."""

    user: str = "User"
    assistant: str = "Assistant"
    interrupted: str = "(interrupted)"
    voice: str = "(voice, {seconds} s)"  # a user's turn; {seconds} with one decimal


@dataclass(frozen=True)
class Export:
    """Write the conversation as one WAV plus transcript (.txt) and timings (.json) next to it."""

    wav_path: str
    labels: TranscriptLabels = TranscriptLabels()


@dataclass(frozen=True)
class Shutdown:
    """Stop the engine thread."""


@dataclass(frozen=True)
class Ping:
    """Are you there? Answered by `Pong` with the same `seq` in every state (the window's watchdog)."""

    seq: int


# History (engine/history): the saved conversations. `conversation_id` is the id a HistoryListed gave.


@dataclass(frozen=True)
class ListHistory:
    """Ask for the saved conversations; answered by `HistoryListed`."""


@dataclass(frozen=True)
class OpenHistory:
    """Read a saved conversation (answered by `HistoryOpened`); the live one is not touched."""

    conversation_id: int


@dataclass(frozen=True)
class ContinueHistory:
    """Make a saved conversation the live one: the model's context is rebuilt from it and talks on."""

    conversation_id: int


@dataclass(frozen=True)
class DeleteHistory:
    """Delete saved conversations (the window has asked for confirmation); `everything`: all of them."""

    conversation_ids: tuple[int, ...] = ()
    everything: bool = False


@dataclass(frozen=True)
class ReplayHistoryTurn:
    """Play a turn of a saved conversation (`turn_id` from `HistoryOpened`)."""

    conversation_id: int
    turn_id: int


@dataclass(frozen=True)
class ExportHistory:
    """Export a saved conversation like `Export` does the live one."""

    conversation_id: int
    wav_path: str
    labels: TranscriptLabels = TranscriptLabels()


@dataclass(frozen=True)
class HistoryOptions:
    """"Don't save this conversation" (False) and the retention limits (0: keep everything)."""

    save_this_conversation: bool = True
    keep_days: int = 0
    max_megabytes: int = 0


@dataclass(frozen=True)
class SetHandsFree:
    """Hands-free listening on or off (push-to-talk keeps working either way), the microphone muted or
    not, and how the voice detector decides where a take ends (engine/audio/voice.py)."""

    enabled: bool
    muted: bool = False
    # Silence after the end of speech before the answer is heard (it is prepared meanwhile); speech that starts
    # again within a pause continues the take either way (engine/audio/turn_taking.py).
    end_of_speech_s: float = 0.3
    min_speech_s: float = 0.1
    echo_cancellation: bool = True


# Training a voice (engine/voices; the engine thread's side is engine/worker/voice_training.py). The speech is
# collected in a data folder (engine/voices/dataset.py): recorded here clip by clip, or imported by the window.


@dataclass(frozen=True)
class StartClip:
    """Start recording one clip for a voice into the data folder `data_dir`, reading `text` (a sentence of the
    reading script, `script_index`); with `replaces` a redo of that clip (the old take stays until the new one
    is saved). Answered by `ClipRecorded` after `StopClip`."""

    data_dir: str
    text: str
    script_index: int | None = None
    replaces: str | None = None
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class StopClip:
    """End the clip being recorded (`keep`), or drop it."""

    keep: bool = True
    at: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class PlayClip:
    """Play a sound file of a voice's data folder or a training preview (a WAV); `Cancel` stops it."""

    path: str


@dataclass(frozen=True)
class TranscribeClip:
    """Transcribe a clip of the data folder with the loaded model (its ASR); answered by `ClipTranscribed`.
    The transcript is not saved: the window shows it for correction."""

    data_dir: str
    name: str


@dataclass(frozen=True)
class PlanVoiceTraining:
    """How much GPU memory and time training the voice of `data_dir` takes on this PC; answered by
    `VoiceTrainingPlan`."""

    data_dir: str
    precision: str = "bf16"


@dataclass(frozen=True)
class StartVoiceTraining:
    """Train a voice from `data_dir` into `out_dir` in a process of its own (`voicechat voice-train`); the chat
    model is unloaded for it when the GPU has no room for both, and comes back after."""

    data_dir: str
    out_dir: str
    precision: str = "bf16"
    steps: int | None = None
    rank: int | None = None
    resume: bool = False
    replace: bool = False  # the user confirmed that the new voice replaces the one in out_dir


@dataclass(frozen=True)
class CancelVoiceTraining:
    """Stop the training after a checkpoint (it can be resumed)."""


@dataclass(frozen=True)
class ExportVoice:
    """Write the voice in `folder` as one zip file to share (checked as a switch would check it); answered by
    `VoiceExported`."""

    folder: str
    zip_path: str


@dataclass(frozen=True)
class ImportVoice:
    """Unpack a shared voice's zip into a new folder of the app's voices (checked first; nothing is written for a
    zip that holds no usable voice); answered by `VoiceImported`."""

    zip_path: str


Command = (
    Load | StartTake | EndTake | Cancel | ApplySettings | SwitchVoice | SelectDevices | ListDevices | Reset
    | ReplayTurn | Export | Shutdown | Ping | ListHistory | OpenHistory | ContinueHistory | DeleteHistory
    | ReplayHistoryTurn | ExportHistory | HistoryOptions | SetHandsFree | StartClip | StopClip | PlayClip
    | TranscribeClip | PlanVoiceTraining | StartVoiceTraining | CancelVoiceTraining | ExportVoice | ImportVoice
)


# --------------------------------------------------------------------------- events (engine -> app)


@dataclass(frozen=True)
class Progress:
    """Start-up or download progress. `fraction` is None when the total is unknown."""

    stage: str  # "download", "load_weights", "merge_voice", "capture_graphs", ...
    fraction: float | None
    detail: str = ""
    done_bytes: int | None = None
    total_bytes: int | None = None


@dataclass(frozen=True)
class StateChanged:
    state: EngineState


@dataclass(frozen=True)
class EngineInfo:
    """Shown in the status bar once a model is loaded."""

    device_name: str
    vram_used_bytes: int | None
    graphs_ready: bool
    fallback_reason: str | None
    model_name: str
    voice_name: str | None
    context_tokens: int


@dataclass(frozen=True)
class PrecisionCost:
    """What one precision costs for the loaded model on this device (engine/model/memory.py's figures)."""

    precision: str  # "bf16" or "int8"
    need_bytes: int  # weights and runtime on the GPU at the loaded context size
    frame_bytes: int  # weight bytes one audio frame reads (the speed on cards bound by memory bandwidth)
    fits: bool  # need_bytes within free_bytes (always True on the CPU)


@dataclass(frozen=True)
class PrecisionInUse:
    """After every load: the precision the model runs in, the one the Load asked for (they differ when int8
    was refused: the window then sets its setting back), and what each precision costs on this device, for
    the settings dialog (the app computes no model figures itself)."""

    precision: str
    requested: str
    costs: tuple[PrecisionCost, ...] = ()
    free_bytes: int | None = None  # what a model may take on this card, the loaded one's memory included; None: CPU
    total_bytes: int | None = None  # the card's memory; None: CPU


@dataclass(frozen=True)
class EngineNotice:
    """Something the user should know that is no error (shown as information)."""

    message: str
    template: str = ""
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class UserTakeAdded:
    turn_id: int
    duration_s: float


@dataclass(frozen=True)
class TakeRejected:
    """A take that was dropped (too short) or cut (too long); `reason` is 'too_short' or 'too_long'."""

    reason: str
    duration_s: float


@dataclass(frozen=True)
class AssistantTurnStarted:
    turn_id: int
    # The decoding settings this turn really uses, so the window (and tests) can show that a change
    # in the settings dialog reached the engine.
    greedy: bool = False


@dataclass(frozen=True)
class TextDelta:
    turn_id: int
    text: str


@dataclass(frozen=True)
class AudioChunkQueued:
    """A piece of the answer's PCM was queued for playback."""

    turn_id: int
    samples: int
    sample_rate: int
    total_seconds: float


@dataclass(frozen=True)
class LiveRtf:
    """Updated while speaking: generation time so far over audio produced so far."""

    turn_id: int
    rtf: float
    frames: int


@dataclass(frozen=True)
class TurnMetrics:
    """Latency waterfall of one turn, in milliseconds from push-to-talk release."""

    turn_id: int
    audio_encoded_ms: float
    prefill_done_ms: float
    first_text_ms: float | None
    first_audio_frame_ms: float | None
    first_audible_ms: float | None
    rtf: float | None
    frames: int
    text: str
    cancelled: bool = False
    underruns: int = 0  # times playback ran dry during this answer (the player's count)
    # Hands-free: the times above count from the end of speech (the last voiced frame), and this is the
    # part of them spent waiting for the silence that ends the take (None: push-to-talk).
    end_of_speech_wait_ms: float | None = None


@dataclass(frozen=True)
class AssistantTurnFinished:
    turn_id: int
    text: str
    duration_s: float
    cancelled: bool


@dataclass(frozen=True)
class TurnsWithdrawn:
    """Hands-free: the user went on speaking after a pause, so the take before the pause and its half-answer are
    withdrawn (from the transcript, the model's context, the history and the export): the whole sentence comes
    as one new take."""

    turn_ids: tuple[int, ...]
    heard_s: float = 0.0  # how much of the half-answer had been heard (0: none, its sound was still held)


@dataclass(frozen=True)
class AnswerInterrupted:
    """An answer was stopped (barge-in, the stop button) after `heard_s` seconds of it had been heard."""

    turn_id: int
    heard_s: float


@dataclass(frozen=True)
class HandsFreeState:
    """What hands-free listening does now: `listening` (the detector runs), `muted`, and `error` when it
    could not start (say, no microphone)."""

    enabled: bool
    listening: bool
    muted: bool
    error: str = ""


@dataclass(frozen=True)
class InputLevel:
    rms: float
    peak: float
    clipping: bool


@dataclass(frozen=True)
class ContextUsage:
    used_tokens: int
    capacity_tokens: int


@dataclass(frozen=True)
class ContextTrimmed:
    """The oldest whole turns were dropped to make room; the cache was rebuilt once."""

    dropped_turns: int
    used_tokens: int


@dataclass(frozen=True)
class Devices:
    """Audio devices by name; `None` in the selection means the system default."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    selected_input: str | None = None
    selected_output: str | None = None


@dataclass(frozen=True)
class ModelMissing:
    """`Load(allow_download=False)` found no local copy of a Hub model (state becomes NO_MODEL)."""

    source: str


@dataclass(frozen=True)
class DownloadCancelled:
    """A model download was stopped by `Cancel`; the partial files stay and the next download resumes."""

    source: str


@dataclass(frozen=True)
class Exported:
    paths: tuple[str, ...]


@dataclass(frozen=True)
class MessagePart:
    """One translatable piece of a message: an English template with {name} placeholders, and values."""

    template: str
    values: tuple[tuple[str, str], ...] = ()

    @property
    def text(self) -> str:
        return self.template.format(**dict(self.values))


@dataclass(frozen=True)
class EngineError:
    """Something the user must be told about. The engine keeps running unless `fatal`."""

    # "model", "lora", "audio_device", "take", "gpu_memory", "settings", "export", "history", "voice_data",
    # "voice_training", "voice_sharing" (exporting or importing a voice's zip), "internal"
    kind: str
    message: str
    fatal: bool = False
    details: str = ""
    # The message's English template with {name} placeholders and their values, for the app to
    # translate (empty: show `message` as it is).
    template: str = ""
    values: tuple[tuple[str, str], ...] = ()
    # Values that are lists of translatable pieces (a broken model folder's problems): the app
    # translates each piece and joins them; `values` holds the English join.
    part_lists: tuple[tuple[str, tuple[MessagePart, ...]], ...] = ()

    @classmethod
    def templated(cls, kind: str, template: str, **args: object) -> "EngineError":
        """The error whose message is `template` filled with `args` (translatable by the app)."""
        values = {name: str(value) for name, value in args.items()}
        return cls(kind=kind, message=template.format(**values), template=template, values=tuple(sorted(values.items())))

    @classmethod
    def from_exception(cls, kind: str, error: object, *, details: str = "") -> "EngineError":
        """From a UserFacingError (message, template, values and parts carried over)."""
        return cls(
            kind=kind,
            message=getattr(error, "message", None) or str(error),
            details=details or getattr(error, "details", ""),
            template=getattr(error, "template", ""),
            values=tuple(sorted(getattr(error, "values", {}).items())),
            part_lists=tuple((name, tuple(parts)) for name, parts in sorted(getattr(error, "part_lists", {}).items())),
        )


@dataclass(frozen=True)
class Pong:
    """The answer to `Ping`: the engine thread is alive and reading commands."""

    seq: int
    state: EngineState


@dataclass(frozen=True)
class ChangeDeferred:
    """A change that touches the conversation or the cache arrived during an answer: it applies after
    this answer. `change` is "system_prompt", "voice", "model" or "devices"."""

    change: str


@dataclass(frozen=True)
class ConversationCleared:
    """The engine started a new conversation (its records and the model's context are empty).
    `cause` is "system_prompt" (a new prompt was applied), "model" (a model was loaded over one that had a
    conversation) or "reset"."""

    cause: str


@dataclass(frozen=True)
class EngineStopped:
    """The engine thread ended (after Shutdown, or because it died: then `error` says why)."""

    error: str | None = None


@dataclass(frozen=True)
class HistoryEntry:
    conversation_id: int
    started_at: float  # seconds since the epoch
    updated_at: float
    title: str  # the first words of the first answer
    turns: int
    duration_s: float  # audio of both sides
    model: str
    voice: str | None  # the voice of the last answer
    several_voices: bool = False  # its answers were not all spoken with one voice


@dataclass(frozen=True)
class HistoryListed:
    entries: tuple[HistoryEntry, ...]  # newest first
    bytes_on_disk: int
    live_uid: str | None = None
    live_conversation_id: int | None = None  # the saved conversation the live one is being saved into


@dataclass(frozen=True)
class HistoryTurnView:
    turn_id: int
    role: str
    text: str
    duration_s: float
    cancelled: bool
    has_audio: bool
    audio_missing: bool  # the turn had audio but its file is gone or damaged
    created_at: float = 0.0


@dataclass(frozen=True)
class HistoryOpened:
    conversation_id: int
    title: str
    started_at: float
    model: str
    voice: str | None
    turns: tuple[HistoryTurnView, ...]
    several_voices: bool = False  # as HistoryEntry's


@dataclass(frozen=True)
class HistoryContinued:
    """The saved conversation is the live one now; `turns` carry live ids (ReplayTurn, Export)."""

    conversation_id: int
    turns: tuple[HistoryTurnView, ...]
    dropped_turns: int  # the oldest turns left out of the model's context to fit it
    skipped_exchanges: int  # exchanges the model cannot be given back (a take's audio missing, no answer)


@dataclass(frozen=True)
class HistoryStatus:
    saving_this_conversation: bool
    paused: bool  # the disk is full: turns wait in memory
    keep_days: int
    max_megabytes: int


@dataclass(frozen=True)
class ClipRecorded:
    """A clip was recorded and saved into the data folder (`name`), with what its check found (`problems`: the
    reasons in words; an empty tuple is a good clip); `saved` False when nothing was kept (no speech at all)."""

    data_dir: str
    name: str
    duration_s: float
    problems: tuple[MessagePart, ...] = ()
    script_index: int | None = None
    saved: bool = True


@dataclass(frozen=True)
class ClipTranscribed:
    data_dir: str
    name: str
    text: str


@dataclass(frozen=True)
class VoiceTrainingPlan:
    """What training the voice of `data_dir` takes here: memory by the driver's count, and an ESTIMATE of the
    time from the card's published throughput (None where the card is unknown or it is the CPU)."""

    data_dir: str
    precision: str
    clips: int
    minutes: float
    need_bytes: int
    free_bytes: int | None  # None: the CPU
    free_if_unloaded_bytes: int | None  # with the chat model unloaded
    unload_needed: bool  # the chat model must make room
    fits: bool
    estimated_seconds: float | None
    device_name: str
    rank: int = 0  # the LoRA rank a training gets unless it is told one (the wizard's 詳細 shows it)


@dataclass(frozen=True)
class VoiceTrainingProgress:
    """The training process's progress. `stage`: "encode" (clips turned into the model's codes: done/total),
    "load", "train" (step/steps with the losses and the time left)."""

    stage: str
    done: int = 0
    total: int = 0
    loss: float | None = None
    text_loss: float | None = None
    audio_loss: float | None = None
    eta_seconds: float | None = None


@dataclass(frozen=True)
class VoiceTrainingHeldOut:
    step: int
    loss: float


@dataclass(frozen=True)
class VoiceTrainingPreview:
    """The voice so far reading the fixed sentence (a 24 kHz WAV) at a checkpoint."""

    step: int
    path: str


@dataclass(frozen=True)
class VoiceTrainingEnded:
    """`status`: "done" (the voice is in `out_dir`), "cancelled" (resumable), "failed" (the message says why;
    the last checkpoint is kept)."""

    status: str
    out_dir: str
    step: int = 0
    message: str = ""
    template: str = ""
    values: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class VoiceExported:
    folder: str
    zip_path: str


@dataclass(frozen=True)
class VoiceImported:
    zip_path: str
    folder: str  # the new voice's folder in the app's voices


Event = (
    Progress | StateChanged | EngineInfo | UserTakeAdded | TakeRejected | AssistantTurnStarted | TextDelta
    | AudioChunkQueued | LiveRtf | TurnMetrics | AssistantTurnFinished | InputLevel | ContextUsage | ContextTrimmed
    | Devices | ModelMissing | DownloadCancelled | Exported | EngineError | EngineStopped | Pong | ChangeDeferred
    | ConversationCleared | HistoryListed | HistoryOpened | HistoryContinued | HistoryStatus | HandsFreeState
    | PrecisionInUse | EngineNotice | ClipRecorded | ClipTranscribed | VoiceTrainingPlan | VoiceTrainingProgress
    | VoiceTrainingHeldOut | VoiceTrainingPreview | VoiceTrainingEnded | VoiceExported | VoiceImported | TurnsWithdrawn
    | AnswerInterrupted
)

__all__ = [name for name in dir() if not name.startswith("_") and name not in {"annotations", "enum", "dataclass"}]
