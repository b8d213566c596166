"""What every adapter hands to the core."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from proxy.core.models import ChatMessage, PromptWriter


class Layout:
    """Where an adapter's canonical messages are in its body: each adapter's own kind, read
    by its `apply`. Identification asks two things of it (`proxy.identify.readings.REQUEST`):

    - `merges`: whether the client may have merged chat messages into one turn (Claude's
      API, a text prompt with instruct off, ST's prompt post-processing); `take_apart`
      then gives each part of such a turn a place of its own;
    - `unsplit`: the chat paragraphs of ST's single user message, which the chat index
      takes apart into messages (`proxy.identify.single`), `take_apart` placing them.
    """

    __slots__ = ()

    @property
    def merges(self) -> bool:
        return False

    @property
    def unsplit(self) -> tuple[str, ...]:
        return ()

    def take_apart(
        self, parsed: ParsedRequest, parts: Mapping[int, Sequence[ChatMessage]]
    ) -> tuple[list[ChatMessage], Layout]:
        """`parsed`'s messages with each one `parts` names replaced by its parts, and the
        layout that places them."""
        raise NotImplementedError(f"{type(self).__name__}: a format whose turns never merge")


@dataclass(frozen=True, slots=True)
class Places(Layout):
    """Each canonical message's wire message (negative: none, ST's prompts the format
    keeps apart); a merged turn's parts share their turn's place."""

    where: tuple[int, ...]

    @property
    def merges(self) -> bool:
        return True

    def take_apart(
        self, parsed: ParsedRequest, parts: Mapping[int, Sequence[ChatMessage]]
    ) -> tuple[list[ChatMessage], Layout]:
        messages, where = spread(parsed.messages, self.where, parts)
        return messages, dataclasses.replace(self, where=where)


@dataclass(slots=True)
class ParsedRequest:
    """A decoded request: its bytes, the body as decoded JSON, and its canonical messages."""

    raw: bytes
    body: dict[str, Any]
    messages: list[ChatMessage]
    stream: bool
    model: str | None
    api: str = "openai_chat"  # the adapter's name: the wire format
    # What else the adapter read that its `apply` needs, e.g. where each canonical
    # message is in the body when they are not one per wire message (its own business).
    layout: Layout | None = None
    route: str = ""  # the `[[upstream.routes]]` prefix it came under (set by the shell)
    path: str = ""  # the path it came to, under that prefix (set by the shell)
    # Text formats: how the proxy's own prompts are written in this request's template.
    writer: PromptWriter | None = None
    # How many of the first messages were taken from the previous request as they were
    # (the same objects), not decoded again.
    carried: int = 0
    # What the messages in a turn the client merged are joined with (`Layout.merges`).
    merged_with: str = "\n\n"
    # Whether ST's own prompts may be joined to a reply in such a turn: with instruct off
    # a line without a name joins any turn, but ST turns its prompts into the user's for
    # Claude and a post-processed prompt (or keeps them the system's), never a reply.
    prompts_in_replies: bool = True


Place = TypeVar("Place")


def spread(
    messages: Sequence[ChatMessage],
    places: Sequence[Place],
    parts: Mapping[int, Sequence[ChatMessage]],
) -> tuple[list[ChatMessage], tuple[Place, ...]]:
    """`messages` with each one that `parts` names replaced by its parts (a turn ST merged,
    taken apart: `Layout.take_apart`), and their `places` in the body, each part at its
    message's."""
    out: list[ChatMessage] = []
    where: list[Place] = []
    for i, (message, place) in enumerate(zip(messages, places, strict=True)):
        for part in parts.get(i, (message,)):
            out.append(part)
            where.append(place)
    return out, tuple(where)


def gone_turns(
    turns: Sequence[Any], where: Sequence[int], drop: Collection[int], *, start: int = 0
) -> set[int]:
    """The wire messages that the parsed messages in `drop` leave out (`where`: each parsed
    message's wire message, negative for none): a merged one only when all of its parts
    go. Less the newest of the user's before the first one kept from `start` on, when that
    one is a reply and the request came with the user's there: servers that want the
    user's first (Claude, those that ST's strict post-processing is for) refuse a reply
    first."""
    dropped = {i for i in drop if 0 <= i < len(where)}
    gone = {where[i] for i in dropped if where[i] >= 0}
    gone -= {where[i] for i in range(len(where)) if i not in dropped}
    first = next((i for i in range(start, len(turns)) if i not in gone), None)
    if first is None or _role(turns[first]) != "assistant" or _role(turns[start]) != "user":
        return gone
    back = next((i for i in range(first - 1, -1, -1) if _role(turns[i]) == "user"), None)
    return gone if back is None else gone - {back}


def _role(message: Any) -> Any:
    return message.get("role") if type(message) is dict else None
