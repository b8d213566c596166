"""What every operation handler shares: its context, the input hash it stamps jobs with,
and asking the LLM for a whole answer.

An answer the model cut off at its length limit (`finish_reason: length`) is never read
as if it were complete: it is asked for again once, with the limit doubled (at most
`[memory.llm] max_tokens_cap`), and still cut off then, the job fails with that said: a
model that rambles past one larger limit rambles past any, and each try costs a whole
answer's generation.

An answer that parsed becomes memory only once `check` found it a real answer, not the
prompt coming back (`proxy.core.genuine`).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, TypeVar

from proxy.core.genuine import NotAnAnswer, check_related
from proxy.core.jsontypes import JSONValue, as_int, as_list
from proxy.core.lore import WorldEntry
from proxy.core.operations import Operation
from proxy.core.regex_scripts import NONE as NO_SCRIPTS
from proxy.core.regex_scripts import PromptScripts
from proxy.core.tokens import TokenCounter
from proxy.errors import InputMissed, JobFailure
from proxy.memory.calls.answers import Answer
from proxy.memory.calls.jobs import Apply, Handler
from proxy.memory.calls.prompts import Prompts
from proxy.memory.chatinfo import PersonaLookup, chat_names
from proxy.observe.events import EventBus
from proxy.settings.memory import MemorySettings
from proxy.sillytavern.chatfile import STMessage
from proxy.store import Database, Store
from proxy.store.jobs import Job, Payload
from proxy.store.records import ChatRecord, MessageRecord

log = logging.getLogger(__name__)

Read = TypeVar("Read")


class Completer(Protocol):
    """The LLM client, as the handlers use it."""

    async def complete(
        self,
        operation: Operation,
        chat_id: str,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int | None = None,
    ) -> Answer: ...

    def answer_limit(self, operation: Operation) -> int: ...

    @property
    def limit_cap(self) -> int: ...


class LoreSource(Protocol):
    """The lorebook snapshots, as a scene recap reads them."""

    async def active_lore(self, chat_id: str, first: int, last: int) -> str: ...

    def own_entries(self, chat: ChatRecord) -> Sequence[WorldEntry]:
        """The entries of the chat's own lorebook (store thread)."""
        ...


def _no_scripts(user: str) -> PromptScripts:
    return NO_SCRIPTS


@dataclass(frozen=True, slots=True)
class HandlerContext:
    """Everything the handlers use, and nothing more."""

    store: Store
    llm: Completer
    prompts: Prompts
    settings: MemorySettings
    clock: Callable[[], float]
    persona: PersonaLookup
    counter: TokenCounter
    lore: LoreSource | None = None
    events: EventBus | None = None  # what a job wrote, for the dashboard
    # A user's regex scripts that ST runs on a prompt (the library's; store's thread).
    scripts: Callable[[str], PromptScripts] = _no_scripts

    def publish(self, kind: str, **data: object) -> None:
        if self.events is not None:
            self.events.publish(kind, **data)


class CutOff(JobFailure):
    """The answer was still cut off at the largest limit allowed."""

    def __init__(self, message: str, limit: int) -> None:
        super().__init__(message)
        self.limit = limit


@lru_cache(maxsize=16)
def stripping(patterns: tuple[str, ...]) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p) for p in patterns)


def thinking(api: str, text: str) -> str:
    """What the model thought before its answer: the API's reasoning field (a thinking
    model's), and any `<think>` block in the text."""
    return "\n\n".join(part.strip() for part in (api, text) if part.strip())


def uids(value: JSONValue, what: str) -> list[int]:
    """A job payload's list of message uids."""
    return [as_int(item, what) for item in as_list(value, what)]


def digest(*parts: object) -> str:
    return hashlib.sha1(repr(parts).encode(), usedforsecurity=False).hexdigest()[:20]


def gone(db: Database) -> None:
    """The `Apply` of a job whose input was not there when it ran. It is reached only when
    the input is there again at its end (else the job is dropped): it runs again."""
    raise InputMissed("its input was not there when it ran; it runs again")


