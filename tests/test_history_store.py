"""The history store on real SQLite files and real processes: round trips, every fault the issue names,
processes killed with SIGKILL mid-write and mid-answer, two processes writing at once, retention."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.history import store as store_module
from engine.history.audio import canonical_take, read_flac
from engine.history.store import (
    AssistantTokens,
    ConversationMeta,
    HistoryStore,
    TurnToSave,
    new_conversation_uid,
    schema_version,
)

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).resolve().parent / "history_child.py"
pytestmark = pytest.mark.timeout(300)


def _meta(uid: str | None = None) -> ConversationMeta:
    return ConversationMeta(uid or new_conversation_uid(), "Respond with interleaved text and audio.", "demo (random weights)",
                            "sakura")


def _take(seconds: float = 1.0, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return canonical_take(rng.standard_normal(int(16000 * seconds)) * 0.2)


def _tokens(frames: int = 12, text: int = 5, seed: int = 0) -> AssistantTokens:
    rng = np.random.default_rng(seed)
    kinds = np.array([0] * text + [1] * frames, np.uint8)
    rng.shuffle(kinds)
    codes = rng.integers(0, 2048, (frames, 8))
    codes[-1] = 2048
    return AssistantTokens(rng.integers(0, 500, text), codes, kinds.tobytes())


def _exchange(store: HistoryStore, meta: ConversationMeta, n: int = 0, text: str = "こんにちは、今日はいい天気ですね。") -> None:
    store.save_turn(meta, TurnToSave("user", _take(0.8, n), 16000))
    answer = np.sin(np.arange(24000) / 24000 * 2 * np.pi * 220).astype(np.float32) * 0.3
    store.save_turn(meta, TurnToSave("assistant", answer, 24000, text=text, tokens=_tokens(seed=n), model=meta.model,
                                     voice=meta.voice, sampling={"greedy": True}))


def _child(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TOKENIZERS_PARALLELISM="false")
    return subprocess.Popen([sys.executable, str(CHILD), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kwargs)


def _check_store_is_whole(folder: Path) -> HistoryStore:
    """Integrity passes, and every row's audio file is complete (decodes to exactly its duration)."""
    store = HistoryStore(folder).open()
    assert store.integrity_check() == ["ok"]
    for path, rate, duration in store.db.execute("SELECT audio_path, sample_rate, duration_s FROM turns"):
        assert path is not None and not path.endswith(".part")
        pcm, file_rate = read_flac(folder / path)
        assert file_rate == rate and abs(len(pcm) / rate - duration) < 1e-9
    return store


# --------------------------------------------------------------------------- round trips


def test_a_saved_conversation_reads_back_whole(tmp_path: Path) -> None:
    meta = _meta()
    with HistoryStore(tmp_path / "history") as store:
        assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == schema_version() == 1
        _exchange(store, meta, 0)
        _exchange(store, meta, 1, text="二つ目の答え")
        answer_row = store.db.execute("SELECT id FROM turns WHERE role = 'assistant' ORDER BY seq").fetchone()[0]
        store.set_metrics(answer_row, {"first_audible_ms": 412.5, "rtf": 0.4})
        (summary,) = store.list_conversations()
        saved = store.load(summary.id)
    assert summary.turn_count == 4 and summary.title == "こんにちは、今日はいい天気ですね。" and summary.voice == "sakura"
    assert abs(summary.duration_s - (0.8 + 1.0 + 0.8 + 1.0)) < 1e-9
    assert [t.role for t in saved.turns] == ["user", "assistant", "user", "assistant"] and [t.seq for t in saved.turns] == [1, 2, 3, 4]
    assert np.array_equal(saved.turns[0].pcm, _take(0.8, 0))  # takes are lossless: re-embedding is exact
    answer = np.sin(np.arange(24000) / 24000 * 2 * np.pi * 220).astype(np.float32) * 0.3
    assert np.abs(saved.turns[1].pcm - answer).max() < 1 / 32767
    assert saved.turns[1].metrics == {"first_audible_ms": 412.5, "rtf": 0.4} and saved.turns[1].sampling == {"greedy": True}
    for turn, seed in ((saved.turns[1], 0), (saved.turns[3], 1)):
        want = _tokens(seed=seed)
        assert np.array_equal(turn.tokens.text_tokens, want.text_tokens) and np.array_equal(turn.tokens.audio_codes, want.audio_codes)
        assert turn.tokens.piece_kinds == want.piece_kinds
    assert saved.system_prompt == meta.system_prompt


