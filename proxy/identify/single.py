"""ST's single user message read as the chat it holds. Pure.

ST's `mergeMessages` with `single` ("Single user message", its Prompt Post-Processing for
a Custom endpoint) names each speaker in the text (`{{char}}: ` before a reply that does
not start with a group member's name, `{{user}}: ` before the user's message, a `name`
folded in as `name: `), makes every message the user's and joins them all with a blank
line. The request alone does not tell where one chat message ends and the next starts (a
message may hold blank lines), nor which speaker is the user: the adapter
(`adapters.single`) keeps the paragraphs after the start-of-chat prompt, and this reading
takes them apart with the chat index, before identification: a paragraph that starts
with a speaker's `Name: ` starts a message, a speaker being a name whose message the index
holds (or, in the chat so found, one whose newest message starts as the paragraph does: a
reply that a regex script changed on its way), and the index says whether it is the
user's; unless the index holds that message and the one before it as one (a reply that
wrote the user's line as `Name: ` stays one reply), or the line is in the text of the
reply before it that a regex script changed on its way (`_quoted`). A paragraph before the
first message is ST's prompt (world info at a depth); ST's prompts after a message the
index holds are told apart from it, and so are its nudges that end the request after one
it does not; any other joins the message before it and is taken apart from it as in any
merged turn (`proxy.identify.merged`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from proxy.core.fingerprints import IndexedMessage, fingerprint, message_fingerprint, normalize
from proxy.core.models import ChatMessage
from proxy.identify.chat_index import MAX_SKIPPED, TAIL, ChatIndex
from proxy.identify.endings import (
    CONTINUE_JOINED,
    CONTINUE_NUDGE,
    GROUP_NUDGE,
    IMPERSONATION,
    SHARED,
    says,
)
from proxy.identify.reasoning import without_reasoning

SEPARATOR = "\n\n"  # what ST joins the messages with
# ST's `${name}: ` before a speaker's message (a name of a line, at most 40 characters).
_SPEAKER = re.compile(r"([^\n:]{1,40}): ")
LONGEST = 12  # paragraphs of a message that tells a speaker (a longer one tells nothing)
TRIES = 4  # a name's newest paragraphs looked up to tell whether it is a speaker's
JOINS = 8  # the newest messages split at a speaker's name that are looked for joined again
# ST's nudges that end a request: each as it starts a paragraph, and as a line of one (ST's
# "squash system messages" joins them to the post-history instructions), as `endings` reads them.
NUDGES = ((CONTINUE_NUDGE, CONTINUE_JOINED), (IMPERSONATION, IMPERSONATION), (GROUP_NUDGE, ""))
NUDGE_REACH = 4  # paragraphs after a nudge that may be post-history instructions


def read_single(
    head: Sequence[ChatMessage], paragraphs: Sequence[str], index: ChatIndex
) -> list[ChatMessage]:
    """The request's messages: `head` (ST's prompts up to the start of the chat) and its
    chat `paragraphs` taken apart into messages, their speakers' roles told by the chat
    index."""
    if not paragraphs:
        return list(head)
    names = [_name(p) for p in paragraphs]
    roles, kept = _speakers(paragraphs, names, index)
    # Only names the index knows as speakers start a message: a paragraph of a message
    # that starts with `Note: ` stays the message's.
    turns = _rejoined(
        paragraphs, _turns(range(len(paragraphs)), lambda i: names[i] in roles), index, kept
    )
    # Only a chat's newest messages are indexed: an older one is not looked up.
    indexed = len(turns) - TAIL - MAX_SKIPPED
    messages = list(head)
    for k, turn in enumerate(turns):
        texts = [paragraphs[i] for i in turn]
        role = roles.get(names[turn[0]])
        # ST's prompts: before the first message, and after a message the index holds
        # (the impersonation prompt, the continue nudge: a reply that ended the request
        # would be taken for a prefill with them).
        if role is None:
            messages += [ChatMessage("system", p) for p in texts]
            continue
        # Where the message ends: after its longest start the index holds, or (none held:
        # a message older than the index keeps, or one ST changed) at the turn's end.
        cut = (_held_start(texts, index) if len(texts) > 1 and k >= indexed else 0) or len(texts)
        if cut == len(texts) and k == len(turns) - 1:
            cut = _before_nudges(texts)
        messages.append(ChatMessage(role, SEPARATOR.join(texts[:cut])))
        messages += [ChatMessage("system", p) for p in texts[cut:]]
    return messages


def _speakers(
    paragraphs: Sequence[str], names: Sequence[str], index: ChatIndex
) -> tuple[dict[str, str], list[IndexedMessage]]:
    """The speakers' names, each with its role ("user" or "assistant"), and the newest
    messages (with their texts) of the chats that hold them: a name is one when
    a paragraph that starts with it (`names`), alone or with up to `LONGEST` - 1 after it,
    is a message the index holds. Then, in the chats so found, a name whose paragraph
    starts one of their newest messages (a reply that a regex script changed on its way
    holds the file's text at its start). Each name is looked for in its newest `TRIES`
    paragraphs (the index holds a chat's newest messages): a name that is none, or one
    whose every reply was changed, costs a request that much, not its whole history."""
    roles: dict[str, str] = {}
    chats: set[str] = set()
    for i in _newest(names, roles):
        for end in range(i + 1, min(len(paragraphs), i + LONGEST) + 1):
            found = _indexed(SEPARATOR.join(paragraphs[i:end]), index)
            if found is not None:
                holders, message = found
                roles[names[i]] = "user" if message.is_user else "assistant"
                chats.update(holders)
                break
    entries = [index.entries.get(c) for c in chats]
    kept = [m for entry in entries if entry is not None for m in entry.tail if m.text]
    for i in _newest(names, roles) if kept else ():
        held = _started(paragraphs, i, names[i], index, kept)
        if held is not None:
            roles[names[i]] = "user" if held.is_user else "assistant"
    return roles, kept


def _started(
    paragraphs: Sequence[str], i: int, name: str, index: ChatIndex, kept: Sequence[IndexedMessage]
) -> IndexedMessage | None:
    """The message of `kept` that the one starting at paragraph `i` (`name: text`) starts
    as, if any: a reply that a regex script changed on its way holds the file's start."""
    # The reply's own text: past the reasoning ST wrote before it (and its blank line).
    text = SEPARATOR.join(paragraphs[i : i + LONGEST])[len(name) + 2 :]
    text = without_reasoning(text, index.reasoning) or text
    start = normalize(text.split(SEPARATOR, 1)[0])[:SHARED]
    return next((m for m in kept if start and m.text.startswith(start)), None)


def _newest(names: Sequence[str], roles: Mapping[str, str]) -> Iterator[int]:
    """The paragraphs that start with a name not in `roles` (as it is when each is asked
    for), newest first, the newest `TRIES` of each name."""
    tried: dict[str, int] = {}
    for i in range(len(names) - 1, -1, -1):
        name = names[i]
        if name and name not in roles and tried.get(name, 0) < TRIES:
            tried[name] = tried.get(name, 0) + 1
            yield i


def _turns(items: Iterable[int], starts: Callable[[int], bool]) -> list[list[int]]:
    """The paragraphs (by their indices) in runs, a new one at each that `starts` holds for."""
    turns: list[list[int]] = []
    for item in items:
        if not turns or starts(item):
            turns.append([item])
        else:
            turns[-1].append(item)
    return turns


def _rejoined(
    paragraphs: Sequence[str],
    turns: list[list[int]],
    index: ChatIndex,
    kept: Sequence[IndexedMessage],
) -> list[list[int]]:
    """`turns` with the messages put back together that a paragraph starting with a
    speaker's `Name: ` split (a reply that writes the user's line, or quotes its own
    speaker): a turn the index holds no message of, joined with the turns after it that
    it holds none of either, when together (the last of them at least up to its first
    paragraph) they are a message it holds. What is left of that last turn (ST's prompts
    after the message) stays a turn of its own. The newest `JOINS` such turns are tried,
    newest first: each costs up to `LONGEST` lookups."""
    first = len(turns) - TAIL - MAX_SKIPPED
    # The lru-cached fingerprint: identification looks the same texts up next.
    held = [
        k >= first
        and message_fingerprint(SEPARATOR.join(paragraphs[i] for i in turn)) in index.by_fp
        for k, turn in enumerate(turns)
    ]
    # The index keeps a chat's newest messages: before the oldest turn it holds, only
    # the message just before it can be one it holds, split in two.
    oldest = next((k for k, known in enumerate(held) if known), len(turns))
    tries = JOINS
    for k in range(len(turns) - 2, max(oldest - 3, -1), -1):
        if held[k] or held[k + 1]:
            continue
        if tries == 0:
            break
        tries -= 1
        joined, rejoined = turns[k], False
        for j in range(k + 1, len(turns)):
            if held[j] or len(joined) >= LONGEST:
                break
            whole = joined + turns[j]
            end = _held_start([paragraphs[i] for i in whole[:LONGEST]], index, len(joined))
            if end:
                rest = [whole[end:]] if end < len(whole) else []
                turns[k : j + 1] = [whole[:end], *rest]
                held[k : j + 1] = [True] * (1 + len(rest))
                rejoined = True
                break
            joined = whole
        quoted = 0 if rejoined else _quoted(paragraphs, turns, held, k, index, kept)
        if quoted:
            end = k + quoted + 1
            turns[k:end] = [[i for turn in turns[k:end] for i in turn]]
            held[k:end] = [False]
    return turns


def _quoted(
    paragraphs: Sequence[str],
    turns: Sequence[Sequence[int]],
    held: Sequence[bool],
    k: int,
    index: ChatIndex,
    kept: Sequence[IndexedMessage],
) -> int:
    """How many turns after turn `k` are lines of the reply it starts, when no join of
    them is a message the index holds: a reply that a regex script changed on its way
    (its status block cut), which writes the user's lines as `Name: ` (each in the text of
    the file's reply, and none a message the index holds as it is), one reply still."""
    name = _name(paragraphs[turns[k][0]])
    reply = _started(paragraphs, turns[k][0], name, index, kept) if name and kept else None
    if reply is None or reply.is_user:
        return 0
    count = 0
    for j in range(k + 1, len(turns)):
        # The index keeps the reply's text normalized (its paragraphs joined by a space).
        if held[j] or normalize(paragraphs[turns[j][0]]) not in reply.text:
            break
        count += 1
    return count


def _held_start(texts: Sequence[str], index: ChatIndex, least: int = 0) -> int:
    """How many of `texts` (paragraphs) its longest start that the index holds as a message
    takes, more than `least` of them; 0 when it holds none."""
    for end in range(len(texts), least, -1):
        if fingerprint(SEPARATOR.join(texts[:end])) in index.by_fp:
            return end
    return 0


def _before_nudges(turn: Sequence[str]) -> int:
    """Where the request's last message ends when the index holds none of its starts (a
    reply that a regex script changed on its way): before the nudges of ST's that end
    the request (continue, impersonation, the group's next speaker), as they read, and
    what follows them (your post-history instructions, which ST puts after them): the
    earliest nudge among the turn's last `NUDGE_REACH` + 1 paragraphs."""
    cut = len(turn)
    for k in range(len(turn) - 1, max(0, len(turn) - 2 - NUDGE_REACH), -1):
        if any(says([ChatMessage("system", turn[k])], *nudge) for nudge in NUDGES):
            cut = k
    return cut


def _name(paragraph: str) -> str:
    found = _SPEAKER.match(paragraph)
    return found.group(1) if found is not None else ""


def _indexed(text: str, index: ChatIndex) -> tuple[tuple[str, ...], IndexedMessage] | None:
    """The indexed message whose text (`Name: text`) this is, and every chat that holds
    it, if any does. All of them: a branch shares its parent's older messages, and the
    index keeps the texts of a chat's newest only (`TEXT_KEPT`), which the branch's are
    and the parent's may not be: the replies looked for next are found by their start in
    those texts."""
    fp = fingerprint(text)
    holders = index.by_fp.get(fp, ())
    for chat_id in holders:
        entry = index.entries.get(chat_id)
        for message in entry.tail if entry is not None else ():
            if fp in message.fps:
                return holders, message
    return None
