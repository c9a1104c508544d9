"""Where a benchmark run writes its files when no folder is named: a new folder of its own under
bench/results/, `run-<UTC date>-<short commit>` (then `-2`, `-3`, ... when that one exists), so that a run
never writes over another run's files and a person finds the newest run by its name.

Standard library only, so that scripts/gpu_run.sh can ask for the folder before anything is installed:

    python3 engine/bench/results_folder.py      # prints e.g. bench/results/run-2026-12-03-d4902e7
"""

from __future__ import annotations

import datetime
import os
import subprocess
from pathlib import Path

RESULTS = Path("bench") / "results"  # relative to where the benchmark runs (scripts/gpu_run.sh: the checkout)


def short_commit() -> str:
    """The commit under test: $VOICECHAT_COMMIT (scripts/gpu_run.sh sets it, also where no .git travels), else
    git's HEAD, else "unknown"; shortened to 7 characters, as git shows it."""
    commit = os.environ.get("VOICECHAT_COMMIT", "").strip()
    if not commit:
        try:
            commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            commit = ""
    return commit[:7] or "unknown"


def new_run_folder(results: Path = RESULTS, now: datetime.datetime | None = None) -> Path:
    """A folder under `results` that does not exist yet, named for today's UTC date and the commit."""
    day = (now or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y-%m-%d")
    base = f"run-{day}-{short_commit()}"
    folder, number = results / base, 1
    while folder.exists():
        number += 1
        folder = results / f"{base}-{number}"
    return folder


if __name__ == "__main__":
    print(new_run_folder())
