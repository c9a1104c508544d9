"""The NVIDIA driver as the self-test sees it: nvidia-smi's report, the CUDA version the driver supports (asked
of the driver library itself), and whether that driver can run this torch build (engine/tools/diagnostics.py
puts the verdict in its report)."""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

# Oldest driver branch that runs CUDA 12.x builds through minor-version compatibility (NVIDIA's
# "CUDA Compatibility" guide: CUDA 12.x needs >= 525, CUDA 13.x needs >= 580).
MIN_DRIVER_BRANCH_FOR_CUDA_MAJOR: dict[int, int] = {11: 450, 12: 525, 13: 580}

# A check's status in the self-test's report.
OK = "ok"
WARNING = "warning"
ERROR = "error"


def error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _parse_version(text: str | None) -> tuple[int, ...] | None:
    """'12.8' -> (12, 8); '572.16' -> (572, 16); None or junk -> None."""
    if not text:
        return None
    parts: list[int] = []
    for piece in text.strip().split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None


def _hidden_window_flags() -> int:
    # The installed app has no console; without this flag every nvidia-smi call would flash a
    # console window on Windows.
    return getattr(subprocess, "CREATE_NO_WINDOW", 0)


# --------------------------------------------------------------------------- NVIDIA driver


def parse_nvidia_smi_csv(text: str) -> list[dict[str, Any]]:
    """Parse `nvidia-smi --query-gpu=name,driver_version,memory.total,memory.free
    --format=csv,noheader,nounits` (memory in MiB) into one dict per GPU."""
    gpus: list[dict[str, Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        # GPU names contain no commas; split from the right so that one would not break it.
        fields = [field.strip() for field in line.rsplit(",", 3)]
        if len(fields) != 4:
            continue
        name, driver, total_mib, free_mib = fields
        gpus.append(
            {
                "name": name,
                "driver_version": driver,
                "total_vram_bytes": int(float(total_mib) * 1024 * 1024) if _is_number(total_mib) else None,
                "free_vram_bytes": int(float(free_mib) * 1024 * 1024) if _is_number(free_mib) else None,
            }
        )
    return gpus


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def query_nvidia_smi(timeout_s: float = 10.0) -> dict[str, Any]:
    """GPUs and driver version as nvidia-smi reports them; works even when torch cannot use CUDA."""
    exe = shutil.which("nvidia-smi")
    if exe is None and sys.platform == "win32":
        # The driver installs it into System32, which a stripped PATH may lack.
        candidate = Path(r"C:\Windows\System32\nvidia-smi.exe")
        exe = str(candidate) if candidate.is_file() else None
    if exe is None:
        return {"available": False, "error": "nvidia-smi not found", "gpus": []}
    try:
        completed = subprocess.run(
            [
                exe,
                "--query-gpu=name,driver_version,memory.total,memory.free",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            creationflags=_hidden_window_flags(),
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"available": False, "error": error_text(exc), "gpus": []}
    if completed.returncode != 0:
        detail = (completed.stderr or completed.stdout).strip()
        return {"available": False, "error": f"nvidia-smi exit {completed.returncode}: {detail}", "gpus": []}
    return {"available": True, "error": None, "gpus": parse_nvidia_smi_csv(completed.stdout), "path": exe}


def query_driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA version the installed driver supports, from cuDriverGetVersion().

    Read straight from the driver library (nvcuda.dll / libcuda.so.1), so it is known even when
    the driver is too old for torch to initialise CUDA. None when there is no NVIDIA driver.
    """
    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    found = ctypes.util.find_library("cuda")
    if found and found not in names:
        names.append(found)
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        try:
            status = lib.cuDriverGetVersion(ctypes.byref(version))
        except AttributeError:
            continue
        if status == 0 and version.value > 0:
            return version.value // 1000, (version.value % 1000) // 10
    return None


def assess_driver(
    *,
    torch_cuda: str | None,
    driver_cuda: tuple[int, int] | None,
    driver_version: str | None,
    gpu_seen: bool,
    cuda_available: bool,
    cuda_init_error: str | None = None,
) -> tuple[str, str, str]:
    """Decide whether the NVIDIA driver can run this torch build: (status, severity, message).

    status is one of ok, minor_compat, too_old, cpu_build, no_gpu, init_failed.
    """
    needed = _parse_version(torch_cuda)
    shown_driver = driver_version or "unknown"
    if needed is None:
        if gpu_seen:
            return (
                "cpu_build",
                ERROR,
                "This build contains the CPU-only torch, so the NVIDIA GPU cannot be used "
                "(packaging error: the installer must be built with the CUDA torch).",
            )
        return "cpu_build", WARNING, "CPU-only torch build and no NVIDIA GPU: the app runs on the CPU (slow)."
    needed_text = ".".join(str(p) for p in needed[:2])
    if not gpu_seen:
        # A driver without a GPU (left over after a GPU swap) is no error: there is nothing to fix.
        found = "an NVIDIA driver but no NVIDIA GPU" if driver_cuda is not None else "no NVIDIA driver or GPU"
        return (
            "no_gpu",
            WARNING,
            f"Found {found}: the app runs on the CPU, which is too slow for real-time speech.",
        )
    if driver_cuda is not None:
        have_text = f"{driver_cuda[0]}.{driver_cuda[1]}"
        min_branch = MIN_DRIVER_BRANCH_FOR_CUDA_MAJOR.get(needed[0])
        driver_branch = _parse_version(driver_version)
        branch_too_old = min_branch is not None and driver_branch is not None and driver_branch[0] < min_branch
        if driver_cuda[0] < needed[0] or branch_too_old:
            branch_hint = f" (driver {min_branch} or newer)" if min_branch is not None else ""
            return (
                "too_old",
                ERROR,
                f"The NVIDIA driver {shown_driver} is too old: it supports CUDA {have_text}, but this app "
                f"needs CUDA {needed_text}{branch_hint}. Update the driver from nvidia.com or GeForce Experience / "
                "NVIDIA App, then restart Windows.",
            )
        if not cuda_available:
            return (
                "init_failed",
                ERROR,
                f"The NVIDIA driver {shown_driver} (CUDA {have_text}) is installed but CUDA could not be "
                f"initialised: {cuda_init_error or 'unknown reason'}. Reinstall or update the driver and restart.",
            )
        if driver_cuda < (needed[0], needed[1] if len(needed) > 1 else 0):
            return (
                "minor_compat",
                WARNING,
                f"The NVIDIA driver {shown_driver} supports CUDA {have_text}, older than this app's CUDA "
                f"{needed_text}. It works through CUDA minor-version compatibility, but a driver update is recommended.",
            )
        return "ok", OK, f"NVIDIA driver {shown_driver} supports CUDA {have_text}; this app needs CUDA {needed_text}."
    # A GPU is listed by nvidia-smi but the driver library did not answer.
    if cuda_available:
        return "ok", OK, f"CUDA works (driver {shown_driver}); the driver's CUDA version could not be read."
    return (
        "init_failed",
        ERROR,
        f"An NVIDIA GPU is present but CUDA could not be initialised: {cuda_init_error or 'unknown reason'}. "
        "Install or update the NVIDIA driver and restart.",
    )
