"""The SQLite connection and its synchronous API: the proxy's own data, never ST's.

Used only on the store's one thread (`proxy.store.Store.call` hands it to functions run
there). WAL mode, foreign keys on, and versioned migrations applied at open. Messages
have a stable `uid` that survives deletions before them, edits, swipes, hiding and
renames of their chat: see `proxy.sillytavern.reconcile`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from proxy.errors import StoreUnusable
from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.reconcile import Event, OldMessage
from proxy.store.entities import EntityTable
from proxy.store.extensions import ExtensionTable
from proxy.store.jobs import JobTable
from proxy.store.lore import LoreTable
from proxy.store.memory import MemoryTable
from proxy.store.records import (
    CHAT_COLUMNS,
    MESSAGE_COLUMNS,
    WRITE_COLUMNS,
    ChatRecord,
    MessageRecord,
    Spoken,
    chat_from_row,
    message_from_row,
    message_values,
)
from proxy.store.schema import DELETED_CHAT_TTL, MIGRATIONS
from proxy.store.usage import UsageTable
from proxy.store.vectors import VectorTable

Clock = Callable[[], float]

# SQLite's answers that mean its file cannot be written or read as it should (a full
# disk, a read-only or damaged file, another process holding it), not a query's mistake.
FILE_ERRORS = (
    "SQLITE_FULL",
    "SQLITE_READONLY",
    "SQLITE_IOERR",
    "SQLITE_CORRUPT",
    "SQLITE_NOTADB",
    "SQLITE_CANTOPEN",
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
)


def file_error(exc: BaseException | None) -> bool:
    """Whether `exc` is SQLite failing at its file (`FILE_ERRORS`)."""
    if not isinstance(exc, sqlite3.Error):
        return False
    return str(getattr(exc, "sqlite_errorname", "")).startswith(FILE_ERRORS)


_ASSIGNMENTS = ", ".join(f"{c.strip()}=?" for c in WRITE_COLUMNS.split(","))


# The data folder a store mirrors: read by `Database.mirrored_folder`, and before the store
# is opened by `proxy.store.mirrored_folder_of`.
MIRRORED_FOLDER = "SELECT value FROM settings_kv WHERE key='st_data_dir'"


class Database:
    """The proxy's SQLite file, for code running on the store's thread."""

    def __init__(self, path: Path | str, clock: Clock) -> None:
        self.clock = clock
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            self.db.row_factory = sqlite3.Row
            # The CLI and a running server may share the file: wait for the other's write.
            self.db.execute("PRAGMA busy_timeout=5000")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except sqlite3.Error as exc:
            self.db.close()
            if not file_error(exc):
                raise
            raise StoreUnusable(
                f"the store {path} cannot be used: {exc}; `recap-proxy doctor` says how to mend it"
            ) from exc
        except StoreUnusable:
            self.db.close()
            raise
        self._tx = _Transaction(self.db)
        self.jobs = JobTable(self.db, self.transaction)
        self.memory = MemoryTable(self.db, self.transaction)
        self.entities = EntityTable(self.db, self.transaction)
        self.vectors = VectorTable(self.db, self.transaction)
        self.extensions = ExtensionTable(self.db, self.transaction)
        self.usage = UsageTable(self.db, self.transaction)
        self.lore = LoreTable(self.db, self.transaction)

    def close(self) -> None:
        self.db.close()

    @property
    def schema_version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def _migrate(self) -> None:
        version = self.schema_version
        if version > len(MIGRATIONS):
            raise StoreUnusable(
                f"the store {self.path} has schema {version}, newer than this recap-proxy "
                f"({len(MIGRATIONS)}): upgrade recap-proxy"
            )
        for number in range(version + 1, len(MIGRATIONS) + 1):
            # One transaction per migration: the schema and its version move together.
            self.db.executescript(
                f"BEGIN;\n{MIGRATIONS[number - 1]}\nPRAGMA user_version={number};\nCOMMIT;"
            )

    # -- chats ---------------------------------------------------------------------------

    def chat(self, chat_id: str) -> ChatRecord | None:
        row = self.db.execute(f"SELECT {CHAT_COLUMNS} FROM chats WHERE id=?", (chat_id,))
        found = row.fetchone()
        return chat_from_row(found) if found else None

    def chats(self, *, named: str | None = None) -> list[ChatRecord]:
        which = "WHERE deleted=0 AND (? IS NULL OR name=?) ORDER BY id"  # named: of that name
        rows = self.db.execute(f"SELECT {CHAT_COLUMNS} FROM chats {which}", (named, named))
        return [chat_from_row(r) for r in rows]

    def deleted_with_integrity(self, integrity: str) -> list[ChatRecord]:
        rows = self.db.execute(
            f"SELECT {CHAT_COLUMNS} FROM chats WHERE deleted=1 AND integrity=?", (integrity,)
        )
        return [chat_from_row(r) for r in rows]

    def deleted_group_copies(self, user: str, file_hash: bytes) -> list[ChatRecord]:
        """The user's deleted group chats without a slug whose file had this content."""
        where = "deleted=1 AND integrity IS NULL AND kind='group' AND user=? AND file_hash=?"
        rows = self.db.execute(f"SELECT {CHAT_COLUMNS} FROM chats WHERE {where}", (user, file_hash))
        return [chat_from_row(r) for r in rows]

    def set_enabled(self, chat_id: str, enabled: bool | None) -> None:
        value = None if enabled is None else int(enabled)
        self.db.execute("UPDATE chats SET enabled=? WHERE id=?", (value, chat_id))

    def mark_deleted(self, chat_id: str) -> None:
        self.db.execute(
            "UPDATE chats SET deleted=1, deleted_at=COALESCE(deleted_at, ?) WHERE id=?",
            (self.clock(), chat_id),
        )

    def purge_deleted(self) -> list[str]:
        """Forget chats deleted longer ago than a rename could claim them, with their
        messages, change log and lorebook snapshots."""
        cutoff = self.clock() - DELETED_CHAT_TTL
        with self.transaction():
            gone = [
                r[0]
                for r in self.db.execute(
                    "SELECT id FROM chats WHERE deleted=1 AND deleted_at < ?", (cutoff,)
                )
            ]
            self.db.executemany("DELETE FROM events WHERE chat_id=?", [(c,) for c in gone])
            self.db.executemany("DELETE FROM chats WHERE id=?", [(c,) for c in gone])
        return gone

    def mirrored_folder(self) -> str | None:
        """ST's data folder this store mirrors (its chat ids are paths under it), or None
        before the first indexing."""
        row = self.db.execute(MIRRORED_FOLDER).fetchone()
        return str(row[0]) if row else None

    def set_mirrored_folder(self, folder: str) -> None:
        self.db.execute(
            "INSERT INTO settings_kv (key, value) VALUES ('st_data_dir', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (folder,),
        )

    def rename(self, old_id: str, new_id: str) -> None:
        """Move a chat's data to a new id (the file was renamed)."""
        with self.transaction():
            self.db.execute("DELETE FROM chats WHERE id=?", (new_id,))
            self.db.execute(
                "UPDATE chats SET id=?, deleted=0, deleted_at=NULL WHERE id=?", (new_id, old_id)
            )
            self.db.execute("UPDATE events SET chat_id=? WHERE chat_id=?", (new_id, old_id))

    # -- messages ------------------------------------------------------------------------

    def messages(self, chat_id: str) -> list[MessageRecord]:
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id=? ORDER BY position",
            (chat_id,),
        )
        return [message_from_row(r) for r in rows]

    def speakers_tail(self, chat_id: str, limit: int) -> tuple[int, list[Spoken]]:
        """The message count and the newest `limit` visible messages (who spoke, what),
        oldest first: read after every save, so no full message rows."""
        count = self.db.execute(
            "SELECT COUNT(*) FROM messages WHERE chat_id=?", (chat_id,)
        ).fetchone()[0]
        rows = self.db.execute(
            "SELECT position, is_user, narrator, name, text FROM messages WHERE chat_id=? AND "
            "is_system=0 ORDER BY position DESC LIMIT ?",
            (chat_id, limit),
        ).fetchall()
        return int(count), [
            Spoken(r[0], bool(r[1]), bool(r[2]), r[3], r[4]) for r in reversed(rows)
        ]

    def layout(self, chat_id: str) -> list[tuple[int, bytes]]:
        """(uid, line digest) of every mirrored message, in order: enough to align."""
        rows = self.db.execute(
            "SELECT uid, digest FROM messages WHERE chat_id=? ORDER BY position", (chat_id,)
        )
        return [(r[0], r[1]) for r in rows]

    def old_messages(self, chat_id: str, uids: Iterable[int] | None = None) -> list[OldMessage]:
        """What reconciling needs of the mirror (no texts: they can be megabytes).

        With `uids`, only those messages (the ones in changed stretches), in order.
        """
        query = (
            "SELECT uid, digest, name, is_user, is_system, send_date, text_hash, swipe_id, "
            "swipe_count FROM messages WHERE chat_id=?"
        )
        params: list[object] = [chat_id]
        if uids is not None:
            wanted = list(uids)
            query += f" AND uid IN ({','.join('?' * len(wanted))})"
            params += wanted
        rows = self.db.execute(query + " ORDER BY position", params)
        return [
            OldMessage(
                uid=r[0],
                digest=r[1],
                name=r[2],
                is_user=bool(r[3]),
                is_system=bool(r[4]),
                send_date=r[5],
                text_hash=r[6],
                swipe_id=r[7],
                swipe_count=r[8],
            )
            for r in rows
        ]

    def save_chat(
        self,
        chat: ChatRecord,
        uids: Sequence[int | None],
        digests: Sequence[bytes],
        load: Callable[[int], STMessage],
        events: Iterable[Event],
        layout: Sequence[tuple[int, bytes]] | None = None,
    ) -> list[Event]:
        """Write a chat and its reconciled messages in one transaction.

        `uids[i]` is the existing uid of new message `i`, or None for an added one; rows
        whose uid is not kept are deleted. A kept row whose line did not change only has its
        position updated, so `load(i)` (which may parse) is called for changed rows only.
        Returns the events with the uids of added messages filled in. `layout` is the
        mirror's `layout()` when the caller just read it.
        """
        now = self.clock()
        with self.transaction():
            self._upsert_chat(chat)
            if layout is None:
                layout = self.layout(chat.id)
            current = {uid: (position, digest) for position, (uid, digest) in enumerate(layout)}
            kept = {uid for uid in uids if uid is not None}
            gone = [(uid,) for uid in current if uid not in kept]
            self.db.executemany("DELETE FROM messages WHERE uid=?", gone)
            moves: list[tuple[int, int]] = []
            final_uids: list[int] = []
            for position, (uid, digest) in enumerate(zip(uids, digests, strict=True)):
                if uid is not None and current.get(uid, (None, None))[1] == digest:
                    final_uids.append(uid)
                    if current[uid][0] != position:
                        moves.append((position, uid))
                    continue
                message = load(position)
                values = message_values(position, digest, message)
                if uid is None:
                    cursor = self.db.execute(
                        f"INSERT INTO messages (chat_id, {WRITE_COLUMNS}, extension_new) "
                        f"VALUES (?,{','.join('?' * len(values))},?)",
                        (chat.id, *values, int(message.extension is not None)),
                    )
                    final_uids.append(int(cursor.lastrowid or 0))
                else:
                    # SET reads the old row: extension data that changed (or went) is
                    # flagged for import.
                    self.db.execute(
                        f"UPDATE messages SET {_ASSIGNMENTS}, extension_new = CASE WHEN "
                        "extension IS ? THEN extension_new ELSE 1 END WHERE uid=?",
                        (*values, message.extension, uid),
                    )
                    final_uids.append(uid)
            self.db.executemany("UPDATE messages SET position=? WHERE uid=?", moves)
            filled = [
                Event(e.kind, e.index, final_uids[e.index] if e.uid is None else e.uid)
                for e in events
            ]
            self.db.executemany(
                "INSERT INTO events (chat_id, kind, uid, position, at) VALUES (?,?,?,?,?)",
                [(chat.id, e.kind, e.uid, e.index, now) for e in filled],
            )
            self.lore.bind_snapshots(chat.id, now)
        return filled

    def visible_count(self, chat_id: str) -> int:
        row = self.db.execute(
            "SELECT COUNT(*) FROM messages WHERE chat_id=? AND is_system=0", (chat_id,)
        ).fetchone()
        return int(row[0])

    def message_at(self, chat_id: str, position: int) -> MessageRecord | None:
        row = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id=? AND position=?",
            (chat_id, position),
        ).fetchone()
        return message_from_row(row) if row else None

    def update_stat(self, chat_id: str, size: int, mtime_ns: int) -> None:
        self.db.execute(
            "UPDATE chats SET size=?, mtime_ns=?, updated=? WHERE id=?",
            (size, mtime_ns, mtime_ns / 1e9, chat_id),
        )

    def events(self, chat_id: str, after: int = 0) -> list[tuple[int, str, int | None, int]]:
        rows = self.db.execute(
            "SELECT seq, kind, uid, position FROM events WHERE chat_id=? AND seq>? ORDER BY seq",
            (chat_id, after),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def _upsert_chat(self, chat: ChatRecord) -> None:
        values = (
            chat.id, chat.user, chat.kind, chat.character, chat.group_id, chat.group_name,
            chat.name, chat.file, chat.integrity, chat.main_chat,
            None if chat.enabled is None else int(chat.enabled),
            chat.size, chat.mtime_ns, chat.file_hash, chat.messages, chat.bad_lines,
            chat.updated, int(chat.deleted), chat.metadata, chat.character_name,
        )  # fmt: skip
        self.db.execute(
            f"INSERT INTO chats ({CHAT_COLUMNS}) VALUES ({','.join('?' * len(values))}) "
            "ON CONFLICT(id) DO UPDATE SET user=excluded.user, kind=excluded.kind, "
            "character=excluded.character, group_id=excluded.group_id, "
            "group_name=excluded.group_name, name=excluded.name, file=excluded.file, "
            "integrity=excluded.integrity, main_chat=excluded.main_chat, size=excluded.size, "
            "mtime_ns=excluded.mtime_ns, file_hash=excluded.file_hash, "
            "messages=excluded.messages, bad_lines=excluded.bad_lines, "
            "updated=excluded.updated, deleted=excluded.deleted, metadata=excluded.metadata, "
            "character_name=excluded.character_name, "
            "deleted_at=NULL",
            values,
        )

    def transaction(self) -> _Transaction:
        """One transaction around several writes (nested uses join the outer one)."""
        return self._tx


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error); nested uses join the outer one, so
    that a job's result and its `done` mark can share a transaction."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db
        self.depth = 0

    def __enter__(self) -> None:
        if self.depth == 0:
            self.db.execute("BEGIN IMMEDIATE")
        self.depth += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.depth -= 1
        if self.depth != 0:
            return
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
            except sqlite3.Error:
                self._rollback()  # a COMMIT that failed (disk full) leaves it open
                raise
        else:
            self._rollback()

    def _rollback(self) -> None:
        # SQLite rolls back by itself on some errors (SQLITE_FULL, SQLITE_IOERR); a
        # ROLLBACK then would raise "no transaction is active" over the real error.
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
