"""Static checks of the Windows delivery files, which no Windows machine runs in this test suite.

installer.iss is parsed here (sections, [Setup] keys, entry parameters, the ISPP #defines it
uses) and compared with what packaging/voicechat.spec produces, read from the spec itself, so a
rename in one file without the other fails here rather than on the Windows build machine.
"""

from __future__ import annotations

import ast
import os
import re
import struct
import uuid
from dataclasses import dataclass, field
from pathlib import Path, PureWindowsPath
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
ISS = ROOT / "installer.iss"
SPEC = ROOT / "packaging" / "voicechat.spec"
ENTRY = ROOT / "packaging" / "voicechat_entry.py"
WORKFLOW = ROOT / ".github" / "workflows" / "windows-installer.yml"
BUILD_PS1 = ROOT / "packaging" / "build_windows.ps1"
GITHUB_ASSET_LIMIT = 2 * 1024**3  # bytes per release asset


# --------------------------------------------------------------------------- a small .iss parser


@dataclass
class IssScript:
    defines: dict[str, str] = field(default_factory=dict)
    setup: dict[str, str] = field(default_factory=dict)
    entries: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    custom_messages: dict[str, str] = field(default_factory=dict)
    code: str = ""


def _split_params(line: str) -> dict[str, str]:
    """'Name: "a; b"; Flags: x y' -> {'Name': 'a; b', 'Flags': 'x y'} (quotes escape by doubling)."""
    params: dict[str, str] = {}
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i] in " \t;":
            i += 1
        if i >= n:
            break
        colon = line.index(":", i)
        key = line[i:colon].strip()
        i = colon + 1
        while i < n and line[i] == " ":
            i += 1
        if i < n and line[i] == '"':
            i += 1
            value = []
            while True:
                if line[i] == '"':
                    if i + 1 < n and line[i + 1] == '"':
                        value.append('"')
                        i += 2
                        continue
                    i += 1
                    break
                value.append(line[i])
                i += 1
            params[key] = "".join(value)
        else:
            end = line.find(";", i)
            end = n if end < 0 else end
            params[key] = line[i:end].strip()
            i = end
    return params


def parse_iss(path: Path) -> IssScript:
    script = IssScript()
    text = path.read_text(encoding="utf-8-sig")

    # ISPP: only plain string #defines are used; `#ifndef X / #define X` gives a default that
    # /DX=... on the ISCC command line overrides, so the first definition wins here.
    for name, value in re.findall(r'^\s*#define\s+(\w+)\s+"([^"]*)"', text, flags=re.M):
        script.defines.setdefault(name, value)

    def expand(line: str) -> str:
        def sub(match: re.Match[str]) -> str:
            name = match.group(1)
            assert name in script.defines, f"undefined ISPP name {{#{name}}} in: {line}"
            return script.defines[name]

        return re.sub(r"\{#(\w+)\}", sub, line)

    section = ""
    code_lines: list[str] = []
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith("#"):
            continue  # preprocessor line
        header = re.fullmatch(r"\[(\w+)\]", stripped)
        if header:
            section = header.group(1)
            continue
        if section == "Code":
            code_lines.append(expand(raw))
            continue
        if not stripped or stripped.startswith(";"):
            continue
        line = expand(stripped)
        if section == "Setup":
            key, _, value = line.partition("=")
            assert key.strip() not in script.setup, f"duplicate [Setup] key {key}"
            script.setup[key.strip()] = value.strip()
        elif section == "CustomMessages":
            key, _, value = line.partition("=")
            script.custom_messages[key.strip()] = value
        else:
            script.entries.setdefault(section, []).append(_split_params(line))
    script.code = "\n".join(code_lines)
    return script


# --------------------------------------------------------------------------- what the spec says


@dataclass
class SpecFacts:
    app_name: str
    excludes: list[str]
    metadata: list[str]
    exe_kwargs: dict[str, Any]
    collect_kwargs: dict[str, Any]
    analysis_kwargs: dict[str, ast.expr]
    contents_directory: str


