"""The scene recap: a closed scene's messages recapped whole (with the lorebook entries
active in it), and the running recap versions built on an older recap of it dropped."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from proxy.core.entities import Mention, entities_of, named_in
from proxy.core.genuine import NotAnAnswer
from proxy.core.jsontypes import as_int
from proxy.core.operations import Operation
from proxy.core.replies import ReplyError, read_reply
from proxy.core.scenes import (
    SceneAnswer,
    scene_name,
    scene_text,
    shown,
)
from proxy.errors import JobFailure
from proxy.memory.calls.jobs import Apply
from proxy.memory.ops.handler import OperationHandler, digest, gone, thinking
from proxy.memory.running import drop_running_from, running_before
from proxy.sillytavern.chatfile import STMessage, text_hash
from proxy.store import Database
from proxy.store.jobs import Job, Payload
from proxy.store.records import MessageRecord, SceneBreak

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _SceneInput:
    scene: SceneBreak
    first: int  # the scene's first position, as the API numbers it
    running: str  # the running recap before it
    names: dict[str, str]
    shown: list[STMessage]  # the messages as the chat's model sees them in a prompt


def scene_start(db: Database, chat_id: str, scene: SceneBreak) -> int:
    """The first message of the scene that ends at `scene`: after the last visible break
    before it, else the chat's first."""
    earlier = [b for b in db.memory.breaks(chat_id) if b.visible and b.position < scene.position]
    return earlier[-1].position + 1 if earlier else 0


def _made_of(scene_uid: int, records: list[MessageRecord], uid: Callable[[int], int] = int) -> str:
    """A scene recap's input hash: the scene's break and its messages' texts, by `uid` of
    each message (the chat's own uids, or another chat's that holds the same messages)."""
    return digest(uid(scene_uid), [(uid(r.uid), text_hash(r.message.mes)) for r in records])


class SceneRecapHandler(OperationHandler):
    operation = Operation.SCENE_RECAP

    def genuine_entities(self, listed: list[Mention], scene: str) -> list[Mention]:
        """The entities of an answer that are real ones: named in the scene (by their name
        or an alias, any case), no placeholder of the prompt's in their name or facts.
        The rest are left out and the recap stands (a model may list what it made up, or
        copy the prompt's example)."""
        genuine = self.context.prompts.genuine[self.operation]
        kept: list[Mention] = []
        for mention in named_in(listed, scene):
            try:
                genuine.check_fields([mention.name, *mention.aliases, *mention.facts])
            except NotAnAnswer:
                continue
            kept.append(mention)
        if len(kept) < len(listed):
            log.debug("%d of %d listed entities left out", len(listed) - len(kept), len(listed))
        return kept

    def _scene(
        self, db: Database, chat_id: str, payload: Payload
    ) -> tuple[list[MessageRecord], SceneBreak | None]:
        """The scene's messages (as the recap reads them) and its break, or ([], None)."""
        memory = db.memory
        scene = memory.scene_break(as_int(payload.get("break"), "break"))
        if scene is None or not scene.visible:
            return [], None
        first = scene_start(db, chat_id, scene)
        which = self.context.settings.scene_recap_message_types
        hidden = self.context.settings.include_hidden_messages
        records = [
            r
            for r in memory.messages_from(chat_id, first, until=scene.position)
            if shown(r.message, which, hidden=hidden)
        ]
        return records, scene

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        records, scene = self._scene(db, chat_id, payload)
        if scene is None or not records:
            return None
        return _made_of(scene.uid, records)

    def scene_input(self, db: Database, chat_id: str, uid: int) -> str | None:
        """`input_hash` of the scene ending at message `uid`."""
        return self.input_hash(db, chat_id, {"break": uid})

    def carried_input(
        self, db: Database, chat_id: str, uid: int, paired: Mapping[int, int]
    ) -> str | None:
        """`input_hash` of the scene ending at message `uid` as it is in this chat, told in
        the uids of another chat that holds the same messages (a branch: `paired` maps
        this chat's uids to its); None when one of them is not there."""
        records, scene = self._scene(db, chat_id, {"break": uid})
        if scene is None or not records or scene.uid not in paired:
            return None
        if any(r.uid not in paired for r in records):
            return None
        return _made_of(scene.uid, records, paired.__getitem__)

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> _SceneInput | None:
            records, scene = self._scene(db, job.chat_id, job.payload)
            if scene is None or not records:
                return None
            base = running_before(db, job.chat_id, scene.position)
            names = self.names(db, job.chat_id)
            seen = self.prompted(db, job.chat_id, records, names)
            # The scene's range as the API and the page number it, from the message after
            # the last break (a group's hidden "chat created" notice too, which no recap
            # reads).
            first = scene_start(db, job.chat_id, scene)
            shown = [seen[r.position] for r in records]
            return _SceneInput(scene, first, base.content if base else "", names, shown)

        got = await self.gather(job, read)
        if got is None:
            return gone
        scene, names, shown = got.scene, got.names, got.shown
        running, first, last = got.running, got.first, scene.position
        lore = ""
        if self.context.lore is not None:
            lore = await self.context.lore.active_lore(job.chat_id, first, last)
        values = {
            "scene_messages": scene_text(shown),
            "running_recap": running,
            "active_lore": lore,
            **names,
        }
        reply = await self.ask(job, values)
        try:
            answer, thought = read_reply(reply.text, SceneAnswer)
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(reply.text, [answer.scene_name, answer.recap], values["scene_messages"])
        listed = self.genuine_entities(entities_of(answer.entities), values["scene_messages"])
        reasoning = thinking(reply.reasoning, thought)
        name = scene_name(
            answer.scene_name,
            first,
            last,
            append_range=self.context.settings.scene_name_append_range,
        )
        uid, position = scene.uid, scene.position

        def apply(db: Database) -> None:
            memory = db.memory
            version = memory.add_scene_recap(
                job.chat_id,
                uid,
                answer.recap,
                self.context.clock(),
                scene_name=name,
                source="llm",
                reasoning=reasoning or None,
                input_hash=job.input_hash,
            )
            if listed:
                db.entities.add(job.chat_id, uid, version, listed)
            log.info("%s: scene %d-%d recapped (version %d)", job.chat_id, first, last, version)
            self.context.publish("recap", chat=job.chat_id, scene=last, version=version)
            current = memory.scene_break(uid)
            if current is not None and not current.name_edited:
                memory.update_break(uid, name=name)
            # A new recap of a scene already folded in makes the running recap from it on
            # out of date: those versions go, and the scene is folded in again.
            drop_running_from(db, job.chat_id, position)

        return apply
