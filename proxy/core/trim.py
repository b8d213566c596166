"""Trimming: which chat messages of a request the running recap already covers, and may
therefore be left out (the proxy's form of ST-Auto-Recap's auto-hide). Pure.

Only chat-history messages are ever dropped, and only those that line up, in order, with
the chat's covered messages: a request message that matches none of them (the main
prompt, ST's injections, an Author's Note at depth, a message newer than the cutoff)
stays, unless it is the user's or a reply and stands where a covered message does
between two that match (that message as ST changed it on its way). This is stricter than
auto-hide, which hid a scene as soon as its break was placed, before the running recap
held it (its report §15.11).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from proxy.core.fingerprints import (
    NAME_LONGEST,
    Fingerprints,
    fingerprint,
    message_fingerprint,
    readings,
)
from proxy.core.models import ChatMessage

MAX_SKIPPED = 12  # unmatched request messages (injections) tolerated inside the covered run
# Request messages that one covered message may have been read as. A request that carries
# no message bounds (ST's "single user message", `adapters.single`; a text prompt with
# instruct off) splits a reply where a paragraph of it starts like a speaker's `Name: `.
GLUED = 3
SPEAKER_HEAD = NAME_LONGEST + 3  # a speaker's `Name: ` is in this much of a text


def trim_cutoff(breaks: Sequence[int], covered_through: int | None, scene_count: int) -> int | None:
    """The newest position that may be left out, or None for "leave nothing out".

    `breaks` are the visible scene breaks' positions, ascending; `covered_through` is the
    newest position the current running recap covers. With `scene_count` N >= 1 the last
    N scenes stay (the open scene is the last one), as ST-Auto-Recap's
    `auto_hide_scene_count`; 0 leaves out everything covered; -1 nothing.
    """
    if scene_count < 0 or covered_through is None:
        return None
    if scene_count == 0:
        return covered_through
    if len(breaks) < scene_count:
        return None
    return min(breaks[-scene_count], covered_through)


@dataclass(frozen=True, slots=True)
class Covered:
    """The chat's visible messages up to the cutoff, oldest first: fingerprints of their
    normalised text (and its `Name: ` / macro variants), and a hash of the exact text,
    which is what ST sends almost always and is much cheaper to compare."""

    fps: tuple[Fingerprints, ...]
    raws: tuple[int, ...] = ()
    by_fp: dict[int, list[int]] = field(default_factory=dict)
    by_raw: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, fps: Sequence[Fingerprints], texts: Sequence[str] = ()) -> Covered:
        by_fp: dict[int, list[int]] = {}
        for i, prints in enumerate(fps):
            for fp in prints:
                by_fp.setdefault(fp, []).append(i)
        raws = tuple(hash(text) for text in texts)
        by_raw: dict[int, list[int]] = {}
        for i, raw in enumerate(raws):
            by_raw.setdefault(raw, []).append(i)
        return cls(tuple(fps), raws, by_fp, by_raw)

    def extended(self, fps: Sequence[Fingerprints], texts: Sequence[str]) -> Covered:
        """These messages covered too, after the others (the cutoff moved on): a new
        value that shares what did not change, so that a long chat's covered messages
        are not all fingerprinted again at every scene."""
        base = len(self.fps)
        by_fp = dict(self.by_fp)
        for i, prints in enumerate(fps, base):
            for fp in prints:
                by_fp[fp] = [*by_fp.get(fp, ()), i]
        raws = tuple(hash(text) for text in texts)
        by_raw = dict(self.by_raw)
        for i, raw in enumerate(raws, base):
            by_raw[raw] = [*by_raw.get(raw, ()), i]
        return Covered((*self.fps, *fps), (*self.raws, *raws), by_fp, by_raw)


class _Request:
    """A request's history texts, hashed all at once (in C: the exact text is what ST
    sends almost always), the normalised fingerprint only when the exact text does not
    match."""

    def __init__(self, messages: Sequence[ChatMessage], history: Sequence[int]) -> None:
        self.messages, self.history = messages, history
        self.texts = [messages[i].text for i in history]
        self.hashes = tuple(map(hash, self.texts))
        self._fps: dict[int, int] = {}
        # `glued` tries left: a request that matches nothing is not joined up pair by pair
        # (two fingerprints of kilobytes each, every message: tens of ms per request).
        self.joins = MAX_SKIPPED

    def fp(self, k: int) -> int:
        found = self._fps.get(k)
        if found is None:
            found = self._fps[k] = message_fingerprint(self.texts[k])
        return found

    def may_be_changed(self, k: int) -> bool:
        """Whether history message `k` may be a chat message ST changed on its way: the
        user's or a reply (ST's own prompts are the system's)."""
        return self.messages[self.history[k]].role != "system"

    def matches(self, k: int, covered: Covered, j: int) -> bool:
        if covered.raws and self.hashes[k] == covered.raws[j]:
            return True
        return self.fp(k) in covered.fps[j]

    def starts(self, k: int, covered: Covered) -> list[int]:
        found = covered.by_raw.get(self.hashes[k]) if covered.raws else None
        return found or covered.by_fp.get(self.fp(k), [])

    def glued(self, k: int, covered: Covered, j: int | None, stop: int) -> tuple[int, int]:
        """How many history messages from `k` (2 to `GLUED`, before `stop`), joined as ST
        joins paragraphs, are one covered message, and which: covered message `j`, or
        (None: the run is to start) one that the message after them follows; (0, 0) when
        none are. The plain fingerprint, not the memoised one: the joins are one-offs.
        Only the user's messages and replies are joined, `joins` times a request."""
        if self.joins == 0 or k + 1 >= stop or not self.may_be_changed(k):
            return 0, 0
        # A message is split where a speaker's line starts: the part after is one.
        after = self.messages[self.history[k + 1]]
        if after.name is None and len(readings(after.text[:SPEAKER_HEAD])) < 2:
            return 0, 0
        self.joins -= 1
        for n in range(2, min(GLUED, stop - k) + 1):
            if not self.may_be_changed(k + n - 1):
                break
            fp = fingerprint("\n\n".join([self.texts[k], *map(self.said, range(k + 1, k + n))]))
            if j is not None:
                if fp in covered.fps[j]:
                    return n, j
                continue
            last = len(covered.fps) - 1
            for start in covered.by_fp.get(fp, ()):
                if start == last or (k + n < stop and self.matches(k + n, covered, start + 1)):
                    return n, start
        return 0, 0

    def said(self, k: int) -> str:
        """History message `k` as its speaker's line reads (`Name: text`): a message's
        later part that a text prompt's turn split off carries its name apart."""
        message = self.messages[self.history[k]]
        name = message.name
        return (
            f"{name}: {message.text}"
            if name and not message.text.startswith(f"{name}: ")
            else message.text
        )

    def exact_run(self, k: int, covered: Covered, j: int, stop: int) -> int:
        """How many history messages from `k` (before `stop`) are, text for text, the
        covered ones from `j`: all of them or none. A long chat's covered history is
        one such run, compared in one step rather than message by message."""
        n = min(stop - k, len(covered.raws) - j)
        if n > 1 and self.hashes[k : k + n] == covered.raws[j : j + n]:
            return n
        return 0


