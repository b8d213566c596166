"""Chat messages that ST changed on their way into a request, still taken for the file's.
Pure.

ST does not always send a chat message as its file has it: a regex script of the user's
may alter the prompt only (a status block cut off every reply), a file attached to it
adds text, ST writes a reply's reasoning before it ("Add to Prompts"), and for Claude or
a post-processed prompt ST joins its own prompts (a group nudge, an Author's Note) to a
chat message. `proxy.identify.match` lines a request's history up with a chat's newest
messages; these say when a request message that is not a file message's text is that
message all the same, and when it is rather one of ST's own prompts, which are skipped.

The rule: a changed message keeps its side (the user's for the user's, a reply for a
reply), and either the messages around it match (the ones before both, past at most
`CHANGED_RUN` - 1 more changed ones of the same sides: every reply of a chat may carry the
status block) or it holds the start or the end of the file message's text (where the index
keeps that text: the newest `TEXT_KEPT` of a chat). ST's own prompt between chat messages
(an Author's Note) does neither: the message before it is not the one before the file's.

For Claude and a post-processed prompt, ST also joins same-side neighbours into one
message (a group's replies in a row, the user's message sent twice). When those were
changed too, no fingerprint finds the parts (`proxy.identify.merged` takes apart the turns
whose parts are the file's as they are). A changed message with a blank line inside it
then stands for a run of file messages of its side (`merged_run`): from the one whose text
holds its start, or from the one after the message that the request message before it is.
"""

from __future__ import annotations

from collections.abc import Container, Sequence

from proxy.core.fingerprints import IndexedMessage, message_fingerprint, normalize, readings
from proxy.core.models import ChatMessage
from proxy.identify.reasoning import ReasoningFormat, without_reasoning

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
    ours = normalize(without_reasoning(text, reasoning) or text)
    return _holds(message.text, ours, ends=True)


def _holds(theirs: str, ours: str, *, ends: bool) -> bool:
    """Whether a file text holds the start (or, `ends`, the end) of a normalised request
    text, as it is or past a speaker's `Name: `."""
    for part in readings(ours):
        n = min(SHARED, len(part))
        if n >= 8 and (part[:n] in theirs or (ends and part[-n:] in theirs)):
            return True
    return False


def merged_run(
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    fps: dict[int, int],
    tail: Sequence[IndexedMessage],
    r: int,
    f: int,
) -> int:
    """How many file messages before `tail[f]` request `history[r]` holds besides
    `tail[f]`, ST having merged same-side neighbours into it (and changed them, else
    `proxy.identify.merged` takes them apart): 0 for none.

    Only a request message with a blank line in it, of `tail[f]`'s side, whose message
    before is not the file's before `tail[f]`, and only file messages of its side, at most
    `CHANGED_RUN` - 1 of them: the run after the message that the request's message before
    it is, or from the one whose text holds the request's start (where the index keeps
    their texts; not `tail[f]`'s own start)."""
    request = messages[history[r]]
    if "\n\n" not in request.text or f < 1 or not sided(request.role, tail[f]):
        return 0
    before = fps[history[r - 1]] if r > 0 else None
    if before is not None and before in tail[f - 1].fps:
        return 0
    sides = []  # the file messages before `tail[f]` of its side, as far back as may be
    for k in range(1, CHANGED_RUN):
        if f < k or not sided(request.role, tail[f - k]):
            break
        if f > k and before is not None and before in tail[f - k - 1].fps:
            return k
        sides.append(k)
    kept = [k for k in sides if tail[f - k].text]
    if not kept:
        return 0
    # Normalising a text costs tens of microseconds: only for a run the texts may tell.
    ours = normalize(request.text)
    if tail[f].text and _holds(tail[f].text, ours, ends=False):
        return 0  # it starts as the message it stands for: no other before it
    return next((k for k in kept if _holds(tail[f - k].text, ours, ends=False)), 0)


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
    # Past its reasoning too: a reply ST changed (its post-history instructions joined to
    # it in a single user message) that it also wrote its reasoning before.
    same = sided(request.role, message) and message.text and alike(text, message, reasoning)
    return bool(same) and not (last.text and alike(text, last, reasoning))
