"""Dependencies point one way: app -> engine; inside the engine the real-time layer (the GPU code) imports
nothing from the engine thread's layer. Each check imports in a fresh interpreter and reads sys.modules."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(imports: list[str]) -> list[str]:
    code = (
        "import importlib, json, sys\n"
        f"for name in {imports!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def _modules(package: str) -> list[str]:
    module = __import__(package, fromlist=["_"])
    return [info.name for info in pkgutil.walk_packages(module.__path__, f"{package}.")]


def test_the_engine_loads_no_qt() -> None:
    names = [name for name in _modules("engine") if not name.endswith("__main__")]
    assert "engine.realtime.backend" in names and "engine.audio.capture" in names
    loaded = _loaded_after(names)
    assert "engine.realtime.backend" in loaded  # the imports did run
    assert [m for m in loaded if m.split(".")[0] in ("PySide6", "shiboken6")] == []


def test_the_window_loads_no_torch() -> None:
    loaded = _loaded_after(["app.main_window"])
    assert "app.main_window" in loaded and "engine.protocol" in loaded
    assert [m for m in loaded if m.split(".")[0] == "torch"] == []


def test_the_real_time_layer_imports_nothing_from_the_engine_thread() -> None:
    realtime = _modules("engine.realtime")
    assert "engine.realtime.graphs" in realtime and "engine.realtime.streaming" in realtime
    loaded = _loaded_after(realtime)
    engine_modules = {m for m in loaded if m.startswith("engine.") and not m.startswith("engine.realtime")}
    # Only the torch-free decoding settings and the app's constants from outside the layer; never the
    # queue protocol, the worker, the session, the settings or the model store.
    assert engine_modules == {"engine.constants", "engine.decoding"}, sorted(engine_modules)
