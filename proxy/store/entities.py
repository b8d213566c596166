"""The entities each scene recap version listed (store thread).

A scene recap's answer lists the scene's entities (`proxy.core.entities`); they are kept
with the version that listed them. A chat's registry is made of the mentions of its
visible scenes' current versions, so a scene recapped again (a new current version), a
recap edited by hand (a version with none) or a scene deleted (its break gone, and with
it its versions) takes its entities' facts along, and no row is ever rewritten.
"""

from __future__ import annotations

import json

from proxy.core.entities import Mention
from proxy.store.records import Table


class EntityTable(Table):
    def add(self, chat_id: str, break_uid: int, version: int, mentions: list[Mention]) -> None:
        """The entities scene recap `version` of the scene ending at `break_uid` listed."""
        with self.transaction():
            self.db.executemany(
                "INSERT INTO entity_mentions (break_uid, version, chat_id, ordinal, name, type,"
                " aliases, facts) VALUES (?,?,?,?,?,?,?,?)",
                [
                    (break_uid, version, chat_id, i, m.name, m.type,
                     json.dumps(list(m.aliases)), json.dumps(list(m.facts)))
                    for i, m in enumerate(mentions)
                ],
            )  # fmt: skip

    def listed(self, break_uid: int, version: int) -> list[Mention]:
        """What one scene recap version listed, in its order."""
        rows = self.db.execute(
            "SELECT name, type, aliases, facts FROM entity_mentions WHERE break_uid=? AND "
            "version=? ORDER BY ordinal",
            (break_uid, version),
        ).fetchall()
        return [_mention(*row) for row in rows]

    def current(self, chat_id: str) -> list[tuple[int, int, Mention]]:
        """`(break uid, its position, mention)` of every entity the chat's visible scenes'
        current recaps list, in story order (`proxy.core.entities.registry` merges them)."""
        rows = self.db.execute(
            "SELECT e.break_uid, m.position, e.name, e.type, e.aliases, e.facts "
            "FROM entity_mentions e JOIN scene_breaks b ON b.message_uid = e.break_uid "
            "JOIN messages m ON m.uid = b.message_uid "
            "WHERE e.chat_id=? AND b.visible=1 AND b.current=e.version "
            "ORDER BY m.position, e.ordinal",
            (chat_id,),
        ).fetchall()
        return [(uid, position, _mention(*rest)) for uid, position, *rest in rows]


def _mention(name: str, kind: str, aliases: str, facts: str) -> Mention:
    return Mention(name, kind, tuple(json.loads(aliases)), tuple(json.loads(facts)))
