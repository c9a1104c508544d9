"""The on-disk cache of compiled kernels (engine/realtime/kernels/runtime.py), on the CPU.

A second start-up reads what NVRTC produced instead of compiling it again; the key follows the source
(its #defines included), the GPU's architecture and the NVRTC and PyTorch versions; a file that is
damaged in any way, truncated or for another build is never used: the kernel is compiled again.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from engine.realtime.kernels import runtime, sources
from engine.realtime.kernels.runtime import KernelCache, build, cache_key

NAME = "short_conv_step"  # the smallest kernel


class CountingCompiler:
    """Stands in for NVRTC (or wraps the real one) and counts the compiles."""

    def __init__(self, real: bool = False) -> None:
        self.calls = 0
        self.real = real
        self.wrapped = runtime.nvrtc_compile

    def __call__(self, text: str, name: str, arch: str) -> tuple[bytes, str]:
        self.calls += 1
        if self.real:
            return self.wrapped(text, name, arch)
        return b"\x7fELF compiled " + arch.encode() + bytes(range(256)) * 3, name


@pytest.fixture
def fake_nvrtc(monkeypatch: pytest.MonkeyPatch) -> CountingCompiler:
    compiler = CountingCompiler()
    monkeypatch.setattr(runtime, "nvrtc_compile", compiler)
    monkeypatch.setattr(runtime, "nvrtc_version", lambda: "13.0")
    return compiler


def test_a_second_compile_is_read_from_the_cache_without_nvrtc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        from torch.cuda._utils import _get_nvrtc_library

        _get_nvrtc_library()
    except Exception as error:  # a CPU-only PyTorch build has no NVRTC
        pytest.skip(f"NVRTC is not available: {error}")
    compiler = CountingCompiler(real=True)
    monkeypatch.setattr(runtime, "nvrtc_compile", compiler)
    cache = KernelCache(tmp_path / "kernels")
    first = build(NAME, "90", cache)
    assert compiler.calls == 1 and first[1] == NAME and len(first[0]) > 1000
    files = list((tmp_path / "kernels").iterdir())
    assert [path.name for path in files] == [cache.path(NAME, cache_key(sources.source(NAME), "90", runtime.nvrtc_version())).name]
    assert build(NAME, "90", cache) == first and compiler.calls == 1  # the second start-up: no NVRTC
    assert build(NAME, "86", cache) != first and compiler.calls == 2  # another GPU: its own file
    assert build(NAME, "86", cache)[0] == build(NAME, "86", None)[0]  # the cached bytes are NVRTC's


def test_the_key_follows_the_source_the_architecture_and_the_versions() -> None:
    text = sources.source(NAME)
    key = cache_key(text, "90", "13.0", "2.11.0")
    assert key == cache_key(text, "90", "13.0", "2.11.0")
    others = [
        cache_key(text + " ", "90", "13.0", "2.11.0"),
        cache_key(text.replace("#define", "#define ", 1) if "#define" in text else "#define X 1\n" + text, "90", "13.0", "2.11.0"),
        cache_key(sources.source("matvec_gated"), "90", "13.0", "2.11.0"),
        cache_key(text, "89", "13.0", "2.11.0"),
        cache_key(text, "120", "13.0", "2.11.0"),
        cache_key(text, "90", "12.8", "2.11.0"),
        cache_key(text, "90", "13.0", "2.9.1"),
    ]
    assert len({key, *others}) == len(others) + 1
    # The #defines are part of the source: the two matvec kernels share a file but not a key.
    assert cache_key(sources.source("matvec"), "90", "13.0") != cache_key(sources.source("matvec_gated"), "90", "13.0")


def _damages() -> st.SearchStrategy:
    """Ways a cache file can be broken: cut short, a byte changed, bytes added, or a header field with
    another value (as another build, a bug or a disk would leave it)."""
    fields = st.sampled_from(["format", "key", "name", "mangled", "size", "sha256"])
    values = st.one_of(st.integers(-3, 10**6), st.text(max_size=70), st.none(), st.booleans())
    return st.one_of(
        st.tuples(st.just("truncate"), st.floats(0, 1, exclude_max=True)),
        st.tuples(st.just("flip"), st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
        st.tuples(st.just("append"), st.binary(min_size=1, max_size=64)),
        st.tuples(st.just("field"), fields, values),
        st.tuples(st.just("drop"), fields),
        st.tuples(st.just("replace"), st.binary(max_size=200)),
    )


def _damage(data: bytes, damage: tuple) -> bytes:
    kind = damage[0]
    if kind == "truncate":
        return data[: int(damage[1] * len(data))]
    if kind == "flip":
        at = int(damage[1] * len(data))
        return data[:at] + bytes([data[at] ^ damage[2]]) + data[at + 1 :]
    if kind == "append":
        return data + damage[1]
    if kind == "replace":
        return damage[1]
    head, _, payload = data.partition(b"\n")
    fields = json.loads(head)
    if kind == "drop":
        del fields[damage[1]]
    else:
        fields[damage[1]] = damage[2]
    return json.dumps(fields, separators=(",", ":"), sort_keys=True).encode() + b"\n" + payload


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(damage=_damages())
def test_every_damaged_cache_file_is_compiled_again(tmp_path: Path, fake_nvrtc: CountingCompiler, damage: tuple) -> None:
    cache = KernelCache(tmp_path / "damaged")
    good = build(NAME, "90", cache)
    path = cache.path(NAME, cache_key(sources.source(NAME), "90", "13.0"))
    whole = path.read_bytes()
    broken = _damage(whole, damage)
    if broken == whole:  # a field set to the value it had: not damage
        return
    path.write_bytes(broken)
    calls = fake_nvrtc.calls
    assert cache.load(NAME, cache_key(sources.source(NAME), "90", "13.0")) is None
    assert build(NAME, "90", cache) == good and fake_nvrtc.calls == calls + 1  # compiled, the right bytes
    assert path.read_bytes() == whole  # and kept whole again
    assert build(NAME, "90", cache) == good and fake_nvrtc.calls == calls + 1


def test_a_file_of_another_kernel_or_build_is_not_taken(tmp_path: Path, fake_nvrtc: CountingCompiler) -> None:
    cache = KernelCache(tmp_path)
    build(NAME, "90", cache)
    key = cache_key(sources.source(NAME), "90", "13.0")
    other = cache_key(sources.source(NAME), "89", "13.0")
    cache.path(NAME, other).write_bytes(cache.path(NAME, key).read_bytes())  # renamed by hand
    assert cache.load(NAME, other) is None
    cache.path("matvec", key).write_bytes(cache.path(NAME, key).read_bytes())
    assert cache.load("matvec", key) is None


def test_an_unwritable_cache_only_costs_the_compile(tmp_path: Path, fake_nvrtc: CountingCompiler) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_bytes(b"not a folder")
    cache = KernelCache(blocked / "kernels")
    assert build(NAME, "90", cache) == build(NAME, "90", cache)
    assert fake_nvrtc.calls == 2


def test_a_cached_kernel_the_driver_refuses_is_compiled_again(
    tmp_path: Path, fake_nvrtc: CountingCompiler, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`_compile`, the path every kernel takes at start-up, with the GPU calls stood in for."""
    import torch

    monkeypatch.setattr(runtime, "default_cache", lambda: KernelCache(tmp_path))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    loads: list[bytes] = []

    def load(binary: bytes, mangled: str) -> tuple[bytes, str]:
        loads.append(binary)
        if len(loads) == 2:
            raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")
        return binary, mangled

    monkeypatch.setattr(runtime, "_load", load)
    first = runtime._compile(NAME)  # compiled, kept
    second = runtime._compile(NAME)  # read from the cache, refused by the "driver", compiled again
    assert first == second and fake_nvrtc.calls == 2 and len(loads) == 3
    assert runtime._compile(NAME) == first and fake_nvrtc.calls == 2  # the cache holds it again


def test_the_cache_lives_in_the_apps_data_folder(isolated_user_dirs: Path) -> None:
    from engine import paths

    assert runtime.default_cache().folder == paths.kernel_cache_dir()
    assert paths.kernel_cache_dir().parent == paths.data_dir()
