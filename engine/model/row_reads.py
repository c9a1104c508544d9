"""Byte ranges of the checkpoint files onto the device, read by several threads through pinned memory.

One mechanism serves loading (every tensor straight into its place, engine/model/checkpoint.py), int8
loading (bf16 rows onto the device to be quantized there, engine/model/quantized.py) and voice switches
(the pristine rows a voice touches, engine/model/pristine.py). A stream of reads goes like this:
- reader threads read each range from the file (a page-cache copy, GIL released) into one of a ring of
  pinned host slots, up to a ring's worth ahead of the consumer;
- each slot is copied to the device on a copy stream (a DMA from pinned memory, no host wait), straight
  into the read's destination when it has one (a weight's own rows: nothing else is written), else into
  one of a few device slots;
- the consumer gets the device bytes in order, ready on its current stream (the stream waits on the copy's
  event, the host does not), and queues its work on them; a device slot is reused only after that work.
The host waits only where it must: a reader for the copy out of the slot it is about to refill, the
consumer for the read it is about to use. The old path read one range at a time from the memory map
(~4 KB page faults), converted bf16 to float32 on the CPU and copied pageable memory to the device
synchronously, chunk after chunk: ~8-10 GB/s of the voice's bytes, 0.35-0.87 s a switch on the H100.

On the CPU the same stream runs without streams or events (tests, the CPU app): the reads land in the
destination, or in a host slot the consumer reads before it is refilled.

Host memory held: the pinned ring (`SLOTS` × `SLOT_BYTES`, 128 MB; each slot made on its first use), for as long as the `RowReader`
lives; device memory: at most `DEVICE_SLOTS` slots, during a stream only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

# A ring of pinned host slots: readers run up to this many reads ahead of the copies to the device.
SLOTS = 8
SLOT_BYTES = 16 << 20
# Device slots for reads without a destination: the copy of one overlaps the consumer's work on another.
DEVICE_SLOTS = 3


def reader_threads() -> int:
    """Reads from the page cache scale with threads until memory bandwidth runs out; half the cores, 2 to 6."""
    return min(6, max(2, (os.cpu_count() or 2) // 2))


@dataclass(frozen=True)
class ByteRange:
    """`nbytes` bytes at `offset` of the file at `path`; `destination` (uint8, contiguous, on the reader's
    device), when given, is where they land: then the consumer gets it back as is."""

    path: Path
    offset: int
    nbytes: int
    destination: torch.Tensor | None = None


class TruncatedFile(OSError):
    """The file ends before a range that its header promised."""


class RowReader:
    """The pinned ring, the reader threads and the copy stream of one device; streams run one at a time."""

    def __init__(self, device: torch.device | str, *, slot_bytes: int = SLOT_BYTES, slots: int = SLOTS,
                 threads: int | None = None) -> None:
        self.device = torch.device(device)
        self.slot_bytes = slot_bytes
        self._slot_count = slots
        self._threads = threads or reader_threads()
        self._on_cuda = self.device.type == "cuda"
        self._slots: list[torch.Tensor | None] = []  # pinned on CUDA; each made when first used
        self._copied: list[Any] = []  # per host slot: its last copy to the device (CUDA events)
        self._pool: ThreadPoolExecutor | None = None
        self._files = threading.local()  # each reader thread's open files, by path
        self._copy_stream: torch.cuda.Stream | None = None
        self._lock = threading.Lock()  # one stream at a time
        self.thread_name = f"row-reads-{id(self):x}"  # its threads' names start with this

    @property
    def host_bytes(self) -> int:
        """Host memory this reader holds (its slots; pinned on CUDA)."""
        return sum(slot.numel() for slot in self._slots if slot is not None)

    def _slot(self, index: int) -> torch.Tensor:
        """Host slot `index`, made on its first use (a stream whose reads all land in place, on the CPU, needs none)."""
        slot = self._slots[index]
        if slot is None:
            slot = self._slots[index] = torch.empty(self.slot_bytes, dtype=torch.uint8, pin_memory=self._on_cuda)
        return slot

    def _start(self) -> None:
        if self._pool is not None:
            return
        self._slots = [None] * self._slot_count
        if self._on_cuda:
            self._copied = [torch.cuda.Event() for _ in self._slots]
            self._copy_stream = torch.cuda.Stream(self.device)
        self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix=self.thread_name)

    def close(self) -> None:
        """Free the slots and stop the threads (a later stream starts them again)."""
        with self._lock:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            self._slots.clear()
            self._copied.clear()
            if self._on_cuda:
                torch._C._host_emptyCache()  # PyTorch keeps freed pinned memory for reuse: give it back

    # ------------------------------------------------------------------ the threads' side

    def _file(self, path: Path) -> Any:
        files = getattr(self._files, "open", None)
        if files is None:
            files = self._files.open = {}
        handle = files.get(path)
        if handle is None:
            handle = files[path] = open(path, "rb", buffering=0)  # noqa: SIM115 - kept open for the thread's next reads
        return handle

    def _read(self, read: ByteRange, slot: int, into_destination: bool) -> None:
        if self._on_cuda:
            self._copied[slot].synchronize()  # the slot's previous bytes are on the device
        target = read.destination if into_destination else self._slot(slot)[: read.nbytes]
        view = memoryview(target.numpy()).cast("B")
        handle = self._file(read.path)
        handle.seek(read.offset)
        done = 0
        while done < read.nbytes:
            got = handle.readinto(view[done:])
            if not got:
                raise TruncatedFile(f"{read.path} ends before byte {read.offset + read.nbytes} (truncated file)")
            done += got

    # ------------------------------------------------------------------ the consumer's side

    def stream(self, reads: Sequence[ByteRange]) -> Iterator[torch.Tensor]:
        """The bytes of each read, in order: its destination, or a device slot (valid until the next item).
        On CUDA they are ready on the current stream when yielded; the caller queues its work on that stream."""
        with self._lock:
            self._start()
            yield from self._stream(reads)

    def _stream(self, reads: Sequence[ByteRange]) -> Iterator[torch.Tensor]:
        for read in reads:
            if read.nbytes > self.slot_bytes and (read.destination is None or self._on_cuda):
                raise ValueError(f"a read of {read.nbytes} bytes is larger than a slot ({self.slot_bytes})")
            if read.destination is not None and (read.destination.dtype != torch.uint8 or not read.destination.is_contiguous()
                                                 or read.destination.numel() != read.nbytes or not _on(read.destination, self.device)):
                raise ValueError("a destination must be the read's bytes, contiguous, on the reader's device")
        slots, pool = len(self._slots), self._pool
        assert pool is not None
        # On the CPU a read with a destination lands there directly; on CUDA everything goes through a slot.
        direct = [read.destination is not None and not self._on_cuda for read in reads]
        futures: dict[int, Future] = {}

        def submit(i: int) -> None:
            if i < len(reads):
                futures[i] = pool.submit(self._read, reads[i], i % slots, direct[i])

        current = torch.cuda.current_stream(self.device) if self._on_cuda else None
        copy = self._copy_stream
        device_slots: list[torch.Tensor] = []
        consumed: list[Any] = []
        if current is not None:
            copy.wait_stream(current)  # destinations may be read by work queued before the stream
            if any(read.destination is None for read in reads):
                device_slots = [torch.empty(self.slot_bytes, dtype=torch.uint8, device=self.device)
                                for _ in range(min(DEVICE_SLOTS, len(reads)))]
                consumed = [torch.cuda.Event() for _ in device_slots]
        try:
            for i in range(min(slots, len(reads))):
                submit(i)
            next_device_slot = 0
            for i, read in enumerate(reads):
                futures.pop(i).result()
                slot = i % slots
                if current is None:  # CPU: the bytes are where the consumer reads them
                    yield read.destination if direct[i] else self._slot(slot)[: read.nbytes]
                    submit(i + slots)  # the consumer is done with the slot
                    continue
                if read.destination is not None:
                    target = read.destination
                    used = None
                else:
                    used = next_device_slot
                    next_device_slot = (next_device_slot + 1) % len(device_slots)
                    target = device_slots[used][: read.nbytes]
                    copy.wait_event(consumed[used])  # the consumer's work on this device slot's last bytes
                with torch.cuda.stream(copy):
                    target.copy_(self._slot(slot)[: read.nbytes], non_blocking=True)
                    self._copied[slot].record(copy)
                current.wait_event(self._copied[slot])
                submit(i + slots)  # its reader first waits for this copy
                yield target
                if used is not None:
                    consumed[used].record(current)
        finally:
            for future in futures.values():  # a consumer that stopped early (an error): no read outlives the stream
                future.cancel()
            for future in futures.values():
                if not future.cancelled():
                    try:
                        future.result()
                    except Exception:  # noqa: BLE001 - the consumer's own error is the one raised
                        pass
            if current is not None:
                # The device slots belong to the current stream, which now also waits for every copy into them:
                # the allocator may hand their memory to its later work.
                current.wait_stream(copy)


def _on(tensor: torch.Tensor, device: torch.device) -> bool:
    if tensor.device.type != device.type:
        return False
    if device.type != "cuda" or device.index is None:
        return tensor.device.type != "cuda" or tensor.device.index == torch.cuda.current_device()
    return tensor.device.index == device.index
