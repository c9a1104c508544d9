"""engine/paths.py: the app's folders, and that what the app writes through libraries lands in them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from engine import paths

ROOT = Path(__file__).resolve().parent.parent


def test_every_folder_follows_the_platform_dirs(isolated_user_dirs: Path) -> None:
    # conftest points XDG_* at the temp dir: every folder moves with it, none is computed elsewhere.
    assert paths.data_dir() == isolated_user_dirs / "xdg_data_home" / paths.APP_NAME
    assert paths.config_dir() == isolated_user_dirs / "xdg_config_home" / paths.APP_NAME
    assert paths.log_dir() == isolated_user_dirs / "xdg_state_home" / paths.APP_NAME / "log"
    assert paths.models_dir().parent == paths.demo_model_dir().parent == paths.hub_xet_cache_dir().parent == paths.data_dir()
    assert paths.settings_file().parent == paths.config_dir()


def test_hf_xet_writes_into_the_apps_folder_after_a_download_attempt(tmp_path: Path) -> None:
    """hf_xet writes logs (and caches) when huggingface_hub creates its session; by default into
    ~/.cache/huggingface/xet, which no uninstaller would remove. After engine.model.store.download() they
    go to paths.hub_xet_cache_dir(). A child process: the session is created once per process."""
    home = tmp_path / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "XDG_"))}
    env.update(HOME=str(home), XDG_DATA_HOME=str(tmp_path / "data"), HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT))
    script = """
from engine import paths
from engine.model.store import download
from engine.errors import ModelNotFoundError
try:
    download("org/never-downloaded")  # offline: refused, as a first download would be
except ModelNotFoundError:
    pass
from huggingface_hub.utils._xet import get_xet_session
get_xet_session()
print(paths.hub_xet_cache_dir())
"""
    result = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    xet_dir = Path(result.stdout.strip().splitlines()[-1])
    assert xet_dir == tmp_path / "data" / paths.APP_NAME / "hf-xet"
    written = [p for p in xet_dir.rglob("*") if p.is_file()]
    assert written, "hf_xet wrote nothing: the test no longer shows where it writes"
    assert not (home / ".cache").exists(), sorted((home / ".cache").rglob("*"))
