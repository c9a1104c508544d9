"""The one way this code base captures a CUDA graph (after moshi's `utils/compile.py` `CUDAGraphed`).

The rules every capture follows:
1. Warm up eagerly on the side stream first, ordered after the work already queued on the current stream
   and before whatever is queued after it: cuBLAS/cuDNN handles and workspaces, lazily loaded kernels
   and lazily grown module state must exist before a capture, and PyTorch's CUDA-graph notes ask for
   the warm-up to be off the default stream (`warm_up`).
2. Capture into a fresh `torch.cuda.CUDAGraph`, into the memory pool the caller names: graphs that
   never run at the same time share one pool (`torch.cuda.graph_pool_handle()`), which keeps VRAM
   bounded; `None` gives the graph a private pool (`capture`).
3. The captured step reads and writes only static buffers, so a replay is the eager step on whatever
   the buffers hold; every caller keeps that eager step as its fallback (CPU, or a failed capture).

The capture itself records nothing on the device; callers that must not lose state (a conversation's
cache, a half-spoken utterance) snapshot it before the warm-up and restore it after the capture.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import torch

T = TypeVar("T")

# Held by every capture: two captures never overlap, and `empty_cache` skips while one is under way, since PyTorch
# refuses to empty its allocator's cache while any thread captures (an internal assert, not an error). Every capture
# of the app runs on the engine's thread (the encoder's rungs behind "ready" too: engine/realtime/lazy_capture.py);
# a capture in CUDA's global mode must not meet another thread's CUDA work (H100 run with a capture thread: "operation
# not permitted when stream is capturing" on the other thread, "Offset increment outside graph capture" from its RNG).
CAPTURE_LOCK = threading.Lock()


def empty_cache() -> bool:
    """`torch.cuda.empty_cache()`, unless a capture is under way on another thread (then nothing: memory hygiene can
    wait for the next call); whether it ran."""
    if not CAPTURE_LOCK.acquire(blocking=False):
        return False
    try:
        torch.cuda.empty_cache()
    finally:
        CAPTURE_LOCK.release()
    return True


def side_stream(device: torch.device | str) -> torch.cuda.Stream:
    """The one stream every start-up warm-up and timing runs on: cuBLAS keeps a workspace (32 MB on Hopper)
    for every stream it ever ran on, for as long as the process lives (H200 bench run 34), so each new
    stream would hold its own for good."""
    device = torch.device(device)
    return _side_stream(device.index if device.index is not None else torch.cuda.current_device())


@functools.cache
def _side_stream(index: int) -> torch.cuda.Stream:
    return torch.cuda.Stream(index)


def warm_up(device: torch.device, run: Callable[[], T], *, side: torch.cuda.Stream | None = None) -> T:
    """`run()` on a side stream (`side_stream` unless `side` is given), ordered between the current
    stream's earlier and later work; returns what `run` returned."""
    current = torch.cuda.current_stream(device)
    if side is None:
        side = side_stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        result = run()
    current.wait_stream(side)
    return result


def beside(device: torch.device, branch: Callable[[], object], work: Callable[[], T]) -> T:
    """`branch()` on the side stream while `work()` runs on the current one, both after the current stream's
    earlier work and before its later work; returns what `work` returned. Captured, the two are branches of
    the graph that run at once (a head's sampling noise beside its product: its five small kernels off the
    step's path); on the CPU, one after the other."""
    if device.type != "cuda":
        branch()
        return work()
    current = torch.cuda.current_stream(device)
    side = side_stream(device)
    side.wait_stream(current)
    with torch.cuda.stream(side):
        branch()
    result = work()
    current.wait_stream(side)
    return result


def capture(step: Callable[[], T], *, pool: Any = None) -> tuple[torch.cuda.CUDAGraph, T]:
    """Record one call of `step` as a new graph in memory pool `pool` (None: a private pool);
    returns the graph and what `step` returned during the capture (its static output buffers).

    Python's cyclic garbage collector is off during the capture: a collection there could free an old
    graph (an earlier session's, caught in a reference cycle), and destroying a graph while a stream
    captures is refused ("operation not permitted when stream is capturing"), and H200 run 64 lost a
    start-up timing's capture right after ten such refusals. (Two GPU tests that made a graph garbage
    mid-capture did not break the capture without this either, runs 65-66, so no test stands for it: the
    cause is inferred from run 64's log.)

    What `torch.cuda.graph` does, less emptying the allocator's caches (device and pinned host) before
    every capture: with expandable segments that unmapped the pages of each warm-up's temporaries only for
    the next warm-up to map them again, some 60 times in a start-up; ChatSession.open empties the cache once,
    when it is ready. The capture runs on one stream of its own, after everything queued before it."""
    graph = torch.cuda.CUDAGraph()
    with CAPTURE_LOCK:
        torch.cuda.synchronize()
        with torch.cuda.stream(_capture_stream(torch.cuda.current_device())):
            collecting = gc.isenabled()
            gc.disable()
            graph.capture_begin(pool=pool)
            try:
                result = step()
            finally:
                graph.capture_end()
                if collecting:
                    gc.enable()
    return graph, result


@functools.cache
def _capture_stream(index: int) -> torch.cuda.Stream:
    """The stream every capture on the engine's thread records on (one: cuBLAS keeps a workspace per stream)."""
    return torch.cuda.Stream(index)


def per_call_us(device: torch.device, run: Callable[[], object], *, calls: int = 20, replays: int = 5,
                side: torch.cuda.Stream | None = None) -> float:
    """Device time per call of `run`, in µs: `calls` calls warmed up (on `side`), captured back to back in
    one graph (a private pool, freed on return), replayed once untimed and then `replays` times timed.
    Back to back in a graph is how the decode step runs them (start-up timings, probes)."""

    def back_to_back() -> None:
        for _ in range(calls):
            run()

    warm_up(device, back_to_back, side=side)
    graph, _ = capture(back_to_back)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / (calls * replays)
