"""Diagnostics, self-test exit codes, file logging, the excepthook and the Qt crash dialog.

Values are compared with what the libraries themselves report on this machine (torch, sounddevice,
huggingface_hub's own cache reader), not with constants copied from the implementation.
"""

from __future__ import annotations

import faulthandler
import io
import json
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest
import torch

from engine import logs
from engine.tools import diagnostics

# --------------------------------------------------------------------------- fixtures


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[Path]:
    """setup_logging() into a temp dir, undone afterwards (pytest's faulthandler is restored)."""
    was_enabled = faulthandler.is_enabled()
    path = logs.setup_logging(log_dir=tmp_path / "logs")
    try:
        yield path
    finally:
        logs.shutdown_logging()
        if was_enabled:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)


@pytest.fixture
def restore_hooks(monkeypatch: pytest.MonkeyPatch) -> None:
    # monkeypatch puts the originals back after the test, whatever install_excepthook set.
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    monkeypatch.setattr(threading, "excepthook", threading.excepthook)
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)


def _read(path: Path) -> str:
    for handler in logging.getLogger().handlers:
        handler.flush()
    return path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- collect_diagnostics


def test_report_versions_match_the_running_libraries(tmp_path: Path) -> None:
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda_build"] == torch.version.cuda
    assert report["torch"]["cuda_available"] == torch.cuda.is_available()
    assert report["platform"]["python"] == platform.python_version()
    assert report["app"]["frozen"] is False
    if torch.cuda.is_available():
        assert [g["name"] for g in report["gpus"]] == [
            torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())
        ]
        assert all(g["total_vram_bytes"] > 0 for g in report["gpus"])
    # The report must survive a JSON round trip unchanged (it is attached to bug reports).
    assert json.loads(json.dumps(report)) == report
    names = {c["name"] for c in report["checks"]}
    assert {"driver", "audio", "model"} <= names
    assert all(c["status"] in {"ok", "warning", "error"} for c in report["checks"])


def test_audio_devices_match_sounddevice(tmp_path: Path) -> None:
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    try:
        import sounddevice as sd
    except OSError as exc:  # no PortAudio library on this machine
        assert "PortAudio" in report["audio"]["error"], exc
        assert any(c["name"] == "audio" and c["status"] == "warning" for c in report["checks"])
        return
    assert [d["name"] for d in report["audio"]["devices"]] == [d["name"] for d in sd.query_devices()]
    assert report["audio"]["portaudio"] == sd.get_portaudio_version()[1]


def test_model_store_is_where_the_downloader_writes() -> None:
    from engine.model import store

    assert diagnostics.collect_diagnostics()["model"]["store"] == str(store.models_dir())
    assert diagnostics.DEFAULT_MODEL_REPO == store.DEFAULT_REPO_ID


# --------------------------------------------------------------------------- driver assessment


@pytest.mark.parametrize(
    ("kwargs", "status", "severity", "needle"),
    [
        # RTX 4090 on driver 572.16 (CUDA 12.8) with the cu128 torch build.
        (
            dict(torch_cuda="12.8", driver_cuda=(12, 8), driver_version="572.16", gpu_seen=True, cuda_available=True),
            "ok",
            "ok",
            "572.16",
        ),
        # Driver 551.86 reports CUDA 12.4: runs through minor-version compatibility.
        (
            dict(torch_cuda="12.8", driver_cuda=(12, 4), driver_version="551.86", gpu_seen=True, cuda_available=True),
            "minor_compat",
            "warning",
            "update",
        ),
        # Driver 472.12 (CUDA 11.4): torch cannot initialise CUDA at all.
        (
            dict(
                torch_cuda="12.8",
                driver_cuda=(11, 4),
                driver_version="472.12",
                gpu_seen=True,
                cuda_available=False,
                cuda_init_error="The NVIDIA driver on your system is too old (found version 11040).",
            ),
            "too_old",
            "error",
            "525",
        ),
        # No NVIDIA hardware at all (this CI machine).
        (
            dict(torch_cuda="12.8", driver_cuda=None, driver_version=None, gpu_seen=False, cuda_available=False),
            "no_gpu",
            "warning",
            "CPU",
        ),
        # A CPU-only torch in a bundle shipped to an RTX machine is a packaging error.
        (
            dict(torch_cuda=None, driver_cuda=(12, 8), driver_version="572.16", gpu_seen=True, cuda_available=False),
            "cpu_build",
            "error",
            "CPU-only",
        ),
        # Driver new enough, but CUDA init failed (e.g. a broken driver install).
        (
            dict(
                torch_cuda="12.8",
                driver_cuda=(12, 8),
                driver_version="572.16",
                gpu_seen=True,
                cuda_available=False,
                cuda_init_error="CUDA driver initialization failed",
            ),
            "init_failed",
            "error",
            "initialization failed",
        ),
    ],
)
def test_assess_driver(kwargs: dict[str, Any], status: str, severity: str, needle: str) -> None:
    got_status, got_severity, message = diagnostics.assess_driver(**kwargs)
    assert (got_status, got_severity) == (status, severity)
    assert needle in message


