"""The app's per-user folders: the one definition every module uses (and installer.iss mirrors).

platformdirs with appname = appauthor = "VoiceChat":

    Windows  data, config, logs: %LOCALAPPDATA%\\VoiceChat\\VoiceChat (logs in its Logs\\ folder)
    Linux    data ~/.local/share/VoiceChat, config ~/.config/VoiceChat, logs ~/.local/state/VoiceChat/log
             (each honours its XDG_*_HOME variable)

On Windows all of these are inside %LOCALAPPDATA%\\VoiceChat\\VoiceChat, the folder the uninstaller
deletes when the user asks it to remove their data (installer.iss, `UserDataDir`; checked by
tests/test_installer_static.py and, for real, tests/test_installer_wine.py).
Functions, not constants: platformdirs reads the environment when called, so tests can point the
folders at a temporary home (tests/conftest.py, `isolated_user_dirs`).
"""

from __future__ import annotations

from pathlib import Path

import platformdirs

from engine.constants import APP_AUTHOR, APP_NAME


def _dirs() -> platformdirs.PlatformDirs:
    return platformdirs.PlatformDirs(APP_NAME, APP_AUTHOR)


def data_dir() -> Path:
    return _dirs().user_data_path


def config_dir() -> Path:
    return _dirs().user_config_path


def log_dir() -> Path:
    return _dirs().user_log_path


def models_dir() -> Path:
    """The Hugging Face cache the app downloads models into."""
    return data_dir() / "models"


def demo_model_dir() -> Path:
    return data_dir() / "demo-model"


def history_dir() -> Path:
    """The saved conversations (engine/history): the database and its audio files."""
    return data_dir() / "history"


def voices_dir() -> Path:
    """The voices the user trained or imported (engine/voices): one PEFT adapter folder each."""
    return data_dir() / "voices"


def voice_data_dir() -> Path:
    """The speech the user recorded or imported to train voices from, one folder per voice."""
    return data_dir() / "voice-data"


def answers_dir() -> Path:
    """Where `reply` keeps an answer that could not be written where the user asked."""
    return data_dir() / "answers"


def hub_xet_cache_dir() -> Path:
    """hf_xet's logs and caches (it would use ~/.cache/huggingface/xet, outside the app's folder)."""
    return data_dir() / "hf-xet"


def kernel_cache_dir() -> Path:
    """The engine's NVRTC kernels as compiled for this GPU (engine/realtime/kernels/runtime.py): a cache,
    rebuilt whenever it is missing or does not match."""
    return data_dir() / "kernel-cache"


def settings_file() -> Path:
    return config_dir() / "settings.json"



def precision_verdicts_file() -> Path:
    """The int8 checks' results, one per model checkpoint (engine/model/precision_verdicts.py)."""
    return data_dir() / "precision-verdicts.json"