def read_spec(path: Path) -> SpecFacts:
    """The spec's constants and its EXE/COLLECT arguments, from its syntax tree (no PyInstaller needed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    constants: dict[str, Any] = {}
    calls: dict[str, ast.Call] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            try:
                constants[name] = ast.literal_eval(node.value)
            except ValueError:
                pass
            if isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name):
                calls[node.value.func.id] = node.value

    def kwargs(call_name: str) -> dict[str, Any]:
        assert call_name in calls, f"the spec has no {call_name}(...)"
        result: dict[str, Any] = {}
        for keyword in calls[call_name].keywords:
            assert keyword.arg is not None
            if isinstance(keyword.value, ast.Name) and keyword.value.id in constants:
                result[keyword.arg] = constants[keyword.value.id]
            else:
                try:
                    result[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    result[keyword.arg] = keyword.value  # an expression; kept as syntax
        return result

    exe = kwargs("EXE")
    analysis = {k.arg: k.value for k in calls["Analysis"].keywords if k.arg is not None}
    return SpecFacts(
        app_name=constants["APP_NAME"],
        excludes=constants["EXCLUDES"],
        metadata=constants["METADATA_PACKAGES"],
        exe_kwargs=exe,
        collect_kwargs=kwargs("COLLECT"),
        analysis_kwargs=analysis,
        # PyInstaller >= 6 puts everything but the exe into this folder unless the spec says otherwise.
        contents_directory=exe.get("contents_directory", "_internal"),
    )


@pytest.fixture(scope="module")
def iss() -> IssScript:
    return parse_iss(ISS)


@pytest.fixture(scope="module")
def spec() -> SpecFacts:
    return read_spec(SPEC)


def _exe_path(spec: SpecFacts) -> str:
    return rf"{{app}}\{spec.app_name}.exe"


# --------------------------------------------------------------------------- the parser itself


def test_param_splitter_handles_quotes_and_semicolons() -> None:
    params = _split_params('Name: "{group}\\A; B"; Filename: "{app}\\x.exe"; Flags: nowait postinstall')
    assert params == {"Name": "{group}\\A; B", "Filename": "{app}\\x.exe", "Flags": "nowait postinstall"}
    assert _split_params('Description: "say ""hi"""') == {"Description": 'say "hi"'}


# --------------------------------------------------------------------------- installer.iss


def test_app_id_is_a_fixed_guid(iss: IssScript) -> None:
    app_id = iss.setup["AppId"]
    # Inno needs the opening brace doubled ("{{") so it is not read as a constant.
    match = re.fullmatch(r"\{\{([0-9A-Fa-f-]{36})\}", app_id)
    assert match, f"AppId must look like {{{{GUID}}, got {app_id!r}"
    assert str(uuid.UUID(match.group(1))).upper() == match.group(1).upper()


def test_setup_keys(iss: IssScript, spec: SpecFacts) -> None:
    s = iss.setup
    for key in ("AppName", "AppVersion", "AppPublisher", "DefaultDirName", "OutputBaseFilename", "UninstallDisplayIcon"):
        assert s.get(key), f"[Setup] {key} is missing"
    assert s["AppName"] == spec.app_name
    assert s["PrivilegesRequired"] == "lowest"
    assert set(s["PrivilegesRequiredOverridesAllowed"].split()) & {"dialog", "commandline"}
    assert s["ArchitecturesAllowed"] == "x64compatible"
    assert s["ArchitecturesInstallIn64BitMode"] == "x64compatible"
    assert s["DefaultDirName"].startswith("{autopf}\\")  # per-user or all-users, as the mode says
    assert s["UninstallDisplayIcon"] == _exe_path(spec)
    assert (ROOT / PureWindowsPath(s["SetupIconFile"]).as_posix()).is_file()
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", s["AppVersion"])


