"""The Windows installer for real: the shipped installer.iss compiled by ISCC.exe and run under wine.

What happens here is what a release build and a user do on Windows, in a fresh wine prefix set to
Windows 10 (installer.iss has MinVersion=10.0):

* a dummy bundle in the exact layout packaging/voicechat.spec produces (dist/<APP_NAME>/<APP_NAME>.exe
  and its contents folder) is compiled with the defines packaging/build_windows.ps1 passes;
* Setup runs silently for all users; the files, the Start-menu shortcut, the uninstall registry entry
  and its version are checked; a second build upgrades it and removes a file the new bundle lacks;
* a silent uninstall keeps the user's models, settings and logs (every folder engine/paths.py names),
  one with /REMOVEUSERDATA=yes leaves nothing of the app's folders;
* spanning: with a slice size shrunk through the SliceSize define, a ~1 MB payload spans two or more
  .bin slices and installs byte-identical; a missing or truncated slice makes Setup fail at once
  instead of waiting for "the next disk" (every Setup run has a timeout, so a hang fails the test);
* per-user: wine 8 has no per-user Program Files folder, so {autopf} cannot be expanded in a per-user
  install under wine. The per-user test therefore overrides only the default folder through the
  DefaultDir define ({localappdata}\\Programs, which is where Windows' per-user Program Files is);
  the shipped script keeps {autopf}, and everything else (per-user Start menu, HKCU uninstall entry)
  is the shipped script's own.

Wine and the innosetup npm package are installed on demand (tests/wine_env.py, root with apt-get);
when that is impossible the tests skip with the reason, shown by pytest -ra. The prefix is a copy
of a pristine one cached next to ISCC.exe (creating one takes ~30 s, copying it a second; wine's
own DLLs are hard links, which nothing here writes to). No display is needed: wine's null driver.
"""

from __future__ import annotations

import ast
import hashlib
import os
import random
import re
import shutil
import struct
import subprocess
import tempfile
import time
import tomllib
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

import pytest

import wine_env
from engine import paths

ROOT = Path(__file__).resolve().parent.parent
ISS = ROOT / "installer.iss"
SPEC = ROOT / "packaging" / "voicechat.spec"
BUILD_PS1 = ROOT / "packaging" / "build_windows.ps1"
ICON = ROOT / "assets" / "icon.ico"

RUN_TIMEOUT_S = 120  # one ISCC compile or one Setup/uninstall run; a hang fails instead of blocking
WINE_ENV = {
    "WINEDEBUG": "-all",
    # No Mono/Gecko download prompts; no menu entries or file associations in the host's home.
    "WINEDLLOVERRIDES": "mscoree,mshtml=;winemenubuilder.exe=d",
}
PREFIX_RECIPE = 1  # bump when the template prefix is made differently

# A cold run installs wine first (apt-get, up to 3 x wine_env.APT_TIMEOUT_S); warm, the module takes ~30 s.
pytestmark = pytest.mark.timeout(1200)


# --------------------------------------------------------------------------- what the sources say


def spec_layout() -> tuple[str, str]:
    """(APP_NAME, contents folder) of the bundle packaging/voicechat.spec produces."""
    tree = ast.parse(SPEC.read_text(encoding="utf-8"))
    app_name = contents = None
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["APP_NAME"]:
            app_name = ast.literal_eval(node.value)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "EXE":
            for keyword in node.keywords:
                if keyword.arg == "contents_directory":
                    contents = ast.literal_eval(keyword.value)
    assert isinstance(app_name, str), "no APP_NAME in the spec"
    # PyInstaller >= 6 puts everything but the exe into _internal unless the spec says otherwise.
    return app_name, contents or "_internal"


