"""The conversation history on disk: one SQLite database (standard library, WAL) and FLAC files.

Layout, in the app's data folder::

    history/history.sqlite3 (+ -wal, -shm)    conversations and turns
    history/audio/<conversation uid>/<turn uid>.flac
    history/set-aside/<time>-<reason>/        a corrupt or newer database, moved here with its audio

Crash safety: a turn's audio file is written whole (temporary file, fsync, rename) before the
transaction that inserts the row naming it commits, and the database runs with synchronous=FULL, so
a process killed at any moment leaves every committed turn complete and `PRAGMA integrity_check`
clean. A file written but never named (killed between the two) is removed at the next open.

Several processes may use the store at once: SQLite's WAL locking serialises the writers (with a
busy timeout), every file name is a fresh UUID, and a turn's number is taken inside its transaction.

The schema version is `PRAGMA user_version`; `MIGRATIONS[n]` upgrades a database from version n to
n + 1 inside one transaction. A database from a newer app (a higher version than this one knows) or
one that is damaged is moved aside, never overwritten, a new one is created, and `notices` says so.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import UserFacingError
from engine.history.audio import (
    ANSWER_SUBTYPE,
    TAKE_SUBTYPE,
    encode_flac,
    read_flac,
)
from engine.files import write_atomically

log = logging.getLogger(__name__)

DB_NAME = "history.sqlite3"
AUDIO_DIR = "audio"
ASIDE_DIR = "set-aside"
CODEBOOKS = 8
BUSY_TIMEOUT_S = 10.0
ORPHAN_AGE_S = 600.0  # a file no row names, older than this, was left by a killed process
TITLE_CHARS = 40


def default_history_dir() -> Path:
    from engine import paths

    return paths.history_dir()


class HistoryError(UserFacingError):
    """Something about the saved history the user must be told; the chat itself goes on."""

    kind = "history"


# --------------------------------------------------------------------------- schema


def _create_v1(db: sqlite3.Connection) -> None:
    db.execute(
        """CREATE TABLE conversations (
            id INTEGER PRIMARY KEY,
            uid TEXT NOT NULL UNIQUE,
            started_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            system_prompt TEXT NOT NULL,
            model TEXT NOT NULL,
            voice TEXT,
            title TEXT NOT NULL DEFAULT '',
            turn_count INTEGER NOT NULL DEFAULT 0,
            duration_s REAL NOT NULL DEFAULT 0,
            stored_bytes INTEGER NOT NULL DEFAULT 0
        )"""
    )
    db.execute(
        """CREATE TABLE turns (
            id INTEGER PRIMARY KEY,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            role TEXT NOT NULL CHECK (role IN ('user', 'assistant')),
            created_at REAL NOT NULL,
            text TEXT NOT NULL DEFAULT '',
            cancelled INTEGER NOT NULL DEFAULT 0,
            audio_path TEXT,
            sample_rate INTEGER NOT NULL,
            duration_s REAL NOT NULL,
            generated_s REAL,
            audio_bytes INTEGER NOT NULL DEFAULT 0,
            model TEXT,
            voice TEXT,
            sampling TEXT,
            metrics TEXT,
            text_tokens BLOB,
            audio_codes BLOB,
            piece_kinds BLOB,
            UNIQUE (conversation_id, seq)
        )"""
    )
    db.execute("CREATE INDEX conversations_by_update ON conversations(updated_at)")


# MIGRATIONS[n] takes a database from user_version n to n + 1 (0 is a new, empty file).
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [_create_v1]


def schema_version() -> int:
    return len(MIGRATIONS)


# --------------------------------------------------------------------------- records


@dataclass
class AssistantTokens:
    """What the model itself produced, in order: text token ids, audio frames (8 codes each), and for
    each generated position whether it was text (0) or an audio frame (1)."""

    text_tokens: np.ndarray  # int32 (T,)
    audio_codes: np.ndarray  # int16 (F, 8); 2048 everywhere is the end-of-audio frame
    piece_kinds: bytes  # T + F bytes

    def __post_init__(self) -> None:
        self.text_tokens = np.asarray(self.text_tokens, dtype=np.int32).reshape(-1)
        self.audio_codes = np.asarray(self.audio_codes, dtype=np.int16).reshape(-1, CODEBOOKS)
        kinds = np.frombuffer(self.piece_kinds, dtype=np.uint8)
        if (kinds > 1).any() or int((kinds == 0).sum()) != len(self.text_tokens) or int(kinds.sum()) != len(self.audio_codes):
            raise ValueError("the saved token layout does not match its tokens and frames")


@dataclass
class ConversationMeta:
    """A conversation as the writer creates it with its first saved turn."""

    uid: str
    system_prompt: str
    model: str
    voice: str | None = None
    started_at: float = field(default_factory=time.time)


@dataclass
class TurnToSave:
    role: str  # "user" | "assistant"
    pcm: np.ndarray  # float32 mono; an answer cut by a barge-in: as far as it was played
    sample_rate: int
    text: str = ""
    cancelled: bool = False
    generated_s: float | None = None  # an answer: how much audio was generated (more than played if cut)
    created_at: float = field(default_factory=time.time)
    model: str | None = None
    voice: str | None = None
    sampling: dict[str, Any] | None = None
    metrics: dict[str, Any] | None = None
    tokens: AssistantTokens | None = None


@dataclass(frozen=True)
class ConversationSummary:
    id: int
    uid: str
    started_at: float
    updated_at: float
    title: str
    turn_count: int
    duration_s: float
    model: str
    voice: str | None
    stored_bytes: int
    voices: int = 1  # how many voices its answers were spoken with (the model's own voice counts as one)


@dataclass
class SavedTurn:
    id: int
    seq: int
    role: str
    created_at: float
    text: str
    cancelled: bool
    sample_rate: int
    duration_s: float
    pcm: np.ndarray | None  # None: no audio, not read (load(with_audio=False)), or missing/damaged (audio_missing)
    audio_missing: bool
    model: str | None
    voice: str | None
    sampling: dict[str, Any] | None
    metrics: dict[str, Any] | None
    tokens: AssistantTokens | None
    audio_path: str | None = None  # relative to the store's folder, checked (see HistoryStore._safe_relative)

    @property
    def has_audio(self) -> bool:
        return self.audio_path is not None and not self.audio_missing and self.duration_s > 0


@dataclass
class SavedConversation:
    summary: ConversationSummary
    system_prompt: str
    turns: list[SavedTurn]


def is_disk_full(error: BaseException) -> bool:
    import errno

    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", -1)):
        return True
    if isinstance(error, sqlite3.Error):
        return getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL or "disk is full" in str(error)
    return False


def first_words(text: str, limit: int = TITLE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


# --------------------------------------------------------------------------- the store


class HistoryStore:
    """One connection to the history database (use one per thread; any number per process)."""

    def __init__(self, folder: Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else default_history_dir()
        self.db_path = self.folder / DB_NAME
        self.audio_dir = self.folder / AUDIO_DIR
        self.notices: list[HistoryError] = []  # what opening found (moved aside, ...), for the user
        self._db: sqlite3.Connection | None = None

    # ------------------------------------------------------------------ opening

    def open(self) -> "HistoryStore":
        self.folder.mkdir(parents=True, exist_ok=True)
        try:
            self._db = self._connect_and_check()
        except _SetAside as reason:
            moved = self._move_aside(reason.reason)
            self.notices.append(reason.notice(moved))
            self._db = self._connect_and_check()
        self._remove_orphans()
        return self

    def _connect_and_check(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = None
        try:
            db = sqlite3.connect(self.db_path, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=True)
            db.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            version = int(db.execute("PRAGMA user_version").fetchone()[0])
            if version > schema_version():
                raise _SetAside("newer", version)
            if version == 0:
                # Before the first table: lets deletes give the space back (PRAGMA incremental_vacuum).
                db.execute("PRAGMA auto_vacuum = INCREMENTAL")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                log.warning("history database is in %s mode, not WAL", mode)
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            check = db.execute("PRAGMA quick_check").fetchall()
            if check != [("ok",)]:
                raise _SetAside("corrupt", "; ".join(str(row[0]) for row in check[:3]))
            self._migrate(db)
            # Tables that are not what this version reads (dropped, altered by hand) count as damage.
            db.execute(self._SUMMARY + " LIMIT 0").fetchall()
            db.execute("SELECT id, conversation_id, seq, role, created_at, text, cancelled, audio_path, sample_rate,"
                       " duration_s, generated_s, audio_bytes, model, voice, sampling, metrics, text_tokens,"
                       " audio_codes, piece_kinds FROM turns LIMIT 0").fetchall()
            return db
        except sqlite3.DatabaseError as error:
            if db is not None:
                db.close()
            if is_disk_full(error) or isinstance(error, sqlite3.OperationalError) and "locked" in str(error):
                raise  # not the file's fault
            raise _SetAside("corrupt", str(error)) from error
        except BaseException:
            if db is not None:
                db.close()
            raise

    def _migrate(self, db: sqlite3.Connection) -> None:
        while True:
            db.execute("BEGIN IMMEDIATE")  # another process may be migrating the same file right now
            try:
                version = int(db.execute("PRAGMA user_version").fetchone()[0])
                if version >= schema_version():
                    db.execute("COMMIT")
                    return
                MIGRATIONS[version](db)
                db.execute(f"PRAGMA user_version = {version + 1}")
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

    def _move_aside(self, reason: str) -> Path:
        """The database and its audio go together into set-aside/, where nothing deletes them."""
        target = self.folder / ASIDE_DIR / f"{time.strftime('%Y%m%d-%H%M%S')}-{reason}"
        n = 1
        while target.exists():
            target = target.with_name(f"{target.name}-{n}")
            n += 1
        target.mkdir(parents=True)
        for suffix in ("", "-wal", "-shm", "-journal"):
            source = self.db_path.with_name(DB_NAME + suffix)
            if source.exists():
                os.replace(source, target / source.name)
        if self.audio_dir.exists():
            os.replace(self.audio_dir, target / AUDIO_DIR)
        log.warning("history database moved aside to %s (%s)", target, reason)
        return target

    def _remove_orphans(self) -> None:
        """Files left by a process killed between writing a file and committing its row."""
        if not self.audio_dir.is_dir():
            return
        named = {row[0] for row in self.db.execute("SELECT audio_path FROM turns WHERE audio_path IS NOT NULL")}
        cutoff = time.time() - ORPHAN_AGE_S
        for path in self.audio_dir.rglob("*"):
            try:
                if path.is_file() and path.relative_to(self.folder).as_posix() not in named and path.stat().st_mtime < cutoff:
                    path.unlink()
            except OSError:
                pass
        for folder in sorted((p for p in self.audio_dir.iterdir() if p.is_dir()), reverse=True):
            try:
                folder.rmdir()  # only if empty
            except OSError:
                pass

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise RuntimeError("the history store is not open")
        return self._db

    def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()

    def __enter__(self) -> "HistoryStore":
        return self.open() if self._db is None else self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ writing

    def save_turn(self, conversation: ConversationMeta, turn: TurnToSave) -> int:
        """Save one finished turn (creating its conversation with the first one); returns the turn's id.

        The audio file is complete on disk before the row naming it commits. Raises OSError or
        sqlite3.Error (see `is_disk_full`); then nothing of this turn is left behind."""
        relative: str | None = None
        audio_bytes = 0
        if turn.pcm is not None and len(turn.pcm):
            subtype = TAKE_SUBTYPE if turn.role == "user" else ANSWER_SUBTYPE
            data = encode_flac(turn.pcm, turn.sample_rate, subtype)
            relative = f"{AUDIO_DIR}/{conversation.uid}/{uuid.uuid4().hex}.flac"
            write_atomically(self.folder / relative, data)
            audio_bytes = len(data)
        tokens = turn.tokens
        blobs = (None, None, None) if tokens is None else (
            tokens.text_tokens.astype("<i4").tobytes(), tokens.audio_codes.astype("<i2").tobytes(), bytes(tokens.piece_kinds))
        stored = audio_bytes + sum(len(b) for b in blobs if b is not None)
        duration = len(turn.pcm) / turn.sample_rate if turn.pcm is not None else 0.0
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(
                    "INSERT OR IGNORE INTO conversations (uid, started_at, updated_at, system_prompt, model, voice)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (conversation.uid, conversation.started_at, turn.created_at, conversation.system_prompt,
                     conversation.model, conversation.voice),
                )
                conversation_id, title = db.execute(
                    "SELECT id, title FROM conversations WHERE uid = ?", (conversation.uid,)).fetchone()
                seq = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM turns WHERE conversation_id = ?",
                                 (conversation_id,)).fetchone()[0]
                cursor = db.execute(
                    "INSERT INTO turns (conversation_id, seq, role, created_at, text, cancelled, audio_path, sample_rate,"
                    " duration_s, generated_s, audio_bytes, model, voice, sampling, metrics, text_tokens, audio_codes,"
                    " piece_kinds) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (conversation_id, seq, turn.role, turn.created_at, turn.text, int(turn.cancelled), relative,
                     turn.sample_rate, duration, turn.generated_s, audio_bytes, turn.model, turn.voice,
                     _json(turn.sampling), _json(turn.metrics), *blobs),
                )
                new_title = title or (first_words(turn.text) if turn.text.strip() else "")
                db.execute(
                    "UPDATE conversations SET updated_at = ?, turn_count = turn_count + 1, duration_s = duration_s + ?,"
                    " stored_bytes = stored_bytes + ?, title = ?, voice = COALESCE(?, voice) WHERE id = ?",
                    (turn.created_at, duration, stored, new_title, turn.voice, conversation_id),
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        except BaseException:
            if relative is not None:
                _unlink_quietly(self.folder / relative)
            raise
        return int(cursor.lastrowid)

    def set_metrics(self, turn_id: int, metrics: dict[str, Any]) -> None:
        self.db.execute("UPDATE turns SET metrics = ? WHERE id = ?", (_json(metrics), turn_id))

    # ------------------------------------------------------------------ reading

    _SUMMARY = ("SELECT id, uid, started_at, updated_at, title, turn_count, duration_s, model, voice, stored_bytes,"
                " (SELECT COUNT(DISTINCT COALESCE(turns.voice, '')) FROM turns"
                "  WHERE turns.conversation_id = conversations.id AND turns.role = 'assistant')"
                " FROM conversations")

    def list_conversations(self) -> list[ConversationSummary]:
        rows = self.db.execute(self._SUMMARY + " ORDER BY updated_at DESC, id DESC").fetchall()
        return [_summary(row) for row in rows]

    def summary(self, conversation_id: int) -> ConversationSummary | None:
        row = self.db.execute(self._SUMMARY + " WHERE id = ?", (conversation_id,)).fetchone()
        return _summary(row) if row else None

    def find(self, uid: str) -> int | None:
        row = self.db.execute("SELECT id FROM conversations WHERE uid = ?", (uid,)).fetchone()
        return int(row[0]) if row else None

    def load(self, conversation_id: int, *, with_audio: bool = True) -> SavedConversation:
        """A saved conversation with its turns; a turn whose audio file is missing or damaged comes back
        with `pcm=None, audio_missing=True` and everything else intact. A damaged field (SQLite keeps any
        type in any column) reads as its empty value, never as an exception."""
        summary = self.summary(conversation_id)
        if summary is None:
            raise HistoryError.of("That conversation is no longer in the history.")
        prompt = _as_str(self.db.execute("SELECT system_prompt FROM conversations WHERE id = ?",
                                         (conversation_id,)).fetchone()[0])
        turns: list[SavedTurn] = []
        for row in self.db.execute(
            "SELECT id, seq, role, created_at, text, cancelled, audio_path, sample_rate, duration_s, model, voice,"
            " sampling, metrics, text_tokens, audio_codes, piece_kinds FROM turns WHERE conversation_id = ? ORDER BY seq",
            (conversation_id,),
        ):
            (turn_id, seq, role, created, text, cancelled, audio_path, rate, duration, model, voice, sampling,
             metrics, text_tokens, audio_codes, piece_kinds) = row
            role = role if role in ("user", "assistant") else "user"
            rate = _as_int(rate)
            relative = self._safe_relative(audio_path)
            pcm, missing = None, audio_path is not None and relative is None
            if relative is not None and rate > 0 and with_audio:
                pcm, missing = self._read_audio(relative)
            elif relative is not None:
                missing = rate <= 0 or not (self.folder / relative).is_file()
            tokens = None
            if piece_kinds is not None:
                try:
                    tokens = AssistantTokens(np.frombuffer(_as_bytes(text_tokens), dtype="<i4"),
                                             np.frombuffer(_as_bytes(audio_codes), dtype="<i2"), _as_bytes(piece_kinds))
                except ValueError:
                    log.warning("turn %s: saved tokens are inconsistent; it is shown but not continued from", turn_id)
            turns.append(SavedTurn(int(turn_id), _as_int(seq), role, _as_float(created), _as_str(text),
                                   _as_int(cancelled) == 1, max(rate, 1), _as_float(duration), pcm, missing,
                                   _as_opt_str(model), _as_opt_str(voice), _unjson(sampling), _unjson(metrics), tokens,
                                   relative))
        return SavedConversation(summary, prompt, turns)

    def turn_audio(self, conversation_id: int, turn_id: int) -> tuple[np.ndarray, int] | None:
        """One turn's sound (replay reads only that file), or None: no such turn, no audio, file gone."""
        row = self.db.execute("SELECT audio_path FROM turns WHERE id = ? AND conversation_id = ?",
                              (turn_id, conversation_id)).fetchone()
        relative = self._safe_relative(row[0]) if row else None
        if relative is None:
            return None
        try:
            return read_flac(self.folder / relative)
        except Exception as error:  # noqa: BLE001 - missing or damaged: nothing to play
            log.warning("history audio %s unreadable: %s", relative, error)
            return None

    def _safe_relative(self, audio_path: object) -> str | None:
        """A row's audio path if it names a file of this store's audio folder (a damaged row must not make
        the store read or delete anything else)."""
        if not isinstance(audio_path, str) or not audio_path.startswith(AUDIO_DIR + "/"):
            return None
        parts = audio_path.split("/")
        if any(part in ("", ".", "..") or "\\" in part or ":" in part for part in parts):
            return None
        return audio_path

    def _read_audio(self, relative: str) -> tuple[np.ndarray | None, bool]:
        try:
            pcm, _rate = read_flac(self.folder / relative)
            return pcm, False
        except Exception as error:  # missing, truncated, not FLAC: the turn is shown without audio
            log.warning("history audio %s unreadable: %s", relative, error)
            return None, True

    # ------------------------------------------------------------------ deleting and retention

    def delete(self, conversation_ids: Iterable[int]) -> int:
        """Delete conversations (rows first, then their files: a crash between leaves only orphans)."""
        ids = [int(i) for i in conversation_ids]
        if not ids:
            return 0
        db = self.db
        marks = ",".join("?" * len(ids))
        db.execute("BEGIN IMMEDIATE")
        try:
            uids = [row[0] for row in db.execute(f"SELECT uid FROM conversations WHERE id IN ({marks})", ids)]
            paths = [row[0] for row in db.execute(
                f"SELECT audio_path FROM turns WHERE conversation_id IN ({marks}) AND audio_path IS NOT NULL", ids)]
            db.execute(f"DELETE FROM turns WHERE conversation_id IN ({marks})", ids)
            db.execute(f"DELETE FROM conversations WHERE id IN ({marks})", ids)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        for relative in paths:
            safe = self._safe_relative(relative)
            if safe is not None:
                _unlink_quietly(self.folder / safe)
        for uid in uids:
            if isinstance(uid, str) and uid.isalnum():
                shutil.rmtree(self.audio_dir / uid, ignore_errors=True)
        try:
            db.execute("PRAGMA incremental_vacuum")
        except sqlite3.Error:
            pass
        return len(uids)

    def delete_all(self, *, keep_uids: Iterable[str] = ()) -> int:
        keep = set(keep_uids)
        return self.delete(s.id for s in self.list_conversations() if s.uid not in keep)

    def size_on_disk(self) -> int:
        """Bytes the live history takes (database, its journal, audio); set-aside copies not counted."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += self.db_path.with_name(DB_NAME + suffix).stat().st_size
            except OSError:
                pass
        if self.audio_dir.is_dir():
            for path in self.audio_dir.rglob("*"):
                try:
                    if path.is_file():
                        total += path.stat().st_size
                except OSError:
                    pass
        return total

    def apply_retention(self, *, max_age_days: float | None, max_bytes: int | None,
                        keep_uids: Iterable[str] = (), now: float | None = None) -> int:
        """Delete the conversations last used more than `max_age_days` ago, then the oldest ones until the
        history fits in `max_bytes`. None (or 0) means no limit; `keep_uids` (the live one) always stays."""
        keep = set(keep_uids)
        now = time.time() if now is None else now
        conversations = [s for s in self.list_conversations() if s.uid not in keep]  # newest first
        doomed: list[int] = []
        if max_age_days:
            doomed += [s.id for s in conversations if s.updated_at < now - max_age_days * 86400.0]
        if max_bytes:
            excess = self.size_on_disk() - max_bytes
            for s in reversed(conversations):  # oldest first
                if excess <= 0:
                    break
                if s.id not in doomed:
                    doomed.append(s.id)
                excess -= s.stored_bytes
        return self.delete(doomed)

    def integrity_check(self) -> list[str]:
        return [str(row[0]) for row in self.db.execute("PRAGMA integrity_check")]


class _SetAside(Exception):
    def __init__(self, reason: str, detail: object) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail

    def notice(self, moved: Path) -> HistoryError:
        if self.reason == "newer":
            return HistoryError.of(
                "The conversation history was made by a newer version of VoiceChat (format {version}); it was moved to "
                "{folder} and a new history was started.", version=self.detail, folder=moved)
        return HistoryError.of(
            "The conversation history was damaged ({error}); it was moved to {folder} and a new history was started.",
            error=self.detail, folder=moved)


def _summary(row: tuple[Any, ...]) -> ConversationSummary:
    cid, uid, started, updated, title, turns, duration, model, voice, stored, voices = row
    return ConversationSummary(int(cid), _as_str(uid), _as_float(started), _as_float(updated), _as_str(title),
                               _as_int(turns), _as_float(duration), _as_str(model), _as_opt_str(voice), _as_int(stored),
                               _as_int(voices))


def _as_float(value: object) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value):
        return float(value)
    return 0.0


def _as_int(value: object) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53 else 0


def _as_str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _as_opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _as_bytes(value: object) -> bytes:
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else b""


def _json(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _unjson(text: object) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def new_conversation_uid() -> str:
    return uuid.uuid4().hex
