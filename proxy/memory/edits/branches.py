"""Branches and checkpoints: a chat whose `main_chat` names its parent starts from the
parent's memory up to the branch point. Store thread.

ST copies the parent's messages up to the branch point into the new file, so the two
chats share a prefix. Messages are paired by position while their texts agree; the
parent's scene breaks, current scene recaps, message recaps, exclusions and the running
recap versions that only cover paired scenes are copied onto the branch's own messages.
Nothing is shared afterwards: the two chats' memories never leak into each other.

What the user wrote stays theirs in the branch: a scene recap or running recap version
they wrote is copied as theirs (`edit`), never made again for them, as in the parent; the
LLM's work is copied as `inherited`. A scene recap the LLM made keeps saying what it was
made from, translated to the branch's messages, so that the branch makes it again once it
changes the scene (an edit, a break set inside it), as the parent would; one that was out
of date in the parent is made again at once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from proxy.memory.running import YOURS
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.store.records import ChatRecord

log = logging.getLogger(__name__)


class SceneInputs(Protocol):
    """What a scene recap is made from (`SceneRecapHandler`): the hash of the scene's
    messages, by the scene's last message; None when it has none."""

    def scene_input(self, db: Database, chat_id: str, uid: int) -> str | None:
        """The scene's, as it is now."""

    def carried_input(
        self, db: Database, chat_id: str, uid: int, paired: Mapping[int, int]
    ) -> str | None:
        """The scene's as it is now in `chat_id`, told in another chat's uids."""


# Stands for "made from what the parent's scene was once": never a scene's current hash.
OUT_OF_DATE = "out of date in the parent"
# Recap sources the LLM wrote, here or in a parent.
FROM_LLM = frozenset({"llm", "inherited"})


def parent_of(db: Database, chat: ChatRecord) -> ChatRecord | None:
    for other in db.chats(named=chat.main_chat):
        if (
            other.id != chat.id
            and other.user == chat.user
            and (other.character, other.group_id) == (chat.character, chat.group_id)
        ):
            return other
    return None


def made_from(db: Database, scene_uid: int, version: int, source: str) -> str | None:
    """What an LLM's recap version of a scene was made from; None for one the user wrote,
    or one whose making is not known (imported from an extension)."""
    return db.memory.scene_recap_input(scene_uid, version) if source in FROM_LLM else None


def _copied(source: str) -> str:
    """A recap's source in the branch: the user's own stays theirs."""
    return source if source in YOURS else "inherited"


def inherit(db: Database, chat: ChatRecord, now: float, scenes: SceneInputs) -> int:
    """Copy the parent's memory for the shared prefix; returns the messages paired. A
    break the branch has of its own already (set through the API before its first
    planning) stays as it is, with its recaps."""
    memory = db.memory
    parent = parent_of(db, chat)
    with db.transaction():
        memory.set_state(chat.id, inherited=1)
        if parent is None:
            return 0
        mine = memory.messages_from(chat.id)
        theirs = memory.messages_from(parent.id)
        paired: dict[int, int] = {}  # parent uid -> branch uid
        for a, b in zip(theirs, mine, strict=False):
            if a.position != b.position or text_hash(a.message.mes) != text_hash(b.message.mes):
                break
            paired[a.uid] = b.uid
        if not paired:
            return 0
        own = {b.uid for b in memory.breaks(chat.id)}
        for scene in memory.breaks(parent.id):
            if scene.uid not in paired or paired[scene.uid] in own:
                continue
            uid = paired[scene.uid]
            memory.set_break(chat.id, uid, "inherited", now, scene.rationale)
            memory.update_break(uid, visible=int(scene.visible), name=scene.name)
            recap = memory.current_scene_recap(scene)
            if recap is None:
                continue
            theirs_from = made_from(db, scene.uid, recap.version, recap.source)
            mine_from = None
            if theirs_from is not None:
                # Made from the parent's scene as it is now (else: made again at once), so
                # from those messages here: the branch's scene may differ (its own breaks).
                fresh = theirs_from == scenes.scene_input(db, parent.id, scene.uid)
                carried = scenes.carried_input(db, parent.id, scene.uid, paired)
                mine_from = carried if fresh and carried is not None else OUT_OF_DATE
            made = memory.add_scene_recap(
                chat.id, uid, recap.recap, now, scene_name=recap.scene_name,
                source=_copied(recap.source), input_hash=mine_from,
            )  # fmt: skip
            # The entities it listed come with it (`proxy.store.entities`).
            listed = db.entities.listed(scene.uid, recap.version)
            if listed:
                db.entities.add(chat.id, uid, made, listed)
        # What was done to the entities (edits, merges, condensing) comes along too: it
        # names them by name, so what the branch's scenes do not name applies to nothing.
        db.entities.copy_changes(parent.id, chat.id)
        for version in memory.running_recaps(parent.id):
            if version.new_scene_uid not in paired:
                continue
            memory.add_running(
                chat.id,
                version.content,
                now,
                scene_count=version.scene_count,
                prev_scene_uid=paired.get(version.prev_scene_uid or -1),
                new_scene_uid=paired[version.new_scene_uid],
                source=_copied(version.source),
            )
        for (uid, swipe), done in memory.message_recaps(parent.id).items():
            if uid in paired:
                memory.put_message_recap(
                    chat.id, paired[uid], swipe, done.source_hash, done.recap, now,
                    edited=done.edited, source="inherited",
                )  # fmt: skip
        for uid in memory.excluded(parent.id):
            if uid in paired:
                memory.set_excluded(chat.id, paired[uid], True)
    log.info(
        "%s starts from the memory of %s (%d messages shared)", chat.id, parent.id, len(paired)
    )
    return len(paired)