def test_driver_check_on_this_machine_agrees_with_torch(tmp_path: Path) -> None:
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    driver = report["driver"]
    if torch.cuda.is_available():
        assert driver["status"] in {"ok", "minor_compat"}
    elif diagnostics.query_driver_cuda_version() is None and not diagnostics.query_nvidia_smi()["available"]:
        assert driver["status"] == "no_gpu"


def test_parse_nvidia_smi_csv() -> None:
    text = "NVIDIA GeForce RTX 4090, 572.16, 24564, 23012\nNVIDIA GeForce RTX 3060, 572.16, 12288, [N/A]\n\n"
    gpus = diagnostics.parse_nvidia_smi_csv(text)
    assert [g["name"] for g in gpus] == ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3060"]
    assert gpus[0]["driver_version"] == "572.16"
    assert gpus[0]["total_vram_bytes"] == 24564 * 1024 * 1024
    assert gpus[0]["free_vram_bytes"] == 23012 * 1024 * 1024
    assert gpus[1]["free_vram_bytes"] is None


# --------------------------------------------------------------------------- model presence


def _fake_hub_cache(cache: Path, repo_id: str, files: dict[str, bytes], *, revision: str = "0" * 40) -> Path:
    """Lay out files the way huggingface_hub does: blobs, a snapshot of links to them, refs/main."""
    import hashlib

    repo_dir = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo_dir / "snapshots" / revision
    (repo_dir / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo_dir / "refs").mkdir()
    (repo_dir / "refs" / "main").write_text(revision, encoding="utf-8")
    for name, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.symlink_to(os.path.relpath(blob, target.parent))
    return snapshot


def test_model_found_in_a_hub_cache(tmp_path: Path) -> None:
    from huggingface_hub import try_to_load_from_cache

    repo = diagnostics.DEFAULT_MODEL_REPO
    files = {"config.json": b'{"codebooks": 8}', "model.safetensors": b"x" * 1000, "tokenizer.json": b"{}"}
    snapshot = _fake_hub_cache(tmp_path / "models", repo, files)
    # huggingface_hub itself must agree that this is its cache layout.
    assert try_to_load_from_cache(repo, "config.json", cache_dir=tmp_path / "models") == str(snapshot / "config.json")

    found = diagnostics.find_cached_model(repo, tmp_path / "models")
    assert found["present"] is True
    assert Path(found["snapshot"]) == snapshot
    assert found["size_bytes"] == sum(len(b) for b in files.values())
    assert found["weights"] == ["model.safetensors"]

    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    assert report["model"]["present"] is True
    assert any(c["name"] == "model" and c["status"] == "ok" for c in report["checks"])


def test_model_missing_or_incomplete(tmp_path: Path) -> None:
    repo = diagnostics.DEFAULT_MODEL_REPO
    assert diagnostics.find_cached_model(repo, tmp_path / "empty")["present"] is False

    # config.json only, and a weights download that was interrupted: not present, and said so.
    _fake_hub_cache(tmp_path / "models", repo, {"config.json": b"{}"})
    blobs = tmp_path / "models" / ("models--" + repo.replace("/", "--")) / "blobs"
    (blobs / "abc123.incomplete").write_bytes(b"partial")
    found = diagnostics.find_cached_model(repo, tmp_path / "models")
    assert found["present"] is False
    assert found["incomplete_downloads"] == 1
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    model_check = next(c for c in report["checks"] if c["name"] == "model")
    assert model_check["status"] == "warning" and "interrupted" in model_check["message"]


# --------------------------------------------------------------------------- write_diagnostics / run_selftest


