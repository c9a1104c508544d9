#!/usr/bin/env bash
# Runs the whole test suite (bootstraps .venv and the system packages first). Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
install_system_packages xvfb  # a real X server for the system-wide push-to-talk key's test (pynput)
ensure_venv test,build  # build: PyInstaller, so the spec test runs too
cd "$ROOT"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
exec "$VENV/bin/python" -m pytest "$@"
