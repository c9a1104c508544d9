"""Wine and the Inno Setup compiler for tests/test_installer_wine.py, installed on demand.

`ensure_wine()` makes Debian's wine 8 usable (wine, wine64 and the i386 wine32 that ISCC.exe and the
32-bit Setup.exe need); `ensure_iscc()` puts the npm package `innosetup` (ISCC.exe 6.4.x and its
language files) into a cache folder. Both return a `Missing` with the reason instead of raising, so
the test can skip loudly with it.

Installing needs root and apt-get (as in CI). Apt indexes can be stale: a mirror in the middle of a
sync serves a Packages file whose size does not match its Release file, and `apt-get update` fails
for that one index. That is not fatal by itself: the install is tried anyway. When the stale index
is the i386 security one, the amd64 libraries have security versions the i386 side lacks, and since
"Multi-Arch: same" packages must have one version on both architectures the install cannot be
resolved; it is retried once with the security suite pinned below the point release, which resolves
every library to the point-release version on both architectures (upgrades only, nothing removed).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

WINE_PACKAGES = ["wine", "wine64", "wine32:i386"]
# The npm package that ships ISCC.exe; 6.4.1 is the newest there (the Windows CI pins 6.4.3).
INNOSETUP_NPM = "innosetup@6.4.1"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "voicechat-tests"
APT_TIMEOUT_S = 300  # per apt-get call; three at most (update, install, the retry)

_SECURITY_BELOW_POINT_RELEASE = """\
# Written by tests/wine_env.py for one apt-get install; see the module docstring.
Package: *
Pin: release l=Debian-Security
Pin-Priority: 100
"""


@dataclass(frozen=True)
class Missing:
    reason: str


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _run(args: list[str], timeout: float = APT_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def wine_installed() -> bool:
    if not (shutil.which("wine") and shutil.which("wineserver")):
        return False
    # wine32 provides the i386 loader; without it no 32-bit program (ISCC.exe, Setup.exe) starts.
    result = subprocess.run(
        ["dpkg-query", "-W", "-f=${Status}", "wine32:i386"], capture_output=True, text=True, check=False
    )
    return "install ok installed" in result.stdout


def _install_wine() -> Missing | None:
    foreign = _run(["dpkg", "--print-foreign-architectures"]).stdout.split()
    if "i386" not in foreign:
        added = _run(["dpkg", "--add-architecture", "i386"])
        if added.returncode != 0:
            return Missing(f"dpkg --add-architecture i386 failed: {_tail(added.stderr)}")
    # Not fatal by itself (stale or half-synced indexes); its output goes into the reason if the
    # install fails too.
    # Wait for another apt (e.g. scripts/bootstrap.sh in a parallel run) instead of failing on its lock.
    wait_for_lock = ["-o", "DPkg::Lock::Timeout=120"]
    update = _run(["apt-get", *wait_for_lock, "update"])
    install_args = ["apt-get", *wait_for_lock, "install", "-y", "--no-install-recommends", *WINE_PACKAGES]
    first = _run(install_args)
    if first.returncode == 0:
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".pref", delete=False) as preferences:
        preferences.write(_SECURITY_BELOW_POINT_RELEASE)
    try:
        second = _run([install_args[0], "-o", f"Dir::Etc::Preferences={preferences.name}", *install_args[1:]])
    finally:
        os.unlink(preferences.name)
    if second.returncode == 0:
        return None
    return Missing(
        "apt-get could not install wine (wine, wine64, wine32:i386).\n"
        f"apt-get update (exit {update.returncode}):\n{_tail(update.stdout + update.stderr, 8)}\n"
        f"apt-get install (exit {first.returncode}):\n{_tail(first.stdout + first.stderr)}\n"
        f"retry with the security suite pinned below the point release (exit {second.returncode}):\n"
        f"{_tail(second.stdout + second.stderr)}"
    )


def ensure_wine() -> Missing | None:
    """None when wine (with wine32) is ready, else why not."""
    if not sys.platform.startswith("linux"):
        return Missing(f"the wine installer test runs on Linux only (this is {sys.platform})")
    if wine_installed():
        return None
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return Missing("wine is not installed and this is not root with apt-get: apt-get install wine wine64 wine32:i386")
    CACHE.mkdir(parents=True, exist_ok=True)
    # One installer at a time (two pytest runs on one machine).
    with open(CACHE / "apt.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if wine_installed():
            return None
        try:
            missing = _install_wine()
        except subprocess.TimeoutExpired as error:
            return Missing(f"installing wine took longer than {error.timeout:.0f} s: {error.cmd}")
    if missing is None and not wine_installed():
        return Missing("apt-get reported success but wine or wine32:i386 is still missing")
    return missing


def ensure_iscc() -> Path | Missing:
    """ISCC.exe from the npm package, installed once into the cache folder."""
    prefix = CACHE / "innosetup-npm"
    iscc = prefix / "node_modules" / "innosetup" / "bin" / "ISCC.exe"
    if iscc.is_file():
        return iscc
    npm = shutil.which("npm")
    if npm is None:
        return Missing("npm is not installed, so the innosetup package (ISCC.exe) cannot be fetched")
    prefix.mkdir(parents=True, exist_ok=True)
    with open(CACHE / "npm.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if iscc.is_file():
            return iscc
        result = _run([npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", INNOSETUP_NPM], timeout=600)
    if result.returncode != 0 or not iscc.is_file():
        return Missing(f"npm install {INNOSETUP_NPM} failed (exit {result.returncode}): {_tail(result.stdout + result.stderr)}")
    return iscc


if __name__ == "__main__":  # python tests/wine_env.py: install both ahead of the test run
    for outcome in (ensure_wine(), ensure_iscc()):
        print(outcome if isinstance(outcome, Missing) else f"ok {outcome or 'wine'}")
