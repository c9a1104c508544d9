"""What the self-test checks and what a bug report needs: versions, GPU, driver, audio, model.

`collect_diagnostics()` never raises: every probe records its own error in the report, because the
report is most needed exactly when something is broken (no driver, no PortAudio, no model).
`run_selftest()` adds one real turn through the pipeline, writes the report next to the logs and
returns the process exit code.

Plain Python + torch; no Qt here.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.metadata
import json
import logging
import platform
import shutil
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Any

from engine import logs, paths
from engine.constants import MODEL_REPO_ID as DEFAULT_MODEL_REPO
from engine.model.store import cached_snapshot, interrupted_downloads, models_dir
from engine.tools.nvidia_driver import (  # noqa: F401 (parse_nvidia_smi_csv: part of the report module's interface)
    ERROR,
    OK,
    WARNING,
    assess_driver,
    parse_nvidia_smi_csv,
    query_driver_cuda_version,
    query_nvidia_smi,
)
from engine.tools.nvidia_driver import error_text as _error_text

logger = logging.getLogger(__name__)

APP_NAME = paths.APP_NAME
REPORT_SCHEMA = 1



# --------------------------------------------------------------------------- small helpers


def _check(name: str, status: str, summary: str) -> dict[str, str]:
    # `summary`, not `message`: the self-test's report is an English file for bug reports, not a
    # message of the window (tests/test_ui_strings.py gathers parameters named `message`).
    return {"name": name, "status": status, "message": summary}


# --------------------------------------------------------------------------- probes


def _probe_torch() -> dict[str, Any]:
    info: dict[str, Any] = {"version": None, "cuda_build": None, "cudnn": None, "cuda_available": False}
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        info["error"] = _error_text(exc)
        return info
    info["version"] = torch.__version__
    info["cuda_build"] = torch.version.cuda
    # torch explains why CUDA is unusable (e.g. "driver too old") only through a warning.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            info["cuda_available"] = bool(torch.cuda.is_available())
        except Exception as exc:  # noqa: BLE001
            info["cuda_init_error"] = _error_text(exc)
    reasons = [str(w.message) for w in caught]
    if reasons and not info["cuda_available"]:
        info["cuda_init_error"] = " ".join(reasons)
    with contextlib.suppress(Exception):
        info["cudnn"] = torch.backends.cudnn.version()
    gpus: list[dict[str, Any]] = []
    if info["cuda_available"]:
        try:
            arch_list = list(torch.cuda.get_arch_list())
            info["arch_list"] = arch_list
            for index in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(index)
                free, total = torch.cuda.mem_get_info(index)
                sm = f"sm_{props.major}{props.minor}"
                gpus.append(
                    {
                        "index": index,
                        "name": props.name,
                        "total_vram_bytes": int(total),
                        "free_vram_bytes": int(free),
                        "compute_capability": f"{props.major}.{props.minor}",
                        # A GPU newer than every architecture the build was compiled for fails
                        # on the first kernel launch, long after is_available() said yes.
                        "supported_by_torch_build": (not arch_list) or sm in arch_list,
                    }
                )
        except Exception as exc:  # noqa: BLE001
            info["gpu_error"] = _error_text(exc)
    if gpus and all(gpu["supported_by_torch_build"] for gpu in gpus):
        # The engine's NVRTC kernels: without them it runs plain PyTorch ops, correct but slower.
        try:
            from engine.realtime.kernels import kernel_status

            info["fused_kernels"] = kernel_status()
        except Exception as exc:  # noqa: BLE001
            info["fused_kernels"] = {"error": _error_text(exc)}
    info["gpus"] = gpus
    return info


def _probe_audio() -> dict[str, Any]:
    info: dict[str, Any] = {"portaudio": None, "devices": [], "default_input": None, "default_output": None}
    try:
        import sounddevice as sd  # raises OSError when the PortAudio library is missing
    except Exception as exc:  # noqa: BLE001
        info["error"] = _error_text(exc)
        return info
    try:
        info["portaudio"] = sd.get_portaudio_version()[1]
        hostapis = sd.query_hostapis()
        devices = []
        for index, device in enumerate(sd.query_devices()):
            devices.append(
                {
                    "index": index,
                    "name": device["name"],
                    "hostapi": hostapis[device["hostapi"]]["name"],
                    "max_input_channels": int(device["max_input_channels"]),
                    "max_output_channels": int(device["max_output_channels"]),
                    "default_samplerate": float(device["default_samplerate"]),
                }
            )
        info["devices"] = devices
        default_in, default_out = sd.default.device
        by_index = {d["index"]: d["name"] for d in devices}
        info["default_input"] = by_index.get(default_in)
        info["default_output"] = by_index.get(default_out)
    except Exception as exc:  # noqa: BLE001
        info["error"] = _error_text(exc)
    return info


def find_cached_model(repo_id: str, store: Path) -> dict[str, Any]:
    """What the model store finds of `repo_id` in the Hugging Face cache at `store` (engine.model.store asks
    huggingface_hub). A snapshot counts when it has config.json and at least one .safetensors file;
    leftover partial files mean an interrupted download."""
    result: dict[str, Any] = {"repo_id": repo_id, "store": str(store), "present": False, "snapshot": None}
    snapshot = cached_snapshot(repo_id, cache_dir=store)
    weights = sorted(snapshot.glob("*.safetensors")) if snapshot is not None else []
    if snapshot is not None and (snapshot / "config.json").is_file() and weights:
        files = [path for path in snapshot.rglob("*") if path.is_file()]
        result.update(
            present=True,
            snapshot=str(snapshot),
            files=len(files),
            # Snapshot entries are symlinks (or copies on Windows without symlink rights); stat() follows
            # the link to the blob, so this is the real size.
            size_bytes=sum(path.stat().st_size for path in files),
            weights=[path.name for path in weights],
        )
    incomplete = interrupted_downloads(repo_id, cache_dir=store)
    if incomplete:
        result["incomplete_downloads"] = incomplete
    return result


def _app_version() -> str:
    try:
        return importlib.metadata.version("voicechat")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


# --------------------------------------------------------------------------- the report


def collect_diagnostics(
    *,
    model_repo: str = DEFAULT_MODEL_REPO,
    model_store: Path | None = None,
    app_name: str = APP_NAME,
) -> dict[str, Any]:
    """Everything a bug report needs, as JSON-ready values. Never raises."""
    torch_info = _probe_torch()
    gpus, driver, gpu_checks = _gpu_report(torch_info)
    audio = _probe_audio()
    model = _model_report(model_repo, model_store if model_store is not None else models_dir())
    return {
        "schema": REPORT_SCHEMA,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "app": _app_info(app_name),
        "platform": _platform_info(),
        "paths": _paths_info(),
        "torch": {key: value for key, value in torch_info.items() if key != "gpus"},
        "gpus": gpus,
        "driver": driver,
        "audio": audio,
        "model": model,
        "checks": [*_torch_checks(torch_info), *gpu_checks, _audio_check(audio), _model_check(model, _saved_settings()),
                   _settings_check()],
    }


def _app_info(app_name: str) -> dict[str, Any]:
    return {
        "name": app_name,
        "version": _app_version(),
        "frozen": bool(getattr(sys, "frozen", False)),
        "executable": sys.executable,
    }


def _platform_info() -> dict[str, str]:
    return {
        "system": platform.system(),
        "release": platform.release(),
        "version": platform.version(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "python_build": sys.version,
    }


def _paths_info() -> dict[str, str | None]:
    return {
        "log_file": str(logs.current_log_path()) if logs.current_log_path() else None,
        "log_dir": str(logs.default_log_dir()),
        "data_dir": str(paths.data_dir()),
        "config_dir": str(paths.config_dir()),
    }


def _torch_checks(torch_info: dict[str, Any]) -> list[dict[str, str]]:
    if "error" in torch_info:
        return [_check("torch", ERROR, f"torch could not be imported: {torch_info['error']}")]
    return []


def _gpu_report(torch_info: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, str]]]:
    """The GPUs, the driver's verdict, and their checks (driver first, then each GPU the build cannot run)."""
    smi = query_nvidia_smi()
    driver_cuda = query_driver_cuda_version()
    driver_version = smi["gpus"][0]["driver_version"] if smi["gpus"] else None
    gpus = torch_info.get("gpus") or []
    if not gpus and smi["gpus"]:
        # torch cannot see the GPU (old driver, CPU build): still report what nvidia-smi sees.
        gpus = [{"index": i, **{k: v for k, v in g.items() if k != "driver_version"}} for i, g in enumerate(smi["gpus"])]
    status, severity, message = assess_driver(
        torch_cuda=torch_info.get("cuda_build"),
        driver_cuda=driver_cuda,
        driver_version=driver_version,
        gpu_seen=bool(gpus) or smi["available"],
        cuda_available=bool(torch_info.get("cuda_available")),
        cuda_init_error=torch_info.get("cuda_init_error"),
    )
    driver = {
        "driver_version": driver_version,
        "driver_cuda": f"{driver_cuda[0]}.{driver_cuda[1]}" if driver_cuda else None,
        "nvidia_smi": smi.get("path") if smi["available"] else smi["error"],
        "status": status,
        "message": message,
    }
    checks = [_check("driver", severity, message)]
    checks += [
        _check(
            "gpu_arch",
            ERROR,
            f"{gpu['name']} (compute capability {gpu['compute_capability']}) is not supported by this "
            f"torch build (built for {', '.join(torch_info.get('arch_list', []))}).",
        )
        for gpu in gpus
        if gpu.get("supported_by_torch_build") is False
    ]
    return gpus, driver, checks


