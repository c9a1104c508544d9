"""The engine's user-facing messages in the UI language.

The engine (no Qt) writes its messages in English; the ones a user meets most carry their English
template with `{name}` placeholders and the values (`EngineError.template` / `.values`, the same
fields on the engine's errors). Here the template is translated through Qt's translation files, in
the "EngineMessages" context, and filled with the same values. A message without a template, or whose
template has no translation, is shown as the engine wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable

from PySide6.QtCore import QT_TRANSLATE_NOOP, QCoreApplication

CONTEXT = "EngineMessages"

# Every template the engine may send, listed so that pyside6-lupdate finds them (the engine cannot
# mark its own strings). Keep in step with engine/audio/devices.py, engine/model_store.py,
# engine/lora.py and engine/session.py; tests/test_app_widgets.py checks each has a translation.
TEMPLATES = (
    QT_TRANSLATE_NOOP("EngineMessages", "No microphone was found. Connect one and try again."),
    QT_TRANSLATE_NOOP("EngineMessages", "No speaker was found. Connect one and try again."),
    QT_TRANSLATE_NOOP(
        "EngineMessages", 'The microphone "{name}" was not found. It may have been unplugged. Available: {available}.'
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages", 'The speaker "{name}" was not found. It may have been unplugged. Available: {available}.'
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        'The microphone "{name}" could not be opened: it may be unplugged, in use by another application, '
        "or not support the format. ({error})",
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        'The speaker "{name}" could not be opened: it may be unplugged, in use by another application, '
        "or not support the format. ({error})",
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        "The default microphone could not be opened: it may be unplugged, in use by another application, "
        "or not support the format. ({error})",
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        "The default speaker could not be opened: it may be unplugged, in use by another application, "
        "or not support the format. ({error})",
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        "{source} is not downloaded and there is no network connection. "
        "Connect to the internet, choose a local model folder, or use the demo model.",
    ),
    QT_TRANSLATE_NOOP("EngineMessages", "Downloading {source} failed: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{source} is not downloaded yet."),
    QT_TRANSLATE_NOOP("EngineMessages", "No model was given: choose a model folder or a Hub repo id."),
    QT_TRANSLATE_NOOP("EngineMessages", "The GPU ran out of memory during the prefill; try a shorter context."),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice {voice} was trained for {base}, not for the loaded model {model}."),
    QT_TRANSLATE_NOOP(
        "EngineMessages", "The voice {voice} does not fit this model: it targets {module}, which the model does not have."
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        "The voice {voice} does not fit this model: {module} is {rows}×{columns}, "
        "but the adapter's lora_A is {a_shape} and lora_B is {b_shape}.",
    ),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice folder {folder} does not exist."),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice folder {folder} has no {file}."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is not valid JSON ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "The model folder {folder} cannot be used: {problems}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The download was cancelled; the files already downloaded are kept for next time."),
    # Start-up fallbacks (EngineInfo.fallback_reason): fixed sentences, translated as they are.
    QT_TRANSLATE_NOOP("EngineMessages", "No CUDA GPU: running eagerly on the CPU (much slower than real time)."),
    QT_TRANSLATE_NOOP("EngineMessages", "CUDA graphs disabled: running eagerly on the GPU."),
)


def engine_text(message: str, template: str = "", values: Iterable[tuple[str, str]] = ()) -> str:
    """`message` in the UI language: its template translated and filled, or `message` unchanged."""
    source = template or message
    translated = QCoreApplication.translate(CONTEXT, source)
    if translated == source and not template:
        return message
    try:
        return translated.format(**dict(values))
    except (KeyError, IndexError, ValueError):  # a translation with a broken placeholder: show the English
        return message
