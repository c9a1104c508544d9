"""GPU probe (issues 25 and 45): where a launch's `ChatSession.open` spends its time.

Writes the full-size random checkpoint (as small_cards does), opens it once in a fresh process (the first
launch fills the compile caches, in a folder of their own as small_cards' launches have), then again in a fresh
process without the profiler (the second launch as users get it), then once more under cProfile. Writes
OUT/open_third.prof and OUT/open_third.txt (the 45 functions with the most cumulative time, then with the most
own time), and OUT/open_phases.json: per launch its progress stages and the session's own stages (seconds from
the call: checked, loaded, step_graphs, decoder_graphs, encoder_buffers, ready), the step graphs' set-up split
(sampling, backbone, depthformer), and when the encoder's rungs captured behind "ready" were all in.
Run on the GPU machine: `python3 scripts/profile_open.py OUT [--precision int8]`.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def open_once(folder: Path, precision: str) -> dict:
    import torch

    from engine.chat.session import ChatSession

    if torch.cuda.is_available():
        torch.cuda.init()
    stages: list[tuple[str, float]] = []
    started = time.perf_counter()

    def progress(p: object) -> None:
        stage = getattr(p, "stage")
        if not stages or stages[-1][0] != stage:
            stages.append((stage, time.perf_counter() - started))

    session = ChatSession.open(str(folder), context_tokens=4096, progress=progress, precision=precision)
    stages.append(("opened", time.perf_counter() - started))
    session.wait_for_graphs()  # what the engine thread's idle ticks do, one rung at a time
    capture = session.lazy_capture
    result = {
        "progress": stages,
        "session_stages": session.startup,
        "step_graphs_setup": getattr(session.backend, "setup_timings", None),
        "rungs_all_in_after_ready_s": capture.finished_after_s if capture is not None else None,
        "lazy_capture_problems": capture.problems if capture is not None else [],
    }
    session.close()
    return result


def main() -> None:
    if sys.argv[1] == "--child":
        folder, out, profile, precision = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1", sys.argv[5]
        profiler = cProfile.Profile() if profile else None
        if profiler:
            profiler.enable()
        result = open_once(folder, precision)
        if profiler:
            profiler.disable()
            profiler.dump_stats(out / "open_third.prof")
            text = io.StringIO()
            for key in ("cumulative", "tottime"):
                pstats.Stats(profiler, stream=text).sort_stats(key).print_stats(45)
            (out / "open_third.txt").write_text(text.getvalue())
        print(json.dumps(result))
        return
    out = Path(sys.argv[1])
    precision = sys.argv[sys.argv.index("--precision") + 1] if "--precision" in sys.argv else "bf16"
    out.mkdir(parents=True, exist_ok=True)
    from engine.bench.small_cards import cache_environment, data_home

    work = Path(tempfile.mkdtemp(prefix="voicechat-open-"))
    folder = work / "LFM2.5-Audio-1.5B-JP"
    subprocess.run([sys.executable, "-c", f"from pathlib import Path; from engine.bench.small_cards import write_full_size_checkpoint; "
                    f"write_full_size_checkpoint(Path({str(folder)!r}))"], check=True)
    env = {**os.environ, **cache_environment(data_home(work, "open", "first"))}
    phases = {}
    for name, profile in (("first", "0"), ("second", "0"), ("third, profiled", "1")):
        done = subprocess.run([sys.executable, __file__, "--child", str(folder), str(out), profile, precision], env=env, check=True,
                              capture_output=True, text=True)
        phases[name] = json.loads(done.stdout.strip().splitlines()[-1])
        print(name, phases[name], flush=True)
    (out / "open_phases.json").write_text(json.dumps(phases, indent=1))


if __name__ == "__main__":
    main()