def test_release_files_stay_under_githubs_limit(iss: IssScript) -> None:
    assert iss.setup["DiskSpanning"].lower() in {"yes", "true", "1"}
    slice_size = int(iss.setup["DiskSliceSize"])
    assert 262144 <= slice_size < GITHUB_ASSET_LIMIT
    assert int(iss.setup.get("SlicesPerDisk", "1")) == 1  # one slice per .bin file


def test_languages_japanese_and_english(iss: IssScript) -> None:
    languages = {entry["Name"]: entry["MessagesFile"] for entry in iss.entries["Languages"]}
    assert languages == {"japanese": r"compiler:Languages\Japanese.isl", "english": "compiler:Default.isl"}
    for message in ("RemoveUserData", "RemoveUserDataFailed"):
        japanese = iss.custom_messages[f"japanese.{message}"]
        english = iss.custom_messages[f"english.{message}"]
        assert "%1" in japanese and "%1" in english  # the folder being deleted is named
        assert re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", japanese), "the Japanese message is not Japanese"
        assert english.isascii()


def test_files_come_from_the_spec_bundle(iss: IssScript, spec: SpecFacts) -> None:
    bundle = PureWindowsPath("dist", spec.collect_kwargs["name"])
    assert spec.collect_kwargs["name"] == spec.exe_kwargs["name"] == spec.app_name
    # What the spec puts in dist/<name>/: the exe and the contents folder (nothing else).
    layout = {
        bundle / f"{spec.app_name}.exe": "{app}",
        bundle / spec.contents_directory / "*": rf"{{app}}\{spec.contents_directory}",
    }
    sources = iss.entries["Files"]
    assert {PureWindowsPath(f["Source"]) for f in sources} == set(layout), "installer.iss misses part of the bundle"
    for entry in sources:
        source = PureWindowsPath(entry["Source"])
        assert entry["DestDir"] == layout[source]
        flags = entry.get("Flags", "").split()
        assert "ignoreversion" in flags  # the bundle's DLLs must replace older ones on upgrade
        if source.name == "*":
            assert {"recursesubdirs", "createallsubdirs"} <= set(flags)

    # If the bundle was built (packaging/build_linux.sh), the sources must resolve to real files.
    built = ROOT / Path(*bundle.parts)
    if built.is_dir():
        exe_name = spec.app_name + (".exe" if os.name == "nt" else "")
        assert (built / exe_name).is_file()
        assert any((built / spec.contents_directory).iterdir())


def test_upgrade_removes_the_old_bundle_contents(iss: IssScript, spec: SpecFacts) -> None:
    deletes = iss.entries.get("InstallDelete", [])
    assert {"Type": "filesandordirs", "Name": rf"{{app}}\{spec.contents_directory}"} in deletes


def test_shortcuts_and_run_point_at_the_exe(iss: IssScript, spec: SpecFacts) -> None:
    icons = iss.entries["Icons"]
    assert icons, "no shortcuts"
    for icon in icons:
        assert icon["Filename"] == _exe_path(spec), icon
    start_menu = [i for i in icons if i["Name"].startswith(("{autoprograms}", "{group}"))]
    desktop = [i for i in icons if i["Name"].startswith("{autodesktop}")]
    assert start_menu, "no Start-menu shortcut"
    assert desktop and all(i.get("Tasks") == "desktopicon" for i in desktop), "the desktop shortcut must be optional"
    task = next(t for t in iss.entries["Tasks"] if t["Name"] == "desktopicon")
    assert "unchecked" in task.get("Flags", "").split()

    runs = iss.entries["Run"]
    assert [r["Filename"] for r in runs] == [_exe_path(spec)]
    assert {"postinstall", "nowait", "skipifsilent"} <= set(runs[0]["Flags"].split())


