#!/usr/bin/env bash
# Prepares everything the app and the tests need; sourced by scripts/app.sh and scripts/test.sh.
#  - finds Python >= 3.12 (python3.12 on PATH, pyenv, or ~/.pyenv/versions/3.12*)
#  - on Linux as root, installs the system libraries (PortAudio, ALSA, what Qt needs offscreen)
#  - creates .venv and installs the project with pinned versions; skipped when nothing changed
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"

find_python() {
    local candidates=(python3.12 python3.13 python3)
    if command -v pyenv >/dev/null 2>&1; then
        candidates+=("$(pyenv root)"/versions/3.1[2-9]*/bin/python3)
    fi
    candidates+=("$HOME"/.pyenv/versions/3.1[2-9]*/bin/python3 /usr/local/bin/python3.12 /usr/bin/python3.12)
    local candidate
    for candidate in "${candidates[@]}"; do
        if command -v "$candidate" >/dev/null 2>&1 &&
            "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    echo "error: Python 3.12 or newer is needed (liquid-audio uses 3.12 syntax); install python3.12 or a pyenv 3.12." >&2
    return 1
}

install_system_packages() {
    [ "$(uname -s)" = "Linux" ] || return 0
    local wanted=(libportaudio2 libasound2 alsa-utils libegl1 libgl1 libxkbcommon0 libfontconfig1 libglib2.0-0 libdbus-1-3 "$@")
    local missing=()
    local package
    for package in "${wanted[@]}"; do
        dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "warning: missing system packages: ${missing[*]} (run as root, or install them with apt)" >&2
        return 0
    fi
    echo "installing system packages: ${missing[*]}" >&2
    # A stale index (a mirror mid-sync, e.g. the i386 one tests/wine_env.py enables) must not stop
    # the run by itself: the install below still works from the indexes at hand, or fails clearly.
    DEBIAN_FRONTEND=noninteractive apt-get update -qq ||
        echo "warning: apt-get update failed; installing from the package indexes at hand" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# What installing the test environment takes at its peak: the venv with torch's CUDA build (~7.9 GB)
# plus the downloads beside it and the suite's temporary files (measured on a clean clone with pip: 12.2 GB;
# uv hard-links the venv to its cache, which needs less).
INSTALL_PEAK_GB=13

warn_if_disk_short() {
    local dir free_gb
    for dir in "$ROOT" "${TMPDIR:-/tmp}"; do
        free_gb="$(df -Pk "$dir" 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }')" || continue
        if [ -n "$free_gb" ] && [ "$free_gb" -lt "$INSTALL_PEAK_GB" ]; then
            echo "warning: $free_gb GB free under $dir; installing and running the tests needs about $INSTALL_PEAK_GB GB (pip fails with 'No space left on device' otherwise)" >&2
        fi
    done
}

ensure_venv() {
    local extras="$1"
    local python
    python="$(find_python)"
    if [ ! -x "$VENV/bin/python" ]; then
        "$python" -m venv "$VENV"
    fi
    local stamp="$VENV/.voicechat-installed"
    local want
    want="$(cat "$ROOT/pyproject.toml" "$ROOT/scripts/constraints.txt" | sha256sum | cut -d' ' -f1)-$extras"
    if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
        warn_if_disk_short
        # uv installs the same pinned set as pip, several times faster (on a clean clone with the bytecode
        # compiled: 62 s against pip's 155 s, mostly torch's CUDA wheels). pip does it where uv cannot be had or
        # cannot install (uv does not read pip's configuration, e.g. a private index in pip.conf).
        if "$VENV/bin/python" -m pip install -q -c "$ROOT/scripts/constraints.txt" uv &&
            "$VENV/bin/python" -m uv pip install -q --compile-bytecode --python "$VENV/bin/python" \
                -c "$ROOT/scripts/constraints.txt" -e "$ROOT[$extras]"; then
            :
        else
            echo "uv could not install the packages; pip installs them" >&2
            "$VENV/bin/python" -m pip install -q --upgrade pip
            "$VENV/bin/python" -m pip install -q -c "$ROOT/scripts/constraints.txt" -e "$ROOT[$extras]"
        fi
        echo "$want" >"$stamp"
    fi
}
