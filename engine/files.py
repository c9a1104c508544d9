"""Writing a file so that it is there whole or not at all: the one way the engine writes what the user
keeps (settings, the history's audio, exports).

A temporary file in the same folder, fsync, `os.replace`, then an fsync of the folder so that the rename
itself survives a power cut. Readers see the old file or the new one, never a partial one; a crash leaves
at most a hidden `.<name>.*.part` file beside it.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, data: bytes) -> None:
    """`data` lands at `path` whole or not at all. Raises OSError (disk full, read-only folder...)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp_name)
        raise
    _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":
        return  # Windows has no directory handles to fsync; NTFS journals the rename itself
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
