"""The memory provider seam: what the chat path asks for the memory of a request.

The server asks its provider once per chat request. The store and the memory engine plug
in here in later work; until then the server runs with `NoMemory`, and tests and the
`inject` preview fill the seam with `StaticMemory`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from adapters.base import ParsedRequest
from proxy.core.models import Memory


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
