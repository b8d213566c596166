"""The store: migrations at open, the change log, per-chat on/off."""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

import pytest

from proxy.errors import StoreUnusable
from proxy.store import (
    MIGRATIONS,
    ChatRecord,
    Database,
    Store,
    file_error,
    log_failed,
    mirrored_folder_of,
    unusable,
)


def record(chat_id: str = "u/chats/S/c") -> ChatRecord:
    return ChatRecord(
        id=chat_id,
        user="u",
        kind="character",
        character="S",
        group_id=None,
        group_name=None,
        name="c",
        file=chat_id + ".jsonl",
        integrity="slug",
        main_chat=None,
        enabled=None,
        size=1,
        mtime_ns=1,
        file_hash=b"h",
        messages=1,
        bad_lines=0,
        updated=1.0,
        deleted=False,
    )


def clock() -> float:
    return 1000.0


async def test_the_store_runs_every_call_on_its_one_thread_and_closes(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    async with Store(path, clock=clock) as store:
        threads = {await store.call(lambda db: threading.get_ident()) for _ in range(5)}
        assert len(threads) == 1 and threading.get_ident() not in threads
        assert await store.call(lambda db: db.schema_version) == len(MIGRATIONS)
    with pytest.raises(RuntimeError, match="closed"):
        await store.call(lambda db: None)
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    db.close()
    newer = Store(path)
    with pytest.raises(StoreUnusable, match="newer than this recap-proxy"):
        await newer.open()
    await newer.close()


async def test_a_store_that_cannot_write_says_so_until_a_write_goes_in_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    path = tmp_path / "s.sqlite3"

    def write(db: Database) -> None:
        db.db.execute("INSERT INTO settings_kv VALUES (hex(randomblob(8)), ?)", ("x" * 50_000,))

    def read(db: Database) -> int:
        return int(db.db.execute("SELECT COUNT(*) FROM chats").fetchone()[0])

    def full(db: Database) -> None:  # the file may not grow: SQLite's own SQLITE_FULL
        db.db.execute("DELETE FROM settings_kv")
        pages = db.db.execute("PRAGMA page_count").fetchone()[0]
        db.db.execute(f"PRAGMA max_page_count={pages}")

    caplog.set_level(logging.INFO, logger="proxy.store")
    async with Store(path, clock=lambda: now[0]) as store:
        with pytest.raises(sqlite3.OperationalError, match="syntax"):
            await store.call(lambda db: db.db.execute("SELEC 1"))
        assert store.failure is None  # a query's own mistake is no failing file
        await store.call(full)
        for _ in range(2):
            with pytest.raises(sqlite3.OperationalError, match="full"):
                await store.call(write)
        assert store.failure == f"cannot write {path}: database or disk is full"
        assert [r.levelname for r in caplog.records] == ["ERROR"]  # once, not per write
        assert "chat requests still go upstream" in caplog.text
        # Reads work on a full disk and say nothing; a small write that fits is no sign
        # that the store works again while bigger ones still fail.
        assert await store.call(read) == 0
        await store.call(lambda db: db.db.execute("INSERT INTO settings_kv VALUES ('a', 'b')"))
        assert store.failure is not None
        now[0] += 25
        with pytest.raises(sqlite3.OperationalError):
            await store.call(write)
        now[0] += 25
        await store.call(lambda db: db.db.execute("UPDATE settings_kv SET value = 'c'"))
        assert store.failure is not None  # 25 s after the last failure
        # Space again: a write that goes in long enough after the last failure ends it.
        await store.call(lambda db: db.db.execute("PRAGMA max_page_count=1073741823"))
        await store.call(write)
        now[0] += 10
        assert store.failure is None
        await store.call(write)
        assert "is written again" in caplog.records[-1].message


def test_what_failed_on_a_failing_store_is_one_line_and_anything_else_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("tests.store")
    full = sqlite3.OperationalError("database or disk is full")
    full.sqlite_errorname = "SQLITE_FULL"  # as SQLite's own errors carry it
    for error in (full, sqlite3.OperationalError("no such table: x"), ValueError("bug")):
        try:
            raise error
        except Exception:
            log_failed(log, "reading %s failed", "Ava")
    said = [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert said == [
        ("WARNING", "reading Ava failed (database or disk is full)", False),
        ("ERROR", "reading Ava failed", True),
        ("ERROR", "reading Ava failed", True),
    ]
    assert file_error(full) and not file_error(ValueError()) and not file_error(None)


def test_a_file_that_is_no_store_is_refused_in_words_and_left_as_it_was(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    path.write_bytes(b"not a store, " * 1000)
    with pytest.raises(StoreUnusable) as refused:
        Database(path, clock)
    assert str(refused.value) == (
        f"the store {path} cannot be used: file is not a database; `recap-proxy doctor` says "
        "how to mend it"
    )
    assert path.read_bytes() == b"not a store, " * 1000
    assert unusable(path) == "file is not a database"
    assert unusable(tmp_path / "none.sqlite3") is None  # made at the first start


def test_a_read_only_store_is_unusable_and_still_names_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite3"
    db = Database(path, clock)
    db.set_mirrored_folder("/st/data")
    db.close()
    monkeypatch.setattr("proxy.store.os.access", lambda p, mode: Path(p) != path)
    assert unusable(path) == "the file is read-only"
    assert mirrored_folder_of(path) == "/st/data"
    monkeypatch.setattr("proxy.store.os.access", lambda p, mode: Path(p) != tmp_path)
    assert unusable(path) == f"its folder {tmp_path} cannot be written"
