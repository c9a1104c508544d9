#!/usr/bin/env bash
# Build packaging/voicechat.spec on Linux and check the frozen app: the same spec as the Windows
# installer, so a missing hidden import, data file or dist-info shows up here first.
#
#   packaging/build_linux.sh            # build dist/VoiceChat/, then run the checks
#   packaging/build_linux.sh --no-build # only run the checks on an existing dist/VoiceChat/
#
# Not part of the default test run: it takes a long time on 2 cores and the bundle holds the
# CUDA libraries (several GB). Checks, both offscreen, on the tiny demo model, with the user
# folders (settings, models, logs) redirected to a temporary directory:
#   1. dist/VoiceChat/VoiceChat reply --demo question.wav answer.wav   (one turn, no Qt)
#   2. dist/VoiceChat/VoiceChat --selftest                              (must exit 0)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
BUILD=1
[[ "${1:-}" == "--no-build" ]] && BUILD=0
cd "$ROOT"

if [[ ! -x "$PY" ]]; then
    echo "no venv at $VENV (set VENV=...)" >&2
    exit 2
fi

if (( BUILD )); then
    "$PY" -c "import PyInstaller" 2>/dev/null || "$PY" -m pip install "pyinstaller>=6.10"
    # The Linux sounddevice wheel has no PortAudio; PyInstaller's hook bundles the system one.
    if ! ldconfig -p | grep -q 'libportaudio\.so\.2'; then
        echo "libportaudio2 is not installed (apt-get install libportaudio2)" >&2
        exit 2
    fi
    # Compile translations whose .qm is missing or older than the .ts, as the Windows build does.
    for ts in app/translations/*.ts; do
        qm="${ts%.ts}.qm"
        if [[ ! -f "$qm" || "$ts" -nt "$qm" ]]; then
            "$VENV/bin/pyside6-lrelease" "$ts" -qm "$qm"
        fi
    done
    nice -n 10 "$PY" -m PyInstaller --noconfirm --clean \
        --distpath "$ROOT/dist" --workpath "$ROOT/build/pyinstaller" packaging/voicechat.spec
fi

APP="$ROOT/dist/VoiceChat/VoiceChat"
[[ -x "$APP" ]] || { echo "no frozen app at $APP" >&2; exit 1; }
du -sh "$ROOT/dist/VoiceChat"

HOME_DIR="$(mktemp -d)"
trap 'rm -rf "$HOME_DIR"' EXIT
export XDG_DATA_HOME="$HOME_DIR/data" XDG_CONFIG_HOME="$HOME_DIR/config"
export XDG_STATE_HOME="$HOME_DIR/state" XDG_CACHE_HOME="$HOME_DIR/cache"
export QT_QPA_PLATFORM=offscreen HF_HUB_OFFLINE=1

# A one-second 440 Hz question, written by the venv's Python (the frozen app only reads it).
"$PY" - "$HOME_DIR/question.wav" <<'EOF'
import sys
import numpy as np
import soundfile as sf
t = np.arange(16000) / 16000
sf.write(sys.argv[1], (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000)
EOF

echo "== frozen: reply --demo"
nice -n 10 "$APP" reply --demo --device cpu "$HOME_DIR/question.wav" "$HOME_DIR/answer.wav"
"$PY" -c "import soundfile as sf, sys; i = sf.info(sys.argv[1]); print(f'answer: {i.duration:.2f} s at {i.samplerate} Hz'); sys.exit(0 if i.frames > 0 else 1)" "$HOME_DIR/answer.wav"

echo "== frozen: --selftest"
set +e
nice -n 10 "$APP" --selftest
status=$?
set -e
for report in "$XDG_STATE_HOME"/VoiceChat/log/diagnostics-*.txt; do
    [[ -f "$report" ]] && { echo "== $report"; cat "$report"; }
done
echo "selftest exit code: $status"
exit "$status"
