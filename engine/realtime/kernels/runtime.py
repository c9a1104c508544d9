"""Compiling, caching and launching the NVRTC kernels: the machinery every kernel family shares.

- Compiling: PyTorch's own NVRTC bindings (`torch.cuda._utils._nvrtc_compile`, the NVRTC of PyTorch's CUDA
  wheel; no compiler on the user's PC) turn `sources.source(name)` into the GPU's code, and
  `_cuda_load_module` loads it, the two steps of `torch.cuda._compile_kernel`. `compile_in_background`
  starts every kernel in its own thread (NVRTC runs without the GIL) before the weights load;
  `compiled(name)` is the kernel for the current device, or None (logged) where it is unavailable, and
  the wrappers then keep the plain ops.
- Caching: what NVRTC produced is kept on disk (`KernelCache`, under `engine.paths.kernel_cache_dir()`),
  keyed by the full source text (its #defines included), the GPU's architecture, the NVRTC version and
  PyTorch's (which chooses NVRTC's options). A file is written whole or not at all (engine/files.py) and
  carries the key, its size and its SHA-256: a damaged, truncated or mismatched file is compiled again,
  never trusted, and a cached module the driver refuses is too.
- Launching: `launch_after_previous`, a ctypes binding of the driver's `cuLaunchKernelEx` for
  programmatic dependent launches (Hopper and later), and `float_bits` for float arguments.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import struct
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch

from engine.realtime.kernels.sources import KERNELS, source

log = logging.getLogger(__name__)

_compile_errors: dict[str, str] = {}


# ---- the disk cache ---------------------------------------------------------------------------------

CACHE_FORMAT = 1


@functools.cache
def nvrtc_version() -> str:
    """The version of the NVRTC that PyTorch loads, e.g. "13.0"."""
    from torch.cuda._utils import _get_nvrtc_library

    major, minor = ctypes.c_int(), ctypes.c_int()
    result = _get_nvrtc_library().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if result != 0:
        raise RuntimeError(f"nvrtcVersion failed ({result})")
    return f"{major.value}.{minor.value}"


def cache_key(text: str, arch: str, nvrtc: str, torch_version: str | None = None) -> str:
    """What a compiled kernel depends on: its whole source, the architecture (e.g. "90"), the NVRTC
    version, and the PyTorch version (its NVRTC options and whether it asks for PTX or a cubin)."""
    parts = [f"format {CACHE_FORMAT}", f"sm_{arch}", f"nvrtc {nvrtc}", f"torch {torch_version or torch.__version__}", text]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


class KernelCache:
    """Compiled kernels on disk, one file each: a one-line JSON header (key, kernel name and the
    compiled code's name, size, SHA-256), then the bytes NVRTC produced. A file is used only when its
    header is byte for byte the one its key, name and content give: any change to it is a miss."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, name: str, key: str) -> Path:
        return self.folder / f"{name}-{key[:32]}.bin"

    @staticmethod
    def _header(name: str, key: str, mangled: str, binary: bytes) -> bytes:
        """The header a file for exactly this content has; the SHA-256 covers the code and its name."""
        digest = hashlib.sha256(mangled.encode("utf-8") + b"\0" + binary).hexdigest()
        fields = {"format": CACHE_FORMAT, "key": key, "name": name, "mangled": mangled, "size": len(binary), "sha256": digest}
        return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode("ascii") + b"\n"

    def load(self, name: str, key: str) -> tuple[bytes, str] | None:
        """(the compiled bytes, their kernel name) if a whole file for exactly this key is there, else None."""
        try:
            data = self.path(name, key).read_bytes()
            head, newline, binary = data.partition(b"\n")
            fields = json.loads(head.decode("ascii")) if newline else None
            mangled = fields["mangled"] if isinstance(fields, dict) else None
            if isinstance(mangled, str) and head + newline == self._header(name, key, mangled, binary):
                return binary, mangled
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError) as error:  # unreadable or not ours: compiled again
            log.info("kernel cache file for %s unreadable (%s); compiling it", name, error)
            return None
        log.info("kernel cache file for %s is damaged or for another build; compiling it", name)
        return None

    def store(self, name: str, key: str, binary: bytes, mangled: str) -> None:
        from engine.files import write_atomically

        try:
            write_atomically(self.path(name, key), self._header(name, key, mangled, binary) + binary)
        except OSError as error:  # a full or read-only disk costs the next start-up its compile, no more
            log.warning("could not keep the compiled kernel %s on disk: %s", name, error)


