"""Memory extensions' data mirrored from the chat files, waiting to be imported (store
thread). Indexing writes each message's `extension` column and flags the rows whose
data changed (`extension_new`); importing reads only the flagged rows, through a partial
index, so a save of a 10,000-message chat costs nothing here unless the extension wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from proxy.store.records import Table


class PendingExtension(NamedTuple):
    uid: int
    position: int
    swipe: int
    text_hash: str
    swipe_hashes: str  # JSON list, one text hash per swipe
    extension: str | None  # None: the data went (the user removed it in ST)


class ExtensionTable(Table):
    def pending(self, chat_id: str) -> list[PendingExtension]:
        """The messages whose extension data changed since the last import, in order."""
        # Without statistics SQLite would take (chat_id, position) for the ORDER BY and
        # read every message of the chat: 2 ms per planning of a 10,000-message chat.
        rows = self.db.execute(
            "SELECT uid, position, COALESCE(swipe_id, 0), text_hash, swipe_hashes, extension "
            "FROM messages INDEXED BY messages_extension_new "
            "WHERE chat_id=? AND extension_new=1 ORDER BY position",
            (chat_id,),
        ).fetchall()
        return [PendingExtension(*row) for row in rows]

    def imported(self, uids: Iterable[int]) -> None:
        self.db.executemany(
            "UPDATE messages SET extension_new=0 WHERE uid=?", [(uid,) for uid in uids]
        )

    def latest_summary(self, chat_id: str) -> tuple[int, int, str] | None:
        """(uid, position, text) of the newest message carrying a Summarize summary."""
        row = self.db.execute(
            "SELECT uid, position, json_extract(extension, '$.summary') FROM messages "
            "WHERE chat_id=? AND extension IS NOT NULL "
            "AND json_extract(extension, '$.summary') IS NOT NULL "
            "ORDER BY position DESC LIMIT 1",
            (chat_id,),
        ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]), str(row[2]))

    def running_mark(self, chat_id: str) -> str | None:
        """The hash of the running recap data last imported for a chat."""
        row = self.db.execute(
            "SELECT imported_running FROM memory_state WHERE chat_id=?", (chat_id,)
        ).fetchone()
        return None if row is None else row[0]

    def set_running_mark(self, chat_id: str, mark: str) -> None:
        self.db.execute(
            "UPDATE memory_state SET imported_running=? WHERE chat_id=?", (mark, chat_id)
        )
