#!/usr/bin/env bash
# Runs the whole test suite (bootstraps .venv and the system packages first). Extra arguments go to pytest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
install_system_packages xvfb  # a real X server for the system-wide push-to-talk key's test (pynput)
ensure_venv test,build  # build: PyInstaller, so the spec test runs too
cd "$ROOT"
export QT_QPA_PLATFORM="${QT_QPA_PLATFORM:-offscreen}"
if [ $# -eq 0 ]; then
    # The whole suite: everything but the randomized engine-thread test on two workers (pyproject's addopts),
    # then that test alone. It times its holds by the audio stream, whose callback a second busy worker on a
    # two-core machine starves for seconds; a hold's press and release then land on one block, and the take
    # is refused as too short (both fresh-clone runs with it beside the other files failed so, stop 36).
    "$VENV/bin/python" -m pytest --ignore=tests/test_worker_stateful.py
    exec "$VENV/bin/python" -m pytest -n 0 tests/test_worker_stateful.py
fi
exec "$VENV/bin/python" -m pytest "$@"
