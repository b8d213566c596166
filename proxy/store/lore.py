"""Which lorebook entries each generated message's prompt carried (store thread).

The chat path records a snapshot per request it identified (`proxy.chat.lore`), for the
index of the reply it asks for. The reply is not saved yet then: the snapshot waits, and
is tied to the message when ST saves it (`bind_snapshots`, called by every save of the
chat). Scene recaps read the entries their messages carried (`active_lore`).
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.store.records import Table
from proxy.store.schema import PENDING_SNAPSHOT_TTL


class LoreTable(Table):
    def add_snapshot(
        self,
        chat_id: str,
        target: int,
        swipe: int,
        generation: str,
        snapshot: dict[str, list[dict[str, Any]]],
        now: float,
    ) -> None:
        """A request's snapshot (`{"active": [...], "inactive": [...]}`) for the reply at
        chat index `target`, swipe `swipe`; tied to it now if ST saved it already."""
        with self.transaction():
            self.db.execute(
                "INSERT INTO lore_snapshots (chat_id, target, swipe, generation, created, "
                "active, inactive) VALUES (?,?,?,?,?,?,?)",
                (
                    chat_id, target, swipe, generation, now,
                    orjson.dumps(snapshot["active"]).decode(),
                    orjson.dumps(snapshot["inactive"]).decode(),
                ),
            )  # fmt: skip
            self.bind_snapshots(chat_id, now)

    def bind_snapshots(self, chat_id: str, now: float) -> None:
        """Tie waiting snapshots to the reply saved at their target index.

        A snapshot waits until ST saves the reply it was made for; it binds only to a
        character's message (a reply never saved must not land on the user's next one),
        and one that waited over an hour is dropped.
        """
        self.db.execute(
            "DELETE FROM lore_snapshots WHERE chat_id=? AND message_uid IS NULL AND created<?",
            (chat_id, now - PENDING_SNAPSHOT_TTL),
        )
        self.db.execute(
            "UPDATE lore_snapshots SET message_uid = ("
            "  SELECT uid FROM messages m WHERE m.chat_id=lore_snapshots.chat_id"
            "  AND m.position=lore_snapshots.target AND m.is_user=0)"
            " WHERE chat_id=? AND message_uid IS NULL AND EXISTS ("
            "  SELECT 1 FROM messages m WHERE m.chat_id=lore_snapshots.chat_id"
            "  AND m.position=lore_snapshots.target AND m.is_user=0)",
            (chat_id,),
        )

    def snapshot_for(self, message_uid: int, swipe: int) -> dict[str, Any] | None:
        """The newest snapshot of a message's swipe."""
        row = self.db.execute(
            "SELECT active, inactive, generation, created FROM lore_snapshots "
            "WHERE message_uid=? AND swipe=? ORDER BY id DESC LIMIT 1",
            (message_uid, swipe),
        ).fetchone()
        if row is None:
            return None
        return {
            "active": orjson.loads(row[0]),
            "inactive": orjson.loads(row[1]),
            "generation": row[2],
            "created": row[3],
        }

    def active_lore(self, chat_id: str, first: int, last: int) -> list[dict[str, Any]]:
        """The entries active in the current swipes of messages `first`..`last`, once each."""
        rows = self.db.execute(
            "SELECT s.active FROM lore_snapshots s JOIN messages m ON m.uid = s.message_uid "
            "WHERE m.chat_id=? AND m.position BETWEEN ? AND ? "
            "AND s.swipe = COALESCE(m.swipe_id, 0) ORDER BY m.position, s.id",
            (chat_id, first, last),
        )
        seen: dict[tuple[str, object], dict[str, Any]] = {}
        for row in rows:
            for item in orjson.loads(row[0]):
                seen[(item["world"], item["uid"])] = item
        return list(seen.values())