def _stft_turn() -> dict[str, Any]:
    """A small real computation standing in for the pipeline turn: find a tone's frequency."""
    rate, freq = 16000, 440.0
    t = torch.arange(rate, dtype=torch.float32) / rate
    spectrum = torch.stft(torch.sin(2 * torch.pi * freq * t), n_fft=1024, window=torch.hann_window(1024), return_complex=True).abs().mean(dim=1)
    peak_hz = float(spectrum.argmax()) * rate / 1024
    return {"peak_hz": peak_hz, "samples": torch.tensor(rate), "text": "こんにちは"}


def _broken_turn() -> dict[str, Any]:
    # Shapes that cannot be concatenated: torch raises a RuntimeError, as a real pipeline bug would.
    return {"out": torch.cat([torch.zeros(2, 3), torch.zeros(4, 5)], dim=0)}


def test_write_diagnostics_json_and_text(tmp_path: Path) -> None:
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    path = diagnostics.write_diagnostics(report, tmp_path / "out" / "diag.json")
    assert path == tmp_path / "out" / "diag.json"
    assert json.loads(path.read_text(encoding="utf-8")) == report
    text = path.with_suffix(".txt").read_text(encoding="utf-8")
    assert torch.__version__ in text
    assert platform.python_version() in text
    assert report["driver"]["message"] in text


def test_text_report_lists_the_fused_kernels(tmp_path: Path) -> None:
    report = diagnostics.collect_diagnostics(model_store=tmp_path / "models")
    # As a GPU machine reports them (this machine has none, so the probe leaves them out).
    report["torch"]["fused_kernels"] = {"depthformer_frame": "ready", "top_k_gumbel_argmax": "RuntimeError: NVRTC not found"}
    text = diagnostics.format_report_text(report)
    assert "  fused kernel depthformer_frame: ready" in text
    assert "  fused kernel top_k_gumbel_argmax: RuntimeError: NVRTC not found" in text


def test_write_diagnostics_defaults_to_the_log_dir(log_file: Path) -> None:
    path = diagnostics.write_diagnostics(diagnostics.collect_diagnostics())
    assert path.parent == log_file.parent
    assert path.name.startswith("diagnostics-") and path.suffix == ".json"
    assert path.with_suffix(".txt").is_file()


