"""The store's schema: migrations run once at open, a newer store is refused, an upgrade
has chats read again."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from proxy.errors import StoreUnusable
from proxy.store import (
    MIGRATIONS,
    Database,
)
from tests.test_store import clock


def test_migrations_run_once_and_a_newer_store_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = Database(path, clock)
    assert store.schema_version == len(MIGRATIONS)
    assert store.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()
    Database(path, clock).close()  # opening again applies nothing twice
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    db.close()
    with pytest.raises(StoreUnusable, match="newer than this recap-proxy"):
        Database(path, clock)


def test_upgrades_have_chats_read_again(tmp_path: Path) -> None:
    """v5: character chats, for their names; v7: every chat, for its extension data."""
    path = tmp_path / "s.sqlite3"
    db = sqlite3.connect(path)
    for number, script in enumerate(MIGRATIONS[:4], start=1):
        db.executescript(f"BEGIN;\n{script}\nPRAGMA user_version={number};\nCOMMIT;")
    columns = "id, user, kind, name, file, size, mtime_ns, file_hash, messages, bad_lines, deleted"
    db.executemany(
        f"INSERT INTO chats ({columns}) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        [
            ("u/chats/default_S/c", "u", "character", "c", "f1", 10, 1, b"h", 1, 0, 0),
            ("u/group chats/g", "u", "group", "g", "f2", 10, 1, b"h", 1, 0, 0),
        ],
    )
    db.commit()
    db.close()
    store = Database(path, clock)
    solo, group = store.chat("u/chats/default_S/c"), store.chat("u/group chats/g")
    assert solo is not None and (solo.size, solo.file_hash, solo.character_name) == (-1, None, None)
    assert group is not None and (group.size, group.file_hash) == (-1, None)
    store.close()
