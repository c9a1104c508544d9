"""Dependencies point one way: app -> engine, and inside the engine from the engine thread down to the foundation.

The dynamic checks import in a fresh interpreter and read sys.modules; the static checks read every import
statement of engine/ (also those inside functions, which a dynamic check never runs) against the layer table,
and look for import circles between modules (two modules that import each other, however indirectly).
"""

from __future__ import annotations

import ast
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


def test_the_voice_data_modules_load_no_torch() -> None:
    """The window's voice wizard imports them: reading, checking and importing speech, a voice's card and a run's
    log must not load torch (the training modules beside them do: they run in the training process and the engine
    thread)."""
    modules = [f"engine.voices.{name}" for name in ("reading_script", "clip_check", "importing", "dataset", "voice_card",
                                                    "run_files")]
    assert set(modules) <= set(_modules("engine.voices"))
    loaded = _loaded_after(modules)
    assert "engine.voices.dataset" in loaded
    assert [m for m in loaded if m.split(".")[0] == "torch"] == []


def test_the_real_time_layer_imports_nothing_from_the_engine_thread() -> None:
    realtime = _modules("engine.realtime")
    assert "engine.realtime.graphs" in realtime and "engine.realtime.streaming" in realtime
    loaded = _loaded_after(realtime)
    engine_modules = {m for m in loaded if m.startswith("engine.") and not m.startswith("engine.realtime")}
    # Only the torch-free decoding settings (and the empty package around them), the app's constants and the
    # int8 weights' representation (engine/model/quantized.py, torch only) from outside the layer; never the
    # queue protocol, the worker, the session, the settings or the model store and loader.
    assert engine_modules == {
        "engine.constants", "engine.chat", "engine.chat.decoding", "engine.model", "engine.model.quantized"
    }, sorted(engine_modules)


# The foundation every layer may use (engine/*.py at the top level).
FOUNDATION = {f"engine.{name}" for name in ("constants", "paths", "files", "errors", "logs", "validation", "protocol")}

# What each part of engine/ may import from the rest of engine/ (besides itself), lowest layer first.
MAY_IMPORT: dict[str, set[str]] = {
    # The queues carry the chat core's decoding settings, which live torch-free in engine.chat.decoding.
    "foundation": FOUNDATION | {"engine.chat.decoding"},
    "engine.settings": FOUNDATION,
    "engine.model": FOUNDATION,
    "engine.audio": FOUNDATION,
    # The GPU code: the app's constants, the decoding settings, and the loaded model it runs (a type only);
    # the compiled-kernel cache's folder and atomic write (engine/realtime/kernels/runtime.py).
    # The int8 matrices it reads are engine.model.quantized's (torch only).
    "engine.realtime": {
        "engine.constants", "engine.chat.decoding", "engine.model.loading", "engine.model.quantized", "engine.paths", "engine.files",
    },
    # The chat core runs the model on the real-time engine; a saved conversation is restored through
    # engine.history.context. It never reaches up into the engine thread or the tools.
    "engine.chat": FOUNDATION | {"engine.model", "engine.realtime", "engine.history.context"},
    # The command-line tools drive the chat core directly, without the engine thread.
    "engine.tools": FOUNDATION | {"engine.settings", "engine.model", "engine.chat", "engine.realtime", "engine.audio", "engine.voices"},
    # The engine thread uses everything below it, its history included; the history never imports the
    # engine thread (engine/history/engine_commands.py gets the worker as an argument, and the record of a
    # turn, TurnRecord, is the history's value type).
    "engine.history": FOUNDATION | {"engine.chat"},
    "engine.worker": FOUNDATION | {"engine.model", "engine.chat", "engine.audio", "engine.history", "engine.voices"},
    "engine.bench": FOUNDATION | {"engine.model", "engine.chat", "engine.realtime", "engine.tools", "engine.voices"},
    # A voice of the user's own: the data side (the reading script, the clip checks, importing, the data folder)
    # reads and resamples audio through engine.audio; the trainer will reach the model through engine.model.
    # A voice's data (audio files) and its training (the model, and the chat core's reference loop for previews).
    "engine.voices": FOUNDATION | {"engine.audio", "engine.model", "engine.chat"},
}


def _part_of(module: str) -> str:
    parts = module.split(".")
    if len(parts) >= 2 and f"engine.{parts[1]}" in MAY_IMPORT:
        return f"engine.{parts[1]}"
    assert module in FOUNDATION, f"{module} is in no layer of tests/test_layering.py"
    return "foundation"


