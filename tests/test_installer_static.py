"""Static checks of the Windows delivery files: only what the Inno Setup compiler cannot check.

tests/test_installer_wine.py compiles installer.iss with the real ISCC and installs, upgrades and
uninstalls the result under wine (files, shortcuts, registry, slices, the per-user mode). What is
left for here: facts ISCC accepts either way (a fixed AppId, the release slice size, a custom
message missing in one language, the uninstaller's folder matching engine/paths.py), the PyInstaller
spec and entry point, the icon, and the build script and workflow, which only run on Windows CI.
"""

from __future__ import annotations

import ast
import importlib
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


# --------------------------------------------------------------------------- installer.iss


def test_app_id_is_a_fixed_guid(iss: IssScript) -> None:
    # Any string compiles, but upgrades and the uninstall entry key on it: it must stay this GUID.
    app_id = iss.setup["AppId"]
    # Inno needs the opening brace doubled ("{{") so it is not read as a constant.
    match = re.fullmatch(r"\{\{([0-9A-Fa-f-]{36})\}", app_id)
    assert match, f"AppId must look like {{{{GUID}}, got {app_id!r}"
    assert str(uuid.UUID(match.group(1))).upper() == match.group(1).upper()


def test_release_files_stay_under_githubs_limit(iss: IssScript) -> None:
    # The wine test shrinks the slice size; the release size itself is only checked here.
    assert iss.setup["DiskSpanning"].lower() in {"yes", "true", "1"}
    slice_size = int(iss.defines["SliceSize"])
    assert iss.setup["DiskSliceSize"] == str(slice_size)
    # Headroom below GitHub's limit per release asset, and Setup.exe (~2 MB) is far below it too.
    assert 262144 <= slice_size <= 0.9 * GITHUB_ASSET_LIMIT
    assert int(iss.setup.get("SlicesPerDisk", "1")) == 1  # one slice per .bin file


def test_languages_and_every_message_in_both(iss: IssScript) -> None:
    # ISCC does not check that a custom message exists in every language: a missing one shows up
    # only when Setup needs it, in the one language that lacks it.
    languages = {entry["Name"]: entry["MessagesFile"] for entry in iss.entries["Languages"]}
    assert languages == {"japanese": r"compiler:Languages\Japanese.isl", "english": "compiler:Default.isl"}
    names = {key.split(".", 1)[1] for key in iss.custom_messages}
    assert names == {"RemoveUserData", "RemoveUserDataFailed", "SliceMissing", "SliceDamaged"}
    for message in names:
        japanese = iss.custom_messages[f"japanese.{message}"]
        english = iss.custom_messages[f"english.{message}"]
        assert re.findall(r"%\d", japanese) == re.findall(r"%\d", english) == ["%1"]  # the folder or file is named
        assert re.search(r"[\u3040-\u30ff\u4e00-\u9fff]", japanese), "the Japanese message is not Japanese"
        assert english.isascii()
        assert f"CustomMessage('{message}')" in iss.code, f"{message} is never shown"


def test_uninstaller_deletes_exactly_the_folder_of_engine_paths(iss: IssScript, monkeypatch: pytest.MonkeyPatch) -> None:
    """What "remove my data" deletes is every folder engine/paths.py names on Windows, and no more.

    (tests/test_installer_wine.py checks the same for real, on Linux as root.)"""
    import platformdirs
    import platformdirs.windows

    from engine import paths

    expanded = re.search(r"ExpandConstant\('\{localappdata\}\\([^']+)'\)", iss.code)
    assert expanded, "the data folder must be computed from {localappdata}"
    local_appdata = r"C:\Users\user\AppData\Local"
    deleted = PureWindowsPath(local_appdata, expanded.group(1))
    monkeypatch.setattr(platformdirs.windows, "get_win_folder", lambda csidl: local_appdata)
    monkeypatch.setattr(platformdirs, "PlatformDirs", platformdirs.windows.Windows)
    named = [value for name, value in vars(paths).items() if callable(value) and getattr(value, "__module__", "") == paths.__name__ and not name.startswith("_")]
    assert len(named) >= 5
    for function in named:
        path = PureWindowsPath(str(function()).replace("/", "\\"))
        assert path == deleted or deleted in path.parents, f"{function.__name__}() = {path} is outside {deleted}"
    # ... and it is the app's own folder, never %LOCALAPPDATA% or the author folder as a whole.
    assert deleted.parent != PureWindowsPath(local_appdata)
    assert deleted.parent.name == iss.defines["AppAuthor"] == paths.APP_AUTHOR
    assert deleted.name == iss.defines["AppName"] == paths.APP_NAME


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
    collects must include the translations, the engine's CUDA files, the assets and every required dist-info."""
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
    # Qt's own Japanese for its dialogs (issue 27), as app/i18n.py loads it: next to ours.
    from app.i18n import QT_CATALOGUES

    names = {Path(src).name for src in qm}
    assert {"voicechat_ja.qm", *(f"{name}_ja.qm" for name in QT_CATALOGUES)} <= names
    assert "assets" in destinations
    # The CUDA files land where engine/realtime/kernels/sources.py looks for them: next to its module.
    from engine.realtime.kernels import sources

    kernels_folder = Path(*sources.FOLDER.relative_to(ROOT).parts).as_posix()
    cuda = {Path(src).resolve() for src, dest in datas if Path(dest).as_posix() == kernels_folder}
    assert kernels_folder == "engine/realtime/kernels"
    assert cuda == set(sources.files()) and {path.suffix for path in cuda} == {".cu", ".cuh"}
    assert {sources.FOLDER / kernel.file for kernel in sources.KERNELS.values()} <= cuda
    for package in spec.metadata:
        wanted = package.replace("-", "_").lower()
        assert any(
            d.lower().startswith(wanted) and d.endswith((".dist-info", ".egg-info")) for d in destinations
        ), f"no metadata collected for {package}"
    assert Path(captured["EXE"]["icon"]).is_file()
    assert captured["EXE"]["name"] == captured["COLLECT"]["name"] == spec.app_name
    # Hands-free's native modules, imported only when listening starts, are bundled.
    hidden = captured["analysis"]["hiddenimports"]
    for module in ("pywebrtc_audio", "pywebrtc_audio._webrtc_audio", "webrtcvad", "_webrtcvad"):
        assert module in hidden
        importlib.import_module(module)  # and they are installed where the bundle is built


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


