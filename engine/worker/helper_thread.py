"""Work the engine thread hands to a helper thread (a model download, an export: network and file I/O, no
model state) while it goes on reading commands, so that a Cancel or a Ping is answered meanwhile."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class HelperAbandoned(Exception):
    """The engine is shutting down and did not wait for a helper thread to finish."""


def wait_for_helper(
    work: Callable[[threading.Event], Any],
    name: str,
    *,
    read_commands: Callable[[], None],
    stopping: Callable[[], bool],
    cancel: threading.Event,
) -> Any:
    """Run `work(cancel)` in a helper thread and call `read_commands()` until it is done; returns its result
    or raises its exception. `cancel` is what a Cancel sets (the caller keeps it while this runs)."""
    done = threading.Event()
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work(cancel)
        except BaseException as exc:  # noqa: BLE001 - handed to the engine thread below
            result["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=f"voicechat-{name}", daemon=True).start()
    while not done.wait(0.02):
        read_commands()
        if stopping():
            # Shutdown: the helper was told to stop (a download), but one stuck in the network must not keep
            # the engine alive; it is a daemon thread and touches no engine state.
            done.wait(1.0)
            if not done.is_set():
                raise HelperAbandoned(name)
    if "error" in result:
        raise result["error"]
    return result.get("value")
