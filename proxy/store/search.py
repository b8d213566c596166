"""Full-text search over the scene recaps, for the chat path.

The index (`scene_search`, FTS5, kept current by triggers: see `proxy.store.schema`) is
written by the store's thread like everything else. A request reads it through this
second, read-only connection, on the event loop itself: one bm25 query over a chat's
scenes takes well under a millisecond, while a hop to the store's thread would wait
behind whatever planning or job it is running (tens of milliseconds on a long chat).
SQLite's WAL lets this reader run beside the writer without either waiting. Any failure
answers "nothing found": recall is an extra, never a reason to fail a request.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

# bm25 weights of the columns (name, recap): a scene's name says what it is about.
_WEIGHTS = "2.0, 1.0"
# A read that would wait longer than this for a lock gives up (answers nothing).
_BUSY_MS = 20


class SceneSearch:
    """Ranks a chat's scenes by relevance to a query; owned by the `Store`."""

    def __init__(self, path: Path | str) -> None:
        self.path = path
        self._db: sqlite3.Connection | None = None
        self._failed = False

    def _connect(self) -> sqlite3.Connection | None:
        if self._db is not None or self._failed:
            return self._db
        if str(self.path) == ":memory:":
            self._failed = True  # a private in-memory database has no second reader
            return None
        try:
            uri = Path(self.path).resolve().as_uri() + "?mode=ro"
            db = sqlite3.connect(uri, uri=True, check_same_thread=False, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout={_BUSY_MS}")
            db.execute("PRAGMA query_only=1")
        except sqlite3.Error as exc:
            log.warning("scene search unavailable (%s): older scenes are not recalled", exc)
            self._failed = True
            return None
        self._db = db
        return db

    def ranked(self, chat_id: str, query: str, limit: int, min_score: float) -> list[int]:
        """The break uids of the chat's best-matching scenes, best first: those whose
        bm25 score (negated: higher is better) is at least `min_score`."""
        if not query:
            return []
        db = self._connect()
        if db is None:
            return []
        try:
            rows = db.execute(
                f"SELECT rowid, bm25(scene_search, {_WEIGHTS}) AS score FROM scene_search "
                "WHERE scene_search MATCH ? AND chat_id=? ORDER BY score LIMIT ?",
                (query, chat_id, limit),
            ).fetchall()
        except sqlite3.Error as exc:
            log.debug("scene search for %s failed: %s", chat_id, exc)
            return []
        return [int(uid) for uid, score in rows if -score >= min_score]

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None