def _audio_check(audio: dict[str, Any]) -> dict[str, str]:
    if "error" in audio:
        return _check("audio", WARNING, f"Audio devices could not be listed: {audio['error']}")
    inputs = [d for d in audio["devices"] if d["max_input_channels"] > 0]
    outputs = [d for d in audio["devices"] if d["max_output_channels"] > 0]
    if inputs and outputs:
        return _check("audio", OK, f"{len(inputs)} input and {len(outputs)} output devices.")
    return _check(
        "audio",
        WARNING,
        f"{len(inputs)} input and {len(outputs)} output devices: connect a microphone and speakers/headphones.",
    )


def _model_report(model_repo: str, store: Path) -> dict[str, Any]:
    try:
        return find_cached_model(model_repo, store)
    except Exception as exc:  # noqa: BLE001 - a report never raises
        return {"repo_id": model_repo, "store": str(store), "present": False, "error": _error_text(exc)}


def _saved_settings() -> Any:
    """The saved settings as the app would read them (a copy is read: the file is left alone), or None."""
    import tempfile

    from engine.settings import default_settings_path, load_settings

    try:
        path = default_settings_path()
        if not path.is_file():
            return None
        with tempfile.TemporaryDirectory(prefix="voicechat-settings-check-") as folder:
            copy = Path(folder) / path.name
            shutil.copyfile(path, copy)
            return load_settings(copy).settings
    except Exception:  # noqa: BLE001 - a report never raises
        return None


