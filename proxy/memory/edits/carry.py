"""Memory leaving a chat and entering one: what an export holds, and a new chat that starts
from another chat's running recap (qvink's most asked-for feature). Store thread.
"""

from __future__ import annotations

from proxy.core.export import Exported, ExportedEntity, ExportedRunning, ExportedScene
from proxy.errors import Conflict, NotFound
from proxy.store import Database


def gather(db: Database, chat_id: str) -> Exported:
    """A chat's visible scenes with their current recaps, and its current running recap."""
    chat = db.chat(chat_id)
    if chat is None or chat.deleted:
        raise NotFound(f"no chat {chat_id!r}")
    memory = db.memory
    scenes = []
    first = 0
    for scene in memory.breaks(chat_id):
        if not scene.visible:
            continue
        recap = memory.current_scene_recap(scene)
        if recap is not None:
            name = scene.name or recap.scene_name or ""
            scenes.append(ExportedScene(first, scene.position, name, recap.recap,
                                        recap.version, recap.source))  # fmt: skip
        first = scene.position + 1
    current = memory.current_running(chat_id)
    running = None
    if current is not None:
        through = memory.position_of(current.new_scene_uid)
        running = ExportedRunning(current.version, current.content, current.scene_count,
                                  through, current.source)  # fmt: skip
    entities = [
        ExportedEntity(e.name, e.type, e.aliases, [f.text for f in e.facts])
        for e in db.entities.registry(chat_id)
        if not e.deleted and e.facts
    ]
    return Exported(chat_id, chat.display_name, scenes, running, entities)


def copy_running(db: Database, target: str, source: str, now: float) -> int:
    """Start `target` from `source`'s current running recap: a version of `target` with
    source `copied` that covers none of its own messages (nothing is left out of its
    requests for it), which its first scene is then folded onto. Returns its number."""
    if target == source:
        raise Conflict("a chat cannot copy its own memory")
    for chat_id in (target, source):
        chat = db.chat(chat_id)
        if chat is None or chat.deleted:
            raise NotFound(f"no chat {chat_id!r}")
    memory = db.memory
    taken = memory.current_running(source)
    if taken is None:
        raise Conflict(f"{source!r} has no running recap to copy")
    if any(v.new_scene_uid is not None for v in memory.running_recaps(target)):
        raise Conflict(f"{target!r} has a running recap of its own already; copy into a new chat")
    return memory.add_running(target, taken.content, now, scene_count=0, prev_scene_uid=None,
                              new_scene_uid=None, source="copied")  # fmt: skip
