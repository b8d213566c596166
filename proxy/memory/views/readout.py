"""What the API and the page show of a chat's memory, read on the store's thread: the
overview, the scenes, the running recap's versions and the message recaps, as JSON.

`proxy.memory.edits.actions` checks that the chat (or scene) exists and calls these; the
corrections live there. Scenes are named by their last message's ST index, messages by
theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.entities import Fact
from proxy.core.entity_changes import Change
from proxy.core.jsontypes import JSONObject, JSONValue
from proxy.memory.chatinfo import swipe_of
from proxy.memory.running import covered_through
from proxy.memory.views.view import MemoryView
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.store.memory import MemoryTable
from proxy.store.records import ChatRecord, RunningRecap, SceneBreak


def overview(
    db: Database, chat: ChatRecord, view: MemoryView | None, on: bool, check_in: int | None
) -> JSONObject:
    """`on`: whether the chat's requests get memory (what its `enabled` comes to);
    `check_in`: messages until the open scene's next scene-break check (None: none will
    come)."""
    chat_id = chat.id
    state = db.memory.state(chat_id)
    current = db.memory.current_running(chat_id)
    jobs = db.jobs.list(chat_id, ("queued", "running", "failed"))
    breaks = [b for b in db.memory.breaks(chat_id) if b.visible]
    failures: list[JSONValue] = [
        {"job": j.id, "operation": j.operation, "error": j.error, "at": j.updated}
        for j in jobs
        if j.state == "failed"
    ]
    # Queued jobs that met an error: they wait for a model (the chat has had no request
    # yet) or for their retry at `not_before`.
    waiting: list[JSONValue] = [
        {
            "job": j.id,
            "operation": j.operation,
            "waiting_for": j.waiting_for,
            "held": j.held,
            "error": j.error,
            "not_before": j.not_before,
        }
        for j in jobs
        if j.waiting_for is not None
    ]
    return {
        "chat": chat_id,
        # What the page titles it by: the character's or the group's name (a group chat's
        # file is named by its date only).
        "name": chat.display_name,
        "kind": chat.kind,
        "enabled": chat.enabled,
        "on": on,
        "active": bool(state and state.active),
        "messages": chat.messages,
        "scenes": len(breaks),
        # How far the newest running recap covers the chat (`backfill`'s bar).
        "covered_through": covered_through(db, chat_id),
        "running_recap": running_json(db.memory, current, current) if current else None,
        "message_recaps": len(db.memory.message_recaps(chat_id)),
        "left_out_through": view.cutoff if view else None,
        # Why a short chat has no scenes yet.
        "scene_check_in": check_in,
        "queue": {
            state: sum(1 for j in jobs if j.state == state)
            for state in ("queued", "running", "failed")
        },
        "failures": failures[-5:],
        "waiting": waiting[:5],
    }


def scenes(db: Database, chat_id: str) -> list[JSONObject]:
    """Every scene break, hidden ones too, with the range of messages its scene spans."""
    out: list[JSONObject] = []
    first = 0
    for scene in db.memory.breaks(chat_id):
        current = db.memory.current_scene_recap(scene)
        out.append(
            {
                "index": scene.position,
                "first": first,
                "name": scene.name,
                "visible": scene.visible,
                "source": scene.source,
                "rationale": scene.rationale,
                "current_version": scene.current,
                "versions": len(db.memory.scene_recaps(scene.uid)),
                "recap": current.recap if current else None,
            }
        )
        if scene.visible:
            first = scene.position + 1
    return out


def entities(db: Database, chat_id: str) -> list[JSONObject]:
    """The chat's entities (`proxy.core.entity_changes.resolve`), in story order, each fact
    with where it comes from (the scene that established it: the index of its last
    message, and its name), and the changes made to it (`versions`), oldest first. One
    the user deleted is listed, marked, so that it can be released."""
    names = {b.uid: b.name for b in db.memory.breaks(chat_id)}
    found = db.entities.registry(chat_id)
    # Each change under the entity its name finds (one index: a chat may have thousands).
    named = {n.casefold(): e.name for e in found for n in (*e.names, *e.known_as)}
    versions: dict[str, list[JSONValue]] = {}
    for change in db.entities.changes(chat_id):
        owner = named.get(change.key.casefold())
        if owner is not None:
            versions.setdefault(owner, []).append(_change(change))

    def facts(told: Sequence[Fact]) -> list[JSONValue]:
        return [
            {
                "text": fact.text,
                "source": fact.source,
                "scene": fact.position if fact.position >= 0 else None,
                "scene_name": names.get(fact.scene),
            }
            for fact in told
        ]

    out: list[JSONObject] = []
    for entity in found:
        item: JSONObject = {
            "id": entity.name,
            "name": entity.name,
            "known_as": list(entity.known_as),
            "type": entity.type,
            "aliases": list(entity.aliases),
            "facts": facts(entity.facts),
            "edited": entity.edited,
            "deleted": entity.deleted,
            "condensed": entity.condensed,
            "versions": versions.get(entity.name, []),
        }
        if entity.edited or entity.condensed is not None:
            item["scene_facts"] = facts(entity.from_scenes)
        out.append(item)
    return out


def _change(change: Change) -> JSONObject:
    item: JSONObject = {"id": change.id, "kind": change.kind, "made": change.made}
    if change.kind in ("edit", "import", "merge"):
        item["name"] = change.name
    if change.kind in ("edit", "import", "condense"):
        item["facts"] = list(change.facts)
    return item


def scene(db: Database, end: SceneBreak) -> JSONObject:
    """One scene (the break that `end`s it) with every version of its recap."""
    versions = db.memory.scene_recaps(end.uid)
    return {
        "index": end.position,
        "name": end.name,
        "visible": end.visible,
        "source": end.source,
        "rationale": end.rationale,
        "current_version": end.current,
        "versions": [v.public(end.current) for v in versions],
    }


def running_versions(memory: MemoryTable, chat_id: str) -> list[JSONObject]:
    current = memory.current_running(chat_id)
    return [running_json(memory, v, current) for v in memory.running_recaps(chat_id)]


def running_json(
    memory: MemoryTable, version: RunningRecap, current: RunningRecap | None
) -> JSONObject:
    return {
        "version": version.version,
        "created": version.created,
        "content": version.content,
        "scene_count": version.scene_count,
        "prev_scene_index": memory.position_of(version.prev_scene_uid),
        "new_scene_index": memory.position_of(version.new_scene_uid),
        "source": version.source,
        "current": current is not None and version.version == current.version,
    }


def message_recaps(db: Database, chat_id: str, view: MemoryView | None) -> list[JSONObject]:
    """The messages that have a recap or are excluded from recaps, in story order; whether
    each recap is stale (its message changed) and could go into a request."""
    recaps = db.memory.message_recaps(chat_id)
    excluded = db.memory.excluded(chat_id)
    injected = set(view.shelf.positions) if view else set()
    out: list[JSONObject] = []
    for record in db.memory.messages_from(chat_id):
        done = recaps.get((record.uid, swipe_of(record)))
        if done is None and record.uid not in excluded:
            continue
        fresh = done is not None and done.source_hash == text_hash(record.message.mes)
        out.append(
            {
                "index": record.position,
                "swipe": swipe_of(record),
                "recap": done.recap if done else None,
                "reasoning": done.reasoning if done else None,
                "edited": bool(done and done.edited),
                "source": done.source if done else None,
                "stale": bool(done and not fresh),
                "excluded": record.uid in excluded,
                "can_be_injected": record.position in injected,
            }
        )
    return out
