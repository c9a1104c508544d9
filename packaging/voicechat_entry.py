"""PyInstaller entry point of VoiceChat.exe (packaging/voicechat.spec builds from this file).

The installed app starts here instead of through the `voicechat` console script.
"""

from __future__ import annotations

import multiprocessing
import sys

# torch must be imported before PySide6. Both ship the MSVC runtime DLLs (msvcp140.dll & co.) in
# their own folders; whichever package loads first pins its copy in the process. PySide6's copy
# can be older than the one torch's c10.dll was built against, and then importing torch after Qt
# fails with "DLL load failed while importing _C". Loading torch first avoids that.
import torch  # noqa: F401  (imported for its side effect on DLL loading)


def main() -> int:
    # A frozen Windows app re-executes itself for multiprocessing children; without this they
    # would start a second copy of the app instead of the child's work.
    multiprocessing.freeze_support()
    from app.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
