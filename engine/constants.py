"""The app's constants, each defined once: its name, the model it talks with, and the audio the model
hears and speaks. Plain values with no imports, so every layer (the window, the real-time engine) may
read them."""

APP_NAME = "VoiceChat"
# platformdirs' "appauthor": on Windows the app's folders are %LOCALAPPDATA%\<author>\<name> (engine/paths.py).
APP_AUTHOR = APP_NAME

MODEL_REPO_ID = "LiquidAI/LFM2.5-Audio-1.5B-JP"
DEFAULT_SYSTEM_PROMPT = "Respond with interleaved text and audio."

USER_SAMPLE_RATE = 16_000  # what the model hears: the recorder delivers it, ChatSession.respond() takes it
ANSWER_SAMPLE_RATE = 24_000  # what the model speaks: the decoder produces it, the player plays it
FRAME_SAMPLES = 1920  # one audio frame of an answer: 80 ms at 24 kHz
FRAME_SECONDS = FRAME_SAMPLES / ANSWER_SAMPLE_RATE
END_OF_AUDIO = 2048  # the audio code that ends the speech of an answer (liquid-audio's)

# A voice is a PEFT LoRA adapter folder: these two files make a folder a voice (engine/model/lora.py reads them;
# the window lists the voices that have them without loading torch).
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
