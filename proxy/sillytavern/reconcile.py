"""Match a new version of a chat file with the mirror, message by message.

ST has no message ids: a message's index shifts when an earlier one is deleted, its text
changes on edit, swipe and continue, and `is_system` flips on hide. Identity is kept by
aligning the two versions: first by whole-line hash (what did not change at all), then,
inside each changed stretch, by speaker and `send_date`, and finally by position among
messages of the same speaker. What is left over was deleted or added.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Literal

from proxy.sillytavern.chatfile import STMessage, text_hash

EventKind = Literal["added", "edited", "deleted", "swiped", "hidden", "unhidden"]


@dataclass(frozen=True, slots=True)
class OldMessage:
    """A mirrored message, as the store holds it."""

    uid: int
    digest: bytes
    name: str
    is_user: bool
    is_system: bool
    send_date: str | None
    text_hash: str
    swipe_id: int | None
    swipe_count: int


@dataclass(frozen=True, slots=True)
class Event:
    """A change. `index` is the message's index in the new file (old file for `deleted`)."""

    kind: EventKind
    index: int
    uid: int | None = None  # None for added messages: the store assigns one


@dataclass(slots=True)
class Reconciled:
    uids: list[int | None] = field(default_factory=list)  # per new message; None = new
    events: list[Event] = field(default_factory=list)


def reconcile(
    old: Sequence[tuple[int, bytes]],
    new_digests: Sequence[bytes],
    load_old: Callable[[Sequence[int]], Sequence[OldMessage]],
    load_new: Callable[[int], STMessage],
) -> Reconciled:
    """Align the mirror (`(uid, line digest)` in order) with the new file's line digests.

    `load_old(uids)` and `load_new(i)` give the details of messages in changed stretches
    only: unchanged lines are never parsed, and their rows never read.
    """
    result = Reconciled(uids=[None] * len(new_digests))
    for tag, i1, i2, j1, j2 in _opcodes([d for _, d in old], list(new_digests)):
        if tag == "equal":
            for k in range(i2 - i1):
                result.uids[j1 + k] = old[i1 + k][0]
            continue
        before_stretch = list(load_old([uid for uid, _ in old[i1:i2]])) if i2 > i1 else []
        after_stretch = [load_new(j) for j in range(j1, j2)]
        paired = _pair(before_stretch, after_stretch)
        for oi, nj in paired:
            before, after = before_stretch[oi], after_stretch[nj]
            result.uids[j1 + nj] = before.uid
            result.events.extend(_changes(before, after, j1 + nj))
        paired_old = {oi for oi, _ in paired}
        paired_new = {nj for _, nj in paired}
        for oi, before in enumerate(before_stretch):
            if oi not in paired_old:
                result.events.append(Event("deleted", i1 + oi, before.uid))
        for nj in range(j2 - j1):
            if nj not in paired_new:
                result.events.append(Event("added", j1 + nj))
    result.events.sort(key=lambda e: (e.kind == "deleted", e.index))
    return result


def moved_older(events: Sequence[Event], total: int) -> bool:
    """Whether `events` (a re-read's, of a file now `total` messages long) changed more
    than the chat's newest messages: one deleted, added, hidden or changed before those
    appended and the one before them (a swipe or continue of the last reply). Only then
    may what was held by position before the re-read (a message's recap, or that it
    lacks one) be of another message, or another text, than the file's now."""
    added = sum(1 for event in events if event.kind == "added")
    newest = total - added - 1
    return any(event.index < (total if event.kind == "deleted" else newest) for event in events)


@dataclass(frozen=True, slots=True)
class Moves:
    """Where a re-read (its `events`) moved the messages that were there before:
    alignment keeps their order, so an old position's new one is its rank among the
    messages kept, shifted past the messages added before it."""

    deleted: tuple[int, ...]  # old positions
    added: tuple[int, ...]  # new positions
    changed: frozenset[int]  # new positions: edited, swiped, hidden or unhidden

    @classmethod
    def of(cls, events: Sequence[Event]) -> Moves:
        def where(kind: EventKind) -> tuple[int, ...]:
            return tuple(sorted(event.index for event in events if event.kind == kind))

        changed = frozenset(e.index for e in events if e.kind not in ("added", "deleted"))
        return cls(where("deleted"), where("added"), changed)

    def new(self, old: int) -> int | None:
        """The new position of the message at `old` (None: it was deleted)."""
        at = bisect_left(self.deleted, old)
        if at < len(self.deleted) and self.deleted[at] == old:
            return None
        return self._past_added(old - at)

    def bound(self, old: int) -> int:
        """The new position of the first message kept from `old` on (or of the end): where
        a stretch that began, or ended before, `old` does now."""
        return self._past_added(old - bisect_left(self.deleted, old))

    def last(self, old: int) -> int:
        """The new position of the newest message kept up to `old` (-1: none)."""
        kept = old + 1 - bisect_right(self.deleted, old)
        return self._past_added(kept - 1) if kept else -1

    def _past_added(self, rank: int) -> int:
        # The rank-th kept message (or the end) comes after every added one before it.
        new = rank
        for added in self.added:
            if added > new:
                break
            new += 1
        return new


def _opcodes(a: list[bytes], b: list[bytes]) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes, with the common head and tail cut off first: ST's usual changes
    (a message appended, the last one swiped or continued) then cost no matching at all."""
    head = 0
    limit = min(len(a), len(b))
    while head < limit and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < limit - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    ops: list[tuple[str, int, int, int, int]] = []
    if head:
        ops.append(("equal", 0, head, 0, head))
    middle = SequenceMatcher(None, a[head : len(a) - tail], b[head : len(b) - tail], autojunk=False)
    for tag, i1, i2, j1, j2 in middle.get_opcodes():
        ops.append((tag, i1 + head, i2 + head, j1 + head, j2 + head))
    if tail:
        ops.append(("equal", len(a) - tail, len(a), len(b) - tail, len(b)))
    return ops


def _pair(old: Sequence[OldMessage], new: Sequence[STMessage]) -> list[tuple[int, int]]:
    """(old, new) index pairs inside one changed stretch, in order."""
    anchors_old = [(o.is_user, o.name, o.send_date) for o in old]
    anchors_new = [(n.is_user, n.name, n.send_date) for n in new]
    pairs: list[tuple[int, int]] = []
    matcher = SequenceMatcher(None, anchors_old, anchors_new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            pairs.extend((i1 + k, j1 + k) for k in range(i2 - i1))
        elif tag == "replace":
            # Same stretch, different anchors (a swipe can move send_date): pair by
            # position while the speaker kind agrees.
            for k in range(min(i2 - i1, j2 - j1)):
                if old[i1 + k].is_user == new[j1 + k].is_user:
                    pairs.append((i1 + k, j1 + k))
    return pairs


def _changes(before: OldMessage, after: STMessage, index: int) -> list[Event]:
    events: list[Event] = []
    if before.is_system != after.is_system:
        events.append(Event("hidden" if after.is_system else "unhidden", index, before.uid))
    if before.swipe_count != after.swipe_count or before.swipe_id != after.swipe_id:
        events.append(Event("swiped", index, before.uid))
    elif before.text_hash != text_hash(after.mes) or before.name != after.name:
        events.append(Event("edited", index, before.uid))
    return events
