"""Which indexed chat a request belongs to, and what kind of generation it is. Pure.

ST sends no chat id. The request's chat history is compared with the newest visible
messages of the indexed chats (`proxy.identify.chat_index`), newest first, by the fingerprints
of their whitespace-normalised text. A request message that matches nothing is one of
ST's own injections (Author's Note, world info at depth) and is skipped, unless it has the
file message's side (the user's, or a reply) and the messages before both match, or it
holds the start or the end of the file message's text: then it is that message as ST
changed it (`proxy.identify.changed`: a prompt-only regex script, ST's prompts joined). One
that ends the history is taken for ST's prompt after it when nothing fits otherwise. The
best alignment wins (the most messages matched as they are); a tie goes to the most
recently saved chat, with low confidence. Each way a request may differ from its file
(a changed or merged message, reasoning, ST's prompt after the history) is a reading in
`proxy.identify.readings`, which the matcher tries in the order listed there.

Generation kinds, from how the request's end meets the file's end:
- normal: the file's last visible message is the request's last history message, a user one
  (or, in a group, another member's reply followed by ST's group nudge, or by the next
  speaker's open turn in a text prompt);
- swipe: the file has one more assistant message than the request (regenerate, swipe);
- continue: the request ends with the file's last assistant text (or a prefix of it);
- quiet: nothing at the end matches (summaries, other quiet prompts), or ST's impersonation
  prompt (or a text prompt's open user turn) follows the history.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.core.fingerprints import IndexedMessage, message_fingerprint
from proxy.core.models import ChatMessage, Generation, HistorySpan, Identification
from proxy.identify.changed import alike, before_last, sided
from proxy.identify.chat_index import MAX_SKIPPED, TAIL, ChatEntry, ChatIndex
from proxy.identify.endings import continues, impersonating, nudged, opened, prefilled, starts
from proxy.identify.readings import HISTORY, MESSAGE, TEXT
from proxy.identify.reasoning import ReasoningFormat


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class _Fit:
    generation: Generation
    matched: int
    history: tuple[int, ...]
    target: int | None
    positions: tuple[int, ...] = ()
    changed: int = 0  # of the chat's messages `history` holds, how many ST changed (`_align`)
    # The request's end after its history (a continue's prefill) is this chat's last
    # message: a chat that ends one message earlier (a branch made before it) matches
    # as many, with that for its next reply's start, and is not as likely.
    prefill: bool = False

    @property
    def rank(self) -> tuple[int, bool]:
        """What makes one chat's fit better than another's (the newer chat wins a tie)."""
        return self.matched, self.prefill


# Not frozen: it keeps the chats it looked up (`candidates`).
@dataclass(slots=True)
class Prints:
    """The request history messages that identification compares (the newest ones) and
    their fingerprints, worked out once for finding the chats to check and for matching
    them; with the chats holding its newest messages, as the index had them."""

    history: list[int]
    fps: dict[int, int]
    _found: tuple[int, set[str]] | None = None  # (the index's version, the chats)

    def candidates(self, index: ChatIndex) -> set[str]:
        found = self._found
        if found is None or found[0] != index.version:
            # Only the newest four: a chat that holds one of them is worth aligning.
            chats = index.candidates([self.fps[i] for i in self.history[-4:]])
            found = self._found = (index.version, chats)
        return found[1]


def prints(messages: Sequence[ChatMessage], span: HistorySpan, index: ChatIndex) -> Prints:
    """The `Prints` of a request whose history is `span`. A message that no chat of
    `index` holds as it came, but does read another way (`proxy.identify.readings.TEXT`:
    without the reasoning ST wrote before it), is printed that way."""
    history = list(span.indices[-TAIL - MAX_SKIPPED :])
    fps = {i: message_fingerprint(messages[i].text) for i in history}
    known = index.by_fp
    # Only the newest TAIL can be a chat's: the index holds no older ones.
    for i in [i for i in history[-TAIL:] if fps[i] not in known]:
        if messages[i].role == "system":
            continue
        for reading in TEXT:
            other = reading.read(messages[i].text, index.reasoning, known)
            if other is not None:
                fps[i] = other
                break
    return Prints(history, fps)


def likely_chats(printed: Prints, index: ChatIndex, limit: int = 3) -> list[str]:
    """The chats that share the request's newest messages, most recently saved first."""
    chats = printed.candidates(index)
    if len(chats) < 2:
        return list(chats)[:limit]  # one chat holds them: every request's case
    return sorted(chats, key=lambda c: index.entries[c].updated, reverse=True)[:limit]


