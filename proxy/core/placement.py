"""Where a memory message goes in a chat-completion message list, with ST's semantics.

ST's rules (`public/scripts/openai.js`, see DESIGN.md):

- `before_prompt` (2): its own message before the main prompt, i.e. at index 0.
- `in_prompt` (0): its own message right after the main prompt (the first system message).
- `in_chat` (1): inside the chat history so that exactly `depth` chat messages follow it;
  0 = after the last one; deeper than the history = top of the history.
- `none` (-1): not inserted.

Depth counts only chat-history messages. From the request alone, the history is the span
after ST's `[Start a new Chat]` marker (or its group variant, or after the last example
message) up to the trailing non-history items: post-history instructions, the group nudge
and control prompts (trailing system messages) and an assistant prefill (an assistant
message that ends the request). A known chat passes the exact indices of its messages
instead, so that ST's own depth injections (Author's Note, character note, world info)
sitting between them are not counted; the memory then goes after ST's injections of the
same depth when its role is system and before them otherwise, which is where ST would
have put an extension prompt of that role.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import lt

from proxy.core.models import ChatMessage, HistorySpan, Placement, Position, Role

EXAMPLE_NAME_PREFIX = "example_"
# How ST's start-of-chat prompts begin by default (`new_chat_prompt`, `new_group_chat_prompt`).
START_MARKERS = ("[Start a new Chat]", "[Start a new group chat")


def find_history(messages: Sequence[ChatMessage], markers: Sequence[str]) -> HistorySpan:
    """Find the chat history of a request from the request alone."""
    start = _history_start(messages, markers)
    end = len(messages)
    # A prefill ("Start Reply With", continue-prefill) is an assistant message that ends the
    # request. Before it, post-history instructions, the group nudge and control prompts
    # trail as system messages. An assistant message followed by a system nudge is history:
    # that is how ST sends "continue" without prefill. An empty user message at the end is
    # the open turn a text-completion impersonation ends with (`<|im_start|>user\nArden:`):
    # trailing too, or the history would end with a message no chat holds.
    if end > start:
        last = messages[end - 1]
        if last.role == "assistant" or (last.role == "user" and not last.text.strip()):
            end -= 1
    while end > start and messages[end - 1].role == "system":
        end -= 1
    return HistorySpan(start=start, end=end, indices=tuple(range(start, end)))


def known_history(
    messages: Sequence[ChatMessage],
    markers: Sequence[str],
    indices: Sequence[int],
    found: HistorySpan | None = None,
) -> HistorySpan:
    """A span for a request whose real chat messages are known (by a matched chat).
    `found`: `find_history`'s answer for it, when it is known already."""
    found = found or find_history(messages, markers)
    if indices and indices[0] >= 0 and indices[-1] < len(messages) and _rising(indices):
        ordered = tuple(indices)  # an identification's, always: in request order already
    else:
        ordered = tuple(sorted(i for i in set(indices) if 0 <= i < len(messages)))
    if not ordered:
        return HistorySpan(start=found.start, end=found.start, indices=())
    # Not `min`/`max`: 3.11 parses keywords on every call of those (per request, here).
    first, end = ordered[0], ordered[-1] + 1
    start = found.start if found.start <= first else first
    end = found.end if found.end >= end else end
    return HistorySpan(start=start, end=end, indices=ordered)


def _rising(values: Sequence[int]) -> bool:
    return all(map(lt, values, values[1:]))


def insertion_index(
    messages: Sequence[ChatMessage], placement: Placement, span: HistorySpan
) -> int | None:
    """The index at which the memory message is inserted, or None for `none`."""
    if placement.position is Position.NONE:
        return None
    if placement.position is Position.BEFORE_PROMPT:
        return 0
    if placement.position is Position.IN_PROMPT:
        for i in range(min(span.start, len(messages))):
            if messages[i].role == "system":
                return i + 1
        return 0
    history = span.indices
    depth = placement.depth
    if not history:
        before, after = span.start, span.end
    elif depth == 0:
        before, after = history[-1] + 1, span.end
    elif depth < len(history):
        before, after = history[-depth - 1] + 1, history[-depth]
    else:
        before, after = span.start, history[0]
    # Between `before` and `after` sit ST's own injections of this depth; ST puts the
    # system-role message of a depth last, so a system memory goes after them.
    return after if placement.role is Role.SYSTEM else before


def _history_start(messages: Sequence[ChatMessage], markers: Sequence[str]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        msg = messages[i]
        if msg.role == "system" and msg.text.lstrip().startswith(tuple(markers)):
            return i + 1
    for i in range(len(messages) - 1, -1, -1):
        if (messages[i].name or "").startswith(EXAMPLE_NAME_PREFIX):
            return i + 1
    for i, msg in enumerate(messages):
        if msg.role != "system":
            return i
    return len(messages)
