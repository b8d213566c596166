"""A chat completion that ST's server made one user message ("Single user message", its
"Prompt Post-Processing" for a Custom endpoint): read as ST had it, written back as one.

ST's `mergeMessages` with `single` (`src/prompt-converters.js`) names each speaker in the
text (`{{char}}: ` before a reply that does not start with a group member's name,
`{{user}}: ` before the user's message, a `name` folded in as `name: `), makes every
message the user's and joins them all with a blank line. Told by the request's shape: one
user message that holds ST's start-of-chat prompt as a paragraph of its own.

The request alone does not tell where one chat message ends and the next starts (a
message may hold blank lines), nor which speaker is the user. So its paragraphs are read
in two steps: the adapter takes those up to the start-of-chat prompt for ST's system
prompts (`canonical`), and the chat path takes the rest apart with the chat index
(`proxy.identify.single`, before identification): a paragraph that starts with a speaker's
`Name: ` starts a message, a speaker being a name whose message the index holds (or, in
the chat so found, one whose newest message starts as the paragraph does: a reply that a
regex script changed on its way), and the index says whether it is the user's; unless
the index holds that message and the one before it as one (a reply that wrote the user's
line as `Name: ` stays one reply), or the line is in the text of the reply before it that
a regex script changed on its way (`_quoted`). A paragraph before the first message is
ST's prompt (world info at a depth); ST's prompts after a message the index holds are
told apart from it, and so are its nudges that end the request after one it does not;
any other joins the message before it and is taken apart from it as in any merged turn
(`proxy.identify.merged`).

Written back, every message (the memory's parts among them) is joined with a blank line
into the one user message again, as ST would have sent it with the memory among its
prompts (the chat path sends a request that nothing went into as it came; one read
back without edits is the message it was, paragraph for paragraph).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from adapters.base import Layout, ParsedRequest, spread
from proxy.core.models import ChatMessage, Insertion
from proxy.core.placement import START_MARKERS
from proxy.identify.single import SEPARATOR


@dataclass(frozen=True, slots=True)
class SingleLayout(Layout):
    """A single user message's request: its history paragraphs (those after the start of
    the chat), until identification takes them apart into messages
    (`proxy.identify.single`). Every message is in the one wire message; ST's prompts in
    a message's paragraphs are taken apart from it as from any merged turn."""

    history: tuple[str, ...]

    @property
    def merges(self) -> bool:
        return True

    @property
    def unsplit(self) -> tuple[str, ...]:
        return self.history

    def take_apart(
        self, parsed: ParsedRequest, parts: Mapping[int, Sequence[ChatMessage]]
    ) -> tuple[list[ChatMessage], Layout]:
        # Once taken apart (the one message into the chat's, or a merged turn), nothing
        # is left unsplit.
        messages, _ = spread(parsed.messages, [0] * len(parsed.messages), parts)
        return messages, SingleLayout(())


def single_message(messages: Sequence[ChatMessage]) -> bool:
    """Whether a request read one message per wire message is ST's single user message."""
    if len(messages) != 1 or messages[0].role != "user" or messages[0].name is not None:
        return False
    text = messages[0].text
    return any(text.startswith(m) or SEPARATOR + m in text for m in START_MARKERS)


def canonical(text: str) -> tuple[list[ChatMessage], SingleLayout]:
    """ST's prompts up to the start of the chat, each paragraph a system message, and the
    paragraphs after it kept for identification to take apart."""
    paragraphs = text.split(SEPARATOR)
    start = next(i for i, p in enumerate(paragraphs) if p.startswith(START_MARKERS))
    head = [ChatMessage("system", p) for p in paragraphs[: start + 1]]
    history = tuple(paragraphs[start + 1 :])
    if history:
        head.append(ChatMessage("user", SEPARATOR.join(history)))
    return head, SingleLayout(history)


def rewritten(
    messages: Sequence[ChatMessage],
    body: dict[str, Any],
    insertions: Sequence[Insertion],
    replacements: Mapping[int, str],
    drop: Collection[int],
) -> dict[str, Any]:
    """`body` (the request's, decoded as its numbers need; `messages` its canonical ones)
    with the memory in, the replacements made and the `drop`ped messages out: all of it
    one user message again."""
    at: dict[int, list[str]] = {}
    for insertion in insertions:
        at.setdefault(insertion.index, []).append(insertion.text)
    texts: list[str] = []
    for i in range(len(messages) + 1):
        texts += at.get(i, ())
        if i < len(messages) and i not in drop:
            texts.append(replacements.get(i, messages[i].text))
    wire = body["messages"][0]
    return {**body, "messages": [{**wire, "content": SEPARATOR.join(texts)}]}