def _model_check(model: dict[str, Any], settings: Any = None) -> dict[str, str]:
    repo = model["repo_id"]
    source = getattr(settings, "model_source", None)
    if settings is not None and settings.demo:
        # The Hub model is not what the app loads: its absence is no problem.
        return _check("model", OK, "The demo model is chosen in the settings; the Hub model is not needed.")
    if source and source != repo and not _looks_like_hub_id(source):
        from engine.model.store import check_model_folder

        problems = check_model_folder(source)
        if problems:
            return _check("model", WARNING, f"The model folder {source} chosen in the settings cannot be used: "
                          + "; ".join(str(problem) for problem in problems))
        return _check("model", OK, f"The model folder {source} chosen in the settings has every file.")
    if model["present"]:
        return _check("model", OK, f"{repo} is downloaded ({model['snapshot']}).")
    if model.get("incomplete_downloads"):
        return _check("model", WARNING, f"{repo}: an earlier download was interrupted; it resumes on the next start.")
    return _check("model", WARNING, f"{repo} is not downloaded yet; the app downloads it on first start.")


def _settings_check() -> dict[str, str]:
    """Whether the settings file can be used. Only looked at: a copy is checked, and the app itself
    moves a bad file aside on its next start."""
    import tempfile

    from engine.settings import default_settings_path, load_settings

    try:
        path = default_settings_path()
        if not path.exists() and not path.is_symlink():
            return _check("settings", OK, "No settings file yet (first start).")
        if not path.is_file():
            return _check("settings", WARNING, f"{path} is not a readable file; the app starts with default settings.")
        with tempfile.TemporaryDirectory(prefix="voicechat-settings-check-") as folder:
            copy = Path(folder) / path.name
            shutil.copyfile(path, copy)
            loaded = load_settings(copy)
            problem = loaded.problem
            if problem is None:
                voice = _voice_problem(loaded.settings.lora)
                if voice:
                    return _check("settings", WARNING, f"{path} is readable, but the saved voice {loaded.settings.lora} "
                                  f"cannot be used: {voice} The app starts with the model's own voice; choose "
                                  "another voice in Settings.")
                return _check("settings", OK, f"{path} is valid.")
            message = problem.message.replace(folder, str(path.parent))
    except Exception as exc:  # noqa: BLE001 - a report never raises
        return _check("settings", WARNING, f"The settings file could not be checked: {_error_text(exc)}")
    return _check("settings", WARNING, f"{message} (The app does this when it starts next.)")


