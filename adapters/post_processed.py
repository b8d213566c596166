"""A chat completion that ST's server post-processed before it left (its "Prompt
Post-Processing" for a Custom endpoint, forced for some sources): read as ST built it,
written as ST would have sent it with the memory among its prompts.

ST's `mergeMessages` (`src/prompt-converters.js`) folds each message's `name` into its
content, joins same-role neighbours with a blank line, and ("semi", "strict") makes every
system message after the first the user's and joins again ("strict" also puts a
placeholder user message after the first when the chat starts with a reply). So the main
prompt, the card and the start-of-chat prompt arrive as one system message, an Author's
Note in the chat is the user's and part of a user message, and ST's nudges at the end
join the user's last message. Told by the request's shape: its first message is a system
one that holds ST's start-of-chat prompt after a blank line, no two neighbours share a
role, and no message has a `name` (an unprocessed request has the start-of-chat prompt
as a message of its own). "single" (all of it one user message) is not told: such a
request goes unchanged.

The canonical list splits the first message at its blank lines into system messages, as
ST had them (so the history starts after the start-of-chat prompt, as in any request),
takes "strict"'s placeholder for ST's prompt, and takes merged chat turns apart when
identification asks (`Layout.take_apart`, as for Claude). The memory is written as its own
messages among the request's, then ST's merge run over the whole list again: in a "semi"
or "strict" request a system part is the user's and joins its neighbour, in a "merge" one
it joins system neighbours only. A request that has no system message after the first
does not tell "merge" from "semi": it is written as "semi", which a server that refuses
system messages there takes too. A request message that nothing went into and nothing
was left out of stays as it came.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from adapters.base import ParsedRequest, Places, gone_turns
from proxy.core.models import ChatMessage, Insertion
from proxy.core.placement import START_MARKERS

SEPARATOR = "\n\n"  # what ST joins merged messages with
# What "strict" puts first when the chat does not start with the user's (config.yaml's
# `promptPlaceholder`, as ST ships it).
PLACEHOLDER = "Let's get started."
Mode = Literal["merge", "semi"]


@dataclass(frozen=True, slots=True)
class MergedLayout(Places):
    """Where each canonical message is in the body: the index of its wire message (several
    parts may share one), and how ST post-processed the request."""

    mode: Mode = "merge"


def post_processing(messages: Sequence[ChatMessage]) -> Mode | None:
    """How ST post-processed a request read one message per wire message: "semi" when no
    system message follows the first (also "strict": they are written alike), "merge" when
    one does; None when the request is not one ST merged."""
    # Every unprocessed request of ST's has two system messages first (the prompts, and
    # the start-of-chat prompt apart): one comparison for the common case.
    if len(messages) < 2 or messages[0].role != "system" or messages[1].role == "system":
        return None
    head = messages[0].text
    if not any(SEPARATOR + marker in head for marker in START_MARKERS):
        return None
    previous = ""
    system = False
    for message in messages[1:]:
        if message.role == previous or message.name is not None:
            return None
        previous = message.role
        system = system or message.role == "system"
    return "merge" if system else "semi"


def canonical(messages: list[ChatMessage], mode: Mode) -> tuple[list[ChatMessage], MergedLayout]:
    """The request's messages as ST had them before the merge, as far as the request alone
    tells: its first message's paragraphs each a system message."""
    head = [
        ChatMessage("system", part) for part in messages[0].text.split(SEPARATOR) if part.strip()
    ]
    rest = messages[1:]
    if rest[0].role == "user" and rest[0].text == PLACEHOLDER:
        rest[0] = ChatMessage("system", PLACEHOLDER)  # "strict"'s, not the user's
    where = (0,) * len(head) + tuple(range(1, len(messages)))
    return [*head, *rest], MergedLayout(where, mode)


def leaves_out(parsed: ParsedRequest, drop: Collection[int]) -> tuple[int, ...]:
    """The messages of `drop` that leave: a merged turn only with all of its parts, and
    never the user's message that a chat which came with the user's first needs first
    (`gone_turns`; the first message is ST's prompts)."""
    layout = parsed.layout
    assert type(layout) is MergedLayout, "not a post-processed request"
    where = layout.where
    gone = gone_turns(parsed.body["messages"], where, drop, start=1)
    return tuple(i for i in drop if 0 <= i < len(where) and where[i] in gone)


def rewritten(
    parsed: ParsedRequest,
    body: dict[str, Any],
    insertions: Sequence[Insertion],
    replacements: Mapping[int, str],
    drop: Collection[int],
) -> dict[str, Any]:
    """`body` (the request's, decoded as its numbers need) with the memory in, the
    replacements made and the `drop`ped messages out, merged as ST merges."""
    layout = parsed.layout
    assert type(layout) is MergedLayout, "not a post-processed request"
    wire: list[Any] = body["messages"]
    where, messages = layout.where, parsed.messages
    at: dict[int, list[Insertion]] = {}
    for insertion in insertions:
        at.setdefault(insertion.index, []).append(insertion)
    # A wire message goes as it came unless something is done inside it; one of content
    # parts (an image) goes as it came unless all of it is left out.
    parts: dict[int, list[int]] = {}
    for i, w in enumerate(where):
        parts.setdefault(w, []).append(i)
    touched = {where[i] for i in drop if 0 <= i < len(where)}
    touched |= {where[i] for i in replacements if 0 <= i < len(where)}
    touched |= {where[i] for i in at if 0 < i < len(where) and where[i - 1] == where[i]}
    gone = {w for w in touched if all(i in drop for i in parts[w])}
    touched = {w for w in touched if type(_content(wire[w])) is str} | gone
    out: list[dict[str, Any]] = []
    for i in range(len(where) + 1):
        out.extend({"role": p.role.value, "content": p.text} for p in at.get(i, ()))
        if i == len(where):
            break
        w = where[i]
        if w not in touched:
            if parts[w][0] == i:
                out.append(wire[w])
        elif w not in gone and i not in drop:
            role = wire[w].get("role")
            text = replacements.get(i, messages[i].text)
            out.append({"role": role, "content": text})
    sent = dict(body)
    sent["messages"] = merged(out, layout.mode)
    return sent


def merged(messages: list[dict[str, Any]], mode: Mode) -> list[dict[str, Any]]:
    """ST's merge over a message list: same-role neighbours with text content joined with
    a blank line; in "semi", then each system message after the first the user's, and
    joined again."""
    out = _joined(messages)
    if mode == "merge" or not out:
        return out
    users = [out[0], *({**m, "role": "user"} if m.get("role") == "system" else m for m in out[1:])]
    return _joined(users)


def _joined(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for message in messages:
        last = out[-1] if out else None
        content = message.get("content")
        if (
            last is not None
            and last.get("role") == message.get("role")
            and content
            and type(content) is str
            and type(last.get("content")) is str
        ):
            out[-1] = {**last, "content": last["content"] + SEPARATOR + content}
        else:
            out.append(message)
    return out


def _content(message: Any) -> Any:
    return message.get("content") if type(message) is dict else None
