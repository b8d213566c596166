"""The only owner of SQLite and of the one thread that uses it: callers await the store.

`Store` opens the database on its own thread (migrations run there) and runs every
function handed to `call` on that thread with the synchronous `Database`, one at a time,
as datasette's `Database.execute_fn` does. Nothing else holds the connection, so no
caller has to know which thread it may use. The store takes its clock, so that tests can
move time.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from proxy.store.database import MIRRORED_FOLDER, Clock, Database, file_error
from proxy.store.records import ChatRecord, MessageRecord
from proxy.store.schema import MIGRATIONS
from proxy.store.search import SceneSearch

__all__ = [
    "MIGRATIONS",
    "ChatRecord",
    "Clock",
    "Database",
    "MessageRecord",
    "Store",
    "file_error",
    "log_failed",
    "mirrored_folder_of",
    "unusable",
]

T = TypeVar("T")

log = logging.getLogger(__name__)

# A full disk still takes small writes (into space a rolled-back write freed) while a
# chat's does not fit: the store counts as failing until a write succeeds this long after
# the last error.
FAILURE_HOLD_S = 30.0


def log_failed(logger: logging.Logger, message: str, *args: object) -> None:
    """In an `except` block: `message` logged with the traceback, or in one line with the
    error when it is the store's file failing (the store has said so, once)."""
    exc = sys.exc_info()[1]
    if file_error(exc):
        logger.warning(message + " (%s)", *args, exc)
    else:
        logger.exception(message, *args)


class Store:
    """The proxy's SQLite file behind its one thread; an async context manager."""

    def __init__(self, path: Path | str, *, clock: Clock = time.time) -> None:
        self.path = path
        self.clock = clock
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="recap-store")
        self._db: Database | None = None
        self._closed = False
        # The last file error (`FILE_ERRORS`) and when, and when a write last went in:
        # with the store failing, chats are not mirrored and memory is not kept while
        # chats still flow, so `/health` says it (`failure`). Written on the store's
        # thread, read on the loop's.
        self._failure: str | None = None
        self._failed_at = 0.0
        self._wrote_at = 0.0
        # The one read the chat path makes, on its own read-only connection.
        self.search = SceneSearch(path)

    async def __aenter__(self) -> Store:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Connect and migrate (raises for a store newer than this recap-proxy)."""
        await self.call(lambda db: None)

    async def call(self, fn: Callable[[Database], T]) -> T:
        """Run `fn(database)` on the store's thread and return what it returns."""
        if self._closed:
            raise RuntimeError("the store is closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._run, fn)

    def _run(self, fn: Callable[[Database], T]) -> T:
        try:
            if self._db is None:
                self._db = Database(self.path, self.clock)
            db = self._db
            changes = db.db.total_changes
            result = fn(db)
        except sqlite3.Error as exc:
            if file_error(exc):
                self._failed(exc)
            raise
        if db.db.total_changes != changes:
            self._wrote(self.clock())
        return result

    def _wrote(self, now: float) -> None:
        if self._failure is not None and now - self._failed_at >= FAILURE_HOLD_S:
            log.info("the store %s is written again", self.path)
            self._failure = None
        self._wrote_at = now

    def _failed(self, exc: sqlite3.Error) -> None:
        if self.failure is None:  # once for each time it starts failing
            log.error(
                "the store %s cannot be written (%s): chats are not mirrored and their "
                "memory is not kept until it can be; chat requests still go upstream",
                self.path,
                exc,
            )
        self._failure = f"cannot write {self.path}: {exc}"
        self._failed_at = self.clock()

    @property
    def failure(self) -> str | None:
        """The store's file error, until a write goes in `FAILURE_HOLD_S` after it."""
        if self._failure is None:
            return None
        if self._wrote_at > self._failed_at and self.clock() - self._failed_at >= FAILURE_HOLD_S:
            return None
        return self._failure

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        """Finish what is queued, then close the connection and the thread."""
        if self._closed:
            return
        self._closed = True
        self.search.close()
        await asyncio.to_thread(self._shutdown)

    def _shutdown(self) -> None:
        self._thread.shutdown(wait=True)
        if self._db is not None:
            self._db.close()
            self._db = None

    # -- the reads and writes the edges use most -----------------------------------------

    async def chat(self, chat_id: str) -> ChatRecord | None:
        return await self.call(lambda db: db.chat(chat_id))

    async def chats(self) -> list[ChatRecord]:
        return await self.call(lambda db: db.chats())

    async def messages(self, chat_id: str) -> list[MessageRecord]:
        return await self.call(lambda db: db.messages(chat_id))


def unusable(path: Path) -> str | None:
    """Why the store file at `path` cannot be used: not a store, damaged where its first
    pages are, or written by a newer recap-proxy; None when it can (or is not made yet).
    Read only, before a server opens it (which would fail at once)."""
    if not path.is_file():
        return None
    if not os.access(path, os.W_OK):
        return "the file is read-only"
    if not os.access(path.parent, os.W_OK):  # SQLite writes its journal beside it
        return f"its folder {path.parent} cannot be written"
    try:
        _, (version,) = _peek(path, "SELECT count(*) FROM sqlite_master", "PRAGMA user_version")
    except sqlite3.Error as exc:
        if str(getattr(exc, "sqlite_errorname", "")).startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return None  # in use by another recap-proxy: its lock says so
        return str(exc)
    if version > len(MIGRATIONS):
        return (
            f"it has schema {version}, newer than this recap-proxy's ({len(MIGRATIONS)}): "
            "upgrade recap-proxy"
        )
    return None


def mirrored_folder_of(path: Path) -> str | None:
    """The data folder the store file at `path` mirrors (`Database.mirrored_folder`), read
    without opening the store (no migration, no thread): before a server or a check has
    chosen its folder. None when there is no such file or it names none."""
    if not path.is_file():
        return None
    try:
        (row,) = _peek(path, MIRRORED_FOLDER)
    except sqlite3.Error:  # unreadable, or made before the table was: the store says so
        return None
    return str(row[0]) if row else None


def _peek(path: Path, *queries: str) -> list[Any]:
    """The first row of each query (None where there is none), on a read-only connection
    of their own: no migration, no store thread."""
    db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2)
    try:
        return [db.execute(query).fetchone() for query in queries]
    finally:
        db.close()