def _looks_like_hub_id(source: str) -> bool:
    from engine.model.store import looks_like_repo_id

    return looks_like_repo_id(source)


def _voice_problem(lora: str | None) -> str:
    """Why the saved voice cannot be read ('' when it can, or when there is none). Its files are read
    as the app reads them; whether it fits the model is known only once the model is loaded."""
    if not lora:
        return ""
    from engine.errors import UserFacingError
    from engine.model.lora import load_voice

    try:
        load_voice(lora)
    except UserFacingError as exc:
        return exc.message
    except Exception as exc:  # noqa: BLE001 - a report never raises
        return _error_text(exc)
    return ""


def _jsonable(value: Any) -> Any:
    """Best-effort conversion of a run_turn() result (may hold numpy/torch scalars, paths) to JSON."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    item = getattr(value, "item", None)
    if callable(item):
        with contextlib.suppress(Exception):
            return _jsonable(item())
    return str(value)


def _format_bytes(count: int | None) -> str:
    return "unknown" if count is None else f"{count / 1024**3:.1f} GiB"


def format_report_text(report: dict[str, Any]) -> str:
    """The human-readable version of the report (the .txt the user can paste into an issue)."""
    lines: list[str] = [f"{report['app']['name']} diagnostics ({report['generated_at']})", ""]

    def section(title: str, rows: Iterable[tuple[str, Any]]) -> None:
        lines.append(f"[{title}]")
        lines.extend(f"  {key}: {value}" for key, value in rows)
        lines.append("")

    app = report["app"]
    plat = report["platform"]
    section(
        "app",
        [("version", app["version"]), ("frozen", app["frozen"]), ("executable", app["executable"])],
    )
    section(
        "system",
        [
            ("os", f"{plat['system']} {plat['release']} ({plat['version']}) {plat['machine']}"),
            ("python", plat["python"]),
        ],
    )
    torch_info = report.get("torch", {})
    section(
        "torch",
        [
            ("version", torch_info.get("version")),
            ("cuda build", torch_info.get("cuda_build")),
            ("cudnn", torch_info.get("cudnn")),
            ("cuda available", torch_info.get("cuda_available")),
        ]
        + ([("cuda init error", torch_info["cuda_init_error"])] if torch_info.get("cuda_init_error") else [])
        + [(f"fused kernel {name}", status) for name, status in (torch_info.get("fused_kernels") or {}).items()]
        + ([("error", torch_info["error"])] if torch_info.get("error") else []),
    )
    driver = report.get("driver", {})
    section(
        "driver",
        [
            ("version", driver.get("driver_version")),
            ("supports cuda", driver.get("driver_cuda")),
            ("status", driver.get("status")),
            ("message", driver.get("message")),
        ],
    )
    gpu_rows: list[tuple[str, Any]] = []
    for gpu in report.get("gpus", []):
        gpu_rows.append(
            (
                f"gpu {gpu.get('index')}",
                f"{gpu.get('name')}, VRAM {_format_bytes(gpu.get('total_vram_bytes'))} total / "
                f"{_format_bytes(gpu.get('free_vram_bytes'))} free, compute capability "
                f"{gpu.get('compute_capability', 'unknown')}",
            )
        )
    section("gpus", gpu_rows or [("gpu", "none found")])
    audio = report.get("audio", {})
    audio_rows: list[tuple[str, Any]] = [
        ("portaudio", audio.get("portaudio")),
        ("default input", audio.get("default_input")),
        ("default output", audio.get("default_output")),
    ]
    if audio.get("error"):
        audio_rows.append(("error", audio["error"]))
    for device in audio.get("devices", []):
        audio_rows.append(
            (
                f"device {device['index']}",
                f"{device['name']} [{device['hostapi']}] in={device['max_input_channels']} "
                f"out={device['max_output_channels']} {device['default_samplerate']:.0f} Hz",
            )
        )
    section("audio", audio_rows)
    model = report.get("model", {})
    section(
        "model",
        [
            ("repo", model.get("repo_id")),
            ("store", model.get("store")),
            ("present", model.get("present")),
            ("snapshot", model.get("snapshot")),
            ("size", _format_bytes(model.get("size_bytes")) if model.get("size_bytes") is not None else None),
        ],
    )
    if "turn" in report:
        turn = report["turn"]
        rows: list[tuple[str, Any]] = [("ok", turn["ok"]), ("seconds", f"{turn['seconds']:.2f}")]
        if turn.get("error"):
            rows.append(("error", turn["error"]))
        for key, value in (turn.get("result") or {}).items():
            rows.append((key, value))
        section("self-test turn", rows)
    section("paths", list(report.get("paths", {}).items()))
    section("checks", [(c["name"], f"{c['status'].upper()}: {c['message']}") for c in report.get("checks", [])])
    if report.get("turn", {}).get("traceback"):
        lines.append("[turn traceback]")
        lines.append(report["turn"]["traceback"].rstrip("\n"))
        lines.append("")
    return "\n".join(lines)


def write_diagnostics(report: dict[str, Any], path: Path | None = None) -> Path:
    """Write the report as JSON plus a readable .txt beside it; returns the JSON file's path.

    Default location: the log dir, named with the time so that older reports are kept.
    """
    if path is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        log_file = logs.current_log_path()
        directory = log_file.parent if log_file is not None else logs.default_log_dir()
        path = directory / f"diagnostics-{stamp}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
    path.with_suffix(".txt").write_text(format_report_text(report) + "\n", encoding="utf-8")
    return path


def format_summary(report: dict[str, Any], report_path: Path | None) -> str:
    """A few lines for the console (or a dialog): one line per check and where the report is."""
    lines = []
    for check in report.get("checks", []):
        lines.append(f"[{check['status'].upper():7}] {check['name']}: {check['message']}")
    failed = any(c["status"] == ERROR for c in report.get("checks", []))
    lines.append(f"Self-test {'FAILED' if failed else 'passed'}.")
    if report_path is not None:
        lines.append(f"Diagnostics: {report_path.with_suffix('.txt')}")
        lines.append(f"             {report_path}")
    log_file = report.get("paths", {}).get("log_file")
    if log_file:
        lines.append(f"Log:         {log_file}")
    return "\n".join(lines)


def _run_with_timeout(run_turn: Callable[[], dict[str, Any]], timeout_s: float | None) -> dict[str, Any]:
    if timeout_s is None:
        return run_turn()
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            outcome["result"] = run_turn()
        except BaseException as exc:  # noqa: BLE001 - handed back to the calling thread
            outcome["error"] = exc

    # A daemon thread: a turn stuck in a driver call must not keep the process from exiting.
    worker = threading.Thread(target=target, name="selftest-turn", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise TimeoutError(f"the self-test turn did not finish within {timeout_s:.0f} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def selftest_main(run_turn: Callable[[], dict[str, Any]], *, timeout_s: float | None = 600.0) -> int:
    """`VoiceChat --selftest` in one call: console, log file, excepthook, then run_selftest().

    For app/cli.py. The excepthook gets no dialog: nobody may be there to close it, and a
    self-test must always end with an exit code.
    """
    logs.attach_parent_console()
    logs.setup_logging()
    logs.install_excepthook(None)
    return run_selftest(run_turn, timeout_s=timeout_s)


def run_selftest(
    run_turn: Callable[[], dict[str, Any]],
    *,
    report_path: Path | None = None,
    timeout_s: float | None = 600.0,
    out: IO[str] | None = None,
    collect: Callable[[], dict[str, Any]] = collect_diagnostics,
) -> int:
    """Diagnostics plus one real turn; writes the report, prints a summary, returns 0 or 1.

    `run_turn` performs one tiny-model turn through the whole pipeline and returns a dict of what
    it measured (text, audio seconds, timings...). With a timeout it runs in a worker thread, so it
    must not create Qt widgets. The result is 1 when the turn fails (exception, timeout or a
    non-dict result) or any check reports an error (e.g. a driver too old for the torch build).
    """
    report = collect()
    checks: list[dict[str, str]] = report.setdefault("checks", [])
    started = time.perf_counter()
    try:
        result = _run_with_timeout(run_turn, timeout_s)
        if not isinstance(result, dict):
            raise TypeError(f"run_turn() returned {type(result).__name__}, expected dict")
    except Exception as exc:  # noqa: BLE001 - a failing turn is the result, not a crash
        elapsed = time.perf_counter() - started
        logger.exception("self-test turn failed")
        report["turn"] = {
            "ok": False,
            "seconds": elapsed,
            "error": _error_text(exc),
            "traceback": "".join(traceback.format_exception(exc)),
        }
        checks.append(_check("turn", ERROR, f"The test turn failed: {_error_text(exc)}"))
    else:
        elapsed = time.perf_counter() - started
        report["turn"] = {"ok": True, "seconds": elapsed, "result": _jsonable(result)}
        checks.append(_check("turn", OK, f"One test turn ran through the full pipeline in {elapsed:.1f} s."))

    exit_code = 1 if any(c["status"] == ERROR for c in checks) else 0
    report["exit_code"] = exit_code
    written: Path | None = None
    try:
        written = write_diagnostics(report, report_path)
    except OSError as exc:
        logger.exception("could not write the diagnostics report")
        checks.append(_check("report", ERROR, f"The diagnostics file could not be written: {_error_text(exc)}"))
        exit_code = 1
    summary = format_summary(report, written)
    logger.info("self-test summary (exit %d):\n%s", exit_code, summary)
    stream = out if out is not None else sys.stdout
    if stream is not None:  # None in a windowed app without an attached console
        try:
            print(summary, file=stream, flush=True)
        except (OSError, UnicodeError):
            logger.warning("could not print the self-test summary", exc_info=True)
    return exit_code
