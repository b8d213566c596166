"""Scene-break detection: where the open scene ends, read from a window of messages and
checked against the messages it names."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from proxy.core.jsontypes import as_int
from proxy.core.operations import Operation
from proxy.core.replies import ReplyError
from proxy.core.scenes import (
    Window,
    detection_messages,
    read_break,
)
from proxy.errors import JobFailure
from proxy.memory.calls.jobs import Apply
from proxy.memory.ops.handler import OperationHandler, digest, gone, uids
from proxy.sillytavern.chatfile import STMessage, text_hash
from proxy.store import Database
from proxy.store.jobs import Job, Payload

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Detection:
    window: Window
    uids: dict[int, int]  # position -> uid
    messages: dict[int, STMessage]


class DetectHandler(OperationHandler):
    operation = Operation.DETECT_SCENE_BREAK

    def _window(self, db: Database, payload: Payload) -> _Detection | None:
        shown_uids = uids(payload.get("shown"), "shown")
        choosable_uids = set(uids(payload.get("choosable"), "choosable"))
        found = db.memory.messages_by_uid(shown_uids)
        if len(found) != len(shown_uids):
            return None
        records = sorted(found.values(), key=lambda r: r.position)
        window = Window(
            shown=tuple(r.position for r in records),
            choosable=tuple(r.position for r in records if r.uid in choosable_uids),
            minimum=as_int(payload.get("minimum"), "minimum"),
        )
        return _Detection(
            window,
            {r.position: r.uid for r in records},
            {r.position: r.message for r in records},
        )

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        found = self._window(db, payload)
        if found is None or not found.window.choosable:
            return None
        texts = [text_hash(found.messages[p].mes) for p in found.window.shown]
        # Where the open scene starts: a break set or removed while the call runs (the
        # page, the API) makes the answer one about a scene that is no longer open.
        opened = max((b.position for b in db.memory.breaks(chat_id) if b.visible), default=-1)
        return digest(found.window.shown, found.window.choosable, texts, opened)

    async def run(self, job: Job) -> Apply:
        def read(db: Database) -> tuple[_Detection | None, dict[str, str], dict[int, STMessage]]:
            found, names = self._window(db, job.payload), self.names(db, job.chat_id)
            if found is None:
                return None, names, {}
            records = db.memory.messages_by_uid(found.uids.values()).values()
            return found, names, self.prompted(db, job.chat_id, records, names)

        got = await self.gather(job, read)
        if got is None:
            return gone
        found, names, seen = got
        if found is None:
            return gone
        window = found.window
        values = {
            "messages": detection_messages(window, seen),
            "earliest_allowed_break": str(window.first),
            "latest_allowed_break": str(window.last),
            "minimum_scene_length": str(window.minimum),
            **names,
        }
        conversation = self.context.prompts.messages(self.operation, values)
        position: int | None = None
        rationale = ""
        genuine = self.context.prompts.genuine[self.operation]
        tries = self.context.settings.scene_break_retries + 1
        for attempt in range(tries):
            answer = await self.complete(job, conversation)
            try:
                genuine.check_text(answer.text)
                position, rationale, _ = read_break(answer.text, window)
                break
            except ReplyError as exc:
                log.info("detection for %s, answer %d invalid: %s", job.chat_id, attempt + 1, exc)
                if attempt + 1 == tries:
                    # Bounded, and never read as "no break": the window is checked again
                    # when the job is, and nothing is marked checked meanwhile.
                    raise JobFailure(
                        f"{self.operation}: no usable answer in {tries} tries: {exc}"
                    ) from None
                conversation = [
                    *conversation,
                    {"role": "assistant", "content": answer.text},
                    {
                        "role": "user",
                        "content": f"That answer cannot be used: {exc}. Answer again with "
                        "the JSON only, choosing a number between "
                        f"{window.first} and {window.last}, or false.",
                    },
                ]
        chosen = None if position is None else found.uids[position]
        last = found.uids[window.last]

        def apply(db: Database) -> None:
            now = self.context.clock()
            memory = db.memory
            if chosen is not None:
                memory.set_break(job.chat_id, chosen, "auto", now, rationale)
                memory.set_state(job.chat_id, checked_uid=chosen)
                log.info("%s: a scene ends at message %d", job.chat_id, position)
                self.context.publish("scene", chat=job.chat_id, message=position)
            else:
                memory.set_state(job.chat_id, checked_uid=last)

        return apply
