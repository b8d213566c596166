"""The message recap: one batch of messages, each recapped in a line or two, checked
against its own text before it is kept."""

from __future__ import annotations

import logging

from proxy.core.genuine import related
from proxy.core.jsontypes import as_int, as_list
from proxy.core.operations import Operation
from proxy.core.recaps import numbered, read_message_recaps
from proxy.core.replies import ReplyError
from proxy.errors import JobFailure
from proxy.memory.calls.jobs import Apply
from proxy.memory.chatinfo import swipe_of
from proxy.memory.ops.handler import OperationHandler, digest, gone, thinking
from proxy.memory.running import covered_through
from proxy.sillytavern.chatfile import STMessage, text_hash
from proxy.store import Database
from proxy.store.jobs import Job, Payload
from proxy.store.records import MessageRecord

log = logging.getLogger(__name__)


_Item = tuple[MessageRecord, int, str]  # a message, its swipe, its text's hash


class MessageRecapHandler(OperationHandler):
    operation = Operation.MESSAGE_RECAP

    def _items(
        self, db: Database, chat_id: str, payload: Payload
    ) -> list[tuple[MessageRecord, int, str]]:
        """The batch's messages that still need this recap: still there, unchanged, and
        not yet covered by the running recap (which makes their recaps useless)."""
        items = []
        for item in as_list(payload.get("items"), "items"):
            uid, swipe, source = as_list(item, "item")
            items.append((as_int(uid, "uid"), as_int(swipe, "swipe"), str(source)))
        found = db.memory.messages_by_uid(u for u, _, _ in items)
        covered = covered_through(db, chat_id)
        return [
            (found[u], s, h)
            for u, s, h in items
            if u in found
            and found[u].position > covered
            and swipe_of(found[u]) == s
            and text_hash(found[u].message.mes) == h
        ]

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        live = [(r.uid, s, h) for r, s, h in self._items(db, chat_id, payload)]
        return digest(live) if live else None

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> tuple[list[_Item], dict[str, str], dict[int, STMessage]]:
            items, names = self._items(db, job.chat_id, job.payload), self.names(db, job.chat_id)
            return items, names, self.prompted(db, job.chat_id, (r for r, _, _ in items), names)

        items, names, seen = await self.context.store.call(read)
        if not items:
            return gone
        by_position = {r.position: (r, s, h) for r, s, h in items}
        values = {"messages": numbered((p, seen[p]) for p in by_position), **names}
        answer = await self.ask(job, values)
        try:
            found, thought = read_message_recaps(answer.text, by_position.keys())
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(answer.text, found.values())
        reasoning = thinking(answer.reasoning, thought)
        # Each recap must be of its own message: one about something else is left out
        # (its message is recapped again later), not kept.
        found = {p: recap for p, recap in found.items() if related(recap, seen[p].mes)}
        if not found:
            raise JobFailure(f"{self.operation}: no recap shares a word with its message")

        def apply(db: Database) -> None:
            now = self.context.clock()
            for position, recap in found.items():
                record, swipe, source = by_position[position]
                db.memory.put_message_recap(
                    job.chat_id, record.uid, swipe, source, recap, now, reasoning=reasoning
                )

        return apply