def default_cache() -> KernelCache:
    from engine.paths import kernel_cache_dir

    return KernelCache(kernel_cache_dir())


def nvrtc_compile(text: str, name: str, arch: str) -> tuple[bytes, str]:
    """NVRTC's output for `text` on sm_`arch` and the kernel's (mangled) name, as _compile_kernel gets them."""
    from torch.cuda._utils import _nvrtc_compile

    result = _nvrtc_compile(text, name, arch)
    return result if isinstance(result, tuple) else (result, name)  # PyTorch 2.8 returned the bytes alone


def build(name: str, arch: str, cache: KernelCache | None, *, use_cached: bool = True) -> tuple[bytes, str]:
    """Kernel `name` compiled for sm_`arch`: from `cache` when it holds this exact build, else by NVRTC
    (and then kept in `cache`)."""
    text = source(name)
    key = cache_key(text, arch, nvrtc_version()) if cache is not None else ""
    if cache is not None and use_cached:
        cached = cache.load(name, key)
        if cached is not None:
            return cached
    binary, mangled = nvrtc_compile(text, name, arch)
    if cache is not None:
        cache.store(name, key, binary, mangled)
    return binary, mangled


def _load(binary: bytes, mangled: str) -> Any:
    from torch.cuda._utils import _cuda_load_module

    result = _cuda_load_module(binary, [mangled])
    return result[mangled] if isinstance(result, dict) else getattr(result, mangled)


def _compile(name: str, device_index: int | None = None) -> Any:
    """Kernel `name` loaded into the current (or `device_index`'s) context, compiled or from the cache."""
    if device_index is not None:
        torch.cuda.set_device(device_index)  # this thread's current context: the module loads into it
    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    arch = f"{major}{minor}"
    try:
        cache: KernelCache | None = default_cache()
    except Exception as error:  # no data folder: compile every time
        log.warning("no kernel cache (%s)", error)
        cache = None
    if cache is not None:
        cached = cache.load(name, cache_key(source(name), arch, nvrtc_version()))
        if cached is not None:
            try:
                return _load(*cached)
            except Exception as error:  # e.g. a driver that no longer takes it: compiled afresh below
                log.warning("the cached kernel %s did not load (%s); compiling it again", name, error)
    return _load(*build(name, arch, cache, use_cached=False))


# ---- compiling at start-up ------------------------------------------------------------------------

_compiling: dict[str, Future] = {}
_compiling_lock = threading.Lock()


def compile_in_background(device: torch.device) -> None:
    """Start compiling every kernel now, each in its own thread (NVRTC runs without the GIL), so that
    the start-up finds them compiled: ChatSession.open calls this before it loads the weights, and the
    compiling (~1 s of CPU for the depthformer kernel alone; a cache hit reads a file) overlaps the loading."""
    if device.type != "cuda":
        return
    index = device.index if device.index is not None else torch.cuda.current_device()
    with _compiling_lock:
        missing = [name for name in KERNELS if name not in _compiling]
        if missing:
            pool = ThreadPoolExecutor(max_workers=len(missing), thread_name_prefix="nvrtc")
            for name in missing:
                _compiling[name] = pool.submit(_compile, name, index)
            pool.shutdown(wait=False)  # the threads end with their compile


def _compiled_in_background(name: str) -> Any | None:
    """The kernel `compile_in_background` made, or None if it was not started or failed (logged)."""
    with _compiling_lock:
        started = _compiling.get(name)
    if started is None:
        return None
    try:
        return started.result()
    except Exception as error:  # compiled again below, on the calling thread
        log.warning("fused kernel %s did not compile in the background (%s); compiling it now", name, error)
        return None


