#!/usr/bin/env bash
# Starts the desktop app (bootstraps .venv and the system packages first). Arguments go to `voicechat`,
# e.g. `scripts/app.sh --demo` or `scripts/app.sh reply question.wav answer.wav`.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/bootstrap.sh"
install_system_packages libxcb-cursor0 libxcb-icccm4 libxcb-keysyms1 libxcb-shape0 libxkbcommon-x11-0
ensure_venv test,build  # the same environment as scripts/test.sh (one install for both)
# No `cd "$ROOT"`: file arguments (`reply q.wav out.wav`) are relative to where the user runs it. The
# venv's editable install finds the package from anywhere; PYTHONPATH makes sure it is this checkout.
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "$VENV/bin/python" -m app "$@"
