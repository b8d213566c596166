"""The memory provider seam: what the chat path asks for the memory of a request.

The server asks its provider once per chat request: `ChatMemory` identifies the chat and
takes its memory from the memory engine (no store reads on the request path). Without an
ST data folder there is no provider at all (the body is not even decoded); tests fill the
seam with `StaticMemory`, or `NoMemory` for a provider that never has any.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from adapters.base import Layout, ParsedRequest
from proxy.core.models import Caller, ChatMessage, HistorySpan, Identification, Memory
from proxy.identify.readings import REQUEST, Asked, Parts, extent, whole
from proxy.library.chats import ChatLibrary, RequestIdentity
from proxy.waits import SERVING

CHAT_ID_HEADER = "X-ST-Chat-Id"


class RequestMemory(Protocol):
    """What a chat's memory gives one request: macro values, and the request indices
    the memory covers (left out)."""

    @property
    def values(self) -> Mapping[str, str]: ...

    @property
    def drop(self) -> tuple[int, ...]: ...


class MemorySource(Protocol):
    """The memory engine, as the chat path uses it."""

    @property
    def active(self) -> Collection[str]:
        """The chats whose upkeep runs (`touch` starts it for any other)."""
        ...

    def touch(
        self, ident: Identification, headers: Mapping[str, str], caller: Caller
    ) -> asyncio.Task[None] | None:
        """A request of this chat went through: keep its key and model, start its upkeep.
        Returns the start of the upkeep when this request began it."""
        ...

    def request_memory(
        self,
        ident: Identification,
        messages: Sequence[ChatMessage],
        history: Sequence[int],
        model: str | None,
    ) -> RequestMemory: ...

    async def question_ready(self, messages: Sequence[ChatMessage]) -> None:
        """Wait (up to `recall_wait_ms`) for the question's vector being made."""
        ...


class MemoryProvider(Protocol):
    async def memory_for(
        self,
        parsed: ParsedRequest,
        headers: Mapping[str, str],
        *,
        markers: Sequence[str],
        preview: bool = False,
    ) -> Memory | None:
        """The memory for this request, or None when there is none to insert. `markers`:
        where the chat history starts (the injection policy's, which places the memory by
        the same history). A preview (asked for by the API, never by a header a client can
        send) shows the memory and starts no upkeep."""
        ...


async def identify_parsed(
    library: ChatLibrary, parsed: ParsedRequest, markers: Sequence[str], header: str | None
) -> RequestIdentity:
    """`ChatLibrary.identify_request` for a parsed request, read each way ST may have cut
    its chat into messages (`proxy.identify.readings.REQUEST`), in order, until one is
    identified whole: a single user message's paragraphs taken apart (then the request is
    never tried as it came: nothing is identified without), the request as it came, and,
    for a format whose client may merge chat messages into one turn (`Layout.merges`),
    those turns taken apart (`proxy.identify.merged`). A later reading is kept only when
    it matches more of the chat; `parsed` ends as the kept one has it.

    Not only a request that matched nothing is read again: a merged turn inside the
    history (two of the user's messages in a row, an Author's Note at a depth) stands for
    two of the file's messages, and matching walks back from the newest one at a time, so
    it stops there. The request would then be matched by its newest few messages only:
    with too little confidence to start a new branch's upkeep, and its older covered
    messages not known as covered. So does a message matched only as one ST changed on
    the way (`proxy.identify.match`): it may be a chat message with ST's prompts joined.

    A reading reads the index as it is when the request comes; identifying may read in
    the chat that ST saved just before (`identify_request` waits for that re-read, or
    does it). Read on the index without ST's newest message, a single message's split
    may hold none of the user's lines the index knows, and a merged turn may not be
    taken apart: when the index changed meanwhile, the request is read again and
    identified as the chat now is."""
    found: RequestIdentity | None = None
    asked: Asked | None = None
    for reading in REQUEST:
        if found is not None and whole(found.identification, found.span):
            break
        # Read the request as the best reading so far has it (once per reading kept: the
        # everyday request, whole as it came, builds it once).
        asked = asked or _asked(parsed, markers, found)
        version = library.index.version
        parts = reading.read(asked, library.index)
        if parts is None:
            continue
        messages, layout = _taken_apart(parsed, parts)
        again = await library.identify_request(messages, markers, header)
        if parts and library.index.version != version:
            parts = reading.read(asked, library.index) or {}
            messages, layout = _taken_apart(parsed, parts)
            again = await library.identify_request(messages, markers, header)
        if found is None or _extent(again) > _extent(found):
            # The best reading so far: the next ones read the request as it has it.
            found, parsed.messages, parsed.layout = again, messages, layout
            asked = None
    assert found is not None  # "as it came" or the single message's split always reads
    return found