@functools.cache
def compiled(name: str) -> Any | None:
    """The NVRTC-compiled kernel `name` for the current CUDA device (from `compile_in_background` if it
    was started and worked), or None (logged) if unavailable."""
    try:
        return _compiled_in_background(name) or _compile(name)
    except Exception as error:  # no NVRTC, an old driver, an unsupported GPU: keep the plain ops
        _compile_errors[name] = f"{type(error).__name__}: {error}".strip()
        log.warning("fused kernel %s unavailable, using plain PyTorch ops: %s", name, error)
        return None


def compile_status() -> dict[str, str]:
    """Per NVRTC kernel: "ready", or why it is not (compiling the kernels if needed)."""
    return {name: "ready" if compiled(name) is not None else _compile_errors.get(name, "unavailable") for name in KERNELS}


# ---- launching ------------------------------------------------------------------------------------


class _LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: an id, then a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_int * 16)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_mem_bytes", ctypes.c_uint),
        ("stream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(_LaunchAttribute)),
        ("num_attrs", ctypes.c_uint),
    ]


_PROGRAMMATIC_STREAM_SERIALIZATION = 6  # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
_dependent_launch_failed: list[str] = []  # why it was turned off, once it was


@functools.cache
def _dependent_launch(device_index: int) -> Callable[..., int] | None:
    """cuLaunchKernelEx where programmatic dependent launch exists (compute capability 9.0 and later,
    a driver with CUDA 12), else None."""
    if torch.cuda.get_device_capability(device_index)[0] < 9:
        return None
    try:
        return torch.cuda._utils._get_cuda_library().cuLaunchKernelEx
    except (AttributeError, OSError):
        return None


def launch_after_previous(kernel: Any, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[Any]) -> None:
    """kernel<<<grid, block>>>(args) on the current stream, allowed to start as soon as the blocks of the
    kernel ahead of it in the stream have exited (programmatic dependent launch: its blocks wait at
    `wait_for_previous` for that kernel's writes).
    Only for kernels that call `wait_for_previous` (common.cuh) as that file says; a plain launch
    where the GPU, the driver or PyTorch's kernel object cannot do it, or once a launch was refused."""
    stream = torch.cuda.current_stream()
    launch = _dependent_launch(stream.device.index) if not _dependent_launch_failed else None
    function = getattr(kernel, "func", None)
    if launch is None or function is None:
        kernel(grid=grid, block=block, args=args)
        return
    values: list[Any] = []  # what the parameter pointers point at, alive until the launch is made
    for arg in args:
        if isinstance(arg, torch.Tensor):
            values.append(ctypes.c_void_p(arg.data_ptr()))
        elif isinstance(arg, int):
            values.append(ctypes.c_int(arg))
        else:
            raise TypeError(f"unsupported kernel argument {type(arg).__name__}")
    parameters = (ctypes.c_void_p * len(values))(*(ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in values))
    attribute = _LaunchAttribute(id=_PROGRAMMATIC_STREAM_SERIALIZATION)
    attribute.value[0] = 1  # programmaticStreamSerializationAllowed
    config = _LaunchConfig(
        grid=(ctypes.c_uint * 3)(*grid), block=(ctypes.c_uint * 3)(*block), shared_mem_bytes=0,
        stream=ctypes.c_void_p(stream.cuda_stream), attrs=ctypes.pointer(attribute), num_attrs=1,
    )  # fmt: skip
    result = launch(ctypes.byref(config), function, parameters, None)
    if result != 0:
        _dependent_launch_failed.append(f"cuLaunchKernelEx returned {result}")
        log.warning("programmatic dependent launch refused (CUDA error %d); plain launches from now on", result)
        kernel(grid=grid, block=block, args=args)


def float_bits(value: float) -> int:
    """A float32 kernel argument as its 32 bits in an int (the kernel reads it with __int_as_float).

    `torch.cuda._compile_kernel` passes ints as C ints on every version, but how it passes a Python
    float has changed (a float parameter read ~0 for eps = 1e-5 on the H200's torch 2.11)."""
    return struct.unpack("<i", struct.pack("<f", float(value)))[0]
