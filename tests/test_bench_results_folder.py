"""Where a benchmark run lands without --out / $OUT: a new folder of its own under bench/results/, named for the
UTC date and the commit, never another run's folder; the bench names it at the end (no GPU: the bench's main
flow with run 32's measured recipe mode, as tests/test_bench_report.py drives it)."""

from __future__ import annotations

import datetime
import os
import re
import subprocess
import sys
from pathlib import Path

from app.cli import build_parser
from tests.test_bench_report import bench_without_gpu  # noqa: F401  (the fixture)

ROOT = Path(__file__).resolve().parents[1]


def _days() -> set[str]:
    """Today's UTC date, and yesterday's for a test that runs across midnight."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {(now - datetime.timedelta(days=d)).strftime("%Y-%m-%d") for d in (0, 1)}


def test_each_run_without_out_gets_a_new_dated_folder_and_says_where(tmp_path: Path, monkeypatch, capsys, bench_without_gpu) -> None:  # noqa: F811
    bench, measured = bench_without_gpu
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("VOICECHAT_COMMIT", "d4902e757591f00d")
    results = tmp_path / "bench" / "results"
    written = []
    for _ in range(2):
        args = build_parser().parse_args(["bench", "--modes", "recipe", "--long-turns", "0", "--no-small-cards", "--no-voice-training"])
        assert args.out is None
        assert bench.run_bench(args) == 0
        folders = sorted(results.iterdir(), key=lambda p: p.stat().st_mtime_ns)
        written.append(folders[-1])
        last_line = capsys.readouterr().out.rstrip().splitlines()[-1]
        assert last_line == f"[bench] results written to {folders[-1].resolve()}"
    first, second = written
    match = re.fullmatch(r"run-(\d{4}-\d{2}-\d{2})-d4902e7", first.name)
    assert match and match.group(1) in _days()
    assert second.name == f"{first.name}-2"  # the second run did not write into the first run's folder
    for folder in written:
        assert sorted(p.name for p in folder.iterdir()) == ["bench.json", "bench.md"]
    assert sorted(p.name for p in results.iterdir()) == [first.name, second.name]


def test_gpu_run_sh_gets_the_same_folder_name_without_torch_or_the_package() -> None:
    """scripts/gpu_run.sh runs the module as a plain script before any wheel is installed."""
    env = {**os.environ, "VOICECHAT_COMMIT": "0123456789abcdef", "PYTHONPATH": ""}
    printed = subprocess.run(
        [sys.executable, "-S", "engine/bench/results_folder.py"], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    match = re.fullmatch(r"bench/results/run-(\d{4}-\d{2}-\d{2})-0123456", printed)
    assert match and match.group(1) in _days()
    gpu_run = (ROOT / "scripts" / "gpu_run.sh").read_text()
    assert 'OUT="${OUT:-$(python3 engine/bench/results_folder.py)}"' in gpu_run