class OperationHandler(Handler):
    operation: Operation

    def __init__(self, context: HandlerContext) -> None:
        self.context = context

    def still_current(self, db: Database, job: Job) -> bool:
        return self.input_hash(db, job.chat_id, job.payload) == job.input_hash

    async def gather(self, job: Job, read: Callable[[Database], Read]) -> Read | None:
        """What `read` finds of the job's input, None when that is not the input the job
        was planned for (gone, or changed while the job waited: it may be as planned
        again by the job's end, when the answer would be kept for it). One store call:
        what is read is what was checked."""
        return await self.context.store.call(
            lambda db: read(db) if self.still_current(db, job) else None
        )

    def input_hash(self, db: Database, chat_id: str, payload: Payload) -> str | None:
        """What the job's input is now (None: gone); store thread."""
        raise NotImplementedError

    async def run(self, job: Job) -> Apply:
        raise NotImplementedError

    def names(self, db: Database, chat_id: str) -> dict[str, str]:
        return chat_names(db, chat_id, self.context.persona)

    def prompted(
        self, db: Database, chat_id: str, records: Iterable[MessageRecord], names: Mapping[str, str]
    ) -> dict[int, STMessage]:
        """Each message by position, as the chat's model sees it in a prompt: the user's
        regex scripts that alter the outgoing prompt run on it (at its depth from the
        chat's end), then `[memory] strip_patterns` take their matches out. Store's thread."""
        chat = db.chat(chat_id)
        scripts = self.context.scripts(chat.user) if chat is not None else NO_SCRIPTS
        strips = stripping(tuple(self.context.settings.strip_patterns))
        total = chat.messages if chat is not None else 0
        out: dict[int, STMessage] = {}
        for record in records:
            message = record.message
            depth = total - 1 - record.position if total > record.position else None
            text = scripts.apply(message.mes, is_user=message.is_user, depth=depth, names=names)
            for pattern in strips:
                text = pattern.sub("", text)
            out[record.position] = (
                message if text == message.mes else message.model_copy(update={"mes": text})
            )
        return out

    def first_limit(self) -> int:
        """The answer limit of this operation's first call."""
        return self.context.llm.answer_limit(self.operation)

    def check(self, text: str, fields: Iterable[str] = (), source: str = "") -> None:
        """Raises `JobFailure` unless the answer `text` (its `fields`, a recap of `source`)
        is a real answer rather than the prompt coming back (`proxy.core.genuine`)."""
        genuine = self.context.prompts.genuine[self.operation]
        try:
            genuine.check_text(text)
            fields = list(fields)
            genuine.check_fields(fields)
            if source and fields:
                check_related(fields[-1], source, "answer")
        except NotAnAnswer as exc:
            raise JobFailure(f"{self.operation}: {exc}") from None

    async def ask(self, job: Job, values: Mapping[str, str]) -> Answer:
        """The whole answer to this job's prompt."""
        messages = self.context.prompts.messages(self.operation, values)
        return await self.complete(job, messages)

    async def count(self, job: Job, messages: Sequence[Mapping[str, str]], answer: Answer) -> None:
        """Keep what a call cost: the API's own figures, else the prompt and answer counted."""
        count = self.context.counter.count
        prompt = answer.prompt_tokens
        if prompt is None:
            prompt = sum(count(m.get("content", "")) for m in messages)
        spent = answer.answer_tokens if answer.answer_tokens is not None else count(answer.text)
        now = self.context.clock()
        await self.context.store.call(
            lambda db: db.usage.add(job.chat_id, self.operation.value, now, prompt, spent)
        )
        self.context.publish("call", chat=job.chat_id, operation=self.operation.value,
                             prompt_tokens=prompt, answer_tokens=spent)  # fmt: skip

    async def complete(
        self, job: Job, messages: Sequence[Mapping[str, str]], *, grow: bool = True
    ) -> Answer:
        """An answer that was not cut off. A cut-off one is asked for again once with the
        limit doubled (`grow`, up to the cap); `CutOff` when it still is (at once without
        `grow`)."""
        llm = self.context.llm
        limit = self.first_limit()
        grown = False
        while True:
            answer = await llm.complete(self.operation, job.chat_id, messages, max_tokens=limit)
            await self.count(job, messages, answer)
            if not answer.cut_off:
                return answer
            cap = max(llm.limit_cap, self.first_limit())
            if not grow or grown or limit >= cap:
                raise CutOff(
                    f"{self.operation}: the answer was cut off at {limit} tokens (a model "
                    "that rambles on, or copies the prompt back?)",
                    limit,
                )
            grown = True
            bigger = min(cap, limit * 2)
            log.info(
                "%s for %s: the answer was cut off at %d tokens; asking again with %d",
                self.operation,
                job.chat_id,
                limit,
                bigger,
            )
            limit = bigger