def test_selftest_passes_with_a_working_turn(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "selftest.json"
    code = diagnostics.run_selftest(
        _stft_turn, report_path=target, out=out, collect=lambda: diagnostics.collect_diagnostics(model_store=tmp_path)
    )
    report = json.loads(target.read_text(encoding="utf-8"))
    assert code == 0 == report["exit_code"]
    assert report["turn"]["ok"] is True
    assert abs(report["turn"]["result"]["peak_hz"] - 440.0) < 16.0  # one FFT bin is 15.6 Hz
    assert report["turn"]["result"]["samples"] == 16000  # a tensor scalar became a plain number
    assert report["turn"]["result"]["text"] == "こんにちは"
    summary = out.getvalue()
    assert "Self-test passed." in summary
    assert str(target.with_suffix(".txt")) in summary


def test_selftest_fails_when_the_turn_raises(tmp_path: Path) -> None:
    out = io.StringIO()
    target = tmp_path / "selftest.json"
    code = diagnostics.run_selftest(
        _broken_turn, report_path=target, out=out, collect=lambda: diagnostics.collect_diagnostics(model_store=tmp_path)
    )
    assert code == 1
    report = json.loads(target.read_text(encoding="utf-8"))
    assert report["turn"]["ok"] is False
    assert report["turn"]["error"].startswith("RuntimeError")
    assert "_broken_turn" in target.with_suffix(".txt").read_text(encoding="utf-8")  # traceback kept
    assert "Self-test FAILED." in out.getvalue()


def test_selftest_fails_on_a_non_dict_result_and_on_timeout(tmp_path: Path) -> None:
    collect = lambda: diagnostics.collect_diagnostics(model_store=tmp_path)  # noqa: E731
    assert diagnostics.run_selftest(lambda: 42, report_path=tmp_path / "a.json", out=io.StringIO(), collect=collect) == 1  # type: ignore[arg-type, return-value]

    release = threading.Event()

    def stuck_turn() -> dict[str, Any]:
        release.wait(30)
        return {}

    started = time.monotonic()
    code = diagnostics.run_selftest(
        stuck_turn, report_path=tmp_path / "b.json", timeout_s=0.5, out=io.StringIO(), collect=collect
    )
    release.set()
    assert code == 1
    assert time.monotonic() - started < 10
    assert "TimeoutError" in json.loads((tmp_path / "b.json").read_text(encoding="utf-8"))["turn"]["error"]


def test_selftest_fails_when_a_check_is_an_error(tmp_path: Path) -> None:
    def collect_with_old_driver() -> dict[str, Any]:
        report = diagnostics.collect_diagnostics(model_store=tmp_path)
        status, severity, message = diagnostics.assess_driver(
            torch_cuda="12.8", driver_cuda=(11, 4), driver_version="472.12", gpu_seen=True, cuda_available=False
        )
        report["checks"] = [c for c in report["checks"] if c["name"] != "driver"]
        report["checks"].append({"name": "driver", "status": severity, "message": message})
        return report

    out = io.StringIO()
    code = diagnostics.run_selftest(_stft_turn, report_path=tmp_path / "c.json", out=out, collect=collect_with_old_driver)
    assert code == 1
    assert "472.12" in out.getvalue()


def test_selftest_survives_a_missing_stdout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The windowed Windows exe has sys.stdout = None unless a console was attached.
    monkeypatch.setattr(sys, "stdout", None)
    code = diagnostics.run_selftest(
        _stft_turn, report_path=tmp_path / "d.json", collect=lambda: diagnostics.collect_diagnostics(model_store=tmp_path)
    )
    assert code == 0
    assert (tmp_path / "d.txt").is_file()


def test_selftest_main_writes_into_the_platform_log_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, restore_hooks: None, capsys: pytest.CaptureFixture[str]
) -> None:
    # platformdirs reads XDG_STATE_HOME on Linux: the log dir moves into the temp dir.
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    was_enabled = faulthandler.is_enabled()
    try:
        code = diagnostics.selftest_main(_stft_turn, timeout_s=60)
        log_dir = logs.default_log_dir()
        assert log_dir.is_relative_to(tmp_path)
        assert logs.current_log_path() == log_dir / logs.LOG_FILE_NAME
        reports = sorted(log_dir.glob("diagnostics-*.json"))
        assert code == 0 and len(reports) == 1
        assert "self-test summary (exit 0)" in _read(log_dir / logs.LOG_FILE_NAME)
        assert str(reports[0].with_suffix(".txt")) in capsys.readouterr().out
    finally:
        logs.shutdown_logging()
        if was_enabled:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)


# --------------------------------------------------------------------------- logs


def test_setup_logging_writes_to_the_file_once(tmp_path: Path, log_file: Path) -> None:
    assert log_file.parent == tmp_path / "logs"
    assert logs.current_log_path() == log_file
    logging.getLogger("voicechat.test").warning("first line %s", "日本語")
    # A second setup must replace, not add, handlers: the next line appears exactly once.
    again = logs.setup_logging(log_dir=tmp_path / "logs")
    assert again == log_file
    logging.getLogger("voicechat.test").warning("second line")
    text = _read(log_file)
    assert "first line 日本語" in text
    assert text.count("second line") == 1
    assert (log_file.parent / logs.NATIVE_CRASH_FILE_NAME).is_file()


def test_setup_logging_without_stderr(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)
    was_enabled = faulthandler.is_enabled()
    try:
        path = logs.setup_logging(log_dir=tmp_path)
        ours = [h for h in logging.getLogger().handlers if getattr(h, "_voicechat_handler", False)]
        assert [type(h).__name__ for h in ours] == ["RotatingFileHandler"]
        logging.getLogger("voicechat.test").error("no console here")
        assert "no console here" in _read(path)
    finally:
        logs.shutdown_logging()
        if was_enabled:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)


def test_excepthook_logs_and_calls_the_dialog(log_file: Path, restore_hooks: None) -> None:
    shown: list[str] = []
    logs.install_excepthook(shown.append)
    try:
        {}["missing-key"]
    except KeyError:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    assert len(shown) == 1
    assert "the main thread" in shown[0] and "KeyError: 'missing-key'" in shown[0]
    assert "KeyError: 'missing-key'" in _read(log_file)