def identify(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    index: ChatIndex,
    *,
    only: str | None = None,
    printed: Prints | None = None,
) -> Identification | None:
    """The most likely chat of a request, or None when no indexed chat fits.

    `only` names the chat when the request said it (header, metadata): then only the
    generation kind and the history are worked out, against that chat. `printed`: the
    request's `prints`, when they were worked out already.
    """
    printed = printed or prints(messages, span, index)
    found: Identification | None = None
    # The readings of where the history ends (`proxy.identify.readings.HISTORY`), until
    # one matches anything: the first that does is taken.
    for n, reading in enumerate(HISTORY):
        read = reading.read(messages, span, printed.fps, index.by_fp)
        if read is None:
            continue
        again = printed if read is span else prints(messages, read, index)
        tried = _identify(messages, read, index, only, again)
        if n == 0 or (tried is not None and tried.matched > 0):
            found = tried
        if found is not None and found.matched > 0:
            break
    if found is None and only is not None and only in index.entries:
        return Identification(only, 1.0, "quiet", None, (), 0, ())
    return found


def _identify(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    index: ChatIndex,
    only: str | None,
    printed: Prints,
) -> Identification | None:
    history, fps = printed.history, printed.fps
    trailing = messages[span.end :]
    if only is not None:
        entry = index.entries.get(only)
        fit = (
            _best_fit(messages, history, fps, trailing, entry, index.reasoning)
            if entry and history
            else None
        )
        if fit is None:
            return None
        return Identification(
            only, 1.0, fit.generation, fit.target, fit.history, fit.matched, fit.positions,
            fit.changed,
        )  # fmt: skip
    if not history:
        return None
    fits: list[tuple[_Fit, ChatEntry]] = []
    for chat_id in printed.candidates(index):
        entry = index.entries[chat_id]
        fit = _best_fit(messages, history, fps, trailing, entry, index.reasoning)
        if fit is not None:
            fits.append((fit, entry))
    if not fits:
        return None
    # One fit, fully covered, is every request's case: no sort, no `min` and no `round`
    # then, each of which costs 3.11 a C path (keyword parsing, float formatting) that a
    # request would otherwise bring into the cache for nothing.
    if len(fits) > 1:
        fits.sort(key=lambda pair: (*pair[0].rank, pair[1].updated), reverse=True)
    best, entry = fits[0]
    tied = len(fits) > 1 and fits[1][0].rank == best.rank
    compared = len(history) if len(history) < len(entry.tail) else len(entry.tail)
    found = best.matched + best.changed
    if found < compared:
        # ST's prompts inside the history (an Author's Note) are no chat's messages.
        chat = len(history) - [messages[i].role for i in history].count("system")
        compared = chat if chat < len(entry.tail) else len(entry.tail)
    confidence = 1.0 if found >= compared else found / compared
    if tied:
        confidence *= 0.4
    return Identification(
        chat_id=entry.chat_id,
        confidence=confidence if confidence == 1.0 else round(confidence, 3),
        generation=best.generation,
        target_message=best.target,
        history=best.history,
        matched=best.matched,
        positions=best.positions,
        changed=best.changed,
    )


