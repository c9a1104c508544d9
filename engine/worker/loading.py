"""How the engine thread gets a model: the folder found, checked or downloaded (in a helper thread, so that a
Cancel stops a download), then the session opened on this thread. engine/worker/thread.py's `_on_Load`
decides the phases around it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine import protocol as p
from engine.errors import UserFacingError
from engine.worker.helper_thread import HelperAbandoned
from engine.worker.precision import PrecisionOpener, precision_in_use
from engine.worker.table import Phase

WaitForHelper = Callable[[Callable[[threading.Event], Any], str], Any]


def resolve_source(command: p.Load, *, wait_for_helper: WaitForHelper, post: Callable[[p.Event], None]) -> Path | None:
    """A checked local folder for the model, downloading it if allowed; None if missing/cancelled."""
    from engine.errors import DownloadCancelled as DownloadCancelledError
    from engine.model.store import find_local_model, looks_like_repo_id, resolve_model

    def work(cancel: threading.Event) -> Path | None:
        if (not command.allow_download and looks_like_repo_id(command.source)
                and find_local_model(command.source, command.revision) is None):
            return None
        return Path(resolve_model(command.source, revision=command.revision, progress=post,
                                  cancel=cancel, allow_download=command.allow_download))

    cancelled = threading.Event()

    def tracked(cancel: threading.Event) -> Path | None:
        try:
            return work(cancel)
        finally:
            if cancel.is_set():
                cancelled.set()

    try:
        path = wait_for_helper(tracked, "model-resolve")
    except HelperAbandoned:
        return None
    except DownloadCancelledError:
        post(p.DownloadCancelled(command.source))
        return None
    except Exception:
        if cancelled.is_set():
            post(p.DownloadCancelled(command.source))
            return None
        raise
    if cancelled.is_set():
        post(p.DownloadCancelled(command.source))
        return None
    if path is None:
        post(p.ModelMissing(command.source))
    return path


def open_session(opener: Callable[..., Any] | None, source: str | None, command: p.Load, *,
                 post: Callable[[p.Event], None]) -> Any:
    """`ChatSession.open` (or the caller's own opener: the self-test's) for a Load command, at its precision."""
    if opener is None:
        from engine.chat.session import ChatSession

        opener = ChatSession.open
    return opener(source, lora=command.lora, demo=command.demo, revision=None, context_tokens=command.context_tokens,
                  progress=post, precision=command.precision)


def load(worker: Any, command: p.Load) -> None:
    """The Load command, for the engine thread (`worker`): the folder checked (or downloaded) first, then the old
    model freed and the new one opened, with the voice, the prompt and a new saved conversation."""
    worker._set_phase(Phase.LOADING)
    source: str | None = None
    if not command.demo:
        # The new folder is checked (or downloaded) first: a missing or broken one leaves the
        # loaded model and voice as they were.
        after_failure = Phase.IDLE if worker.session is not None else Phase.NO_MODEL
        try:
            resolved = resolve_source(command, wait_for_helper=worker._wait_for_helper, post=worker._post)
        except BaseException:
            worker._set_phase(after_failure)  # before the error, so the window knows why
            raise
        if resolved is None or worker._stopping:
            worker._set_phase(after_failure)
            return
        source = str(resolved)
    # The old model is freed before the new one loads (two copies rarely fit in VRAM), or, for int8's first
    # check, serves as its bf16 reference (engine/worker/precision.py).
    opener = PrecisionOpener(worker, source, command,
                             lambda chosen: open_session(worker._session_opener, source, chosen, post=worker._post))
    try:
        worker.session = opener.open()
    except BaseException:
        worker._set_phase(Phase.NO_MODEL)
        raise
    if worker.session is None:  # a Shutdown during int8's check
        worker._set_phase(Phase.NO_MODEL)
        return
    # A broken voice never costs the model: the session opened without it and says why.
    voice_problem = getattr(worker.session, "voice_problem", None)
    if voice_problem is not None:
        worker._report(voice_problem, "lora")
    if worker.system_prompt is not None:
        try:
            worker.session.set_system_prompt(worker.system_prompt)
        except UserFacingError as exc:  # too long for this context: the default prompt stays
            worker._report(exc, "settings")
    worker.last_load = command
    # A new model starts with an empty context: a new conversation, in the history and in what the engine keeps for
    # replay and export, and the window is told (it asked the user first), as for a new prompt.
    worker.history.new_conversation()
    if worker.book.records:
        worker.book.clear()
        worker._post(p.ConversationCleared("model"))
    worker._post(worker.session.info)
    worker._post(precision_in_use(worker.session, opener.requested))
    worker._post_context()
    worker._set_phase(Phase.IDLE)
