"""The memory provider seam: what the chat path asks for the memory of a request.

The server asks its provider once per chat request. The store and the memory engine plug
in here in later work; until then the server runs with `NoMemory`, and tests and the
`inject` preview fill the seam with `StaticMemory`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from adapters.base import ParsedRequest
from proxy.core.models import Memory

if TYPE_CHECKING:
    from proxy.library import ChatLibrary

CHAT_ID_HEADER = "X-ST-Chat-Id"


class MemoryProvider(Protocol):
    async def memory_for(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Memory | None:
        """The memory for this request, or None when there is none to insert."""
        ...


class NoMemory:
    """No memory yet: every request goes upstream as it came."""

    async def memory_for(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Memory | None:
        return None


class StaticMemory:
    """The same memory for every request."""

    def __init__(self, memory: Memory) -> None:
        self.memory = memory

    async def memory_for(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Memory | None:
        return self.memory


class ChatMemory:
    """Memory for the chat a request belongs to, identified against ST's chats.

    `values` gives a chat's macro values (the memory engine, once it exists); the chat's
    identity, its on/off state and the request indices of its messages come from here.
    """

    def __init__(
        self,
        library: ChatLibrary,
        markers: Sequence[str],
        values: Callable[[str], Mapping[str, str]] | None = None,
    ) -> None:
        self.library = library
        self.markers = tuple(markers)
        self.values = values

    async def memory_for(self, parsed: ParsedRequest, headers: Mapping[str, str]) -> Memory | None:
        found = await self.library.identify_request(
            parsed.messages, self.markers, headers.get(CHAT_ID_HEADER)
        )
        ident = found.identification
        if ident is None:
            return Memory(replacements=found.replacements)
        entry = self.library.index.entries.get(ident.chat_id)
        return Memory(
            values=self.values(ident.chat_id) if self.values else {},
            chat_id=ident.chat_id,
            chat_enabled=entry.enabled if entry else None,
            history=ident.history or None,
            replacements=found.replacements,
            identity=ident,
        )