def _windows_platformdirs(monkeypatch: pytest.MonkeyPatch, local_appdata: str) -> dict[str, str]:
    """What platformdirs answers on Windows for the app's data/config/log dirs."""
    import platformdirs.windows as win

    monkeypatch.setattr(win, "get_win_folder", lambda csidl: local_appdata)
    dirs = win.Windows(appname="VoiceChat", appauthor="VoiceChat")
    return {
        name: getattr(dirs, name).replace("/", "\\")
        for name in ("user_data_dir", "user_config_dir", "user_log_dir", "user_cache_dir")
    }


def test_uninstaller_asks_before_deleting_exactly_the_app_data(iss: IssScript, monkeypatch: pytest.MonkeyPatch) -> None:
    code = iss.code
    assert "procedure CurUninstallStepChanged(CurUninstallStep: TUninstallStep);" in code
    assert "usPostUninstall" in code
    # The question comes before any deletion, its default button is "No", and silent uninstalls keep data.
    ask = code.index("MsgBox(FmtMessage(CustomMessage('RemoveUserData')")
    assert ask < code.index("DelTree(")
    assert "MB_DEFBUTTON2" in code[ask : code.index("\n", ask)]
    assert code.index("UninstallSilent()") < code.index("DelTree(")

    expanded = re.search(r"ExpandConstant\('\{localappdata\}\\([^']+)'\)", code)
    assert expanded, "the data folder must be computed from {localappdata}"
    local_appdata = r"C:\Users\user\AppData\Local"
    deleted = local_appdata + "\\" + expanded.group(1)
    for name, path in _windows_platformdirs(monkeypatch, local_appdata).items():
        # Models (data dir), settings.json (config dir) and logs all go with that one folder ...
        assert path == deleted or path.startswith(deleted + "\\"), f"{name} {path} is outside {deleted}"
    # ... and it is the app's own folder, never %LOCALAPPDATA% or the author folder as a whole.
    assert PureWindowsPath(deleted).parent != PureWindowsPath(local_appdata)


# --------------------------------------------------------------------------- the PyInstaller spec


def test_spec_settings(spec: SpecFacts) -> None:
    assert "triton" in spec.excludes
    analysis_excludes = spec.analysis_kwargs["excludes"]
    assert isinstance(analysis_excludes, ast.Name) and analysis_excludes.id == "EXCLUDES"
    assert spec.exe_kwargs["console"] is False
    assert spec.exe_kwargs["upx"] is False
    assert spec.collect_kwargs["upx"] is False
    assert spec.exe_kwargs["exclude_binaries"] is True  # one-folder bundle, not one-file
    required = {"transformers", "tokenizers", "huggingface_hub", "safetensors", "peft", "accelerate", "liquid-audio"}
    normalized = {name.replace("_", "-") for name in spec.metadata}
    assert {name.replace("_", "-") for name in required} <= normalized


def test_entry_imports_torch_before_qt_and_the_app() -> None:
    tree = ast.parse(ENTRY.read_text(encoding="utf-8"))
    imports: list[tuple[int, str]] = []
    for node in ast.walk(tree):  # includes imports inside functions
        if isinstance(node, ast.Import):
            imports += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append((node.lineno, node.module))
    by_line = [name for _, name in sorted(imports)]
    assert "torch" in by_line and "app.cli" in by_line
    torch_at = by_line.index("torch")
    assert all(not name.startswith(("PySide6", "app", "engine")) for name in by_line[:torch_at])
    assert torch_at < by_line.index("app.cli")
    # The spec builds from this very file.
    assert "voicechat_entry.py" in SPEC.read_text(encoding="utf-8")


