"""The running recap: folding each finished scene into it, and keeping it within its budget.

A long story's running recap grows with every scene. The fold prompt is told the budget
(`[memory] running_recap_max_tokens`); a version that comes out over it is condensed into
a new version of the same coverage (source `condensed`) before the next scene is folded
onto it. A fold whose answer is cut off at its length limit is not retried larger: the
version it was folded onto is condensed first, then the fold runs again on that. Older
versions stay, and stay selectable; the detail condensing drops is what recalling older
scene recaps (`proxy.memory.views.recall`) brings back when it matters.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from proxy.core.jsontypes import as_int
from proxy.core.operations import Operation, job_key
from proxy.core.replies import ReplyError, read_reply
from proxy.core.scenes import RunningAnswer
from proxy.errors import JobFailure
from proxy.memory.calls.answers import Answer
from proxy.memory.calls.jobs import Apply
from proxy.memory.ops.handler import CutOff, OperationHandler, digest, gone, thinking
from proxy.memory.running import newest_at, running_before
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import text_hash
from proxy.store import Database
from proxy.store.jobs import Job, Payload
from proxy.store.records import MemoryState, RunningRecap, SceneBreak, SceneRecap

log = logging.getLogger(__name__)

CountTokens = Callable[[str], int]
FailedLately = Callable[[str], bool]  # whether the job with this key failed lately

# Sources whose versions are not condensed for being long: the user's own text, and what
# condensing already made (condensing it again would only lose more).
KEEP_AS_WRITTEN = frozenset({"edit", "condensed"})


def words(tokens: int) -> int:
    """About how many English words fit in `tokens` (what a prompt can tell a model)."""
    return tokens * 3 // 4


class _BudgetedHandler(OperationHandler):
    """A running recap operation: its answer must have room for a whole recap."""

    def first_limit(self) -> int:
        # Room for a recap at its budget and what a fold adds, in JSON; a configured
        # limit below that would cut every long story's fold off.
        budget = self.context.settings.running_recap_max_tokens
        room = min(self.context.llm.limit_cap, budget * 3 // 2 + 64)
        return max(super().first_limit(), room)

    def budget_values(self) -> dict[str, str]:
        budget = self.context.settings.running_recap_max_tokens
        return {"max_tokens": str(budget), "max_words": str(words(budget))}

    def read(self, reply: Answer, source: str) -> tuple[str, str]:
        """The recap in the answer, checked to be a real one of `source`, and what the
        model thought first."""
        try:
            answer, thought = read_reply(reply.text, RunningAnswer)
        except ReplyError as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None
        self.check(reply.text, [answer.recap], source)
        return answer.recap, thinking(reply.reasoning, thought)


_FoldInput = tuple[SceneBreak | None, SceneRecap | None, RunningRecap | None]


class RunningRecapHandler(_BudgetedHandler):
    operation = Operation.RUNNING_RECAP

    def _input(self, db: Database, chat_id: str, payload: Payload) -> _FoldInput:
        memory = db.memory
        scene = memory.scene_break(as_int(payload.get("scene"), "scene"))
        if scene is None or not scene.visible:
            return None, None, None
        recap = memory.current_scene_recap(scene)
        base = running_before(db, chat_id, scene.position)
        return scene, recap, base

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        scene, recap, base = self._input(db, chat_id, payload)
        if scene is None or recap is None:
            return None
        return digest(scene.uid, recap.version, base.version if base else None)

    async def run(self, job: Job) -> Apply:
        got = await self.gather(
            job, lambda db: (self._input(db, job.chat_id, job.payload), self.names(db, job.chat_id))
        )
        if got is None:
            return gone
        (scene, recap, base), names = got
        if scene is None or recap is None:
            return gone
        values = {
            "running_recap": base.content if base else "",
            "scene_recap": recap.recap,
            "scene_name": scene.name or recap.scene_name or "",
            **self.budget_values(),
            **names,
        }
        messages = self.context.prompts.messages(self.operation, values)
        # Folding onto a shorter base is what helps a cut-off fold, not a larger limit,
        # when the base is long and condensing it has not just failed (`grow`).
        budget = self.context.settings.running_recap_max_tokens
        condensable = (
            base is not None
            and base.source not in KEEP_AS_WRITTEN
            and not job.payload.get("grow")
            and self.context.counter.count(base.content) > budget // 2
        )
        try:
            answer = await self.complete(job, messages, grow=not condensable)
        except CutOff as exc:
            if base is None or not condensable:
                raise
            return self._condense_first(job, base, exc.limit)
        source = "\n".join((values["running_recap"], values["scene_name"], recap.recap))
        text, reasoning = self.read(answer, source)
        uid = scene.uid

        def apply(db: Database) -> None:
            memory = db.memory
            folded = any(new == uid for _, new, _ in memory.running_at(job.chat_id))
            if folded and not job.payload.get("again"):
                return  # already folded in (a retry after a crash): never twice
            count = (base.scene_count if base else 0) + 1
            version = memory.add_running(
                job.chat_id,
                text,
                self.context.clock(),
                scene_count=count,
                prev_scene_uid=base.new_scene_uid if base else None,
                new_scene_uid=uid,
                source="llm",
                reasoning=reasoning or None,
            )
            log.info("%s: running recap version %d (%d scenes)", job.chat_id, version, count)
            self.context.publish("running", chat=job.chat_id, version=version, source="llm")

        return apply

    def _condense_first(self, job: Job, base: RunningRecap, limit: int) -> Apply:
        log.info(
            "%s: folding onto running recap version %d was cut off at %d tokens; it is "
            "condensed first",
            job.chat_id,
            base.version,
            limit,
        )

        def apply(db: Database) -> None:
            db.memory.set_state(job.chat_id, condense_version=base.version)

        return apply


class CondenseHandler(_BudgetedHandler):
    operation = Operation.CONDENSE_RUNNING_RECAP

    def _input(self, db: Database, chat_id: str, payload: Payload) -> RunningRecap | None:
        """The version to condense, while it is still the one the next fold builds on."""
        version = as_int(payload.get("version"), "version")
        newest = newest_at(db, chat_id, None)
        if newest is None or newest[0] != version:
            return None
        return db.memory.running_version(chat_id, version)

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        found = self._input(db, chat_id, payload)
        return None if found is None else digest(found.version, text_hash(found.content))

    async def run(self, job: Job) -> Apply:
        found, names = await self.context.store.call(
            lambda db: (self._input(db, job.chat_id, job.payload), self.names(db, job.chat_id))
        )
        if found is None:
            return gone
        count = self.context.counter.count
        budget = self.context.settings.running_recap_max_tokens
        before = count(found.content)
        values = {"running_recap": found.content, **self.budget_values(), **names}
        messages = self.context.prompts.messages(self.operation, values)
        answer = await self.complete(job, messages)
        text, reasoning = self.read(answer, found.content)
        if count(text) > budget:
            # One plain re-ask, as a person would: say how long it came out.
            messages = [
                *messages,
                {"role": "assistant", "content": answer.text},
                {
                    "role": "user",
                    "content": f"That is about {words(count(text))} words; it must be at "
                    f"most {words(budget)}. Shorten it the same way and answer with the "
                    "JSON only.",
                },
            ]
            again = await self.complete(job, messages)
            text, reasoning = self.read(again, found.content)
        after = count(text)
        if after >= before:
            raise JobFailure(
                f"{self.operation}: the condensed recap ({after} tokens) is no shorter than "
                f"version {found.version} ({before} tokens)"
            )
        if after > budget:
            log.warning(
                "%s: running recap condensed to %d tokens, still over its budget of %d",
                job.chat_id,
                after,
                budget,
            )

        def apply(db: Database) -> None:
            memory = db.memory
            version = memory.add_running(
                job.chat_id,
                text,
                self.context.clock(),
                scene_count=found.scene_count,
                prev_scene_uid=found.prev_scene_uid,
                new_scene_uid=found.new_scene_uid,
                source="condensed",
                reasoning=reasoning or None,
            )
            memory.set_state(job.chat_id, condense_version=None)
            # Condensing is keyed by version: one that failed on an older version is over
            # now that a newer one is condensed (kept failed, it counted as a failure for
            # good: the page, `memory`, /health, doctor). Until now it showed the trouble.
            now = self.context.clock()
            for old in db.jobs.list(job.chat_id, ("failed",)):
                if old.operation == self.operation.value:
                    db.jobs.drop(old, now, f"a newer version was condensed (it had: {old.error})")
            self.context.publish("running", chat=job.chat_id, version=version, source="condensed")
            log.info(
                "%s: running recap version %d condensed into version %d (%d -> %d tokens)",
                job.chat_id,
                found.version,
                version,
                before,
                after,
            )

        return apply


class RunningPlanner:
    """What the running recap needs next (store thread): condensing the newest version
    when it is over its budget or a fold onto it was cut off, else folding in the next
    finished scene, strictly in story order."""

    def __init__(self, settings: MemorySettings, count: CountTokens) -> None:
        self.settings = settings
        self.count = count

    def plan(
        self,
        db: Database,
        chat_id: str,
        breaks: Sequence[SceneBreak],
        state: MemoryState,
        refused: FailedLately,
    ) -> list[tuple[Operation, str, Payload]]:
        found = newest_at(db, chat_id, None)
        newest = None if found is None else db.memory.running_version(chat_id, found[0])
        grow = False
        if newest is not None and self._needs_condensing(newest, state):
            key = job_key(Operation.CONDENSE_RUNNING_RECAP, chat_id, newest.version)
            # A condensing that keeps failing must not stop the story being folded in:
            # the fold goes on, onto the long version (a cut-off answer asked for again
            # larger), until the failure cools down.
            if not refused(key):
                return [(Operation.CONDENSE_RUNNING_RECAP, key, {"version": newest.version})]
            grow = True
        covered = -1 if found is None else found[1]
        following = [b for b in breaks if b.position > covered]
        if following and following[0].current is not None:
            uid = following[0].uid
            payload: Payload = {"scene": uid, "grow": True} if grow else {"scene": uid}
            return [(Operation.RUNNING_RECAP, job_key(Operation.RUNNING_RECAP, chat_id, uid),
                     payload)]  # fmt: skip
        return []

    def _needs_condensing(self, version: RunningRecap, state: MemoryState) -> bool:
        if state.condense_version == version.version:
            return True
        if version.source in KEEP_AS_WRITTEN:
            return False
        # The counter keeps recent counts: planning again costs a lookup, not a count.
        return self.count(version.content) > self.settings.running_recap_max_tokens