def test_windows_build_script() -> None:
    ps1 = BUILD_PS1.read_text(encoding="utf-8")
    assert ps1.isascii()  # Windows PowerShell 5.1 reads BOM-less files as ANSI
    assert "https://download.pytorch.org/whl/cu128" in ps1
    assert "packaging\\voicechat.spec" in ps1 and "installer.iss" in ps1
    assert "Inno Setup 6\\ISCC.exe" in ps1
    assert "$LASTEXITCODE" in ps1  # native failures must stop the build
    assert '$ErrorActionPreference = "Stop"' in ps1
    # Under "Stop", Windows PowerShell 5.1 turns redirected native stderr into a terminating error:
    # every redirection must sit where the preference was relaxed.
    lines = ps1.splitlines()
    for number, line in enumerate(lines):
        if re.search(r"2>\s*(\$null|&1)", line) and not line.lstrip().startswith("#"):
            before = [l for l in lines[:number] if "$ErrorActionPreference =" in l]
            assert before and '"Continue"' in before[-1], f"line {number + 1}: {line.strip()}"
    assert "[switch]$RemoveVenvBeforeInstaller" in ps1


def _workflow() -> dict[str, Any]:
    import yaml  # PyYAML comes with transformers

    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    workflow["on"] = workflow.pop(True, workflow.get("on"))  # YAML 1.1 reads the key `on` as True
    return workflow


def test_workflow_builds_on_every_change_that_affects_the_installer() -> None:
    triggers = _workflow()["on"]
    assert triggers["push"]["tags"] == ["v*"]
    paths = set(triggers["pull_request"]["paths"])
    assert {"app/**", "engine/**", "assets/**", "packaging/**", "installer.iss", "pyproject.toml", "scripts/constraints.txt"} <= paths
    assert ".github/workflows/windows-installer.yml" in paths


def test_workflow_steps() -> None:
    workflow = _workflow()
    text = WORKFLOW.read_text(encoding="utf-8")
    # Node 20 left the runners: these majors and newer run on Node 24.
    minimum_major = {"actions/checkout": 5, "actions/setup-python": 6, "actions/upload-artifact": 6, "actions/download-artifact": 7}
    used = re.findall(r"uses:\s*([\w-]+/[\w-]+)@v(\d+)", text)
    assert {name for name, _ in used} == set(minimum_major)
    for name, major in used:
        assert int(major) >= minimum_major[name], f"{name}@v{major} runs on Node 20"

    build = workflow["jobs"]["installer"]
    assert build["runs-on"] == "windows-latest"
    assert build["env"]["PIP_NO_CACHE_DIR"] == "1"  # disk margin on the runner
    version = build["env"]["INNO_SETUP_VERSION"]
    assert tuple(int(p) for p in version.split(".")) >= (6, 3, 0)  # x64compatible needs 6.3
    assert "Inno Setup 6\\ISCC.exe" in build["env"]["ISCC"]  # called by full path, not from PATH
    scripts = "\n".join(step.get("run", "") for step in build["steps"])
    assert "choco install innosetup --version=$env:INNO_SETUP_VERSION" in scripts
    # Official ISCC.exe builds carry 0.0.0.0 as their product version: the check must use what
    # the compiler prints.
    assert "VersionInfo" not in scripts and "Compiler engine version: Inno Setup" in scripts
    assert "-RemoveVenvBeforeInstaller" in scripts
    upload = next(step for step in build["steps"] if step.get("with", {}).get("name") == "VoiceChat-Setup-windows-x64")
    assert upload["with"]["path"].split() == ["Output/*.exe", "Output/*.bin"]


def test_release_job_publishes_setup_slices_and_checksums() -> None:
    workflow = _workflow()
    release = workflow["jobs"]["release"]
    assert release["needs"] == "installer"
    assert release["if"] == "startsWith(github.ref, 'refs/tags/v')"
    assert release["permissions"] == {"contents": "write"}
    assert workflow["permissions"] == {"contents": "read"}  # the build job itself cannot write
    download = release["steps"][0]
    assert download["uses"].startswith("actions/download-artifact@") and download["with"]["name"] == "VoiceChat-Setup-windows-x64"
    scripts = "\n".join(step.get("run", "") for step in release["steps"])
    assert "sha256sum VoiceChat-Setup-*.exe VoiceChat-Setup-*.bin > SHA256SUMS.txt" in scripts
    for command in ("gh release upload", "gh release create"):
        line = next(line for line in scripts.splitlines() if command in line)
        assert "VoiceChat-Setup-*" in line and "SHA256SUMS.txt" in line
