"""Condensing an entity whose facts have grown past `[memory] entity_max_tokens`.

Scene after scene adds facts to a recurring character; her card would grow with the
story and crowd the others out of `{{entities}}`. When it passes its budget, the model
rewrites the facts shorter, keeping what is current (exiled, then back: back). The answer
is a change of the entity (`proxy.core.entity_changes`), kept beside the scenes' facts:
it stands while the facts it rewrote stand, and the facts later scenes tell show after it
until it is condensed again. One the user wrote is never condensed.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from dataclasses import replace

from proxy.core.entities import Entity, Fact, card
from proxy.core.entity_changes import Change, CondensedFacts, find
from proxy.core.jsontypes import as_str
from proxy.core.operations import Operation, job_key
from proxy.core.replies import ReplyError, read_reply
from proxy.errors import JobFailure
from proxy.memory.calls.answers import Answer
from proxy.memory.calls.jobs import Apply
from proxy.memory.ops.handler import OperationHandler, digest, gone, thinking
from proxy.memory.ops.running_recap import words
from proxy.store import Database
from proxy.store.jobs import Job, Payload

log = logging.getLogger(__name__)

Wanted = tuple[Operation, str, Payload]


def entity_key(chat_id: str, entity: Entity) -> str:
    """Its job's key: one live condensing per entity (a job subject is a number)."""
    subject = zlib.crc32(entity.name.casefold().encode())
    return job_key(Operation.CONDENSE_ENTITY, chat_id, subject)


def to_condense(
    chat_id: str,
    entities: Sequence[Entity],
    budget: int,
    count: Callable[[str], int],
    refused: Callable[[str], bool],
) -> list[Wanted]:
    """The entities to condense: their card over `budget`, with a fact told since they
    were last condensed (else condensing again would only lose more), not written by the
    user, and not failed lately (`refused`)."""
    if not budget:
        return []
    wanted: list[Wanted] = []
    for entity in entities:
        if entity.edited or entity.deleted:
            continue
        if all(f.source == "condensed" for f in entity.facts):
            continue
        if count(card(entity)) <= budget:
            continue
        key = entity_key(chat_id, entity)
        if not refused(key):
            wanted.append((Operation.CONDENSE_ENTITY, key, {"entity": entity.name}))
    return wanted


class CondenseEntityHandler(OperationHandler):
    operation = Operation.CONDENSE_ENTITY

    def _input(self, db: Database, chat_id: str, payload: Payload) -> Entity | None:
        found = find(db.entities.registry(chat_id), as_str(payload.get("entity"), "entity"))
        if found is None or found.edited or found.deleted:
            return None
        return found

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        found = self._input(db, chat_id, payload)
        if found is None:
            return None
        return digest(found.name.casefold(), tuple(f.text for f in found.facts))

    async def run(self, job: Job) -> Apply:
        got = await self.gather(
            job, lambda db: (self._input(db, job.chat_id, job.payload), self.names(db, job.chat_id))
        )
        if got is None:
            return gone
        entity, names = got
        if entity is None:
            return gone
        budget = self.context.settings.entity_max_tokens
        told = "\n".join(f"- {fact.text}" for fact in entity.facts)
        aliases = f" (also {', '.join(entity.aliases)})" if entity.aliases else ""
        values = {
            "entity_name": entity.name,
            "entity_type": entity.type,
            "entity_aliases": aliases,
            "facts": told,
            "max_tokens": str(budget),
            "max_words": str(words(budget)),
            **names,
        }
        answer = await self.ask(job, values)
        facts, reasoning = self._read(answer, told)
        count = self.context.counter.count
        before = count(card(entity))
        shorter = tuple(Fact(text, 0, 0, "condensed") for text in facts)
        after = count(card(replace(entity, facts=shorter)))
        if after >= before:
            raise JobFailure(
                f"{self.operation}: the condensed facts of {entity.name} ({after} tokens) are "
                f"no shorter than before ({before} tokens)"
            )
        change = Change(
            "condense",
            entity.name,
            facts=tuple(facts),
            covers=tuple(f.text for f in entity.from_scenes),
        )

        def apply(db: Database) -> None:
            db.entities.change(job.chat_id, change, self.context.clock())
            log.info(
                "%s: %s condensed (%d -> %d tokens)%s",
                job.chat_id,
                entity.name,
                before,
                after,
                "" if after <= budget else f", still over its budget of {budget}",
            )
            self.context.publish(
                "memory", chat=job.chat_id, action=f"condense_entity {entity.name}", index=None
            )
            if reasoning:
                log.debug("%s: condensing %s thought: %s", job.chat_id, entity.name, reasoning)

        return apply

    def _read(self, reply: Answer, source: str) -> tuple[list[str], str]:
        try:
            answer, thought = read_reply(reply.text, CondensedFacts)
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(reply.text, answer.facts, source)
        return answer.facts, thinking(reply.reasoning, thought)