def test_spec_runs_with_real_pyinstaller_hooks(spec: SpecFacts, monkeypatch: pytest.MonkeyPatch) -> None:
    """Execute the spec with PyInstaller's hook helpers but stubbed build steps: the data it
    collects must include the translations, the assets and every required dist-info."""
    pytest.importorskip("PyInstaller.utils.hooks")
    captured: dict[str, Any] = {}

    class Analysis:
        def __init__(self, scripts: list[str], **kwargs: Any) -> None:
            captured["scripts"] = scripts
            captured["analysis"] = kwargs
            self.pure: list[Any] = []
            self.scripts: list[Any] = []
            self.binaries: list[Any] = []
            self.datas: list[Any] = []

    def record(name: str) -> Any:
        def build(*args: Any, **kwargs: Any) -> str:
            captured[name] = kwargs
            return name

        return build

    namespace = {
        "__file__": str(SPEC),
        "SPECPATH": str(SPEC.parent),
        "Analysis": Analysis,
        "PYZ": record("PYZ"),
        "EXE": record("EXE"),
        "COLLECT": record("COLLECT"),
    }
    monkeypatch.chdir(ROOT)
    exec(compile(SPEC.read_text(encoding="utf-8"), str(SPEC), "exec"), namespace)  # noqa: S102

    assert Path(captured["scripts"][0]) == ENTRY
    datas = captured["analysis"]["datas"]
    destinations = {Path(dest).as_posix() for _, dest in datas}
    qm = [src for src, dest in datas if dest == "app/translations"]
    assert qm and all(src.endswith(".qm") and Path(src).is_file() for src in qm)
    assert "assets" in destinations
    for package in spec.metadata:
        wanted = package.replace("-", "_").lower()
        assert any(
            d.lower().startswith(wanted) and d.endswith((".dist-info", ".egg-info")) for d in destinations
        ), f"no metadata collected for {package}"
    assert Path(captured["EXE"]["icon"]).is_file()
    assert captured["EXE"]["name"] == captured["COLLECT"]["name"] == spec.app_name


# --------------------------------------------------------------------------- icon, scripts, workflow


def test_icon_has_the_sizes_windows_uses() -> None:
    data = (ROOT / "assets" / "icon.ico").read_bytes()
    reserved, kind, count = struct.unpack_from("<HHH", data, 0)
    assert (reserved, kind) == (0, 1) and count >= 4
    sizes = set()
    for index in range(count):
        width, height, _, _, planes, bits, length, offset = struct.unpack_from("<BBBBHHII", data, 6 + 16 * index)
        assert offset + length <= len(data)
        payload = data[offset : offset + length]
        if payload.startswith(b"\x89PNG"):
            assert width == 0  # 0 means 256 in the directory
        else:
            header_size, bmp_w, bmp_h = struct.unpack_from("<Iii", payload, 0)
            assert (header_size, bmp_w, bmp_h) == (40, width, 2 * height)  # XOR image + AND mask
        sizes.add(width or 256)
    assert {16, 32, 48, 256} <= sizes
    assert (ROOT / "assets" / "icon.png").read_bytes().startswith(b"\x89PNG")


def test_windows_build_script_and_workflow() -> None:
    ps1 = BUILD_PS1.read_text(encoding="utf-8")
    assert ps1.isascii()  # Windows PowerShell 5.1 reads BOM-less files as ANSI
    assert "https://download.pytorch.org/whl/cu128" in ps1
    assert "packaging\\voicechat.spec" in ps1 and "installer.iss" in ps1
    assert "Inno Setup 6\\ISCC.exe" in ps1
    assert "$LASTEXITCODE" in ps1  # native failures must stop the build

    workflow = WORKFLOW.read_text(encoding="utf-8")
    assert re.search(r"runs-on:\s*windows-latest", workflow)
    pinned = re.search(r"choco install innosetup --version=(\$\{\{ env\.INNO_SETUP_VERSION \}\}|\d+\.\d+\.\d+)", workflow)
    assert pinned, "Inno Setup must be installed at a pinned version"
    version = re.search(r'INNO_SETUP_VERSION:\s*"?(\d+\.\d+\.\d+)"?', workflow)
    assert version and tuple(int(p) for p in version.group(1).split(".")) >= (6, 3, 0)  # x64compatible needs 6.3
    assert "Inno Setup 6\\ISCC.exe" in workflow  # called by full path, not from PATH
    assert "Output/*.exe" in workflow and "Output/*.bin" in workflow