def build_script_defines() -> list[str]:
    """The /D names build_windows.ps1 passes to ISCC."""
    text = BUILD_PS1.read_text(encoding="utf-8")
    calls = [line for line in text.splitlines() if re.match(r"\s*Invoke-Native \$Iscc\b", line)]
    assert len(calls) == 1, f"expected one ISCC call in {BUILD_PS1.name}, found {calls}"
    return re.findall(r'"/D(\w+)=', calls[0])


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


def app_id() -> str:
    match = re.search(r"^AppId=\{\{([0-9A-Fa-f-]{36})\}", ISS.read_text(encoding="utf-8-sig"), flags=re.M)
    assert match, "installer.iss has no AppId={{GUID}"
    return match.group(1)


APP_NAME, CONTENTS = spec_layout()
UNINSTALL_KEY = rf"Software\Microsoft\Windows\CurrentVersion\Uninstall\{{{app_id()}}}_is1"


def windows_user_folders(local_appdata: PureWindowsPath, monkeypatch: pytest.MonkeyPatch) -> dict[str, PureWindowsPath]:
    """Every folder and file engine/paths.py names, as platformdirs answers them on Windows."""
    import platformdirs.windows

    with monkeypatch.context() as patch:
        patch.setattr(platformdirs.windows, "get_win_folder", lambda csidl: str(local_appdata))
        patch.setattr(platformdirs, "PlatformDirs", platformdirs.windows.Windows)
        result = {
            name: PureWindowsPath(str(function()).replace("/", "\\"))
            for name, function in vars(paths).items()
            if callable(function) and not name.startswith("_") and getattr(function, "__module__", "") == paths.__name__
        }
    assert {"data_dir", "config_dir", "log_dir", "models_dir", "settings_file"} <= set(result), result
    return result


# --------------------------------------------------------------------------- wine


