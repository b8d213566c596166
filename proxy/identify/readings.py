"""The ways ST may carry a chat in a request: each of its quirks a named reading. Pure.

ST does not always send a chat's messages as its file has them. Each way it may differ is
a *reading* here, and identification tries them in the order listed, each at its level:

- `REQUEST`, how the request's messages are cut (`proxy.chat.providers.identify_parsed`
  reads it once for each that applies, until one identifies the request whole): a single
  user message taken apart (`proxy.identify.single`; with it, the request as it came is
  never tried), the request as it came, and turns that ST merged taken apart
  (`proxy.identify.merged`).
- `HISTORY`, where its chat history ends (`proxy.identify.match.identify`): as found, and
  without a last message that is ST's prompt after the history.
- `MESSAGE`, a request message that is no file message as it is (`match._align`, in
  order, the first that holds): a run of same-side messages that ST merged and changed,
  and one message that ST changed on its way (`proxy.identify.changed`: a prompt-only
  regex script, a status block cut, an attached file, a speaker's `Name: `).
- `TEXT`, a message's text printed another way when no chat holds it as it came
  (`match.prints`): without the reasoning ST wrote before it.

How the request's end meets its file's end, and the generation kind that tells, are
tables of their own (`match.ENDINGS`, `match.AT_THE_END`). A new quirk is a new reading in
its list, with its own test (tests/identify/test_readings.py), not a branch in the matcher.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from proxy.core.fingerprints import IndexedMessage
from proxy.core.models import ChatMessage, HistorySpan, Identification
from proxy.core.placement import find_history
from proxy.identify.changed import bare_print, is_changed, merged_run
from proxy.identify.chat_index import ChatIndex
from proxy.identify.merged import unmerged
from proxy.identify.reasoning import ReasoningFormat
from proxy.identify.single import read_single

F = TypeVar("F")


@dataclass(frozen=True, slots=True)
class Reading(Generic[F]):
    """One of ST's quirks: what it is, in words for a reader, and how it is read."""

    name: str
    read: F


# -- how the request's messages are cut -----------------------------------------------


@dataclass(frozen=True, slots=True)
class Asked:
    """A request as its `REQUEST` readings see it: its messages and history, and what its
    wire format says of how ST may have carried the chat (`adapters.base.Layout`)."""

    messages: Sequence[ChatMessage]
    markers: Sequence[str]  # where its chat history starts
    found: HistorySpan | None = None  # its history, when a reading found it already
    unsplit: tuple[str, ...] = ()  # a single user message's chat paragraphs, not cut yet
    merges: bool = False  # whether ST may have merged chat messages into one turn
    merged_with: str = "\n\n"
    prompts_in_replies: bool = True


# Request index -> the messages it stands for, in order; empty: the request as it is.
Parts = Mapping[int, Sequence[ChatMessage]]
# None: the reading does not apply to this request.
ReadRequest = Callable[[Asked, ChatIndex], Parts | None]


def _single(asked: Asked, index: ChatIndex) -> Parts | None:
    if not asked.unsplit:
        return None
    head = asked.messages[:-1]  # ST's prompts before the chat; the last is the one message
    return {len(head): read_single(head, asked.unsplit, index)[len(head) :]}


def _as_it_came(asked: Asked, index: ChatIndex) -> Parts | None:
    return None if asked.unsplit else {}


def _unmerged(asked: Asked, index: ChatIndex) -> Parts | None:
    if not asked.merges:
        return None
    span = asked.found or find_history(asked.messages, asked.markers)
    parts = unmerged(
        asked.messages,
        span,
        index.by_fp,
        asked.merged_with,
        prompts_in_replies=asked.prompts_in_replies,
    )
    return parts or None


REQUEST: tuple[Reading[ReadRequest], ...] = (
    Reading("a single user message, its paragraphs taken apart into the chat's messages",
            _single),
    Reading("the request as it came", _as_it_came),
    Reading("turns that ST merged (Claude, a text prompt, post-processing) taken apart",
            _unmerged),
)  # fmt: skip


def whole(ident: Identification | None, span: HistorySpan) -> bool:
    """Whether a reading identified the request in full: every message its chat's as it
    is, the history's last one among them (no later reading can do better)."""
    return (
        ident is not None
        and ident.confidence == 1.0
        and not ident.changed
        and span.indices[-1:] == ident.history[-1:]
    )


def extent(ident: Identification | None, span: HistorySpan) -> tuple[int, bool]:
    """How much of a request its chat matched, to compare two readings: the messages, then
    whether its history's last one is among them (not when a merged turn of ST's prompts
    ends it, which matching took for one of ST's prompts whole: its continue nudge would
    then be missed)."""
    if ident is None:
        return (-1, False)
    return (ident.matched, span.indices[-1:] == ident.history[-1:])


# -- where the chat history ends --------------------------------------------------------

# (the request's messages, its history, the fingerprints it was printed with, the
# fingerprints the index holds) -> the history read this way, or None: not this way.
ReadHistory = Callable[
    [Sequence[ChatMessage], HistorySpan, Mapping[int, int], Container[int]], HistorySpan | None
]


def _as_found(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    fps: Mapping[int, int],
    known: Container[int],
) -> HistorySpan | None:
    return span


def _before_prompt(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    fps: Mapping[int, int],
    known: Container[int],
) -> HistorySpan | None:
    """ST's own prompt as a message after the history: a Prompt Manager prompt, an
    Author's Note or world info "in chat" at depth 0 as the user's (or, in a text prompt,
    whose open turn ends it, the character's). No chat holds it, so no chat ended as the
    request did. The history without it, when there is history before it."""
    history = span.indices
    if len(history) < 2:
        return None
    last = history[-1]
    if messages[last].role == "system" or fps.get(last) in known:
        return None
    return HistorySpan(span.start, last, history[:-1])


HISTORY: tuple[Reading[ReadHistory], ...] = (
    Reading("the history as found", _as_found),
    Reading("its last message ST's prompt after the history", _before_prompt),
)


# -- a message that is no file message as it is -----------------------------------------

# (the request's messages, its history's indices, their fingerprints, the chat's newest
# messages, the history position and the file position) -> how many file messages the
# request message stands for, from `tail[f]` back; 0: not this way.
ReadMessage = Callable[
    [Sequence[ChatMessage], Sequence[int], dict[int, int], Sequence[IndexedMessage], int, int],
    int,
]


MESSAGE: tuple[Reading[ReadMessage], ...] = (
    Reading("same-side messages that ST merged into one turn and changed",
            lambda *at: 1 + run if (run := merged_run(*at)) else 0),
    Reading("a message ST changed on its way (a prompt-only regex script, a status block cut,"
            " an attached file, a speaker's name)", lambda *at: int(is_changed(*at))),
)  # fmt: skip


# -- a message's text ---------------------------------------------------------------------

# (a request message's text, the user's reasoning formats, the fingerprints the index
# holds) -> its fingerprint read this way when the index holds that, else None.
ReadText = Callable[[str, Sequence[ReasoningFormat], Container[int]], int | None]

TEXT: tuple[Reading[ReadText], ...] = (
    Reading("without the reasoning ST wrote before a reply", bare_print),
)