def unidentified_reason(
    messages: Sequence[ChatMessage],
    span: HistorySpan,
    index: ChatIndex,
    *,
    only: str | None = None,
) -> str:
    """Why `identify` found no chat for this request, in words for the log."""
    if only is not None:
        return f"it names chat {only!r}, which is not indexed"
    if not span.indices:
        return "it carries no chat history (no messages after the start-of-chat marker)"
    history = list(span.indices[-TAIL - MAX_SKIPPED :])
    candidates = index.candidates(message_fingerprint(messages[i].text) for i in history[-4:])
    if not candidates:
        return f"no indexed chat ({len(index.entries)}) holds any of its newest messages"
    return (
        f"{len(candidates)} chat(s) share its newest messages, but none ends the way it "
        "does (a chat not saved yet, or edited since)"
    )


def _best_fit(
    messages: Sequence[ChatMessage],
    history: list[int],
    fps: dict[int, int],
    trailing: Sequence[ChatMessage],
    entry: ChatEntry,
    reasoning: Sequence[ReasoningFormat],
) -> _Fit | None:
    """The best of the ways the request's end may meet the chat file's end (`ENDINGS`):
    the one that matches most messages, the first of equals."""
    if not entry.tail:
        return None
    best: _Fit | None = None
    for ending in ENDINGS:
        fit = ending(messages, history, fps, trailing, entry, reasoning)
        if fit is not None and (best is None or fit.matched > best.matched):
            best = fit
    return best


# What a request whose history ends where its file ends asks for, told by what follows
# its history: the first rule that holds gives the generation kind, and whether its
# target is the file's next message (True), its last (False), or none (None).
_AtEnd = Callable[[IndexedMessage, Sequence[ChatMessage], Sequence[ReasoningFormat]], bool]
AT_THE_END: tuple[tuple[str, _AtEnd, Generation, bool | None], ...] = (
    ("the user's message, answered",
     lambda last, trailing, r: last.is_user and not impersonating(trailing), "normal", True),
    ("the last reply, continued", lambda last, trailing, r: continues(trailing, last, r),
     "continue", False),
    # Before the group nudge: ST sends that with a group's continue too (above).
    ("the next group member answering after another one (or the character again)",
     lambda last, trailing, r: nudged(trailing) or opened(trailing), "normal", True),
    ("a quiet prompt (an impersonation, a summary)", lambda last, trailing, r: True,
     "quiet", None),
)  # fmt: skip


def _at_the_end(
    messages: Sequence[ChatMessage],
    history: list[int],
    fps: dict[int, int],
    trailing: Sequence[ChatMessage],
    entry: ChatEntry,
    reasoning: Sequence[ReasoningFormat],
) -> _Fit | None:
    """The request's history ends where the file ends: its last message is the file's
    last, as it is or as ST changed it (`proxy.identify.changed`)."""
    tail = entry.tail
    last, last_request = tail[-1], messages[history[-1]]
    if fps[history[-1]] not in last.fps:
        if _partial(last, last_request, reasoning):
            return None  # `_partial_reply`'s
        # The newest message changed: only one that holds the file text's start or end
        # (ST's own prompt there may have a reply's side, and follow the message before).
        if not (sided(last_request.role, last) and alike(last_request.text, last, reasoning)):
            return None
    matched, changed, used, at = _align(messages, history, fps, tail, len(tail) - 1)
    for _, holds, kind, following in AT_THE_END:
        if holds(last, trailing, reasoning):
            target = None if following is None else entry.total if following else last.position
            return _Fit(kind, matched, used, target, at, changed)
    return None


def _partial(
    last: IndexedMessage, last_request: ChatMessage, reasoning: Sequence[ReasoningFormat]
) -> bool:
    return last_request.role == "assistant" and starts(last, last_request.text, reasoning)