def test_thread_exceptions_reach_the_hook(log_file: Path, restore_hooks: None) -> None:
    shown: list[str] = []
    logs.install_excepthook(shown.append)

    def worker() -> None:
        raise ValueError("engine thread broke")

    thread = threading.Thread(target=worker, name="engine")
    thread.start()
    thread.join()
    assert len(shown) == 1 and "thread 'engine'" in shown[0] and "ValueError: engine thread broke" in shown[0]
    assert "engine thread broke" in _read(log_file)


def test_keyboard_interrupt_and_broken_dialog(log_file: Path, restore_hooks: None, capsys: pytest.CaptureFixture[str]) -> None:
    def broken_dialog(message: str) -> None:
        raise RuntimeError("dialog exploded")

    logs.install_excepthook(broken_dialog)
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())  # type: ignore[arg-type]
    assert "KeyboardInterrupt" in capsys.readouterr().err  # default behaviour, no dialog
    try:
        raise OSError("disk gone")
    except OSError:
        sys.excepthook(*sys.exc_info())  # must not raise although the dialog does
    text = _read(log_file)
    assert "disk gone" in text and "dialog exploded" in text


# --------------------------------------------------------------------------- Qt crash dialog


def test_crash_dialog_is_shown_in_the_gui_thread(qapp: Any, qtbot: Any, tmp_path: Path) -> None:
    from PySide6.QtCore import QThread, QTimer
    from PySide6.QtWidgets import QMessageBox

    from app.crash import CrashReporter

    log_path = tmp_path / "voicechat.log"
    reporter = CrashReporter(log_path, interactive=True)
    seen: list[tuple[str, str, str, bool]] = []

    def inspect(box: QMessageBox) -> None:
        seen.append((box.text(), box.informativeText(), box.detailedText(), QThread.currentThread() is qapp.thread()))
        QTimer.singleShot(0, box.reject)  # close it once exec() runs

    reporter.dialog_shown.connect(inspect)
    message = "Unhandled exception in thread 'engine':\nTraceback ...\nValueError: boom"
    worker = threading.Thread(target=reporter.show, args=(message,))
    worker.start()
    worker.join()
    qtbot.waitUntil(lambda: len(seen) == 1, timeout=5000)
    text, informative, detailed, in_gui_thread = seen[0]
    assert in_gui_thread
    assert "ValueError: boom" in text
    assert str(log_path) in informative
    assert detailed == message


def test_crash_dialog_end_to_end_with_the_excepthook(qapp: Any, qtbot: Any, log_file: Path, restore_hooks: None) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QMessageBox

    from app.crash import CrashReporter

    reporter = CrashReporter(log_file, interactive=True)
    details: list[str] = []

    def close(box: QMessageBox) -> None:
        details.append(box.detailedText())
        QTimer.singleShot(0, box.reject)

    reporter.dialog_shown.connect(close)
    logs.install_excepthook(reporter.show)

    def audio_callback() -> None:
        raise ZeroDivisionError("division by zero in the audio thread")

    thread = threading.Thread(target=audio_callback, name="audio")
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: len(details) == 1, timeout=5000)
    assert "thread 'audio'" in details[0] and "ZeroDivisionError" in details[0]
    assert "ZeroDivisionError: division by zero in the audio thread" in _read(log_file)


def test_crash_dialog_does_not_stack_or_block_headless(qapp: Any, qtbot: Any, tmp_path: Path) -> None:
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QMessageBox

    from app.crash import CrashReporter, headless

    # Offscreen (as in CI and the frozen self-test): the automatic mode shows nothing.
    assert headless()
    quiet = CrashReporter(tmp_path / "x.log")
    shown_quiet: list[QMessageBox] = []
    quiet.dialog_shown.connect(shown_quiet.append)
    quiet.show("Unhandled exception in the main thread:\nRuntimeError: x")
    qtbot.wait(50)
    assert shown_quiet == []

    # A second error while the first dialog is open is logged, not shown on top of it.
    reporter = CrashReporter(tmp_path / "x.log", interactive=True)
    count: list[int] = []

    def reenter(box: QMessageBox) -> None:
        count.append(1)
        if len(count) == 1:
            QTimer.singleShot(0, lambda: reporter.show("second error"))
        QTimer.singleShot(20, box.reject)

    reporter.dialog_shown.connect(reenter)
    reporter.show("first error")
    qtbot.wait(100)
    assert len(count) == 1
