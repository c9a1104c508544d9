"""Every message the app and the engine can show has a finished Japanese translation.

The messages are gathered by construction, from the source, not from a list kept by hand:

- app/: every `self.tr("…")` (context: the class it is written in, as lupdate reads it),
  `QCoreApplication.translate("Ctx", "…")`, `QT_TRANSLATE_NOOP("Ctx", "…")`, and calls of helpers
  that pass their argument to `translate` with a fixed context (app/crash.py's `_tr`). A `tr()` of
  anything but a literal cannot be translated and fails the test.
- engine/: every call of a function or class that takes a user-visible text as a parameter named
  `message`, `user_message` or `template` (the convention: a text that is not for the window, such
  as the self-test report's lines, takes another name) (UserFacingError and its subclasses, `.of`, `Message`,
  `Problem`, AudioError, `_device_error`, the `EngineError` event, …), found from their signatures.
  A literal there is a message the window can show: it must be in app/engine_messages.py's TEMPLATES
  (so lupdate keeps it) and translated in the "EngineMessages" context. An f-string there cannot be
  translated and fails the test (unless the call also gives its `template`, or is an internal error,
  which shows the exception as it is).
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from dataclasses import dataclass, fields
from pathlib import Path

from app.engine_messages import CONTEXT, TEMPLATES
from engine import protocol

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "app" / "translations" / "voicechat_ja.ts"
MESSAGE_PARAMS = ("message", "user_message", "template")


def _catalogue() -> dict[tuple[str, str], str]:
    """(context, source) -> the finished translation ('' when missing, unfinished or obsolete)."""
    entries: dict[tuple[str, str], str] = {}
    for context in ET.parse(CATALOGUE).getroot().iter("context"):
        name = context.findtext("name") or ""
        for message in context.iter("message"):
            translation = message.find("translation")
            finished = translation is not None and translation.get("type") not in ("unfinished", "obsolete", "vanished")
            entries[(name, message.findtext("source") or "")] = (translation.text or "").strip() if finished else ""
    return entries


def _parse(folder: str) -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8"), str(path))
            for path in sorted((ROOT / folder).rglob("*.py"))}


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{node.lineno}"


# ------------------------------------------------------------------------------------------ app


@dataclass
class _AppStrings:
    found: set[tuple[str, str]]
    not_literal: list[str]


def _app_strings() -> _AppStrings:
    modules = _parse("app")
    # Helpers like crash.py's `_tr(text)`: they call translate("Ctx", <their parameter>).
    helpers: dict[str, str] = {}
    for tree in modules.values():
        for func in ast.walk(tree):
            if isinstance(func, ast.FunctionDef):
                params = {a.arg for a in func.args.args}
                for call in ast.walk(func):
                    if (isinstance(call, ast.Call) and _call_name(call) == "translate" and len(call.args) >= 2
                            and _literal(call.args[0]) and isinstance(call.args[1], ast.Name)
                            and call.args[1].id in params):
                        helpers[func.name] = _literal(call.args[0])  # type: ignore[assignment]
    found: set[tuple[str, str]] = set()
    not_literal: list[str] = []

    def visit(node: ast.AST, path: Path, cls: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, path, child.name)
                continue
            if isinstance(child, ast.Call):
                name = _call_name(child)
                if name == "tr" and isinstance(child.func, ast.Attribute):
                    text = _literal(child.args[0]) if child.args else None
                    if text is None:
                        not_literal.append(_where(path, child))
                    else:
                        found.add((cls, text))
                elif name in ("translate", "QT_TRANSLATE_NOOP") and len(child.args) >= 2:
                    context, text = _literal(child.args[0]), _literal(child.args[1])
                    if context is not None and text is not None:
                        found.add((context, text))
                elif name in helpers and child.args:
                    text = _literal(child.args[0])
                    if text is None:
                        not_literal.append(_where(path, child))
                    else:
                        found.add((helpers[name], text))
            visit(child, path, cls)

    for path, tree in modules.items():
        visit(tree, path, "")
    return _AppStrings(found, not_literal)


def test_the_app_strings_are_found_where_expected() -> None:
    strings = _app_strings().found
    # Samples of each way of marking a string, so that a broken walker cannot pass by finding nothing.
    assert ("ConversationFlow", "There is nothing to export yet.") in strings  # self.tr in a method
    assert ("PttButton", "Recording… release to send") in strings
    assert ("CrashReporter", "An unexpected error occurred.") in strings  # through the _tr helper
    assert (CONTEXT, "No speaker was found. Connect one and try again.") in strings  # QT_TRANSLATE_NOOP
    assert len(strings) > 180


def test_every_app_string_has_a_finished_japanese_translation() -> None:
    strings = _app_strings()
    assert strings.not_literal == [], "tr() of a non-literal cannot be translated"
    catalogue = _catalogue()
    missing = sorted(key for key in strings.found if not catalogue.get(key))
    assert missing == []


# ------------------------------------------------------------------------------------------ engine


def _message_callables(modules: dict[Path, ast.Module]) -> dict[str, list[str]]:
    """Name -> positional parameter names, for every engine function or class that takes a user-visible
    text (a parameter named message / user_message / template). Classes inherit their base's __init__."""
    callables: dict[str, list[str]] = {}
    keyword_only: set[str] = set()
    bases: dict[str, list[str]] = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id for b in node.bases if isinstance(b, ast.Name)]
                for item in node.body:
                    if isinstance(item, ast.FunctionDef) and item.name in ("__init__", "__new__"):
                        params = [a.arg for a in item.args.args][1:]
                        kwonly = [a.arg for a in item.args.kwonlyargs]
                        if set(MESSAGE_PARAMS) & set(params + kwonly):
                            callables[node.name] = params
                            if not set(MESSAGE_PARAMS) & set(params):
                                keyword_only.add(node.name)
            elif isinstance(node, ast.FunctionDef) and node.name not in ("__init__", "__new__"):
                params = [a.arg for a in node.args.args]
                if params[:1] in (["self"], ["cls"]):
                    params = params[1:]
                if set(MESSAGE_PARAMS) & set(params + [a.arg for a in node.args.kwonlyargs]):
                    callables.setdefault(node.name, params)
    # The events are dataclasses: their fields are their parameters.
    for name in dir(protocol):
        cls = getattr(protocol, name)
        if isinstance(cls, type) and hasattr(cls, "__dataclass_fields__"):
            names = [f.name for f in fields(cls)]
            if set(MESSAGE_PARAMS) & set(names):
                callables[name] = names
    changed = True
    while changed:  # subclasses without their own __init__ take their base's
        changed = False
        for cls, cls_bases in bases.items():
            if cls not in callables:
                inherited = next((callables[b] for b in cls_bases if b in callables), None)
                if inherited is not None:
                    callables[cls] = inherited
                    changed = True
    return callables