@dataclass
class Wine:
    prefix: Path
    env: dict[str, str]
    logs: Path

    def run(self, args: list[str], *, timeout: float = RUN_TIMEOUT_S, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        # Output goes to files, not pipes: the wine services a program starts inherit its handles
        # and outlive it (the server is persistent), so reading a pipe to its end would never return.
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            try:
                process = subprocess.run(["wine", *args], env=self.env, cwd=cwd, stdout=out, stderr=err, timeout=timeout, check=False)
            except subprocess.TimeoutExpired:
                subprocess.run(["wineserver", "-k"], env=self.env, check=False, timeout=30)
                pytest.fail(f"wine {' '.join(args)} did not finish within {timeout:.0f} s (killed)")
            texts = []
            for handle in (out, err):
                handle.seek(0)
                texts.append(handle.read().decode("utf-8", errors="replace"))
        return subprocess.CompletedProcess(process.args, process.returncode, texts[0], texts[1])

    def host(self, path: str | PureWindowsPath) -> Path:
        """The Linux path of a C:\\ path in this prefix."""
        windows = PureWindowsPath(path)
        assert windows.drive.upper() == "C:", windows
        return self.prefix / "drive_c" / Path(*windows.parts[1:])

    def folders(self, *variables: str) -> dict[str, PureWindowsPath]:
        """Windows environment variables (folders), as Windows programs see them."""
        result = self.run(["cmd", "/c", "set"])
        assert result.returncode == 0, result
        environment = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
        environment = {name.upper(): value.strip() for name, value in environment.items()}
        return {name: PureWindowsPath(environment[name.upper()]) for name in variables}

    def registry(self, root: str, key: str) -> dict[str, str] | None:
        """The values of a registry key (64-bit view), or None if the key does not exist."""
        result = self.run(["reg", "query", rf"{root}\{key}", "/reg:64"])
        if result.returncode != 0:
            return None
        values = {}
        for line in result.stdout.splitlines():
            match = re.match(r"\s{4}(.+?)\s{4}(REG_\w+)\s{4}(.*)$", line)
            if match:
                values[match.group(1)] = match.group(3).strip()
        return values

    def log_path(self, name: str) -> tuple[Path, str]:
        path = self.logs / f"{name}-{time.monotonic_ns()}.log"
        return path, "/LOG=Z:" + str(path).replace("/", "\\")

    def setup(self, exe: Path, *options: str, expect_ok: bool = True, timeout: float = RUN_TIMEOUT_S) -> tuple[int, str]:
        """Run Setup silently; returns (exit code, its log)."""
        log, log_option = self.log_path(exe.stem)
        result = self.run([str(exe), "/VERYSILENT", "/SUPPRESSMSGBOXES", "/NORESTART", log_option, *options], timeout=timeout)
        text = log.read_text(encoding="utf-8-sig", errors="replace") if log.exists() else ""
        if expect_ok:
            assert result.returncode == 0, f"Setup failed ({result.returncode}):\n{text[-3000:]}\n{result.stderr[-2000:]}"
            assert "Installation process succeeded." in text, text[-3000:]
        return result.returncode, text

    def uninstall(self, uninstaller: PureWindowsPath, *options: str) -> str:
        """Run the uninstaller silently and wait for its second phase (the first one returns at once)."""
        log, log_option = self.log_path("uninstall")
        result = self.run([str(uninstaller), "/VERYSILENT", "/SUPPRESSMSGBOXES", log_option, *options])
        assert result.returncode == 0, result
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while time.monotonic() < deadline:
            text = log.read_text(encoding="utf-8-sig", errors="replace") if log.exists() else ""
            if "Log closed." in text:
                assert "Uninstallation process succeeded." in text, text[-3000:]
                return text
            time.sleep(0.2)
        pytest.fail(f"the uninstaller did not finish within {RUN_TIMEOUT_S} s:\n{text[-3000:]}")


def _template_prefix(env: dict[str, str]) -> Path:
    """A pristine prefix (Windows 10, null graphics driver), made once per wine version."""
    version = subprocess.run(["wine", "--version"], capture_output=True, text=True, check=True).stdout.strip()
    template = wine_env.CACHE / f"wine-prefix-{re.sub(r'[^A-Za-z0-9.]+', '_', version)}-r{PREFIX_RECIPE}"
    if (template / ".complete").exists():
        return template
    with open(wine_env.CACHE / "prefix.lock", "w") as lock:
        import fcntl

        fcntl.flock(lock, fcntl.LOCK_EX)
        if (template / ".complete").exists():
            return template
        building = Path(tempfile.mkdtemp(prefix="wine-prefix-", dir=wine_env.CACHE))
        shutil.rmtree(building)
        env = dict(env, WINEPREFIX=str(building))
        steps = [
            ["wineboot", "-i"],
            ["wine", "winecfg", "/v", "win10"],
            # Setup needs a window station but no screen: wine's null driver needs no X server.
            ["wine", "reg", "add", r"HKCU\Software\Wine\Drivers", "/v", "Graphics", "/d", "null", "/f"],
            ["wineserver", "-w"],  # the registry is written to disk when the server exits
        ]
        for step in steps:
            result = subprocess.run(step, env=env, capture_output=True, text=True, timeout=300, check=False)
            assert result.returncode == 0, f"{step} failed: {result.stdout[-2000:]}{result.stderr[-2000:]}"
        (building / ".complete").write_text(version, encoding="utf-8")
        shutil.rmtree(template, ignore_errors=True)
        building.rename(template)
    return template


def _copy_prefix(template: Path, prefix: Path) -> None:
    """A private copy; wine's own DLLs and programs (1.2 of its 1.3 GB) are hard links, since
    nothing here writes to them (the registry and everything else are real copies)."""
    shared = [template / "drive_c" / "windows" / name for name in ("system32", "syswow64")]

    def copy(source: str, target: str) -> None:
        if any(Path(source).is_relative_to(folder) for folder in shared) and not source.endswith((".ini", ".log")):
            os.link(source, target)
        else:
            shutil.copy2(source, target)

    shutil.copytree(template, prefix, symlinks=True, copy_function=copy)


def _skip_loudly(reason: str) -> None:
    message = f"THE WINDOWS INSTALLER WAS NOT TESTED UNDER WINE: {reason}"
    warnings.warn(message, stacklevel=2)
    pytest.skip(message)


@pytest.fixture(scope="module")
def iscc() -> Path:
    missing = wine_env.ensure_wine()
    if missing is not None:
        _skip_loudly(missing.reason)
    found = wine_env.ensure_iscc()
    if isinstance(found, wine_env.Missing):
        _skip_loudly(found.reason)
    return found


@pytest.fixture(scope="module")
def wine(iscc: Path) -> Iterator[Wine]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "WINEPREFIX")}
    env.update(WINE_ENV)
    template = _template_prefix(env)
    work = Path(tempfile.mkdtemp(prefix="voicechat-wine-"))
    prefix = work / "prefix"
    _copy_prefix(template, prefix)
    (work / "logs").mkdir()
    env["WINEPREFIX"] = str(prefix)
    # One wine server (and its services) for the whole module: started afresh for every program,
    # it would add ~1.5 s to each of the ~40 wine calls here.
    subprocess.run(["wineserver", "-p"], env=env, check=True, timeout=60)
    try:
        yield Wine(prefix=prefix, env=env, logs=work / "logs")
    finally:
        subprocess.run(["wineserver", "-k"], env=env, check=False, timeout=60)
        shutil.rmtree(work, ignore_errors=True)  # 1.3 GB: never left behind