@settings(max_examples=25, deadline=None)
@given(kinds=st.lists(st.booleans(), max_size=80), seed=st.integers(0, 2**31))
def test_any_token_layout_round_trips_exactly(tmp_path_factory, kinds: list[bool], seed: int) -> None:
    rng = np.random.default_rng(seed)
    frames = sum(kinds)
    tokens = AssistantTokens(rng.integers(0, 2**31 - 1, len(kinds) - frames), rng.integers(0, 2049, (frames, 8)),
                             bytes(int(k) for k in kinds))
    folder = tmp_path_factory.mktemp("h")
    with HistoryStore(folder) as store:
        store.save_turn(_meta(), TurnToSave("assistant", np.zeros(0, np.float32), 24000, tokens=tokens))
        (turn,) = store.load(store.list_conversations()[0].id).turns
    assert turn.pcm is None and not turn.audio_missing
    assert np.array_equal(turn.tokens.text_tokens, tokens.text_tokens) and np.array_equal(turn.tokens.audio_codes, tokens.audio_codes)
    assert turn.tokens.piece_kinds == tokens.piece_kinds


def test_an_inconsistent_token_layout_is_refused() -> None:
    with pytest.raises(ValueError):
        AssistantTokens(np.zeros(3), np.zeros((2, 8)), bytes([0, 0, 1, 1]))


# --------------------------------------------------------------------------- faults


def _garbage(db: Path) -> None:
    db.write_bytes(b"this is not a database at all" * 100)


def _truncated(db: Path) -> None:
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])


def _scribbled_pages(db: Path) -> None:
    data = bytearray(db.read_bytes())
    rng = random.Random(5)
    page = 4096
    for start in range(page, len(data), page):  # every page but the header: b-trees damaged everywhere
        for i in range(start + 8, min(start + page, len(data)), 7):
            data[i] = rng.randrange(256)
    db.write_bytes(bytes(data))


def _header_damaged(db: Path) -> None:
    data = bytearray(db.read_bytes())
    data[0:16] = b"SQLite format 2\0"
    db.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [_garbage, _truncated, _scribbled_pages, _header_damaged])
def test_a_corrupt_database_is_moved_aside_with_its_audio_and_a_new_one_started(tmp_path: Path, damage) -> None:
    folder = tmp_path / "history"
    with HistoryStore(folder) as store:
        for n in range(30):  # enough rows for several pages
            _exchange(store, _meta(), n, text="長い答え " * 30)
    audio_before = sorted(p.relative_to(folder / "audio") for p in (folder / "audio").rglob("*.flac"))
    damage(folder / "history.sqlite3")
    store = HistoryStore(folder).open()
    assert len(store.notices) == 1
    notice = store.notices[0]
    assert notice.kind == "history" and "damaged" in notice.message and "set-aside" in notice.message
    assert store.list_conversations() == [] and store.integrity_check() == ["ok"]
    _exchange(store, _meta(), 99)  # the new history works
    assert len(store.list_conversations()) == 1
    store.close()
    (aside,) = (folder / "set-aside").iterdir()
    assert aside.name.endswith("-corrupt") and (aside / "history.sqlite3").is_file()
    # Nothing of the user's is deleted: the old audio went with the old database.
    assert sorted(p.relative_to(aside / "audio") for p in (aside / "audio").rglob("*.flac")) == audio_before


