"""Chat turns that ST merged before sending them to Claude, taken apart again. Pure.

Claude's Messages API wants user and assistant turns in alternation, so ST turns every
system message into a user one and joins same-role neighbours with a blank line
(`convertClaudeMessages` in ST's `src/prompt-converters.js`). A turn that matches no chat
message may then be several: two user messages in a row (a reply deleted, or sent again
after a failed one), consecutive group members' replies, a chat message with ST's own
prompt joined to it (the group nudge, an Author's Note at depth 0, the impersonation
prompt, the continue nudge of ST 1.13 and later). When one ends the request, no chat
ends the way the request does, and the request would go without memory. A text prompt
with instruct off has the like: ST writes its own prompts at a depth (an Author's Note,
world info) and narrator messages as lines without a name, which read as more lines of
the message before them.

`unmerged` finds, for each such turn, the runs of its paragraphs that are chat messages
(by the index's fingerprints); the paragraphs between them are ST's prompts, given back
as system messages, one a paragraph. The newest history message that matches nothing and
is the user's (ST's nudge on its own turn) is taken for ST's prompts too. Only asked for
when a request was not identified as it came: the common request pays nothing.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from proxy.core.fingerprints import fingerprint, message_fingerprint
from proxy.core.models import ChatMessage, HistorySpan
from proxy.identify.chat_index import MAX_SKIPPED, TAIL

SEPARATOR = "\n\n"  # what ST joins merged messages with
MAX_PARAGRAPHS = 48  # a turn of more is left as it is (the split is quadratic in them)


def unmerged(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    known: Container[int],
    separator: str = SEPARATOR,
    *,
    prompts_in_replies: bool = True,
) -> dict[int, list[ChatMessage]]:
    """The history messages to take apart (request index -> its parts, in order), given
    the fingerprints of the indexed chats' messages (`known`) and what merged messages
    are joined with (`separator`). Empty: nothing to do. `prompts_in_replies`: whether
    ST may have joined its prompts to a reply (`ParsedRequest.prompts_in_replies`); where
    it may not, what of a reply before the newest message is no chat message as it is
    stays the reply's (a reply of a group's member that ST changed, a status block cut)."""
    found: dict[int, list[ChatMessage]] = {}
    history = span.indices[-TAIL - MAX_SKIPPED :]
    for i in history:
        message = messages[i]
        if message.role == "system" or separator not in message.text:
            continue
        if message_fingerprint(message.text) in known:
            continue  # a chat message of several paragraphs, as it is
        replies = message.role == "assistant" and i != history[-1] and not prompts_in_replies
        parts = _parts(message, known, separator, keep_role=replies)
        if parts is not None:
            found[i] = parts
    if history:
        last = history[-1]
        message = messages[last]
        parts = found.get(last, [message])
        final = parts[-1]
        if final.role == "user" and fingerprint(final.text) not in known:
            found[last] = [*parts[:-1], *_prompts(final.text.split(separator))]
    return found


def _prompts(paragraphs: list[str]) -> list[ChatMessage]:
    """ST's own prompts, one system message a paragraph: each was a message of its own
    before the merge (a nudge is told by how its message starts)."""
    return [ChatMessage("system", p) for p in paragraphs if p.strip()]


def _parts(
    message: ChatMessage, known: Container[int], separator: str, *, keep_role: bool = False
) -> list[ChatMessage] | None:
    """The message's paragraphs grouped into chat messages and ST's prompts between them,
    covering as many paragraphs with chat messages as can be; None when none is one.
    `keep_role`: the paragraphs between are of the message's role too (a run of them one
    message), not ST's prompts."""
    paragraphs = message.text.split(separator)
    count = len(paragraphs)
    if count > MAX_PARAGRAPHS:
        return None
    # best[i]: the most paragraphs from i on that chat messages cover; step[i]: where the
    # run starting at i ends, and whether it is a chat message.
    best = [0] * (count + 1)
    step: list[tuple[int, bool]] = [(count, False)] * (count + 1)
    for i in range(count - 1, -1, -1):
        best[i], step[i] = best[i + 1], (i + 1, False)
        for end in range(i + 1, count + 1):
            if fingerprint(separator.join(paragraphs[i:end])) in known:
                covered = end - i + best[end]
                if covered > best[i]:
                    best[i], step[i] = covered, (end, True)
    if best[0] == 0:
        return None
    parts: list[ChatMessage] = []
    at = 0
    while at < count:
        end, chat = step[at]
        if chat or keep_role:
            text = separator.join(paragraphs[at:end])
            parts.append(ChatMessage(message.role, text, message.name))
        else:
            parts += _prompts(paragraphs[at:end])
        at = end
    return parts
