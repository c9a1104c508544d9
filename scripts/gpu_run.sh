#!/usr/bin/env bash
# Everything that needs the GPU, in one call on the GPU machine: the `gpu` tests, then the benchmark.
# The machine has torch but not liquid-audio & co.: they travel as wheels in .whl/ (see README).
# Results land in $OUT (the device tool brings them back); without $OUT in a new folder of their own,
# bench/results/run-<UTC date>-<short commit> (engine/bench/results_folder.py), named at the end.
set -uo pipefail
cd "$(dirname "$0")/.."
export VOICECHAT_COMMIT="${VOICECHAT_COMMIT:-$(cat .commit 2>/dev/null || git rev-parse HEAD 2>/dev/null || echo unknown)}"
OUT="${OUT:-$(python3 engine/bench/results_folder.py)}"
mkdir -p "$OUT"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
fi
# librosa (which liquid-audio's log-mel preprocessor imports for its mel filter bank) imports numba at module level,
# and numba's llvmlite wheel (60 MB) is too large to travel. Where the machine has no numba, its decorators are made
# to leave functions as they are: the filter bank runs no jitted code.
if ! python3 -c "import numba" 2>/dev/null; then
    mkdir -p /tmp/site/numba
    printf 'def _same(*args, **kwargs):\n    if len(args) == 1 and callable(args[0]) and not kwargs:\n        return args[0]\n    return lambda function: function\njit = njit = vectorize = guvectorize = stencil = generated_jit = _same\nprange = range\n' >/tmp/site/numba/__init__.py
    export PYTHONPATH="/tmp/site:${PYTHONPATH:-$PWD}"
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
mode="${1:-all}"
if [ "$mode" = all ] || [ "$mode" = tests ]; then
    python3 -m pytest -q -m gpu -p no:cacheprovider -o addopts="" --timeout 900 tests/test_gpu_kernels.py tests/test_gpu_engine.py tests/test_streaming_decoder.py tests/test_voice_training.py 2>&1 | tee "$OUT/gpu_tests.log"
fi
if [ "$mode" = all ] || [ "$mode" = bench ]; then
    python3 -m app bench --out "$OUT" 2>&1 | tee "$OUT/bench.log"
fi
if [ "$mode" = voice ]; then  # the voice_training section alone (it is also the bench's last section)
    python3 -m engine.bench.voice_training --out "$OUT" 2>&1 | tee "$OUT/voice_training.log"
fi
if [ "$mode" = learn ]; then  # the voice_training section's learning check alone; further arguments go to it
    python3 -m engine.bench.voice_training --out "$OUT" --runs "" "${@:2}" 2>&1 | tee "$OUT/voice_training.log"
fi
echo "[gpu_run] results in $OUT"
