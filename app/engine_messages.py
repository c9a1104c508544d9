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

from engine.protocol import MessagePart

CONTEXT = "EngineMessages"

# Every template the engine may send, listed so that pyside6-lupdate finds them (the engine cannot
# mark its own strings). Keep in step with engine/audio/devices.py, engine/model/store.py,
# engine/model/lora.py, engine/chat/session.py, engine/worker/precision.py, engine/validation.py, engine/settings.py, engine/tools/reply.py and engine/voices/; tests/test_app_widgets.py checks each has a translation.
TEMPLATES = (
    # engine/audio/echo_advice.py (hands-free: devices that make echo cancellation unreliable)
    QT_TRANSLATE_NOOP("EngineMessages", 'Echo cancellation may be unreliable: "{name}" is used through {host_api}, which gives no capture timing. Choose its WASAPI entry in the settings if there is one.'),
    QT_TRANSLATE_NOOP("EngineMessages", 'Echo cancellation may be unreliable: the microphone "{input}" and the speaker "{output}" are different devices with clocks of their own. Headphones, or a headset\'s own microphone and speaker, work best.'),
    QT_TRANSLATE_NOOP("EngineMessages", 'Echo cancellation may be unreliable over Bluetooth ("{name}"): its delay varies. Wired headphones work best.'),
    QT_TRANSLATE_NOOP("EngineMessages", 'Echo cancellation may be unreliable: "{name}" buffers {ms} ms of sound. Choose another device or driver with less delay.'),
    QT_TRANSLATE_NOOP("EngineMessages", "Hands-free listening failed."),
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
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} is a {kind} adapter; only LoRA voices are supported."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} is a DoRA adapter; only plain LoRA voices are supported."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} also replaces whole modules ({modules}); only LoRA weights are supported."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is unreadable ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} holds a tensor that is not a LoRA weight: {key}."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} holds no LoRA weights."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: module {module} has {weight} missing."),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice {voice} targets {module}, a {kind}; only linear layers are supported."),
    QT_TRANSLATE_NOOP("EngineMessages", "The model folder {folder} cannot be used: {problems}"),
    # ... and its problems (engine/model/store.py, engine/model/loading.py), joined by the separator.
    QT_TRANSLATE_NOOP("EngineMessages", "; "),
    QT_TRANSLATE_NOOP("EngineMessages", "{folder} is not a folder"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is missing"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is not valid JSON ({error})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} does not hold a JSON object"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} lacks {keys}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} (the weights) is missing"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} lacks {count} tensors (e.g. {names})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} has tensors of the wrong shape for config.json: {tensors}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is unreadable (truncated or corrupt: {error})"),
    QT_TRANSLATE_NOOP("EngineMessages", '{file} lacks the {{"format": "pt"}} metadata that the loader requires'),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is truncated ({size} of {expected} bytes)"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} does not describe a model liquid-audio can build ({error})"),
    QT_TRANSLATE_NOOP("EngineMessages", "the audio decoder is missing (neither audio_detokenizer/ nor {file})"),
    QT_TRANSLATE_NOOP("EngineMessages", "loading failed: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The download was cancelled; the files already downloaded are kept for next time."),
    # Bad input (engine/validation.py and the checks it lists: settings, CLI flags, output path, voice,
    # config.json, audio files and takes).
    QT_TRANSLATE_NOOP("EngineMessages", "{name} must be a whole number from {low} to {high} (got {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{name} must be a number from {low} to {high} (got {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "The system prompt must be text."),
    QT_TRANSLATE_NOOP("EngineMessages", "The system prompt is too long ({length} characters; at most {limit})."),
    QT_TRANSLATE_NOOP("EngineMessages", "The system prompt contains a NUL character."),
    QT_TRANSLATE_NOOP("EngineMessages", "The system prompt is too long for the context: {tokens} tokens, at most {limit} fit in a context of {context} tokens. Shorten it or choose a larger context."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} is the input recording; choose another name so the recording is kept."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output path {path} is a folder; give a file name."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output path {path} is a link to nothing."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} cannot be created: {parent} is not a folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output path {path} is not a regular file."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} exists and cannot be overwritten."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} cannot be written: the folder {parent} is read-only."),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} cannot be written: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The output file {path} cannot be written: the folder {folder} does not exist. Check the path, or create the folder first."),  # noqa: E501
    QT_TRANSLATE_NOOP("EngineMessages", "The answer could not be written to {path} ({error}); it was saved to {saved} instead."),
    QT_TRANSLATE_NOOP("EngineMessages", "The answer could not be written to {path} ({error}) nor anywhere else."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is a link to a missing file. It was moved to {moved}. Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is a link to a missing file. Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is too large ({size} bytes; at most {limit}). It was moved to {moved}. Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is too large ({size} bytes; at most {limit}). Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is not UTF-8 text (byte {position}). It was moved to {moved}. Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} is not UTF-8 text (byte {position}). Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} was corrupt ({error}). It was moved to {moved}. Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} was corrupt ({error}). Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "Some settings in {path} were invalid and were reset to their defaults: {fields}. The original file was kept as {moved}."),
    QT_TRANSLATE_NOOP("EngineMessages", "Some settings in {path} were invalid and were reset to their defaults: {fields}."),
    QT_TRANSLATE_NOOP("EngineMessages", "The settings file {path} could not be read ({error}). Default settings are used."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} does not hold a JSON object."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} uses {option}, which a plain LoRA merge does not support."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {field} in adapter_config.json must be a whole number from 1 to {high} (it is {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {field} in adapter_config.json must be a finite number (it is {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {field} in adapter_config.json must be true or false (it is {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {field} in adapter_config.json must be a model name (it is {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {field} in adapter_config.json must be an object of module names and numbers (it is {value})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {key} is not a matrix of numbers ({shape}, {dtype})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: {key} holds NaN or infinite values; the voice is damaged."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice}: module {module} has rank {rank} in adapter_config.json, but its lora_A is {a_shape} and lora_B is {b_shape}."),
    QT_TRANSLATE_NOOP("EngineMessages", "{voice} would change {module} by up to {bound}, far beyond what a trained voice does; check lora_alpha and the weights."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be one of {choices} (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be true or false (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be a whole number (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be a number (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be text (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be a list (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be from {low} to {high} (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be an object (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} must be {expected} (it is {value})"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file}: {key} has {count} entries, but {layers_key} is {layers}"),
    QT_TRANSLATE_NOOP("EngineMessages", "the tokenizer ({files}) cannot be loaded: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} does not exist."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is not a file."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is not a readable audio file ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} cannot be read ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} has a sample rate of {rate} Hz; only {low} to {high} Hz are supported."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is too long ({seconds} s; at most {maximum} s)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is empty."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is too short ({seconds} s; at least {minimum} s is needed)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is too long ({seconds} s; at most {maximum} s)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording contains invalid samples (NaN or infinity)."),
    # Start-up fallbacks (EngineInfo.fallback_reason) and the demo model's name (EngineInfo.model_name):
    # engine.errors.Message strings, shown through engine_str().
    QT_TRANSLATE_NOOP("EngineMessages", "No CUDA GPU: running eagerly on the CPU (much slower than real time)."),
    QT_TRANSLATE_NOOP("EngineMessages", "CUDA graphs disabled: running eagerly on the GPU."),
    QT_TRANSLATE_NOOP("EngineMessages", "CUDA graph capture failed ({error}); running eagerly on the GPU."),
    QT_TRANSLATE_NOOP("EngineMessages", "demo (random weights)"),
    # The worker's answers to commands that cannot be done now (engine/worker.py).
    QT_TRANSLATE_NOOP("EngineMessages", "The model is not loaded yet."),
    QT_TRANSLATE_NOOP("EngineMessages", "That turn has no audio to replay."),
    QT_TRANSLATE_NOOP("EngineMessages", "No model is loaded, so there is no voice to switch."),
    QT_TRANSLATE_NOOP("EngineMessages", "There is nothing to export yet."),
    # Audio streams (engine/audio/).
    QT_TRANSLATE_NOOP("EngineMessages", "Audio capture failed."),
    QT_TRANSLATE_NOOP("EngineMessages", "Audio playback failed."),
    QT_TRANSLATE_NOOP("EngineMessages", "The previous take is still being processed; press again in a moment."),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        'The microphone "{name}" stopped delivering audio (unplugged?). It will be reopened on the next push-to-talk.',
    ),
    QT_TRANSLATE_NOOP(
        "EngineMessages", 'The speaker "{name}" stopped playing (unplugged?). It will be reopened for the next answer.'
    ),
    # Recordings and audio files (engine/chat/session.py, engine/audio/wav.py).
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is empty."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is too short ({seconds} s; at least {minimum} s is needed)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording is too long ({seconds} s; at most {maximum} s)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording contains invalid samples (NaN or infinity)."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} does not exist."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is not a file."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is not a readable audio file ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} cannot be read ({error})."),
    # Models (engine/model/store.py, engine/model/loading.py).
    QT_TRANSLATE_NOOP("EngineMessages", "{source} is neither a model folder nor a Hub repo id like {example}."),
    QT_TRANSLATE_NOOP("EngineMessages", "A revision can only be pinned for a Hub repo id, not for a folder."),
    QT_TRANSLATE_NOOP(
        "EngineMessages",
        "The GPU ran out of memory while loading the model ({memory}). "
        "Close other programs that use the GPU, or use a GPU with more memory.",
    ),
    # The memory check before loading (engine/model/memory.py), capture, and a voice merge (engine/model/lora.py).
    QT_TRANSLATE_NOOP("EngineMessages", "The GPU does not have enough free memory for the model: it needs about {needed} GB ({weights} GB of weights and {runtime} GB to run), but only {free} GB of {total} GB are free. Close programs that use the GPU (games, video, browsers with hardware acceleration), or use a GPU with more memory."),
    QT_TRANSLATE_NOOP("EngineMessages", "The GPU ran out of memory while preparing the model for real time (it needs about {needed} GB, {free} GB are still free). Close programs that use the GPU, or use a GPU with more memory."),
    QT_TRANSLATE_NOOP("EngineMessages", "The GPU has no room to merge the voice {voice}; the previous voice stays. Close other programs that use the GPU and try again."),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice needs the model's bf16 weights for {module}, which are not available."),
    # The weights' precision (engine/worker/precision.py).
    QT_TRANSLATE_NOOP("EngineMessages", "int8 was refused for this model on this GPU: its output differs too much from bf16 ({worst}; allowed: KL up to {max_kl}, text top-1 from {text_top1}). Standard precision (bf16) stays."),
    QT_TRANSLATE_NOOP("EngineMessages", "int8 was refused for this model on this GPU: its audio decoder, which int8 runs in bf16, differs too much from float32 (SNR {snr} dB over {frames} frames; allowed: from {min_snr} dB). Standard precision (bf16) stays."),
    QT_TRANSLATE_NOOP("EngineMessages", "int8 needs an NVIDIA GPU: it is checked against bf16 on the GPU, and only the GPU engine runs it faster. Standard precision (bf16) is used."),
    QT_TRANSLATE_NOOP("EngineMessages", "The int8 check could not run ({error}), so standard precision (bf16) stays."),
    QT_TRANSLATE_NOOP("EngineMessages", "This GPU has no room for the model in bf16, so int8 could not be checked against it on this card; int8 is used without the check."),
    QT_TRANSLATE_NOOP("EngineMessages", "The int8 check was stopped; standard precision (bf16) stays."),
    # A problem that is a library's own message (engine/errors.py): shown as it is.
    QT_TRANSLATE_NOOP("EngineMessages", "{text}"),
    # The conversation history (engine/history).
    QT_TRANSLATE_NOOP("EngineMessages", "The conversation history cannot be opened ({error}); conversations are not saved."),
    QT_TRANSLATE_NOOP("EngineMessages", "The conversation history was made by a newer version of VoiceChat (format {version}); it was moved to {folder} and a new history was started."),
    QT_TRANSLATE_NOOP("EngineMessages", "The conversation history was damaged ({error}); it was moved to {folder} and a new history was started."),
    QT_TRANSLATE_NOOP("EngineMessages", "A turn could not be saved to the history ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "The disk is full: conversations are not being saved for now. The chat goes on, and saving resumes (with the turns since) as soon as there is room."),
    QT_TRANSLATE_NOOP("EngineMessages", "That conversation is no longer in the history."),
    QT_TRANSLATE_NOOP("EngineMessages", "The conversation history is not available."),
    QT_TRANSLATE_NOOP("EngineMessages", "Load a model to continue a conversation."),
    QT_TRANSLATE_NOOP("EngineMessages", "This conversation was held with the model {saved}, not {loaded}: load that model to continue it. It can still be read, replayed and exported."),
    QT_TRANSLATE_NOOP("EngineMessages", "That turn has no audio to replay."),
    # Commands the engine refuses in its current phase (engine/worker/table.py).
    QT_TRANSLATE_NOOP("EngineMessages", "The model is not loaded yet."),
    QT_TRANSLATE_NOOP("EngineMessages", "No model is loaded, so there is no voice to switch."),
    QT_TRANSLATE_NOOP("EngineMessages", "A turn cannot be replayed while you are recording."),
    QT_TRANSLATE_NOOP("EngineMessages", "The recording was lost; press the talk button again."),
    # A voice of the user's own, the data side (engine/voices: clip_check.py, importing.py, dataset.py).
    QT_TRANSLATE_NOOP("EngineMessages", "No speech was heard in this recording. Check that the right microphone is chosen and not muted, then speak and record again."),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice is too quiet ({level} dBFS; at least {minimum} dBFS is needed). Move closer to the microphone or turn its volume up, and record again."),
    QT_TRANSLATE_NOOP("EngineMessages", "The sound is distorted: {percent} % of it was louder than the recording can hold. Move a little away from the microphone or turn its volume down, and record again."),
    QT_TRANSLATE_NOOP("EngineMessages", "There is too much background noise: the voice is only {snr} dB above it (at least {minimum} dB is needed). Record in a quieter place, away from fans, air conditioners and traffic."),
    QT_TRANSLATE_NOOP("EngineMessages", "The speech is too short ({seconds} s; at least {minimum} s is needed). Read the whole sentence, or use a longer piece."),
    QT_TRANSLATE_NOOP("EngineMessages", "The speech is too long ({seconds} s; at most {maximum} s). Split it into shorter sentences."),
    QT_TRANSLATE_NOOP("EngineMessages", "There is a silence of {seconds} s inside the speech (at most {maximum} s). Read the sentence in one go, without stopping."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is not an audio file (wav, flac, ogg or mp3)."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is damaged and cannot be read ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is empty: it holds no audio."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is damaged: it holds invalid samples (NaN or infinity)."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is too long ({minutes} minutes; at most {maximum} minutes a file). Split it into shorter files."),
    QT_TRANSLATE_NOOP("EngineMessages", "{path} is neither UTF-8 nor Shift_JIS text. Save it as UTF-8 and scan again."),
    QT_TRANSLATE_NOOP("EngineMessages", "The folder {folder} does not exist."),
    QT_TRANSLATE_NOOP("EngineMessages", "{folder} is not a folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "The folder {folder} cannot be read ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "The folder {folder} is empty."),
    QT_TRANSLATE_NOOP("EngineMessages", "The folder {folder} holds more than {count} files; choose the folder that holds the recordings."),
    QT_TRANSLATE_NOOP("EngineMessages", "The folder {folder} holds no audio files (wav, flac, ogg or mp3)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The transcript {file} is empty; the model will write one for you to check."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} has no transcript; the model will write one for you to check."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is longer than {maximum} s, so it was split at its pauses into {count} pieces; the model will write their transcripts for you to check."),
    QT_TRANSLATE_NOOP("EngineMessages", "Line {line} of {file} is not in the form file|text and was skipped: {text}"),
    QT_TRANSLATE_NOOP("EngineMessages", "Line {line} of {file} names {name}, which is not an audio file in the folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "Line {line} of {file} lists {name} again; the text of line {first} is used."),
    QT_TRANSLATE_NOOP("EngineMessages", "Line {line} of {file} has no text for {name}; the model will write one for you to check."),
    QT_TRANSLATE_NOOP("EngineMessages", "There is no clip {name} in {folder}."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} could not be saved in {folder} ({error}). Free some space on the disk and try again; the clips saved before are kept."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} could not be deleted ({error})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{minutes} minutes of speech: too little for a steady voice. Collect at least {minimum} minutes; {low} to {high} minutes are recommended."),
    QT_TRANSLATE_NOOP("EngineMessages", "{minutes} minutes of speech: enough to train, but {low} to {high} minutes give a steadier voice."),
    QT_TRANSLATE_NOOP("EngineMessages", "{minutes} minutes of speech: a good amount for training."),
    QT_TRANSLATE_NOOP("EngineMessages", "{minutes} minutes of speech: more than needed. Training takes longer; {low} to {high} minutes are usually enough."),
    QT_TRANSLATE_NOOP("EngineMessages", "{count} clips have no transcript: {names}. Write their text in the wizard or in the list file, or remove them."),
    QT_TRANSLATE_NOOP("EngineMessages", "{count} clips have no transcript: {names} and {more} more. Write their text in the wizard or in the list file, or remove them."),
    QT_TRANSLATE_NOOP("EngineMessages", "No clip in {folder} can be used for training: all {count} were left out. The first, {name}: {reason}"),
    QT_TRANSLATE_NOOP("EngineMessages", "--resume and --replace cannot be given together: resume goes on with the run in {folder}."),
    QT_TRANSLATE_NOOP("EngineMessages", "--resume goes on with the run's own settings: leave out --steps and --rank."),
    QT_TRANSLATE_NOOP("EngineMessages", "A voice is already training; wait for it to end or stop it first."),
    QT_TRANSLATE_NOOP("EngineMessages", "Downloading {file} of {source} failed: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "Load a model first: a voice is trained on the model the app talks with."),
    QT_TRANSLATE_NOOP("EngineMessages", "Load a model to transcribe clips: the model itself hears them."),
    QT_TRANSLATE_NOOP("EngineMessages", "The GPU ran out of memory while training the voice (step {step}); the last checkpoint is kept. Close programs that use the GPU, or train with the int8 base, and resume."),
    QT_TRANSLATE_NOOP("EngineMessages", "The checkpoint in {folder} is damaged ({error}); train again into a new folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "The model folder {folder} has no audio tokenizer ({file}), which training needs to turn speech into the model's audio codes. Download the model again (the app fetches the file) or copy the file into the folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "The model is not loaded; load it to plan or start a training."),
    QT_TRANSLATE_NOOP("EngineMessages", "The run in {folder} was started with other clips or settings, so it cannot be resumed. Resume it with the same data and settings, or train into a new folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "The speech folder {folder} does not exist."),
    QT_TRANSLATE_NOOP("EngineMessages", "The training could not be started: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice could not be written to {file}: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The voice in {file} could not be imported: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "There are no clips to train on."),
    QT_TRANSLATE_NOOP("EngineMessages", "There is no unfinished training in {folder} to resume."),
    QT_TRANSLATE_NOOP("EngineMessages", "This GPU cannot train a voice: it needs about {need} GB, and {free} GB are free even without the chat model. Choose the int8 base, or close programs that use the GPU."),
    QT_TRANSLATE_NOOP("EngineMessages", "This GPU has {free} GB free, but training a voice with the bf16 base needs about {need} GB. Close programs that use the GPU, or choose the int8 base."),
    QT_TRANSLATE_NOOP("EngineMessages", "This GPU has {free} GB free, but training a voice needs about {need} GB even with the int8 base. Close programs that use the GPU."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} cannot be played: {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} holds a file too large for a voice."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} holds files a voice does not have ({names})."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} holds no voice ({names} missing)."),
    QT_TRANSLATE_NOOP("EngineMessages", "{file} is not a voice file (a zip with a voice inside): {error}"),
    QT_TRANSLATE_NOOP("EngineMessages", "{folder} already holds a voice. Choose another folder, or confirm that the new voice replaces it."),
    QT_TRANSLATE_NOOP("EngineMessages", "{folder} holds an unfinished training. Resume it, or choose another folder for a new voice."),
    QT_TRANSLATE_NOOP("EngineMessages", "{folder} is a file, not a folder."),
    QT_TRANSLATE_NOOP("EngineMessages", "A voice is training and has the GPU; the conversation goes on when the training ends (or stop the training)."),
    QT_TRANSLATE_NOOP("EngineMessages", "The training process stopped unexpectedly (status {status}); the last checkpoint is kept. {detail}"),
    QT_TRANSLATE_NOOP("EngineMessages", "The conversation goes on, but the model starts without its memory of it: it was not saved in the history."),
)


def engine_text(
    message: str,
    template: str = "",
    values: Iterable[tuple[str, str]] = (),
    part_lists: Iterable[tuple[str, Iterable[MessagePart]]] = (),
) -> str:
    """`message` in the UI language: its template translated and filled, or `message` unchanged.

    `part_lists` name values that are lists of pieces (a broken model folder's problems): each piece is
    translated the same way, and they are joined with the UI language's separator.
    """
    source = template or message
    translated = QCoreApplication.translate(CONTEXT, source)
    if translated == source and not template:
        return message
    filled = dict(values)
    for name, parts in part_lists:
        filled[name] = engine_parts(parts)
    try:
        return translated.format(**filled)
    except (KeyError, IndexError, ValueError):  # a translation with a broken placeholder: show the English
        return message


# Values that are a library's or the system's own words ("Error while deserializing header: header too large"),
# English whatever the UI's language: the translations leave them out, and the window keeps the engine's whole
# English message in the details instead.
LIBRARY_VALUES = frozenset({"error"})


def library_words(values: Iterable[tuple[str, str]] = (),
                  part_lists: Iterable[tuple[str, Iterable[MessagePart]]] = ()) -> list[str]:
    """The library's own words among a message's values (and its parts' values), in order."""
    words = [value for name, value in values if name in LIBRARY_VALUES]
    for _name, parts in part_lists:
        words += [value for part in parts for name, value in part.values if name in LIBRARY_VALUES]
    return words


def engine_parts(parts: Iterable[MessagePart]) -> str:
    """A list of translatable pieces (a broken model folder's problems), each translated, joined with
    the UI language's separator."""
    separator = QCoreApplication.translate(CONTEXT, "; ")
    return separator.join(engine_text(part.text, part.template, part.values) for part in parts)


def engine_str(text: str) -> str:
    """A text the engine hands over as a plain string (a status-bar name, a fallback reason) in the
    UI language. Such strings may be `engine.errors.Message`s, which carry their template and values."""
    return engine_text(text, getattr(text, "template", ""), tuple(getattr(text, "values", {}).items()))
