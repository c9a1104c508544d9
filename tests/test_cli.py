"""`voicechat reply`: the happy path on the demo model, and a clear one-line error for each bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from app.cli import main
from conftest import sine

ROOT = Path(__file__).resolve().parents[1]


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["reply", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_reply_happy_path_in_a_real_process(tmp_path: Path, isolated_user_dirs: Path) -> None:
    question = tmp_path / "question.wav"
    stereo = np.stack([sine(1.5, 44100, 300), sine(1.5, 44100, 500)], axis=1)
    soundfile.write(question, stereo, 44100)  # stereo, 44.1 kHz: downmixed and resampled
    answer = tmp_path / "answer.wav"
    env = {**__import__("os").environ}
    result = subprocess.run(
        [sys.executable, "-m", "app", "reply", str(question), str(answer), "--demo", "--greedy", "--max-answer-seconds", "1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("answer: ")
    summary = lines[-1]
    for field in ("load", "audio encoded", "prefill", "generation", "decode", "frames", "RTF"):
        assert field in summary
    frames = int(summary.split("frames ")[1].split()[0])
    assert frames >= 9
    pcm, rate = soundfile.read(answer)
    assert rate == 24000
    assert pcm.ndim == 1 and len(pcm) == frames * 1920  # every frame decoded, streamed chunks + tail
    assert np.abs(pcm).max() > 0


def test_silence_is_a_valid_question(tmp_path: Path, isolated_user_dirs: Path, capsys) -> None:
    question = tmp_path / "silence.wav"
    soundfile.write(question, np.zeros(8000, dtype=np.float32), 16000)
    code, out, err = run_cli([str(question), str(tmp_path / "a.wav"), "--demo", "--greedy", "--max-answer-seconds", "0.5"], capsys)
    assert code == 0, err
    assert (tmp_path / "a.wav").is_file()
    assert out.startswith("answer: ")


def _write(path: Path, seconds: float, rate: int = 16000) -> Path:
    soundfile.write(path, sine(seconds, rate), rate)
    return path


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda d: d / "missing.wav", [], "missing.wav does not exist."),
        (lambda d: (d / "notes.wav").write_text("just text") and d / "notes.wav", [], "is not a readable audio file"),
        (lambda d: d, [], "is not a file."),
        (lambda d: _write(d / "empty.wav", 0.0), [], "The recording is empty."),
        (lambda d: _write(d / "short.wav", 0.05), [], "The recording is too short (0.05 s; at least 0.1 s is needed)."),
        (lambda d: _write(d / "long.wav", 61.0), [], "The recording is too long (61.0 s; at most 60 s)."),
        (lambda d: _write(d / "long2.wav", 3.0), ["--max-seconds", "2"], "The recording is too long (3.0 s; at most 2 s)."),
    ],
)
def test_bad_input_gives_one_clear_line(tmp_path: Path, isolated_user_dirs: Path, capsys, make, extra, message) -> None:
    question = make(tmp_path)
    code, out, err = run_cli([str(question), str(tmp_path / "a.wav"), "--demo", *extra], capsys)
    assert code == 2
    assert out == ""
    first = err.strip().splitlines()[0]
    assert first.startswith("error: ") and message in first
    assert "Traceback" not in err
    assert not (tmp_path / "a.wav").exists()


def test_no_model_and_no_network_offers_the_demo(tmp_path: Path, isolated_user_dirs: Path, capsys) -> None:
    question = _write(tmp_path / "q.wav", 1.0)
    code, out, err = run_cli([str(question), str(tmp_path / "a.wav")], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert lines[0].startswith("error: LiquidAI/LFM2.5-Audio-1.5B-JP is not downloaded and there is no network connection.")
    assert "--demo" in lines[-1]


def test_broken_model_folder_is_named(tmp_path: Path, tiny_model_dir: Path, isolated_user_dirs: Path, capsys) -> None:
    import shutil

    broken = Path(shutil.copytree(tiny_model_dir, tmp_path / "broken"))
    (broken / "audio_detokenizer" / "model.safetensors").unlink()
    question = _write(tmp_path / "q.wav", 1.0)
    code, _, err = run_cli([str(question), str(tmp_path / "a.wav"), "--model", str(broken)], capsys)
    assert code == 2
    assert "audio_detokenizer/model.safetensors is missing" in err.splitlines()[0]


def test_selftest_runs_a_demo_turn_and_writes_diagnostics(isolated_user_dirs: Path, capsys) -> None:
    import json

    code = main(["--selftest"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "Self-test passed." in out
    reports = list((isolated_user_dirs / "xdg_state_home").rglob("diagnostics-*.json"))
    assert len(reports) == 1
    report = json.loads(reports[0].read_text())
    turn = next(check for check in report["checks"] if check["name"] == "turn")
    assert turn["status"] == "ok"
    result = report["turn"]["result"]
    assert report["turn"]["ok"] and result["frames"] > 0 and result["audio_seconds"] == pytest.approx(result["frames"] * 0.08)


def test_reply_takes_the_precision(tmp_path: Path, isolated_user_dirs: Path, capsys) -> None:
    question = _write(tmp_path / "q.wav", 1.0)
    code, out, err = run_cli([str(question), str(tmp_path / "a.wav"), "--demo", "--greedy", "--max-answer-seconds", "0.5",
                              "--precision", "int8"], capsys)
    assert code == 0, err
    assert "precision: int8" in out.splitlines() and (tmp_path / "a.wav").is_file()
    with pytest.raises(SystemExit) as exit_info:
        main(["reply", str(question), str(tmp_path / "b.wav"), "--demo", "--precision", "fp8"])
    out, err = capsys.readouterr()
    assert exit_info.value.code == 2 and out == "" and not (tmp_path / "b.wav").exists()
    assert err.startswith("error: argument --precision: invalid choice: 'fp8'") and len(err.strip().splitlines()) == 1


def test_selftest_takes_the_precision_and_the_app_refuses_it(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import engine.tools.selftest as selftest

    asked: list[str] = []
    monkeypatch.setattr(selftest, "main", lambda precision="bf16": asked.append(precision) or 0)
    assert main(["--selftest", "--precision", "int8"]) == 0
    assert main(["--selftest"]) == 0
    assert asked == ["int8", "bf16"]
    assert main(["--precision", "int8"]) == 2  # the window's precision is its setting
    assert "--precision goes with --selftest or reply" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--selftest", "--precision", "fp16"])


def test_the_selftest_turn_runs_in_the_precision_asked_for(isolated_user_dirs: Path) -> None:
    from engine.tools.selftest import run_demo_turn

    result = run_demo_turn("int8")
    assert result["precision"] == "int8" and result["frames"] > 0


def test_bench_refuses_an_unknown_mode_before_building_anything(capsys) -> None:
    code = main(["bench", "--modes", "engine,turbo"])
    out = capsys.readouterr().out
    assert code == 2
    assert out.strip() == "error: unknown benchmark mode(s) turbo; choose from engine, engine-int8, recipe, eager"