def _engine_imports(path: Path) -> set[str]:
    """Every engine or app module `path` imports, wherever the import statement stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from engine import paths` names a module; `from engine.x import name` names the module engine.x.
            found |= {f"{node.module}.{alias.name}" for alias in node.names} if node.module == "engine" else {node.module}
    return {name for name in found if name.split(".")[0] in ("engine", "app")}


def _allowed(target: str, allowed: set[str]) -> bool:
    return any(target == prefix or target.startswith(prefix + ".") for prefix in allowed)


def test_every_import_inside_the_engine_points_down_the_layers() -> None:
    files = sorted((ROOT / "engine").rglob("*.py"))
    assert len(files) > 40
    wrong = []
    for path in files:
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module == "engine":
            continue
        part = _part_of(module)
        own = set() if part == "foundation" else {part}
        wrong += [f"{module} imports {target}" for target in sorted(_engine_imports(path))
                  if not _allowed(target, own | MAY_IMPORT[part])]
    assert wrong == []


def test_the_layer_table_catches_an_import_inside_a_function(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text("def later():\n    from engine.worker import EngineWorker\n    from engine import settings\n")
    imports = _engine_imports(module)
    assert imports == {"engine.worker", "engine.settings"}
    assert not any(_allowed(name, MAY_IMPORT["engine.chat"]) for name in imports)


def test_the_chat_core_and_the_model_layer_never_reach_up_to_the_engine_thread() -> None:
    """The rule of the table that matters most when the chat core changes, said on its own."""
    above = {"engine.worker", "engine.history.service", "engine.history.engine_commands", "engine.tools",
             "engine.settings", "engine.bench", "app"}
    files = [path for part in ("chat", "model") for path in sorted((ROOT / "engine" / part).glob("*.py"))]
    assert any(path.name == "session.py" for path in files)
    reaching_up = {f"{path.relative_to(ROOT)}: {target}" for path in files for target in _engine_imports(path)
                   if _allowed(target, above)}
    assert reaching_up == set()


def _module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def import_graph(root: Path, package: str = "engine") -> dict[str, set[str]]:
    """Module -> the modules of `package` it imports, wherever the import statement stands. `from x import y`
    points at module x.y where that is a module, else at x (whose __init__ defines y). A package's __init__
    running before its submodules is not counted as an import of it: only what the code names."""
    paths = {_module_name(root, path): path for path in sorted((root / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in paths else node.module
                            for alias in node.names}
        graph[module] = {target for target in targets if target in paths and target != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that reach each other through imports (Tarjan's strongly connected
    components of more than one module), each as one circle through it, e.g. [a, b, a]."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)

    def circle_through(group: list[str]) -> list[str]:  # a shortest way from the group's first module back to it
        start, members = group[0], set(group)
        paths = {start: [start]}
        frontier = [start]
        while frontier:
            following = []
            for module in frontier:
                for target in sorted(graph[module] & members):
                    if target == start:
                        return paths[module] + [start]
                    if target not in paths:
                        paths[target] = paths[module] + [target]
                        following.append(target)
            frontier = following
        raise AssertionError(group)

    return [circle_through(group) for group in groups]


def test_no_import_circle_inside_the_engine() -> None:
    graph = import_graph(ROOT)
    assert "engine.worker.thread" in graph and "engine.history.engine_commands" in graph["engine.worker.thread"]
    assert import_circles(graph) == []


def test_the_circle_check_finds_a_planted_circle(tmp_path: Path) -> None:
    """Three modules that reach each other only through a package __init__ and an import inside a function."""
    package = tmp_path / "engine"
    (package / "worker").mkdir(parents=True)
    (package / "history").mkdir()
    (package / "__init__.py").write_text("")
    (package / "history" / "__init__.py").write_text("")
    (package / "worker" / "__init__.py").write_text("from engine.worker.thread import Worker\n")
    (package / "worker" / "thread.py").write_text("from engine.history import commands\nclass Worker: pass\n")
    (package / "history" / "commands.py").write_text("def later():\n    from engine.worker import Worker\n")
    (package / "history" / "store.py").write_text("import engine.history.commands\n")  # reaches the circle, not in it
    circles = import_circles(import_graph(tmp_path))
    assert circles == [["engine.history.commands", "engine.worker", "engine.worker.thread", "engine.history.commands"]]
