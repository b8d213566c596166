"""What a chat needs besides its running recap, worked out from the store (store thread):
the next scene-break check of the open scene, and message recaps in full batches.

Both read only the stretch of the chat they need, so that planning a 10,000-message chat
after each job costs what planning a short one does.
"""

from __future__ import annotations

from dataclasses import replace

from proxy.core.jsontypes import JSONValue, as_int, as_list
from proxy.core.operations import Operation, job_key
from proxy.core.recaps import exclusion
from proxy.core.scenes import CONTEXT_BEFORE, detection_window, messages_until_window, shown
from proxy.core.tokens import TokenCounter
from proxy.core.trim import Cut
from proxy.memory.chatinfo import swipe_of
from proxy.memory.running import covered_through
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.store.jobs import Payload
from proxy.store.records import MemoryState, MessageRecord


class WorkPlanner:
    """Scene-break checks and message recap batches for one chat at a time."""

    def __init__(self, settings: MemorySettings, counter: TokenCounter) -> None:
        self.settings = settings
        self.counter = counter
        self.rules = settings.recap_rules()
        self.detect = settings.detection_rules()

    def detection(
        self, db: Database, chat_id: str, last_break: int, state: MemoryState, *, now: bool = False
    ) -> Payload | None:
        """The payload of the open scene's next scene-break check, or None when no check
        can succeed yet (or one is running: its answer decides where the next starts).
        `now`: asked for by the user, without waiting for `scene_break_every` more
        messages (the scene's minimum length and its newest context messages still count)."""
        if self._checking(db, chat_id):
            return None  # its answer decides where the next check starts
        records, checked = self._open_scene(db, chat_id, last_break, state)
        rules = replace(self.detect, every=1) if now else self.detect
        window = detection_window([r.position for r in records], checked=checked, rules=rules)
        if window is None:
            return None
        uid = {r.position: r.uid for r in records}
        shown_uids: list[JSONValue] = [uid[p] for p in window.shown]
        choosable: list[JSONValue] = [uid[p] for p in window.choosable]
        return {"shown": shown_uids, "choosable": choosable, "minimum": window.minimum}

    def messages_until_check(
        self, db: Database, chat_id: str, last_break: int, state: MemoryState
    ) -> int:
        """How many more messages (of those detection reads) the open scene needs before
        its next scene-break check; 0 when one is due, queued or running."""
        if self._checking(db, chat_id, ("queued", "running")):
            return 0
        records, checked = self._open_scene(db, chat_id, last_break, state)
        positions = [r.position for r in records]
        return messages_until_window(positions, checked=checked, rules=self.detect)

    @staticmethod
    def _checking(db: Database, chat_id: str, states: tuple[str, ...] = ("running",)) -> bool:
        jobs = db.jobs.list(chat_id, states)
        return any(j.operation == Operation.DETECT_SCENE_BREAK for j in jobs)

    def _open_scene(
        self, db: Database, chat_id: str, last_break: int, state: MemoryState
    ) -> tuple[list[MessageRecord], int | None]:
        """The open scene's messages detection reads, from as far back as its next check
        needs, and the newest position an earlier check of it found no break up to."""
        memory = db.memory
        s = self.settings
        checked = memory.position_of(state.checked_uid)
        start = last_break + 1
        # A long open scene is read from just before the last check, not from its start:
        # its length is settled, and the window needs only a little context before.
        reach = s.minimum_scene_length + CONTEXT_BEFORE
        if checked is not None and checked - reach > start:
            start = checked - reach
        # A window needs this many of the open scene's shown messages from `start` (the
        # earliest it may choose, its size, and the context after it); a long open scene
        # (a backfill) is read that far, in pages, not to the chat's end.
        needed = (
            reach
            + s.minimum_scene_length
            + s.scene_break_window
            + s.scene_break_offset
            + s.scene_break_every
        )
        records: list[MessageRecord] = []
        page = start
        while len(records) < needed:
            rows = memory.messages_from(chat_id, page, limit=2 * needed)
            records.extend(
                r
                for r in rows
                if shown(r.message, s.scene_break_check_which, hidden=s.include_hidden_messages)
            )
            if len(rows) < 2 * needed:
                break
            page = rows[-1].position + 1
        return records, checked if checked is not None and checked > last_break else None

    def recap_start(self, covered: int, last_break: int, total: int, backfill: bool) -> int:
        """The first position whose message may get a recap: past what the running recap
        covers, in the open scene (with a running recap), and (but in a backfill) within
        the newest `message_recap_lookback` messages."""
        start = covered + 1
        if self.settings.running_recap:
            # A finished scene is about to be folded into the running recap, which makes
            # its messages' recaps useless: only the open scene's messages get them, and
            # only once detection has settled where the open scene starts.
            start = max(start, last_break + 1)
        if not backfill:
            start = max(start, total - self.settings.message_recap_lookback)
        return start

    def lacking(
        self, db: Database, chat_id: str, start: int, until: int | None, in_flight: set[int]
    ) -> tuple[list[Pending], list[Pending]]:
        """The messages from `start` on that are to get a recap and lack a current one (none
        in flight): those before `until` (due), and past it as many as fill up a batch."""
        memory = db.memory
        recaps = memory.message_recaps(chat_id)
        excluded = memory.excluded(chat_id)
        size = self.settings.message_recap_batch_size
        pending: list[Pending] = []
        # Past `until`: only to fill up a batch that goes anyway. A call costs far more than
        # a message's few tokens, and the next one is then that much further off.
        extra: list[Pending] = []
        for record in memory.messages_from(chat_id, start):
            beyond = until is not None and record.position >= until
            if beyond and (not pending or len(extra) >= size):
                break
            if record.uid in in_flight:
                continue
            swipe = swipe_of(record)
            source = text_hash(record.message.mes)
            done = recaps.get((record.uid, swipe))
            if done is not None and (done.source_hash == source or done.edited):
                continue
            tokens = self.counter.count(record.message.mes)
            if exclusion(record.message, tokens, self.rules, user_excluded=record.uid in excluded):
                continue
            (extra if beyond else pending).append((record.uid, swipe, source, record.position))
        return pending, extra

    def message_batches(
        self,
        db: Database,
        chat_id: str,
        backfill: bool,
        last_break: int,
        detection_due: bool,
        cut: Cut | None = None,
    ) -> list[tuple[Operation, str, Payload]]:
        """Message recap jobs: the queued batches stamped again, and full batches of the
        open scene's messages that lack a current recap (a partial one too in a backfill).
        `detection_due`: planning is about to queue a scene-break check. `cut` (policy
        `needed`; None for `always`): where the chat's latest request began; only messages
        before where it aims to start, or within `message_recap_ahead` of it, are recapped
        (they are due), without waiting for a full batch."""
        jobs = db.jobs.list(chat_id, ("queued", "running"))
        chat = db.chat(chat_id)
        total = chat.messages if chat is not None else 0
        start = self.recap_start(covered_through(db, chat_id), last_break, total, backfill)
        live = [job for job in jobs if job.operation == Operation.MESSAGE_RECAP]
        in_flight = {
            as_int(as_list(item, "item")[0], "uid")
            for job in live
            for item in as_list(job.payload.get("items"), "items")
        }
        # Queued batches are stamped again: messages the running recap now covers leave
        # them (and an emptied batch is dropped without a call).
        specs = [
            (Operation.MESSAGE_RECAP, j.dedup_key, j.payload) for j in live if j.state == "queued"
        ]
        detecting = detection_due or any(j.operation == Operation.DETECT_SCENE_BREAK for j in jobs)
        if detecting and self.settings.running_recap:
            return specs
        until = None  # messages from here on are not due yet
        if cut is not None:
            until = cut.aim + self.settings.message_recap_ahead if cut.st else 0
        size = self.settings.message_recap_batch_size
        pending, extra = self.lacking(db, chat_id, start, until, in_flight)
        batches = batched(pending, extra, size, backfill=backfill, due=cut is not None)
        for batch in batches:
            items: list[JSONValue] = [[uid, swipe, source] for uid, swipe, source, _ in batch]
            key = job_key(Operation.MESSAGE_RECAP, chat_id, batch[0][0])
            specs.append((Operation.MESSAGE_RECAP, key, {"items": items}))
        return specs


# A message lacking its recap: uid, swipe, its text's hash, position.
Pending = tuple[int, int, str, int]


def batched(
    pending: list[Pending], extra: list[Pending], size: int, *, backfill: bool, due: bool
) -> list[list[Pending]]:
    """`pending` in batches of `size`. A partial last batch goes in a backfill; when it is
    `due` (policy `needed`) it is filled up with `extra`, the messages after it; else it
    waits for more messages."""
    batches = [pending[i : i + size] for i in range(0, len(pending), size)]
    if batches and len(batches[-1]) < size and not backfill:
        if due:
            # Due: left out within `message_recap_ahead` messages, and its recap is to
            # be there by then. Filled up with the next messages (`extra`).
            batches[-1].extend(extra[: size - len(batches[-1])])
        else:
            batches.pop()  # a partial batch waits for more messages
    return batches