def _first_kept(history: Sequence[int], keep: Collection[int]) -> int:
    """Where in `history` the first index of `keep` is (its length: none is)."""
    if not keep:
        return len(history)
    if history and history[0] in keep:
        return 0  # all of the request is newer: a request ST cut past the covered part
    # History is in request order and `keep` is mostly a part of it: its least index,
    # found by bisection, is then the first one.
    first = min(keep)
    at = bisect_left(history, first)
    if at < len(history) and history[at] == first:
        return at
    return next((k for k, index in enumerate(history) if index in keep), len(history))


def _anchor(request: _Request, covered: Covered, k: int) -> int | None:
    """The covered message a run of covered messages starts at with request message `k`
    (of its history): one `k` matches whose next one the next request message matches
    too, or the next but one (the one between as ST changed it); the last covered
    message alone. None: `k` starts no run."""
    last = len(covered.fps) - 1
    size = len(request.history)
    for start in request.starts(k, covered):
        following = k + 1 < size and start < last
        if start == last or (following and request.matches(k + 1, covered, start + 1)):
            return start
        # Or the next but one, the one between changed (see `droppable`).
        two = start + 2 <= last and k + 2 < size and request.may_be_changed(k + 1)
        if two and request.matches(k + 2, covered, start + 2):
            return start
    return None


