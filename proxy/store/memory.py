"""The memory tables: message recaps, scene breaks and their recap versions, the running
recap versions, and each chat's memory state. Every method runs on the store's thread.

Everything is keyed by message uid, never by position, so that it survives the deletion
of earlier messages; positions are joined in when read. A message that goes takes its
recaps, its exclusion and its scene break (with the break's recaps) with it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from typing import Any

from proxy.store.records import (
    MESSAGE_COLUMNS,
    MemoryState,
    MessageRecap,
    MessageRecord,
    RunningRecap,
    SceneBreak,
    SceneRecap,
    Table,
    message_from_row,
)

_END = 2**62  # a position past any chat's end

_BREAK_SELECT = (
    "SELECT b.message_uid, m.position, b.source, b.visible, b.name, b.name_edited, "
    "b.rationale, b.current FROM scene_breaks b JOIN messages m ON m.uid = b.message_uid "
)


def _break(row: sqlite3.Row | tuple[Any, ...]) -> SceneBreak:
    uid, position, source, visible, name, edited, rationale, current = row
    return SceneBreak(uid, position, source, bool(visible), name, bool(edited), rationale, current)


class MemoryTable(Table):
    # -- state -----------------------------------------------------------------------------

    def state(self, chat_id: str) -> MemoryState | None:
        row = self.db.execute(
            "SELECT active, current_recap, checked_uid, inherited, condense_version "
            "FROM memory_state WHERE chat_id=?",
            (chat_id,),
        ).fetchone()
        if row is None:
            return None
        return MemoryState(bool(row[0]), row[1], row[2], bool(row[3]), row[4])

    def activate(self, chat_id: str) -> bool:
        """Start upkeep for a chat; True when it was not active before."""
        with self.transaction():
            before = self.state(chat_id)
            self.db.execute(
                "INSERT INTO memory_state (chat_id, active) VALUES (?, 1) "
                "ON CONFLICT(chat_id) DO UPDATE SET active=1",
                (chat_id,),
            )
        return before is None or not before.active

    def active_chats(self) -> list[str]:
        rows = self.db.execute(
            "SELECT s.chat_id FROM memory_state s JOIN chats c ON c.id = s.chat_id "
            "WHERE s.active=1 AND c.deleted=0"
        ).fetchall()
        return [row[0] for row in rows]

    def set_state(self, chat_id: str, **fields: Any) -> None:
        with self.transaction():
            self.db.execute(
                "INSERT INTO memory_state (chat_id, active) VALUES (?, 1) "
                "ON CONFLICT(chat_id) DO NOTHING",
                (chat_id,),
            )
            sets = ", ".join(f"{name}=?" for name in fields)
            self.db.execute(
                f"UPDATE memory_state SET {sets} WHERE chat_id=?", (*fields.values(), chat_id)
            )

    # -- messages ----------------------------------------------------------------------------

    def messages_from(
        self,
        chat_id: str,
        position: int = 0,
        until: int | None = None,
        limit: int | None = None,
    ) -> list[MessageRecord]:
        """Messages from `position` on (through `until`; at most `limit`): a long chat's
        readers take the stretch they need, never the rest of a 10,000-message chat."""
        rows = self.db.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE chat_id=? AND position>=? "
            "AND position<=? ORDER BY position LIMIT ?",
            (chat_id, position, _END if until is None else until, -1 if limit is None else limit),
        ).fetchall()
        return [message_from_row(row) for row in rows]

    def messages_by_uid(self, uids: Iterable[int]) -> dict[int, MessageRecord]:
        wanted = list(uids)
        found: dict[int, MessageRecord] = {}
        for start in range(0, len(wanted), 500):
            chunk = wanted[start : start + 500]
            rows = self.db.execute(
                f"SELECT {MESSAGE_COLUMNS} FROM messages WHERE uid IN "
                f"({','.join('?' * len(chunk))})",
                chunk,
            ).fetchall()
            found.update((row["uid"], message_from_row(row)) for row in rows)
        return found

    def visible_through(
        self, chat_id: str, last: int, first: int = 0
    ) -> list[tuple[int, bool, str, str]]:
        """(position, is_user, name, text) of the visible messages from `first` up to
        `last`: only the columns trimming's fingerprints need, for chats of many thousand
        messages."""
        rows = self.db.execute(
            "SELECT position, is_user, name, text FROM messages WHERE chat_id=? AND "
            "position>=? AND position<=? AND is_system=0 ORDER BY position",
            (chat_id, first, last),
        ).fetchall()
        return [(row[0], bool(row[1]), row[2], row[3]) for row in rows]

    def uid_at(self, chat_id: str, position: int) -> int | None:
        row = self.db.execute(
            "SELECT uid FROM messages WHERE chat_id=? AND position=?", (chat_id, position)
        ).fetchone()
        return None if row is None else int(row[0])

    def position_of(self, uid: int | None) -> int | None:
        if uid is None:
            return None
        row = self.db.execute("SELECT position FROM messages WHERE uid=?", (uid,)).fetchone()
        return None if row is None else int(row[0])

    # -- message recaps ------------------------------------------------------------------------

    def message_recaps(self, chat_id: str) -> dict[tuple[int, int], MessageRecap]:
        rows = self.db.execute(
            "SELECT message_uid, swipe, source_hash, recap, reasoning, edited, created, "
            "source FROM message_recaps WHERE chat_id=?",
            (chat_id,),
        ).fetchall()
        return {
            (row[0], row[1]): MessageRecap(
                row[0], row[1], row[2], row[3], row[4], bool(row[5]), row[6], row[7]
            )
            for row in rows
        }

    def delete_message_recap(self, uid: int, swipe: int) -> bool:
        """Clear one message's recap (of one swipe); whether there was one."""
        cursor = self.db.execute(
            "DELETE FROM message_recaps WHERE message_uid=? AND swipe=?", (uid, swipe)
        )
        return cursor.rowcount > 0

    def put_message_recap(
        self,
        chat_id: str,
        uid: int,
        swipe: int,
        source_hash: str,
        recap: str,
        now: float,
        *,
        reasoning: str | None = None,
        edited: bool = False,
        source: str | None = None,
    ) -> None:
        """`source`: llm, edit, inherited or imported (default: edit when `edited`)."""
        source = source or ("edit" if edited else "llm")
        self.db.execute(
            "INSERT INTO message_recaps (message_uid, swipe, chat_id, source_hash, recap, "
            "reasoning, edited, created, source) VALUES (?,?,?,?,?,?,?,?,?) "
            "ON CONFLICT(message_uid, swipe) DO UPDATE SET source_hash=excluded.source_hash, "
            "recap=excluded.recap, reasoning=excluded.reasoning, edited=excluded.edited, "
            "created=excluded.created, source=excluded.source",
            (uid, swipe, chat_id, source_hash, recap, reasoning, int(edited), now, source),
        )

    def drop_message_recap(self, uid: int, swipe: int) -> None:
        self.db.execute("DELETE FROM message_recaps WHERE message_uid=? AND swipe=?", (uid, swipe))

    def excluded(self, chat_id: str) -> set[int]:
        rows = self.db.execute(
            "SELECT message_uid FROM message_exclusions WHERE chat_id=?", (chat_id,)
        ).fetchall()
        return {row[0] for row in rows}

    def set_excluded(self, chat_id: str, uid: int, excluded: bool) -> None:
        if excluded:
            self.db.execute(
                "INSERT OR IGNORE INTO message_exclusions (message_uid, chat_id) VALUES (?, ?)",
                (uid, chat_id),
            )
        else:
            self.db.execute("DELETE FROM message_exclusions WHERE message_uid=?", (uid,))

    # -- scene breaks and scene recaps -----------------------------------------------------------

    def breaks(self, chat_id: str) -> list[SceneBreak]:
        rows = self.db.execute(
            _BREAK_SELECT + "WHERE b.chat_id=? ORDER BY m.position", (chat_id,)
        ).fetchall()
        return [_break(row) for row in rows]

    def scene_break(self, uid: int) -> SceneBreak | None:
        row = self.db.execute(_BREAK_SELECT + "WHERE b.message_uid=?", (uid,)).fetchone()
        return None if row is None else _break(row)

    def set_break(
        self, chat_id: str, uid: int, source: str, now: float, rationale: str | None = None
    ) -> None:
        """Place a break on a message, or make its hidden break visible again."""
        self.db.execute(
            "INSERT INTO scene_breaks (message_uid, chat_id, source, visible, rationale, "
            "created) VALUES (?,?,?,1,?,?) ON CONFLICT(message_uid) DO UPDATE SET visible=1",
            (uid, chat_id, source, rationale, now),
        )

    def update_break(self, uid: int, **fields: Any) -> None:
        sets = ", ".join(f"{name}=?" for name in fields)
        self.db.execute(
            f"UPDATE scene_breaks SET {sets} WHERE message_uid=?", (*fields.values(), uid)
        )

    def remove_break(self, uid: int) -> None:
        self.db.execute("DELETE FROM scene_breaks WHERE message_uid=?", (uid,))

    def scene_recaps(self, break_uid: int) -> list[SceneRecap]:
        rows = self.db.execute(
            "SELECT break_uid, version, scene_name, recap, reasoning, source, created "
            "FROM scene_recaps WHERE break_uid=? ORDER BY version",
            (break_uid,),
        ).fetchall()
        return [SceneRecap(*row) for row in rows]

    def scene_recap_input(self, break_uid: int, version: int) -> str | None:
        """The hash of the scene's messages a recap version was made from."""
        row = self.db.execute(
            "SELECT input_hash FROM scene_recaps WHERE break_uid=? AND version=?",
            (break_uid, version),
        ).fetchone()
        return None if row is None else row[0]

    def current_scene_recap(self, scene: SceneBreak) -> SceneRecap | None:
        if scene.current is None:
            return None
        row = self.db.execute(
            "SELECT break_uid, version, scene_name, recap, reasoning, source, created "
            "FROM scene_recaps WHERE break_uid=? AND version=?",
            (scene.uid, scene.current),
        ).fetchone()
        return None if row is None else SceneRecap(*row)

    def scene_cards(self, chat_id: str) -> list[tuple[SceneBreak, SceneRecap]]:
        """Every visible scene with its current recap, in story order, in one query."""
        rows = self.db.execute(
            "SELECT b.message_uid, m.position, b.source, b.visible, b.name, b.name_edited, "
            "b.rationale, b.current, r.break_uid, r.version, r.scene_name, r.recap, "
            "r.reasoning, r.source, r.created FROM scene_breaks b "
            "JOIN messages m ON m.uid = b.message_uid "
            "JOIN scene_recaps r ON r.break_uid = b.message_uid AND r.version = b.current "
            "WHERE b.chat_id=? AND b.visible=1 ORDER BY m.position",
            (chat_id,),
        ).fetchall()
        return [(_break(tuple(row)[:8]), SceneRecap(*tuple(row)[8:])) for row in rows]

    def optimize_search(self) -> None:
        """Merge the scene index into one segment. Each write adds a segment, and a query
        reads them all: after a few hundred scenes that triples a query's time (a few ms
        for 500 scenes, once per change to a chat's scenes)."""
        self.db.execute("INSERT INTO scene_search(scene_search) VALUES('optimize')")

    def add_scene_recap(
        self,
        chat_id: str,
        break_uid: int,
        recap: str,
        now: float,
        *,
        scene_name: str | None,
        source: str,
        reasoning: str | None = None,
        input_hash: str | None = None,
    ) -> int:
        """Store a new version and select it; returns its number."""
        with self.transaction():
            version = self._next_version("scene_recaps", "break_uid", break_uid)
            self.db.execute(
                "INSERT INTO scene_recaps (break_uid, version, chat_id, scene_name, recap, "
                "reasoning, source, input_hash, created) VALUES (?,?,?,?,?,?,?,?,?)",
                (break_uid, version, chat_id, scene_name, recap, reasoning, source,
                 input_hash, now),
            )  # fmt: skip
            self.update_break(break_uid, current=version)
        return version

    # -- running recap ---------------------------------------------------------------------------

    def running_recaps(self, chat_id: str) -> list[RunningRecap]:
        rows = self.db.execute(
            "SELECT version, content, scene_count, prev_scene_uid, new_scene_uid, source, "
            "created FROM running_recaps WHERE chat_id=? ORDER BY version",
            (chat_id,),
        ).fetchall()
        return [RunningRecap(*row) for row in rows]

    def running_at(self, chat_id: str) -> list[tuple[int, int | None, int | None]]:
        """(version, uid and position of the scene it folded in last) for every version
        (position -1: none; None: that message is gone), in one query without the texts:
        long stories have hundreds of versions."""
        rows = self.db.execute(
            "SELECT r.version, r.new_scene_uid, "
            "CASE WHEN r.new_scene_uid IS NULL THEN -1 ELSE m.position END "
            "FROM running_recaps r LEFT JOIN messages m ON m.uid = r.new_scene_uid "
            "WHERE r.chat_id=? ORDER BY r.version",
            (chat_id,),
        ).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]

    def running_version(self, chat_id: str, version: int) -> RunningRecap | None:
        row = self.db.execute(
            "SELECT version, content, scene_count, prev_scene_uid, new_scene_uid, source, "
            "created FROM running_recaps WHERE chat_id=? AND version=?",
            (chat_id, version),
        ).fetchone()
        return None if row is None else RunningRecap(*row)

    def current_running(self, chat_id: str) -> RunningRecap | None:
        """The selected version, else the newest one."""
        state = self.state(chat_id)
        if state is not None and state.current_recap is not None:
            chosen = self.running_version(chat_id, state.current_recap)
            if chosen is not None:
                return chosen
        row = self.db.execute(
            "SELECT MAX(version) FROM running_recaps WHERE chat_id=?", (chat_id,)
        ).fetchone()
        return None if row[0] is None else self.running_version(chat_id, row[0])

    def add_running(
        self,
        chat_id: str,
        content: str,
        now: float,
        *,
        scene_count: int,
        prev_scene_uid: int | None,
        new_scene_uid: int | None,
        source: str,
        reasoning: str | None = None,
    ) -> int:
        """Store a new running recap version and select it; returns its number."""
        with self.transaction():
            version = self._next_version("running_recaps", "chat_id", chat_id)
            self.db.execute(
                "INSERT INTO running_recaps (chat_id, version, content, scene_count, "
                "prev_scene_uid, new_scene_uid, source, reasoning, created) "
                "VALUES (?,?,?,?,?,?,?,?,?)",
                (chat_id, version, content, scene_count, prev_scene_uid, new_scene_uid,
                 source, reasoning, now),
            )  # fmt: skip
            self.set_state(chat_id, current_recap=version)
        return version

    def _next_version(self, table: str, owner: str, key: object) -> int:
        row = self.db.execute(
            f"SELECT COALESCE(MAX(version), 0) FROM {table} WHERE {owner}=?", (key,)
        ).fetchone()
        return int(row[0]) + 1

    def running_sources(self, chat_id: str) -> dict[int, str]:
        """version -> where it came from (`llm`, `condensed`, `edit`, ...), without texts."""
        rows = self.db.execute(
            "SELECT version, source FROM running_recaps WHERE chat_id=?", (chat_id,)
        )
        return {int(version): str(source) for version, source in rows}

    def drop_running(self, chat_id: str, versions: Iterable[int]) -> int:
        dropped = list(versions)
        with self.transaction():
            self.db.executemany(
                "DELETE FROM running_recaps WHERE chat_id=? AND version=?",
                [(chat_id, v) for v in dropped],
            )
            state = self.state(chat_id)
            if state is not None and state.current_recap in dropped:
                self.set_state(chat_id, current_recap=None)
            if state is not None and state.condense_version in dropped:
                self.set_state(chat_id, condense_version=None)
        return len(dropped)