# --------------------------------------------------------------------------- builds


@dataclass
class Build:
    setup: Path
    slices: list[Path]
    bundle: Path
    version: str
    compiler_output: str


def make_bundle(root: Path, *, seed: int, extra: dict[str, bytes] | None = None) -> Path:
    """A dummy dist/<APP_NAME>/ in the layout the spec produces, with a ~1 MB incompressible payload."""
    bundle = root / "dist" / APP_NAME
    rng = random.Random(seed)
    files = {
        f"{APP_NAME}.exe": b"MZ dummy VoiceChat.exe " + rng.randbytes(4096),
        f"{CONTENTS}/python312.dll": rng.randbytes(200_000),
        f"{CONTENTS}/torch/lib/torch_cuda.dll": rng.randbytes(700_000),
        f"{CONTENTS}/app/translations/voicechat_ja.qm": rng.randbytes(3000),
        f"{CONTENTS}/assets/icon.ico": ICON.read_bytes(),
        f"{CONTENTS}/base_library.zip": rng.randbytes(100_000),
        f"{CONTENTS}/transformers-5.24.0.dist-info/METADATA": b"Name: transformers\n",
    }
    files.update(extra or {})
    for relative, data in files.items():
        path = bundle / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return bundle


def compile_installer(
    iscc: Path, wine: Wine, root: Path, version: str, *, seed: int = 1, extra: dict[str, bytes] | None = None,
    defines: dict[str, str] | None = None,
) -> Build:
    """Compile the shipped installer.iss (a byte-identical copy, next to its assets and the bundle)."""
    root.mkdir(parents=True)
    shutil.copyfile(ISS, root / "installer.iss")
    (root / "assets").mkdir()
    shutil.copyfile(ICON, root / "assets" / "icon.ico")
    bundle = make_bundle(root, seed=seed, extra=extra)
    options = [f"/DAppVersion={version}"] + [f"/D{name}={value}" for name, value in (defines or {}).items()]
    result = wine.run([str(iscc), *options, "installer.iss"], cwd=root)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"ISCC failed ({result.returncode}):\n{output[-4000:]}"
    assert "Successful compile" in output and "Warning" not in output, output[-4000:]
    out = root / "Output"
    setup = out / f"{APP_NAME}-Setup-{version}.exe"
    slices = sorted(out.glob(f"{APP_NAME}-Setup-{version}-*.bin"), key=lambda p: int(p.stem.rsplit("-", 1)[1]))
    assert setup.is_file() and slices, sorted(out.iterdir())
    assert [int(p.stem.rsplit("-", 1)[1]) for p in slices] == list(range(1, len(slices) + 1))
    assert {p.name for p in out.iterdir()} == {setup.name, *(p.name for p in slices)}
    return Build(setup=setup, slices=slices, bundle=bundle, version=version, compiler_output=output)