def _asked(parsed: ParsedRequest, markers: Sequence[str], found: RequestIdentity | None) -> Asked:
    layout = parsed.layout
    return Asked(
        parsed.messages,
        markers,
        found.span if found is not None else None,
        layout.unsplit if layout is not None else (),
        layout is not None and layout.merges,
        parsed.merged_with,
        parsed.prompts_in_replies,
    )


def _taken_apart(parsed: ParsedRequest, parts: Parts) -> tuple[list[ChatMessage], Layout | None]:
    """`parsed`'s messages and layout with `parts` taken apart (as they are: none)."""
    if not parts or parsed.layout is None:
        return parsed.messages, parsed.layout
    return parsed.layout.take_apart(parsed, parts)


def _extent(found: RequestIdentity) -> tuple[int, bool]:
    return extent(found.identification, found.span)


class NoMemory:
    """No memory yet: every request goes upstream as it came."""

    async def memory_for(
        self,
        parsed: ParsedRequest,
        headers: Mapping[str, str],
        *,
        markers: Sequence[str],
        preview: bool = False,
    ) -> Memory | None:
        return None


class StaticMemory:
    """The same memory for every request."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    async def memory_for(
        self,
        parsed: ParsedRequest,
        headers: Mapping[str, str],
        *,
        markers: Sequence[str],
        preview: bool = False,
    ) -> Memory | None:
        return self.memory


class ChatMemory:
    """Memory for the chat a request belongs to, identified against ST's chats.

    The chat's identity, its on/off state and the request indices of its messages come
    from here; its macro values and the covered messages to leave out from the memory
    engine (or from `values`, a fixed source for tests and previews).
    """

    def __init__(
        self,
        library: ChatLibrary,
        values: Callable[[str], Mapping[str, str]] | None = None,
        engine: MemorySource | None = None,
        first_request: float = SERVING.first_request,
    ) -> None:
        """`first_request`: seconds a chat's first request waits for its memory to start."""
        self.library = library
        self.first_request = first_request
        self.values = values
        self.engine = engine

    async def memory_for(
        self,
        parsed: ParsedRequest,
        headers: Mapping[str, str],
        *,
        markers: Sequence[str],
        preview: bool = False,
    ) -> Memory | None:
        found = await identify_parsed(self.library, parsed, markers, headers.get(CHAT_ID_HEADER))
        ident = found.identification
        if ident is None:
            return Memory(replacements=found.replacements, span=found.span)
        if self.engine is not None and not preview:
            caller = Caller(parsed.model, parsed.api, parsed.route, parsed.path, parsed.writer)
            started = self.engine.touch(ident, headers, caller)
            if started is not None:
                # The chat's first request: starting its memory is planning only (and
                # importing what an extension left), no LLM call; waiting a moment
                # lets this request already carry what exists.
                await asyncio.wait({started}, timeout=self.first_request)
            await self.engine.question_ready(parsed.messages)
        return self.known(ident, parsed.messages, found.span, parsed.model, found.replacements)

    def known(
        self,
        ident: Identification,
        messages: Sequence[ChatMessage],
        span: HistorySpan,
        model: str | None,
        replacements: dict[int, str],
    ) -> Memory:
        """The memory of a request identified as `ident` (the engine touched already)."""
        entry = self.library.index.entries.get(ident.chat_id)
        values: Mapping[str, str] = self.values(ident.chat_id) if self.values else {}
        drop: tuple[int, ...] = ()
        if self.engine is not None:
            # Every history message of the request, not only the matched newest ones:
            # trimming reaches back to the oldest covered message ST sent.
            got = self.engine.request_memory(ident, messages, span.indices, model)
            values, drop = ({**got.values, **values} if values else got.values), got.drop
        return Memory(
            values=values,
            chat_id=ident.chat_id,
            chat_enabled=entry.enabled if entry else None,
            history=ident.history or None,
            replacements=replacements,
            identity=ident,
            drop=drop,
            span=span,
        )
