"""Chat messages that ST changed on their way into a request, still taken for the file's.
Pure.

ST does not always send a chat message as its file has it: a regex script of the user's
may alter the prompt only (a status block cut off every reply), a file attached to it
adds text, ST writes a reply's reasoning before it ("Add to Prompts"), and for Claude or
a post-processed prompt ST joins its own prompts (a group nudge, an Author's Note) to a
chat message. `proxy.core.identify` lines a request's history up with a chat's newest
messages; these say when a request message that is not a file message's text is that
message all the same, and when it is rather one of ST's own prompts, which are skipped.

The rule: a changed message keeps its side (the user's for the user's, a reply for a
reply), and either the messages around it match (the ones before both, past at most
`CHANGED_RUN` - 1 more changed ones of the same sides: every reply of a chat may carry the
status block) or it holds the start or the end of the file message's text (where the index
keeps that text: the newest `TEXT_KEPT` of a chat). ST's own prompt between chat messages
(an Author's Note) does neither: the message before it is not the one before the file's.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from proxy.core.chat_index import IndexedMessage, message_fingerprint, normalize, readings
from proxy.core.models import ChatMessage
from proxy.core.reasoning import ReasoningFormat, without_reasoning

# How many changed messages in a row are taken on the sides of the messages before them.
CHANGED_RUN = 3
SHARED = 32  # characters of a request text's start or end a file message must hold


def bare_print(
    text: str, reasoning: Sequence[ReasoningFormat], known: Container[int]
) -> int | None:
    """The fingerprint of `text` without the reasoning ST wrote before it, when `known`
    holds that one; else None."""
    bare = without_reasoning(text, reasoning)
    found = message_fingerprint(bare) if bare is not None else None
    return found if found in known else None


def alike(text: str, message: IndexedMessage, reasoning: Sequence[ReasoningFormat]) -> bool:
    """Whether a file message holds the start or the end of a request text, past the
    reasoning and the speaker's `Name: ` ST may write before it (ST's own prompt after the
    history, which may have the reply's side, holds neither). False for a message whose
    text the index no longer keeps."""
    theirs = message.text
    ours = normalize(without_reasoning(text, reasoning) or text)
    for part in readings(ours):
        n = min(SHARED, len(part))
        if n >= 8 and (part[:n] in theirs or part[-n:] in theirs):
            return True
    return False


def sided(role: str, message: IndexedMessage) -> bool:
    """Whether a request message of `role` is on the file message's side: the user's or a
    reply (ST's own prompts are the system's)."""
    return role == ("user" if message.is_user else "assistant")


def is_changed(
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    fps: dict[int, int],
    tail: Sequence[IndexedMessage],
    r: int,
    f: int,
) -> bool:
    """Whether request `history[r]`, not file message `tail[f]`, is that one as ST changed
    it (the module's rule)."""
    if not sided(messages[history[r]].role, tail[f]):
        return False
    for k in range(1, CHANGED_RUN + 1):
        if r < k or f < k:
            break
        if fps[history[r - k]] in tail[f - k].fps:
            return True
        if not sided(messages[history[r - k]].role, tail[f - k]):
            break
    return bool(tail[f].text) and alike(messages[history[r]].text, tail[f], ())


def before_last(
    request: ChatMessage, tail: Sequence[IndexedMessage], reasoning: Sequence[ReasoningFormat]
) -> bool:
    """Whether a request message is the file's last message but one: as it is, past its
    reasoning, or as ST changed it (holding its text's start or end), holding not the last
    one's text too (the two merged, as ST merges them for Claude)."""
    text, message, last = request.text, tail[-2], tail[-1]
    fps = message.fps
    if message_fingerprint(text) in fps or bare_print(text, reasoning, fps) is not None:
        return True
    same = sided(request.role, message) and message.text and alike(text, message, ())
    return bool(same) and not (last.text and alike(text, last, ()))