@dataclass
class _EngineStrings:
    found: dict[str, str]  # message -> where
    untranslatable: list[str]


def _engine_messages() -> _EngineStrings:
    modules = _parse("engine")
    callables = _message_callables(modules)
    found: dict[str, str] = {}
    untranslatable: list[str] = []
    for path, tree in modules.items():
        for call in ast.walk(tree):
            if not isinstance(call, ast.Call) or _call_name(call) not in callables:
                continue
            params = callables[_call_name(call)]
            given: dict[str, ast.AST] = {kw.arg: kw.value for kw in call.keywords if kw.arg}
            for param, value in zip(params, call.args):
                given.setdefault(param, value)
            texts = [given[p] for p in MESSAGE_PARAMS if p in given]
            kind = _literal(given.get("kind"))
            has_template = _literal(given.get("template")) is not None
            for node in texts:
                # `a if cond else b`: both are messages.
                for choice in (node.body, node.orelse) if isinstance(node, ast.IfExp) else (node,):
                    text = _literal(choice)
                    if text is not None:
                        found.setdefault(text, _where(path, call))
                    elif isinstance(choice, ast.JoinedStr) and not has_template and kind != "internal":
                        untranslatable.append(_where(path, call))
    return _EngineStrings(found, untranslatable)


def test_the_engine_messages_are_found_where_expected() -> None:
    found = _engine_messages().found
    assert "The model is not loaded yet." in found  # UserFacingError("…") in the worker
    assert "No speaker was found. Connect one and try again." in found  # through _device_error
    assert "{file} is missing" in found  # Problem("…")
    assert "The voice folder {folder} does not exist." in found  # LoraError.of("…")
    assert "No CUDA GPU: running eagerly on the CPU (much slower than real time)." in found  # Message("…")
    assert "The previous take is still being processed; press again in a moment." in found  # EngineError(message=…)


def test_every_engine_message_can_be_translated() -> None:
    assert _engine_messages().untranslatable == [], (
        "an f-string message cannot be translated: give it as a template with values (UserFacingError.of, Message)")


def test_every_engine_message_has_a_finished_japanese_translation() -> None:
    messages = _engine_messages().found
    catalogue = _catalogue()
    not_listed = sorted(f"{where}: {text}" for text, where in messages.items() if text not in TEMPLATES)
    assert not_listed == [], "add these to app/engine_messages.py TEMPLATES, so lupdate keeps them"
    untranslated = sorted(f"{where}: {text}" for text, where in messages.items() if not catalogue.get((CONTEXT, text)))
    assert untranslated == []