def _partial_reply(
    messages: Sequence[ChatMessage],
    history: list[int],
    fps: dict[int, int],
    trailing: Sequence[ChatMessage],
    entry: ChatEntry,
    reasoning: Sequence[ReasoningFormat],
) -> _Fit | None:
    """A continue of a partial reply the file already holds in full (or one that a regex
    script of the user's cut short: an impersonation may follow it)."""
    tail = entry.tail
    last, last_request = tail[-1], messages[history[-1]]
    if fps[history[-1]] in last.fps or not _partial(last, last_request, reasoning):
        return None
    matched, changed, used, at = _align(messages, history[:-1], fps, tail, len(tail) - 2)
    used, at = (*used, history[-1]), (*at, last.position)
    went: Generation = "quiet" if impersonating(trailing) else "continue"
    return _Fit(went, matched + 1, used, last.position, at, changed)


def _regenerated(
    messages: Sequence[ChatMessage],
    history: list[int],
    fps: dict[int, int],
    trailing: Sequence[ChatMessage],
    entry: ChatEntry,
    reasoning: Sequence[ReasoningFormat],
) -> _Fit | None:
    """The file has one more assistant message: the request regenerates it (a swipe),
    unless the request carries that message as a continue-prefill at its very end."""
    tail = entry.tail
    last = tail[-1]
    if len(tail) < 2 or last.is_user or not before_last(messages[history[-1]], tail, reasoning):
        return None
    matched, changed, used, at = _align(messages, history, fps, tail, len(tail) - 2)
    continued = prefilled(trailing, last, reasoning)
    kind: Generation = "continue" if continued else "swipe"
    return _Fit(kind, matched, used, last.position, at, changed, continued)


def _swipe_after_reply(
    messages: Sequence[ChatMessage],
    history: list[int],
    fps: dict[int, int],
    trailing: Sequence[ChatMessage],
    entry: ChatEntry,
    reasoning: Sequence[ReasoningFormat],
) -> _Fit | None:
    """A swipe of the file's last reply when the message before it is a reply too: the
    request ends with that one (or as ST changed it), where a prefill would be."""
    tail = entry.tail
    if len(tail) < 3 or tail[-1].is_user or tail[-2].is_user:
        return None
    if not trailing or trailing[-1].role != "assistant":
        return None
    if not before_last(trailing[-1], tail, reasoning):
        return None
    matched, changed, used, at = _align(messages, history, fps, tail, len(tail) - 3)
    final = len(messages) - 1  # the trailing message is the request's last
    at = (*at, tail[-2].position)
    return _Fit("swipe", matched + 1, (*used, final), tail[-1].position, at, changed)


# The ways a request's end may meet its chat file's end, each read from its own place in
# the file; `_best_fit` keeps the one that matches most (the first of equals).
ENDINGS = (_at_the_end, _partial_reply, _regenerated, _swipe_after_reply)


def _align(
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    fps: dict[int, int],
    tail: Sequence[IndexedMessage],
    start: int,
) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """Walk back from request `history[-1]` and file `tail[start]`; skip unmatched requests
    (ST's own prompts), but take one for the file's messages it stands for when it reads
    as them another way (`proxy.identify.readings.MESSAGE`: ST changed it, or merged a run
    of them). Returns the count of the matched, of the changed, the request indices of
    both and their chat positions."""
    matched: list[int] = []
    positions: list[int] = []
    changed = 0
    r, f, skipped = len(history) - 1, start, 0
    while r >= 0 and f >= 0:
        if fps[history[r]] in tail[f].fps:
            matched.append(history[r])
            positions.append(tail[f].position)
            f -= 1
            skipped = 0
        elif stands := next(
            (n for reading in MESSAGE if (n := reading.read(messages, history, fps, tail, r, f))),
            0,
        ):
            # The first of the `MESSAGE` readings that holds: how many file messages from
            # `tail[f]` back the request message stands for.
            matched.append(history[r])
            # A merged run stands at its newest position: left out only once all of it is
            # covered (`proxy.core.trim`).
            positions.append(tail[f].position)
            f -= stands
            skipped = 0
            changed += 1
        else:
            skipped += 1
            if skipped > MAX_SKIPPED:
                break
        r -= 1
    used, at = tuple(reversed(matched)), tuple(reversed(positions))
    return len(matched) - changed, changed, used, at