def droppable(
    messages: Sequence[ChatMessage],
    history: Sequence[int],
    covered: Covered,
    keep: Collection[int] = (),
) -> list[int]:
    """Request indices (of `history`, oldest first) that are covered chat messages.

    The run starts where two consecutive history messages match consecutive covered
    messages (one match is enough only for the very last covered message), then follows
    the covered messages in order; it stops at the first message in `keep` (known to be
    newer than the cutoff) and when the covered messages run out.
    """
    stop = _first_kept(history, keep)
    if not covered.fps or not stop:
        return []  # nothing covered, or the request's history is all newer than the cutoff
    request = _Request(messages, history)
    last = len(covered.fps) - 1
    dropped: list[int] = []
    j: int | None = None  # next covered message expected
    skipped = 0
    k = 0
    while k < stop:
        if j is None:
            j = _anchor(request, covered, k)
            if j is None:
                n, start = request.glued(k, covered, None, stop)
                if n:
                    dropped.extend(history[k : k + n])
                    k, j = k + n, start + 1
                    if j > last:
                        break
                else:
                    k += 1
                continue
            run = request.exact_run(k, covered, j, stop)
            if run:
                dropped.extend(history[k : k + run])
                k, j = k + run, j + run
                if j > last:
                    break
                continue
        if request.matches(k, covered, j) or (
            # Covered message j as ST changed it on its way (a regex script that alters
            # only the prompt, a file attached to it): the user's or a reply, not one of
            # ST's prompts, and the next message is the next covered one.
            k + 1 < stop
            and j < last
            and request.may_be_changed(k)
            and request.matches(k + 1, covered, j + 1)
        ):
            dropped.append(history[k])
            j += 1
            skipped = 0
            if j > last:
                break
        elif (glued := request.glued(k, covered, j, stop)[0]) > 0:
            # Covered message j read as several (`GLUED`): they all leave.
            dropped.extend(history[k : k + glued])
            k, j, skipped = k + glued, j + 1, 0
            if j > last:
                break
            continue
        else:
            skipped += 1
            if skipped > MAX_SKIPPED:
                break
        k += 1
    return dropped


class Cut(NamedTuple):
    """Where a request of a chat began: `st`, the oldest chat position ST sent (0: the
    whole chat); `start`, where its history began once stepped (`history_cut_step`);
    `aim`, where the step would have it begin, past messages held back until a recap can
    stand in for them (`start` otherwise)."""

    st: int
    start: int
    aim: int


def stepped_start(sent_from: int | None, step: int, cutoff: int | None) -> int | None:
    """Where a request's history is made to start: ST's own cut (`sent_from`, the oldest
    chat position it sent) moved on to the next of every `step`-th position counted from
    the first one trimming keeps (`cutoff` + 1, when trimming applies; else from 0).

    Once ST's context is full it cuts the oldest message at almost every exchange, and a
    prompt whose start moves shares no prefix with the one before: a provider's prompt
    cache (and llama.cpp's slot) has to read it all again. Stepped, the start moves every
    `step / 2` exchanges; counted from trimming's cut, its first move is a whole step too.
    Nothing is moved while trimming's cut already holds the start still, nor when ST sent
    the whole chat.
    """
    if sent_from is None or sent_from <= 0 or step <= 1:
        return sent_from
    base = 0 if cutoff is None else cutoff + 1
    if sent_from <= base:
        return sent_from
    return base + -(-(sent_from - base) // step) * step


def stepped_drop(
    history: Sequence[int],
    matched: Sequence[int],
    positions: Sequence[int],
    start: int,
    keep_at_least: int,
) -> list[int]:
    """The history's request indices to leave out so that it starts at chat position
    `start`: the matched messages (`matched` with their chat `positions`) before it.

    Only when the request's oldest history message is itself matched: its position is
    then known, where otherwise a message of the chat older than the identified ones
    could stay behind a left-out one. A message that matches no chat message (an
    injection of ST's) is never left out, and at least `keep_at_least` history messages
    stay.
    """
    if not history or not matched or matched[0] != history[0]:
        return []
    # Positions rise with the request's order: those before `start` come first.
    early = list(matched[: bisect_left(positions, start)])
    if len(history) - len(early) < keep_at_least:
        return []
    return early
