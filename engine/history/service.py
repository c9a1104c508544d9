"""The engine's side of the history: saves finished turns as they end, answers the history commands.

Saving runs on a writer thread with its own connection, so FLAC encoding and fsync never delay the
engine loop (a barge-in must act within a frame). When the disk is full the chat goes on: the turns
wait in memory, the user is told once, and the writer tries again every `RETRY_S` and with every new
turn; when a save succeeds again the user is told that saving has resumed and nothing was lost.

Reads (the list, opening, continuing, replay, export) and deletes run on the engine thread with a
second connection; SQLite's WAL lets them run beside the writer.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from engine import protocol as p
from engine.history.store import (
    ConversationMeta,
    HistoryError,
    HistoryStore,
    SavedConversation,
    TurnToSave,
    is_disk_full,
    new_conversation_uid,
)

log = logging.getLogger(__name__)

RETRY_S = 5.0
MEGABYTE = 10**6  # as the window shows sizes (app/widgets/history.py)
MAX_PENDING_TURNS = 400  # beyond this (hours of a full disk) the oldest waiting turns are given up


@dataclass
class _Save:
    meta: ConversationMeta
    turn: TurnToSave
    live_turn_id: int


@dataclass
class _Metrics:
    live_turn_id: int
    metrics: dict[str, Any]


@dataclass
class _Retention:
    keep_uid: str | None


@dataclass
class _Flush:
    done: threading.Event


_STOP = object()


class HistoryKeeper:
    """Owned by the engine thread. `post` puts an event on the window's queue (thread-safe)."""

    def __init__(self, post: Callable[[p.Event], None], folder: Path | None = None) -> None:
        self._post = post
        self.folder = folder
        self.current: ConversationMeta | None = None  # created with its first saved turn
        self.save_current = True  # the window's "don't save this conversation" switch, inverted
        self.keep_days = 0  # 0: no limit
        self.max_bytes = 0
        self._reader: HistoryStore | None = None
        self._jobs: queue.Queue[object] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._unavailable: HistoryError | None = None
        self.paused = False  # the writer could not save (disk full); read by the window through events

    # ------------------------------------------------------------------ life cycle (engine thread)

    def start(self) -> None:
        """Open the store (telling the user what opening found), then start the writer."""
        try:
            self._reader = HistoryStore(self.folder).open()
            self.folder = self._reader.folder
        except Exception as error:  # noqa: BLE001 - without a history the chat still works
            log.exception("the history cannot be opened")
            self._unavailable = HistoryError.of(
                "The conversation history cannot be opened ({error}); conversations are not saved.", error=error)
            self._post(p.EngineError.from_exception("history", self._unavailable))
            return
        for notice in self._reader.notices:
            self._post(p.EngineError.from_exception("history", notice))
        self._writer = threading.Thread(target=self._write_loop, name="voicechat-history", daemon=True)
        self._writer.start()
        self._jobs.put(_Retention(None))

    def close(self, wait_s: float = 5.0) -> None:
        """Let the writer finish what it has (bounded: a full disk must not keep the app from quitting)."""
        if self._writer is not None:
            self._jobs.put(_STOP)
            self._writer.join(wait_s)
            self._writer = None
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every turn handed over so far is saved (or, while the disk is full, waiting in memory)."""
        if self._writer is None:
            return True
        done = threading.Event()
        self._jobs.put(_Flush(done))
        return done.wait(timeout)

    @property
    def available(self) -> bool:
        return self._reader is not None

    # ------------------------------------------------------------------ the live conversation

    def new_conversation(self) -> None:
        self.current = None
        if not self.save_current:
            self.save_current = True
            self._post_status()
        self.refresh_listing()  # the list no longer marks a live conversation

    def set_options(self, command: p.HistoryOptions) -> None:
        self.save_current = command.save_this_conversation
        self.keep_days = max(0, int(command.keep_days))
        self.max_bytes = max(0, int(command.max_megabytes)) * MEGABYTE
        self._post_status()
        self._jobs.put(_Retention(self.current.uid if self.current else None))

    def _meta(self, session: Any) -> ConversationMeta:
        if self.current is None:
            info = session.info
            self.current = ConversationMeta(new_conversation_uid(), session.system_prompt, info.model_name,
                                            info.voice_name)
        return self.current

    def user_take(self, live_turn_id: int, pcm: np.ndarray, sample_rate: int, session: Any, started_at: float) -> None:
        if not self._saving(session):
            return
        turn = TurnToSave("user", pcm, sample_rate, created_at=started_at)
        self._jobs.put(_Save(self._meta(session), turn, live_turn_id))

    def answer(self, live_turn_id: int, pcm: np.ndarray, sample_rate: int, *, text: str, cancelled: bool,
               generated_samples: int, session: Any, sampling: p.SamplingSettings, started_at: float,
               context_valid: bool = True, tokens: Any = "capture", metrics: p.TurnMetrics | None = None) -> None:
        """An answer that has ended (`pcm` as far as it was played when it was cut by a barge-in). Its tokens
        are taken from the session's last turn (pass `tokens` if they were taken earlier with
        `answer_tokens`) unless `context_valid` is False (generation failed half-way: replayable, not
        continued)."""
        if not self._saving(session):
            return
        if isinstance(tokens, str):
            tokens = answer_tokens(session) if context_valid else None
        info = session.info
        turn = TurnToSave("assistant", pcm, sample_rate, text=text, cancelled=cancelled,
                          generated_s=generated_samples / sample_rate, created_at=started_at, model=info.model_name,
                          voice=info.voice_name, sampling=dataclasses.asdict(sampling), tokens=tokens,
                          metrics=dataclasses.asdict(metrics) if metrics is not None else None)
        self._jobs.put(_Save(self._meta(session), turn, live_turn_id))

    def record_finished(self, record: Any, session: Any) -> None:
        """The worker's record-finished seam (engine/worker/records.py): a take when it arrives, an answer
        once its metrics are known, with what the worker noted at the end of its generation (its tokens,
        how much was heard, how it was sampled)."""
        if record.role == "user":
            self.user_take(record.turn_id, record.pcm, record.sample_rate, session, record.started_at)
            return
        heard = getattr(record, "heard_samples", None)
        pcm = record.pcm if heard is None else record.pcm[: max(0, min(len(record.pcm), heard))]
        self.answer(record.turn_id, pcm, record.sample_rate, text=record.text, cancelled=record.cancelled,
                    generated_samples=len(record.pcm), session=session,
                    sampling=getattr(record, "sampling", None) or p.SamplingSettings(), started_at=record.started_at,
                    tokens=getattr(record, "tokens", None), metrics=record.metrics)

    def metrics(self, live_turn_id: int, metrics: p.TurnMetrics) -> None:
        if self._writer is not None:
            self._jobs.put(_Metrics(live_turn_id, dataclasses.asdict(metrics)))

    def _saving(self, session: Any) -> bool:
        return self._writer is not None and self.save_current and session is not None

    # ------------------------------------------------------------------ commands (engine thread)

    def live_conversation_id(self) -> int | None:
        """The saved conversation the live one is saved into (after what is being written has landed), or None."""
        if self.current is None or self._reader is None or not self.flush():
            return None
        return _current_id(self._reader, self.current)

    def reader(self) -> HistoryStore:
        if self._reader is None:
            raise self._unavailable or HistoryError.of("The conversation history is not available.")
        return self._reader

    def listing(self, store: HistoryStore | None = None) -> p.HistoryListed:
        store = store or self.reader()
        entries = tuple(
            p.HistoryEntry(s.id, s.started_at, s.updated_at, s.title, s.turn_count, s.duration_s, s.model, s.voice,
                           several_voices=s.voices > 1)
            for s in store.list_conversations()
        )
        return p.HistoryListed(entries, store.size_on_disk(), self.current.uid if self.current else None,
                               _current_id(store, self.current))

    def post_listing(self) -> None:
        self._post(self.listing())

    def refresh_listing(self) -> None:
        """An unasked-for refresh of the window's list: a failure is logged, never raised into the engine."""
        if self._reader is None:
            return
        try:
            self.post_listing()
        except Exception:  # noqa: BLE001 - the list is refreshed again with the next save
            log.exception("listing the history failed")

    def load(self, conversation_id: int, *, with_audio: bool = True) -> SavedConversation:
        return self.reader().load(conversation_id, with_audio=with_audio)

    def turn_audio(self, conversation_id: int, turn_id: int) -> tuple[np.ndarray, int] | None:
        return self.reader().turn_audio(conversation_id, turn_id)

    def opened(self, saved: SavedConversation) -> p.HistoryOpened:
        s = saved.summary
        return p.HistoryOpened(s.id, s.title, s.started_at, s.model, s.voice, _views(saved),
                               several_voices=s.voices > 1)

    def delete(self, command: p.DeleteHistory) -> None:
        store = self.reader()
        current_id = _current_id(store, self.current)
        if command.everything:
            store.delete_all()
        else:
            store.delete(command.conversation_ids)
        if current_id is not None and store.summary(current_id) is None:
            self.current = None  # its next turns start a new saved conversation
        self.post_listing()

    def continue_into(self, saved: SavedConversation) -> None:
        """Later turns are added to this saved conversation."""
        s = saved.summary
        self.current = ConversationMeta(s.uid, saved.system_prompt, s.model, s.voice, started_at=s.started_at)
        if not self.save_current:
            self.save_current = True
            self._post_status()

    def _post_status(self) -> None:
        self._post(p.HistoryStatus(self.save_current, self.paused, self.keep_days, self.max_bytes // MEGABYTE))

    # ------------------------------------------------------------------ the writer thread

    def _write_loop(self) -> None:
        assert self.folder is not None
        store: HistoryStore | None = None
        pending: collections.deque[object] = collections.deque()
        rows: dict[int, int] = {}  # live turn id -> saved row
        stopping = False
        while True:
            try:
                job = self._jobs.get(timeout=RETRY_S if pending else None)
            except queue.Empty:
                job = None
            if job is _STOP:
                stopping = True
            elif isinstance(job, _Flush) and self.paused:
                job.done.set()  # everything handed over is saved or waiting for room: nothing to wait for
                continue
            elif job is not None:
                pending.append(job)
                self._drop_excess(pending)
            while pending:
                job = pending[0]
                try:
                    if store is None:
                        store = HistoryStore(self.folder).open()
                    self._run_job(store, job, rows)
                except Exception as error:  # noqa: BLE001 - reported; the chat goes on
                    if is_disk_full(error):
                        self._set_paused(True)
                        break  # kept, and tried again later
                    log.exception("saving to the history failed")
                    self._post(p.EngineError.from_exception("history", HistoryError.of(
                        "A turn could not be saved to the history ({error}).", error=error)))
                    if store is not None:
                        store.close()  # opened afresh (and checked) for the next job
                        store = None
                else:
                    if isinstance(job, _Save):
                        self._set_paused(False)
                pending.popleft()
            if stopping:
                for job in pending:  # cannot be saved before quitting: release any waiter
                    if isinstance(job, _Flush):
                        job.done.set()
                if store is not None:
                    store.close()
                return

    def _run_job(self, store: HistoryStore, job: object, rows: dict[int, int]) -> None:
        if isinstance(job, _Save):
            rows[job.live_turn_id] = store.save_turn(job.meta, job.turn)
            if job.turn.role == "assistant":
                self._retention(store, job.meta.uid)
            self._post_listing_of(store)
        elif isinstance(job, _Metrics):
            row = rows.get(job.live_turn_id)
            if row is not None:
                store.set_metrics(row, job.metrics)
        elif isinstance(job, _Retention):
            if self._retention(store, job.keep_uid):
                self._post_listing_of(store)
        elif isinstance(job, _Flush):
            job.done.set()

    def _post_listing_of(self, store: HistoryStore) -> None:
        try:
            self._post(self.listing(store))
        except Exception:  # noqa: BLE001 - the turn is saved; the list catches up with the next one
            log.exception("listing the history failed")

    def _retention(self, store: HistoryStore, keep_uid: str | None) -> int:
        if not (self.keep_days or self.max_bytes):
            return 0
        return store.apply_retention(max_age_days=self.keep_days or None, max_bytes=self.max_bytes or None,
                                     keep_uids=[keep_uid] if keep_uid else [])

    def _drop_excess(self, pending: collections.deque[object]) -> None:
        saves = [job for job in pending if isinstance(job, _Save)]
        if len(saves) > MAX_PENDING_TURNS:
            pending.remove(saves[0])
            log.warning("history: a turn waiting for disk space was given up (%d waiting)", len(saves))

    def _set_paused(self, paused: bool) -> None:
        if paused == self.paused:
            return
        self.paused = paused
        if paused:
            self._post(p.EngineError.from_exception("history", HistoryError.of(
                "The disk is full: conversations are not being saved for now. The chat goes on, and saving resumes "
                "(with the turns since) as soon as there is room.")))
        self._post_status()


def answer_tokens(session: Any) -> Any:
    """What the model generated in the answer that just ended (the session's last turn), or None."""
    turns = session.conversation.turns
    if not turns or turns[-1].role != "assistant":
        return None
    from engine.history.context import tokens_of_turn  # torch: only where a model's turn exists

    try:
        return tokens_of_turn(turns[-1])
    except ValueError:
        log.warning("an answer's tokens cannot be saved; it can be replayed but not continued")
        return None


def _current_id(store: HistoryStore, current: ConversationMeta | None) -> int | None:
    return store.find(current.uid) if current is not None else None


def _views(saved: SavedConversation) -> tuple[p.HistoryTurnView, ...]:
    return tuple(
        p.HistoryTurnView(turn.id, turn.role, turn.text, turn.duration_s, turn.cancelled,
                          has_audio=turn.has_audio, audio_missing=turn.audio_missing,
                          created_at=turn.created_at)
        for turn in saved.turns
    )


def views_with_ids(saved: SavedConversation, ids: list[int]) -> tuple[p.HistoryTurnView, ...]:
    """The turns of a continued conversation under their new live ids (replay and export use those)."""
    return tuple(dataclasses.replace(view, turn_id=turn_id) for view, turn_id in zip(_views(saved), ids, strict=True))


__all__ = ["HistoryKeeper", "answer_tokens", "views_with_ids"]
