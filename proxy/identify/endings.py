"""How a request ends: ST's prompts after the chat history, and what they tell of the
generation (`proxy.identify.match`). Pure.

After the history ST may send its continue nudge, its group nudge, its impersonation
prompt, other prompts of its own (post-history instructions, an Author's Note at depth 0),
a reply's start as the prefill, or a text prompt's open turn.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.core.fingerprints import IndexedMessage, normalize, readings
from proxy.core.models import ChatMessage
from proxy.identify.reasoning import ReasoningFormat, without_reasoning

CONTINUE_NUDGE = "[continue"
# A line that is ST's default continue nudge (squashed after an Author's Note at depth 0):
# longer, as a line inside other instructions is no sure sign of the nudge.
CONTINUE_JOINED = "[continue your last message"
GROUP_NUDGE = "[write the next reply only as"
IMPERSONATION = "[write your next reply from the point of view of"  # ST's default prompt
HEAD = 200  # characters of a trailing prompt that telling those three apart reads
SHARED = 64  # characters a continued reply's start shares with the file's, at least


def says(trailing: Sequence[ChatMessage], prompt: str, line: str = "") -> bool:
    """Whether one of ST's prompts after the history starts as `prompt` (lower case): a
    system message, or the user's (Claude's turns are, and a prompt in chat at depth 0
    may be: `proxy.identify.readings.HISTORY`). Only each one's head is
    normalised: a request's post-history instructions can run to kilobytes, and a new
    reply after the user's message looks for the impersonation prompt. `line`: or a line
    of one starts so (ST's "squash system messages" joins its prompts after the history
    into one message)."""
    for m in trailing:
        if m.role == "assistant":
            continue
        if normalize(m.text[:HEAD]).lower().startswith(prompt):
            return True
        # ST's prompts open with "[": a multi-line instruction without a line so opening
        # (most, per request) is not lower-cased whole.
        if line and "\n[" in m.text and "\n" + line in m.text.lower():
            return True
    return False


def nudged(trailing: Sequence[ChatMessage]) -> bool:
    return says(trailing, GROUP_NUDGE)


def opened(trailing: Sequence[ChatMessage]) -> bool:
    """A text prompt ends with a speaker's open turn (`Seraphina:`): a new reply, the
    group nudge of a prompt that has none."""
    return any(m.role == "assistant" and m.name and not m.text.strip() for m in trailing)


def impersonating(trailing: Sequence[ChatMessage]) -> bool:
    """ST writes the user's next message: its impersonation prompt, or (a text prompt)
    the user's open turn (`find_history` leaves it out of the history, empty)."""
    open_turn = any(m.role == "user" and not m.text.strip() for m in trailing)
    return open_turn or says(trailing, IMPERSONATION, IMPERSONATION)


def continues(
    trailing: Sequence[ChatMessage], last: IndexedMessage, reasoning: Sequence[ReasoningFormat]
) -> bool:
    return says(trailing, CONTINUE_NUDGE, CONTINUE_JOINED) or prefilled(trailing, last, reasoning)


def prefilled(
    trailing: Sequence[ChatMessage], last: IndexedMessage, reasoning: Sequence[ReasoningFormat]
) -> bool:
    """The request ends with the start of the file's last message: a reply's start, or
    a text prompt's last lines from one as a speaker's (`Name: text`) that were taken for
    ST's own (a group member whose name starts no other turn, the reply ST changed on its
    way: a status block cut, reasoning written before it), where ST continues it."""
    if any(
        m.role == "assistant" and m.text.strip() and starts(last, m.text, reasoning)
        for m in trailing
    ):
        return True
    # From the end, the system messages back to a named one: with instruct off, the
    # reply's lines after its first read as more of ST's (its reasoning's, a paragraph's).
    # Only single lines are walked past: a prompt of several (post-history instructions,
    # kilobytes) is ST's own, and is not normalised whole on the chat path.
    for at in range(len(trailing) - 1, -1, -1):
        line = trailing[at]
        if line.role != "system":
            return False
        if len(readings(normalize(line.text[:HEAD]))) == 2:  # named: only its head read
            return starts(last, "\n".join(m.text for m in trailing[at:]), reasoning)
        if "\n" in line.text:
            return False
    return False


def starts(last: IndexedMessage, text: str, reasoning: Sequence[ReasoningFormat] = ()) -> bool:
    """Whether the file's last message starts with `text`, or with `text` after a
    speaker's `Name: ` (a text prompt tells a group member's name apart only once it
    starts two turns), or without the reasoning ST wrote before it (a continued reply's
    always goes in). A long `text` need only share its start (`SHARED`): a regex script
    that alters the prompt only may have changed the rest."""
    for part in readings(normalize(text)):
        if last.text.startswith(part if len(part) < SHARED else part[:SHARED]):
            return True
    bare = without_reasoning(text, reasoning) if reasoning else None
    return bare is not None and bare.strip() != "" and starts(last, bare)
