"""The entities each scene recap version listed (store thread).

A scene recap's answer lists the scene's entities (`proxy.core.entities`); they are kept
with the version that listed them. A chat's registry is made of the mentions of its
visible scenes' current versions, so a scene recapped again (a new current version), a
recap edited by hand (a version with none) or a scene deleted (its break gone, and with
it its versions) takes its entities' facts along, and no row is ever rewritten. What
the user, condensing and imports changed of them is kept beside, in the order made
(`proxy.core.entity_changes`), and applied over the registry made anew (`registry`).
"""

from __future__ import annotations

import json

from proxy.core.entities import Entity, Mention
from proxy.core.entity_changes import Change, resolve
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

    def change(self, chat_id: str, change: Change, made: float) -> int:
        """Keep one change of an entity; its id."""
        body = {
            "name": change.name,
            "type": change.type,
            "aliases": list(change.aliases),
            "facts": list(change.facts),
            "covers": list(change.covers),
        }
        cursor = self.db.execute(
            "INSERT INTO entity_changes (chat_id, kind, key, body, made) VALUES (?,?,?,?,?)",
            (chat_id, change.kind, change.key, json.dumps(body), made),
        )
        return int(cursor.lastrowid or 0)

    def changes(self, chat_id: str) -> list[Change]:
        """The chat's entity changes, oldest first."""
        rows = self.db.execute(
            "SELECT id, kind, key, body, made FROM entity_changes WHERE chat_id=? ORDER BY id",
            (chat_id,),
        ).fetchall()
        out: list[Change] = []
        for change_id, kind, key, body, made in rows:
            data = json.loads(body)
            out.append(
                Change(
                    kind,
                    key,
                    name=data.get("name", ""),
                    type=data.get("type", ""),
                    aliases=tuple(data.get("aliases", ())),
                    facts=tuple(data.get("facts", ())),
                    covers=tuple(data.get("covers", ())),
                    id=change_id,
                    made=made,
                )
            )
        return out

    def copy_changes(self, source: str, chat_id: str) -> None:
        """A branch's entities as its parent's: the parent's changes, kept in their order
        (they name entities by name, and the branch's scenes are its parent's)."""
        self.db.execute(
            "INSERT INTO entity_changes (chat_id, kind, key, body, made) SELECT ?, kind, key,"
            " body, made FROM entity_changes WHERE chat_id=? ORDER BY id",
            (chat_id, source),
        )

    def registry(self, chat_id: str) -> list[Entity]:
        """The chat's entities: its scenes' with its changes applied (deleted ones marked)."""
        return resolve(self.current(chat_id), self.changes(chat_id))


def _mention(name: str, kind: str, aliases: str, facts: str) -> Mention:
    return Mention(name, kind, tuple(json.loads(aliases)), tuple(json.loads(facts)))
