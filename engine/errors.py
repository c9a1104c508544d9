"""Errors the user must be told about, each with a one-line message that says what to do.

Everything that the app shows in a dialog or the CLI prints as `error: ...` derives from
`UserFacingError`; anything else escaping the engine is a bug and is reported as such.
"""

from __future__ import annotations

from engine.protocol import MessagePart


def _one_line(name: str, value: object) -> str:
    """A library's error text can span lines (with a traceback of its own); a message is one line."""
    text = str(value)
    return " ".join(text.split()) if name == "error" else text


class UserFacingError(Exception):
    """An error with a clear, specific message meant for the user (no traceback needed).

    `template` is the English message with `{name}` placeholders and `values` fills them: the app
    translates the template (Qt's translation files) and fills in the same values. Errors raised
    with a plain message are shown as they are.
    """

    kind: str = "internal"

    def __init__(self, message: str, *, template: str = "", values: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.template = template
        self.values = values or {}
        self.part_lists: dict[str, list[MessagePart]] = {}  # see EngineError.part_lists

    @classmethod
    def of(cls, template: str, **args: object) -> "UserFacingError":
        """The error whose message is `template` filled with `args` (translatable by the app)."""
        values = {name: _one_line(name, value) for name, value in args.items()}
        return cls(template.format(**values), template=template, values=values)


class Message(str):
    """A user-visible text handed over as a plain string (a fallback reason, a model's display name).
    It is its English text, so it reads, joins and compares as a string, and it keeps the template and
    values the app translates it from (app/engine_messages.py: engine_str)."""

    template: str
    values: dict[str, str]

    def __new__(cls, template: str, **args: object) -> "Message":
        values = {name: _one_line(name, value) for name, value in args.items()}
        problem = super().__new__(cls, template.format(**values))
        problem.template = template
        problem.values = values
        return problem


class Problem(Message):
    """One thing wrong with a model folder (joined into ModelFilesError's message)."""

    def part(self) -> MessagePart:
        return MessagePart(self.template, tuple(sorted(self.values.items())))


class ModelFilesError(UserFacingError):
    """The model folder is incomplete or broken; the message names every missing or bad file."""

    kind = "model"

    def __init__(self, folder: object, problems: list[str]) -> None:
        self.folder = folder
        self.problems = problems
        values = {"folder": str(folder), "problems": "; ".join(problems)}
        template = "The model folder {folder} cannot be used: {problems}"
        super().__init__(template.format(**values), template=template, values=values)
        # A plain-string problem (e.g. a library's own message) has no translation and shows as it is.
        self.part_lists = {
            "problems": [p.part() if isinstance(p, Problem) else MessagePart("{text}", (("text", str(p)),)) for p in problems]
        }


class ModelNotFoundError(UserFacingError):
    """No model is available locally and it cannot be downloaded now."""

    kind = "model"


class DownloadCancelled(UserFacingError):
    kind = "model"

    def __init__(self) -> None:
        message = "The download was cancelled; the files already downloaded are kept for next time."
        super().__init__(message, template=message)


class LoraError(UserFacingError):
    """A LoRA voice that cannot be merged into the loaded model (the previous voice stays)."""

    kind = "lora"


class AudioInputError(UserFacingError):
    """An input recording that cannot be used (missing, unreadable, empty, too short or too long)."""

    kind = "take"


class GpuMemoryError(UserFacingError):
    """The GPU ran out of memory while loading or preparing the model."""

    kind = "gpu_memory"


class SettingsError(UserFacingError):
    """A setting or a command-line value outside what the app accepts, or an unusable settings file."""

    kind = "settings"


class OutputPathError(UserFacingError):
    """A file the user asked the app to write cannot be written there (the answer is kept elsewhere)."""

    kind = "export"


class VoiceDataError(UserFacingError):
    """Speech for training a voice that cannot be used: a missing or empty folder, a file that is not audio or is
    damaged, clips without transcripts, a clip that cannot be saved (engine/voices)."""

    kind = "voice_data"


class VoiceTrainingError(UserFacingError):
    """A voice cannot be trained, resumed, published or shared as asked (nothing the user made is changed)."""

    kind = "voice_training"