@pytest.fixture(scope="module")
def builds_root() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="voicechat-iss-"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def release(iscc: Path, wine: Wine, builds_root: Path) -> Build:
    """What build_windows.ps1 builds: the defines it passes, the version from pyproject.toml."""
    assert build_script_defines() == ["AppVersion"], "build_windows.ps1 passes other defines: pass them here too"
    return compile_installer(iscc, wine, builds_root / "release", project_version(), extra={f"{CONTENTS}/stale_in_next.dll": b"old"})


def _bump(version: str) -> str:
    major, minor, patch = (int(part) for part in re.match(r"(\d+)\.(\d+)\.(\d+)", version).groups())  # type: ignore[union-attr]
    return f"{major}.{minor}.{patch + 1}"


# --------------------------------------------------------------------------- checks


def files_of(folder: Path) -> dict[str, str]:
    return {
        path.relative_to(folder).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def read_shortcut(path: Path) -> dict[str, str]:
    """Target and working folder of a .lnk file ([MS-SHLLINK]: header, ID list, LinkInfo, strings)."""
    data = path.read_bytes()
    header_size, flags = struct.unpack_from("<I16xI", data, 0)
    assert header_size == 0x4C, "not a shell link"
    offset = header_size
    if flags & 0x01:  # HasLinkTargetIDList
        offset += 2 + struct.unpack_from("<H", data, offset)[0]
    result: dict[str, str] = {}
    if flags & 0x02:  # HasLinkInfo
        info_size, _, _, _, base_offset, _, suffix_offset = struct.unpack_from("<7I", data, offset)
        base = data[offset + base_offset :].split(b"\0", 1)[0].decode("mbcs" if os.name == "nt" else "latin-1")
        suffix = data[offset + suffix_offset :].split(b"\0", 1)[0].decode("latin-1")
        result["target"] = base + suffix
        offset += info_size
    unicode = bool(flags & 0x80)
    for bit, name in ((0x04, "name"), (0x08, "relative_path"), (0x10, "working_dir"), (0x20, "arguments"), (0x40, "icon")):
        if flags & bit:
            count = struct.unpack_from("<H", data, offset)[0]
            size = count * (2 if unicode else 1)
            raw = data[offset + 2 : offset + 2 + size]
            # Wine counts the terminating NUL, Windows does not.
            result[name] = raw.decode("utf-16-le" if unicode else "latin-1").rstrip("\0")
            offset += 2 + size
    return result


def assert_installed(wine: Wine, build: Build, app_dir: PureWindowsPath, shortcut: PureWindowsPath, root: str) -> dict[str, str]:
    installed = wine.host(app_dir)
    expected = files_of(build.bundle)
    actual = files_of(installed)
    uninstaller = {name for name in actual if re.fullmatch(r"unins\d{3}\.(exe|dat)", name)}
    assert uninstaller == {"unins000.exe", "unins000.dat"}
    assert {k: v for k, v in actual.items() if k not in uninstaller} == expected  # byte-identical, nothing else

    link = read_shortcut(wine.host(shortcut))
    exe = str(app_dir / f"{APP_NAME}.exe")
    assert link["target"].lower() == exe.lower(), link
    assert link["working_dir"].lower() == str(app_dir).lower(), link

    entry = wine.registry(root, UNINSTALL_KEY)
    assert entry is not None, f"no uninstall entry {root}\\{UNINSTALL_KEY}"
    assert entry["DisplayName"] == APP_NAME
    assert entry["DisplayVersion"] == build.version
    assert entry["Publisher"] == APP_NAME
    assert entry["DisplayIcon"].lower() == exe.lower()
    assert PureWindowsPath(entry["InstallLocation"]) == app_dir
    assert entry["UninstallString"].strip('"').lower() == str(app_dir / "unins000.exe").lower()
    return entry


def assert_uninstalled(wine: Wine, app_dir: PureWindowsPath, shortcut: PureWindowsPath, root: str) -> None:
    assert not wine.host(app_dir).exists(), sorted(wine.host(app_dir).rglob("*"))
    assert not wine.host(shortcut).exists()
    assert wine.registry(root, UNINSTALL_KEY) is None


# --------------------------------------------------------------------------- the tests


def test_compiles_with_the_build_scripts_defines_and_no_warning(release: Build) -> None:
    assert re.search(r"Compiler engine version: Inno Setup 6\.\d+\.\d+", release.compiler_output)
    # One slice at the release slice size: the whole ~1 MB payload, the exe holds none of it.
    assert len(release.slices) == 1
    payload = sum(len(p.read_bytes()) for p in release.bundle.rglob("*") if p.is_file())
    assert release.slices[0].stat().st_size > 0.9 * payload  # nearly all random bytes: they do not compress


def test_all_users_install_upgrade_and_uninstall(
    iscc: Path, wine: Wine, release: Build, builds_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folders = wine.folders("ProgramW6432", "ProgramData", "PUBLIC", "LOCALAPPDATA")
    app_dir = folders["ProgramW6432"] / APP_NAME  # the 64-bit Program Files: x64 install mode
    shortcut = folders["ProgramData"] / r"Microsoft\Windows\Start Menu\Programs" / f"{APP_NAME}.lnk"
    desktop = folders["PUBLIC"] / "Desktop" / f"{APP_NAME}.lnk"
    assert_uninstalled(wine, app_dir, shortcut, "HKLM")

    _, log = wine.setup(release.setup, "/ALLUSERS")
    assert "64-bit install mode: Yes" in log
    assert "-- Run entry --" not in log  # "launch VoiceChat" is skipped in a silent install
    assert_installed(wine, release, app_dir, shortcut, "HKLM")
    assert not wine.host(desktop).exists()  # the desktop icon is an unchecked task
    assert wine.registry("HKCU", UNINSTALL_KEY) is None

    # The upgrade: a new build without stale_in_next.dll and with other contents everywhere.
    upgrade = compile_installer(iscc, wine, builds_root / "upgrade", _bump(release.version), seed=2)
    wine.setup(upgrade.setup, "/ALLUSERS")
    assert_installed(wine, upgrade, app_dir, shortcut, "HKLM")  # stale_in_next.dll is gone
    assert not (wine.host(app_dir) / CONTENTS / "stale_in_next.dll").exists()

    # What the app writes, at the places engine/paths.py names on Windows.
    local_appdata = folders["LOCALAPPDATA"]
    user_folders = windows_user_folders(local_appdata, monkeypatch)
    user_files = {}
    for name, folder in user_folders.items():
        host = wine.host(folder)
        if host.suffix:  # a file (settings.json)
            host.parent.mkdir(parents=True, exist_ok=True)
            user_files[host] = f"{name} contents".encode()
        else:
            user_files[host / "written-by-the-app.bin"] = name.encode() * 100
    for path, data in user_files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    uninstaller = app_dir / "unins000.exe"
    wine.uninstall(uninstaller)
    assert_uninstalled(wine, app_dir, shortcut, "HKLM")
    for path, data in user_files.items():  # a silent uninstall keeps models, settings and logs
        assert path.read_bytes() == data, path

    # Reinstall, then uninstall and remove the data too.
    wine.setup(upgrade.setup, "/ALLUSERS")
    log = wine.uninstall(uninstaller, "/REMOVEUSERDATA=yes")
    assert_uninstalled(wine, app_dir, shortcut, "HKLM")
    # Everything the app writes lives in one folder under %LOCALAPPDATA% ...
    assert {folder.relative_to(local_appdata).parts[0] for folder in user_folders.values()} == {paths.APP_AUTHOR}
    # ... and it is gone, the author folder with it.
    author_folder = wine.host(local_appdata / paths.APP_AUTHOR)
    assert not author_folder.exists(), (sorted(author_folder.rglob("*")), log[-2000:])


def test_spanned_release_installs_and_a_missing_slice_fails(iscc: Path, wine: Wine, release: Build, builds_root: Path) -> None:
    # The first slice shares the "disk" with Setup.exe, so the size must exceed Setup.exe's.
    slice_size = release.setup.stat().st_size + 128 * 1024
    spanned = compile_installer(iscc, wine, builds_root / "spanned", "9.8.7", defines={"SliceSize": str(slice_size)})
    assert len(spanned.slices) >= 2, [p.stat().st_size for p in spanned.slices]
    assert all(p.stat().st_size <= slice_size for p in spanned.slices)

    folders = wine.folders("ProgramW6432", "ProgramData")
    app_dir = folders["ProgramW6432"] / APP_NAME
    shortcut = folders["ProgramData"] / r"Microsoft\Windows\Start Menu\Programs" / f"{APP_NAME}.lnk"
    cases = {
        "last slice missing": lambda folder: (folder / spanned.slices[-1].name).unlink(),
        "first slice missing": lambda folder: (folder / spanned.slices[0].name).unlink(),
        "last slice truncated": lambda folder: os.truncate(folder / spanned.slices[-1].name, spanned.slices[-1].stat().st_size // 2),
    }
    for case, damage in cases.items():
        folder = builds_root / f"spanned-{case.replace(' ', '-')}"
        shutil.copytree(spanned.setup.parent, folder)
        damage(folder)
        started = time.monotonic()
        code, log = wine.setup(folder / spanned.setup.name, "/ALLUSERS", expect_ok=False, timeout=60)
        assert code != 0, f"{case}: Setup succeeded:\n{log[-2000:]}"
        assert re.search(r"(Missing|Damaged) slice: .*-\d+\.bin", log), f"{case}:\n{log[-2000:]}"
        assert "Asking user for new disk" not in log
        assert time.monotonic() - started < 60
        assert_uninstalled(wine, app_dir, shortcut, "HKLM")  # it stopped before copying anything

    _, log = wine.setup(spanned.setup, "/ALLUSERS")
    assert f"All {len(spanned.slices)} slices are present." in log
    assert_installed(wine, spanned, app_dir, shortcut, "HKLM")  # byte-identical across the slices
    wine.uninstall(app_dir / "unins000.exe")
    assert_uninstalled(wine, app_dir, shortcut, "HKLM")


def test_per_user_install(iscc: Path, wine: Wine, builds_root: Path) -> None:
    # Wine 8 cannot expand {autopf} per-user (no per-user Program Files), so only the default folder
    # is overridden, with where Windows keeps per-user programs; the shipped script is unchanged.
    per_user = compile_installer(
        iscc, wine, builds_root / "per-user", project_version(), defines={"DefaultDir": rf"{{localappdata}}\Programs\{APP_NAME}"}
    )
    folders = wine.folders("LOCALAPPDATA", "APPDATA")
    app_dir = folders["LOCALAPPDATA"] / "Programs" / APP_NAME
    shortcut = folders["APPDATA"] / r"Microsoft\Windows\Start Menu\Programs" / f"{APP_NAME}.lnk"
    _, log = wine.setup(per_user.setup, "/CURRENTUSER")
    assert "Administrative install mode: No" in log
    assert_installed(wine, per_user, app_dir, shortcut, "HKCU")
    assert wine.registry("HKLM", UNINSTALL_KEY) is None
    wine.uninstall(app_dir / "unins000.exe")
    assert_uninstalled(wine, app_dir, shortcut, "HKCU")