def test_a_database_from_a_newer_version_is_kept_aside_untouched(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    with HistoryStore(folder) as store:
        _exchange(store, _meta())
        store.db.execute(f"PRAGMA user_version = {schema_version() + 3}")
    original = (folder / "history.sqlite3").read_bytes()
    store = HistoryStore(folder).open()
    assert "newer version" in store.notices[0].message and store.notices[0].values["version"] == str(schema_version() + 3)
    assert store.list_conversations() == []
    store.close()
    (aside,) = (folder / "set-aside").iterdir()
    assert (aside / "history.sqlite3").read_bytes() == original and aside.name.endswith("-newer")
    again = HistoryStore(folder).open()  # the new one is not moved again
    assert again.notices == []
    again.close()


def test_a_missing_or_damaged_audio_file_leaves_the_turn_without_audio(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "history") as store:
        meta = _meta()
        _exchange(store, meta, 0)
        _exchange(store, meta, 1)
        paths = [row[0] for row in store.db.execute("SELECT audio_path FROM turns ORDER BY seq")]
        (store.folder / paths[0]).unlink()
        damaged = store.folder / paths[3]
        damaged.write_bytes(damaged.read_bytes()[:100])
        saved = store.load(store.list_conversations()[0].id)
        # Opened to read, the files are only looked for; replay reads one and finds the damage then.
        light = store.load(saved.summary.id, with_audio=False)
        assert [t.audio_missing for t in light.turns] == [True, False, False, False]
        assert [t.has_audio for t in light.turns] == [False, True, True, True]
        assert store.turn_audio(saved.summary.id, light.turns[3].id) is None
        assert store.turn_audio(saved.summary.id, light.turns[0].id) is None
        pcm, rate = store.turn_audio(saved.summary.id, light.turns[2].id)
        assert rate == 16000 and len(pcm) == 12800
        assert store.turn_audio(saved.summary.id + 1, light.turns[2].id) is None  # not that conversation's turn
    assert [t.audio_missing for t in saved.turns] == [True, False, False, True]
    assert [t.has_audio for t in saved.turns] == [False, True, True, False]
    assert saved.turns[0].pcm is None and saved.turns[3].pcm is None
    assert saved.turns[3].text == "こんにちは、今日はいい天気ですね。" and saved.turns[3].tokens is not None
    assert saved.turns[1].pcm is not None and len(saved.turns[2].pcm) == 12800


def test_a_migration_upgrades_in_place_and_keeps_the_rows(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "history"
    with HistoryStore(folder) as store:
        _exchange(store, _meta())

    def add_rating(db: sqlite3.Connection) -> None:
        db.execute("ALTER TABLE turns ADD COLUMN rating INTEGER")

    monkeypatch.setattr(store_module, "MIGRATIONS", [*store_module.MIGRATIONS, add_rating])
    with HistoryStore(folder) as store:
        assert store.notices == []
        assert store.db.execute("PRAGMA user_version").fetchone()[0] == 2
        assert store.db.execute("SELECT COUNT(*), COUNT(rating) FROM turns").fetchone() == (2, 0)
        assert len(store.load(store.list_conversations()[0].id).turns) == 2


def _run_unshared(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script],
                          capture_output=True, text=True, timeout=240, cwd=ROOT,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_full_disk_pauses_saving_and_the_waiting_turns_are_saved_once_there_is_room(tmp_path: Path) -> None:
    """A real full file system: a 3 MiB tmpfs, mounted in a private mount namespace."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    probe = _run_unshared(f"mount -t tmpfs -o size=3m tmpfs {mount} && echo ok")
    if probe.returncode != 0 or "ok" not in probe.stdout:
        direct = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True,
                                text=True) if os.geteuid() == 0 else None
        if direct is None or direct.returncode != 0:
            pytest.skip("NO DISK-FULL TEST: cannot mount a small tmpfs here (unshare: "
                        f"{probe.stderr.strip()}; mount: {direct.stderr.strip() if direct else 'not root'})")
        script_prefix = ""
    else:
        script_prefix = f"mount -t tmpfs -o size=3m tmpfs {mount} && "
    try:
        result = _run_unshared(f"{script_prefix}{sys.executable} {CHILD} diskfull {mount}") if script_prefix else \
            subprocess.run([sys.executable, str(CHILD), "diskfull", str(mount)], capture_output=True, text=True,
                           timeout=240, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    finally:
        if not script_prefix:
            subprocess.run(["umount", str(mount)], check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["fill_error"] == 28  # ENOSPC: the disk really was full
    assert report["paused_while_full"] is True
    assert any("disk is full" in t for t in report["errors_while_full"])
    assert report["errors_while_full"].count(report["errors_while_full"][0]) == 1  # told once, not per turn
    assert report["paused_after"] is False and report["status_after"][-1] is False
    assert report["turns"] == ["user", "assistant"] * 4  # the turns made while the disk was full are there
    assert report["audio_missing"] == [False] * 8 and report["integrity"] == ["ok"]


# --------------------------------------------------------------------------- real processes


def test_processes_killed_mid_write_leave_every_finished_turn_whole(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "history"
    uid = new_conversation_uid()
    rng = random.Random(11)
    confirmed: set[int] = set()
    for round_ in range(5):
        child = _child("writer", str(folder), uid, "0", str(round_))
        seen = 0
        target = rng.randint(1, 6)
        while seen < target:
            line = child.stdout.readline()
            assert line, child.stderr.read()
            confirmed.add(int(line.split()[1]))
            seen += 1
        time.sleep(rng.uniform(0.0, 0.05))  # somewhere inside the next write or commit
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
        store = _check_store_is_whole(folder)
        rows = {row[0] for row in store.db.execute("SELECT id FROM turns")}
        assert confirmed <= rows  # every turn the writer had reported as saved is there
        store.close()
    monkeypatch.setattr(store_module, "ORPHAN_AGE_S", -1.0)  # as if the next start were much later
    with _check_store_is_whole(folder) as store:
        named = {row[0] for row in store.db.execute("SELECT audio_path FROM turns")}
        on_disk = {p.relative_to(folder).as_posix() for p in (folder / "audio").rglob("*") if p.is_file()}
        assert on_disk == named  # files of turns that never committed are gone, no named file is
        seqs = [row[0] for row in store.db.execute("SELECT seq FROM turns ORDER BY seq")]
        assert seqs == list(range(1, len(seqs) + 1))


def test_two_processes_writing_at_once_do_not_corrupt_the_store(tmp_path: Path) -> None:
    folder = tmp_path / "history"
    HistoryStore(folder).open().close()
    shared = new_conversation_uid()
    children = [_child("writer", str(folder), uid, "24", str(seed))
                for seed, uid in enumerate([new_conversation_uid(), new_conversation_uid(), shared, shared])]
    for child in children:
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err[-3000:]
        assert out.count("saved") == 24
    with _check_store_is_whole(folder) as store:
        summaries = store.list_conversations()
        assert sorted(s.turn_count for s in summaries) == [24, 24, 48]
        for summary in summaries:
            seqs = [t.seq for t in store.load(summary.id, with_audio=False).turns]
            assert seqs == list(range(1, summary.turn_count + 1))  # numbered inside the transaction: no clash


def test_a_process_killed_mid_answer_leaves_the_finished_turns_to_continue_from(tmp_path: Path, tiny_model_dir: Path) -> None:
    folder = tmp_path / "history"
    child = _child("answer", str(folder), str(tiny_model_dir))
    lines: list[str] = []
    while "generating" not in lines[-1:]:
        line = child.stdout.readline()
        assert line, child.stderr.read()[-3000:]
        lines.append(line.strip())
    for _ in range(3):  # a few pieces into the third answer
        child.stdout.readline()
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    child.stderr.close()
    assert lines[:2] == ["turn 1 saved", "turn 2 saved"]
    with _check_store_is_whole(folder) as store:
        (summary,) = store.list_conversations()
        saved = store.load(summary.id)
    # Two whole exchanges and the take the third answer was for (saved as it ended, before the answer).
    assert [t.role for t in saved.turns] == ["user", "assistant", "user", "assistant", "user"]
    assert all(t.tokens is not None and len(t.tokens.piece_kinds) > 0 for t in saved.turns if t.role == "assistant")
    from engine.history.context import saved_exchanges

    plan = saved_exchanges(saved, vocabulary=512)
    assert len(plan.exchanges) == 2 and plan.skipped == 1


# --------------------------------------------------------------------------- retention and size


def test_retention_by_age_and_by_size_keeps_the_live_conversation(tmp_path: Path) -> None:
    with HistoryStore(tmp_path / "history") as store:
        metas = [_meta() for _ in range(5)]
        for n, meta in enumerate(metas):
            _exchange(store, meta, n)
            store.db.execute("UPDATE conversations SET updated_at = ? WHERE uid = ?", (1000.0 + n * 86400, meta.uid))
        now = 1000.0 + 4 * 86400 + 1
        assert store.apply_retention(max_age_days=None, max_bytes=None, now=now) == 0  # default: keep everything
        size = store.size_on_disk()
        assert size > sum(s.stored_bytes for s in store.list_conversations())  # the database counts too
        # Older than 2.5 days: conversations 0 and 1, but 0 is the live one.
        assert store.apply_retention(max_age_days=2.5, max_bytes=None, keep_uids=[metas[0].uid], now=now) == 1
        assert {s.uid for s in store.list_conversations()} == {metas[0].uid, metas[2].uid, metas[3].uid, metas[4].uid}
        per = store.list_conversations()[0].stored_bytes
        # A size limit deletes the oldest first until it fits.
        limit = store.size_on_disk() - per // 2
        assert store.apply_retention(max_age_days=None, max_bytes=limit, keep_uids=[metas[0].uid], now=now) == 1
        assert {s.uid for s in store.list_conversations()} == {metas[0].uid, metas[3].uid, metas[4].uid}
        assert store.size_on_disk() < size
        assert not (store.audio_dir / metas[1].uid).exists() and not (store.audio_dir / metas[2].uid).exists()
        assert store.delete_all(keep_uids=[metas[0].uid]) == 2
        assert [s.uid for s in store.list_conversations()] == [metas[0].uid]


TURN_COLUMNS = ["seq", "role", "created_at", "text", "cancelled", "audio_path", "sample_rate", "duration_s",
                "generated_s", "audio_bytes", "model", "voice", "sampling", "metrics", "text_tokens", "audio_codes",
                "piece_kinds"]
CONVERSATION_COLUMNS = ["uid", "started_at", "updated_at", "system_prompt", "model", "voice", "title", "turn_count",
                        "duration_s", "stored_bytes"]
ANY_VALUE = st.one_of(st.none(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=True), st.text(max_size=40),
                      st.binary(max_size=40), st.sampled_from(["../../outside.flac", "audio/x/../../../etc", "{}", "[1]",
                                                               "audio/", "user", "assistant"]))


@pytest.fixture(scope="module")
def damage_template(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("template") / "history"
    with HistoryStore(folder) as store:
        meta = _meta()
        _exchange(store, meta, 0)
        _exchange(store, meta, 1)
    return folder


@settings(max_examples=60, deadline=None)
@given(table=st.sampled_from(["turns", "conversations"]), column_index=st.integers(0, 100), row=st.integers(1, 4),
       value=ANY_VALUE)
def test_a_row_damaged_in_any_field_is_read_without_failing(tmp_path_factory, damage_template: Path, table: str,
                                                            column_index: int, row: int, value) -> None:
    from engine.history.context import saved_exchanges
    from engine.history.engine_commands import records_of
    from engine.history.service import views_with_ids

    folder = tmp_path_factory.mktemp("damaged") / "history"
    shutil.copytree(damage_template, folder)
    outside = folder.parent / "outside.flac"
    outside.write_bytes(b"not the store's")
    columns = TURN_COLUMNS if table == "turns" else CONVERSATION_COLUMNS
    column = columns[column_index % len(columns)]
    with HistoryStore(folder) as store:
        try:
            store.db.execute(f"UPDATE {table} SET {column} = ? WHERE id = ?", (value, row if table == "turns" else 1))
        except sqlite3.IntegrityError:
            return  # NOT NULL / CHECK / UNIQUE: SQLite itself keeps that damage out
        (summary,) = store.list_conversations()
        saved = store.load(summary.id)
        assert len(saved.turns) == 4
        untouched = [t for t in saved.turns if table == "conversations" or t.id != row]
        assert all(not t.audio_missing and t.pcm is not None for t in untouched)
        plan = saved_exchanges(saved, vocabulary=512)
        assert len(plan.exchanges) + plan.skipped >= 1
        records = records_of(saved, iter(range(100)).__next__)
        assert all(r.duration_s >= 0 for r in records)
        views_with_ids(saved, [r.turn_id for r in records])
        assert store.delete_all() == 1
    assert outside.read_bytes() == b"not the store's"  # a damaged path never reaches outside the store


def test_the_history_and_the_worker_import_neither_qt_nor_torch() -> None:
    """The window imports engine.worker on the GUI thread; torch is for the engine thread to load."""
    code = (
        "import sys, engine.history.store, engine.history.service, engine.history.engine_commands, engine.worker\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'PySide6', 'transformers'))\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))


# --------------------------------------------------------------------------- a generated life of the store

from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402


class StoreLife(RuleBasedStateMachine):
    """Random saves, deletes, reopenings, lost files and retention against a plain model of what the store
    should hold; after every step the store and the model agree and the database is whole."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile

        self.folder = Path(tempfile.mkdtemp(prefix="history-life-")) / "history"
        self.store = HistoryStore(self.folder).open()
        self.model: dict[str, list[tuple[str, np.ndarray]]] = {}  # uid -> (role, pcm) in order
        self.lost: set[tuple[str, int]] = set()  # (uid, index) whose file was deleted
        self.n = 0

    @initialize()
    def first(self) -> None:
        self.live = _meta()

    @rule()
    def new_conversation(self) -> None:
        self.live = _meta()

    @rule(role=st.sampled_from(["user", "assistant"]), samples=st.integers(0, 400))
    def save(self, role: str, samples: int) -> None:
        self.n += 1
        rate = 16000 if role == "user" else 24000
        pcm = canonical_take(np.random.default_rng(self.n).standard_normal(samples) * 0.1)
        tokens = _tokens(frames=3, text=2, seed=self.n) if role == "assistant" else None
        self.store.save_turn(self.live, TurnToSave(role, pcm, rate, text=f"答え{self.n}", tokens=tokens))
        self.model.setdefault(self.live.uid, []).append((role, pcm))

    @rule(data=st.data())
    def delete_one(self, data) -> None:
        if self.model:
            uid = data.draw(st.sampled_from(sorted(self.model)))
            assert self.store.delete([self.store.find(uid)]) == 1
            self._forget(uid)

    @rule()
    def delete_all_but_live(self) -> None:
        self.store.delete_all(keep_uids=[self.live.uid])
        for uid in [uid for uid in self.model if uid != self.live.uid]:
            self._forget(uid)

    @rule()
    def reopen(self) -> None:
        self.store.close()
        self.store = HistoryStore(self.folder).open()
        assert self.store.notices == []

    @rule(data=st.data())
    def lose_a_file(self, data) -> None:
        rows = self.store.db.execute(
            "SELECT c.uid, t.seq, t.audio_path FROM turns t JOIN conversations c ON c.id = t.conversation_id"
            " WHERE t.audio_path IS NOT NULL ORDER BY t.id").fetchall()
        if rows:
            uid, seq, path = data.draw(st.sampled_from(rows))
            (self.folder / path).unlink(missing_ok=True)
            self.lost.add((uid, seq - 1))

    @rule(fraction=st.floats(0.2, 1.0))
    def retention_by_size(self, fraction: float) -> None:
        limit = int(self.store.size_on_disk() * fraction)
        self.store.apply_retention(max_age_days=None, max_bytes=limit, keep_uids=[self.live.uid])
        kept = {s.uid for s in self.store.list_conversations()}
        assert self.live.uid in kept or self.live.uid not in self.model
        for uid in [uid for uid in self.model if uid not in kept]:
            self._forget(uid)

    def _forget(self, uid: str) -> None:
        del self.model[uid]
        self.lost = {(u, i) for u, i in self.lost if u != uid}  # a later save under this uid starts afresh

    @invariant()
    def agrees(self) -> None:
        listed = {s.uid: s for s in self.store.list_conversations()}
        assert set(listed) == set(self.model)
        for uid, turns in self.model.items():
            saved = self.store.load(listed[uid].id)
            assert listed[uid].turn_count == len(turns) == len(saved.turns)
            for index, ((role, pcm), turn) in enumerate(zip(turns, saved.turns, strict=True)):
                assert turn.role == role and turn.seq == index + 1
                if len(pcm) == 0:
                    assert turn.pcm is None and not turn.audio_missing
                elif (uid, index) in self.lost:
                    assert turn.pcm is None and turn.audio_missing
                else:
                    assert not turn.audio_missing and len(turn.pcm) == len(pcm)
                    if role == "user":
                        assert np.array_equal(turn.pcm, pcm)  # lossless
                    else:
                        assert np.abs(turn.pcm - pcm).max() <= 1 / 32767  # 16-bit
        assert self.store.integrity_check() == ["ok"]

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.folder.parent, ignore_errors=True)


TestStoreLife = StoreLife.TestCase
TestStoreLife.settings = settings(max_examples=15, stateful_step_count=25, deadline=None)
