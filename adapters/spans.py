"""Where each message of a chat request sits in its bytes, and what a request shares with
the one before it.

ST sends the whole chat with every request, and consecutive requests share nearly all of
it byte for byte: a new turn appends messages, ST's own cut drops the oldest ones once the
context is full, its depth injections (Author's Note, world info) move along. The
messages found again in the previous request's bytes are not decoded again (decoding is
most of the memory step of a 100k-token request), and a body that gets memory is put
together from slices of the bytes it came as, not re-encoded.

Only the compact JSON that ST sends (`JSON.stringify`'s: no spaces, `messages` first) is
mapped, and only where orjson writes each message back to exactly its bytes; any other
body is decoded whole, as it always was. No library maps JSON values to byte offsets
faster than decoding the whole body, which is what this avoids, hence this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

HEAD = b'{"messages":['
KEY = b'"messages"'
COMMA, CLOSE = ord(","), ord("]")
# How many of the previous request's oldest messages ST may have cut since: one or two
# per turn; more when the user cut the context, or after a long continue.
MAX_DROPPED = 32
BLOCK = 16  # messages compared at once where a whole run does not match
# Bodies smaller than this are decoded whole and re-encoded: orjson does a few KiB in
# microseconds, less than mapping them costs (about 15 us a request either way).
MAP_FROM = 32 * 1024


@dataclass(frozen=True, slots=True)
class Spans:
    """The byte offsets of each message of `messages` (its `{` and one past its `}`), and
    of the array's `]`."""

    starts: list[int]
    ends: list[int]
    close: int


@dataclass(frozen=True, slots=True)
class Decoded:
    """A body decoded with the help of the previous one. `taken`: for each of the first
    messages, the previous request's index of the same message (the same object); the
    messages after those were decoded anew."""

    body: dict[str, Any]
    spans: Spans
    taken: list[int]


def measure(raw: bytes, wire: Sequence[Any], at: int = len(HEAD)) -> Spans | None:
    """The spans of `wire`, a decoded `messages` array whose first element is at `at` in
    `raw`; None when its bytes are not orjson's compact encoding of it."""
    starts: list[int] = []
    ends: list[int] = []
    if not _measure(raw, wire, at, starts, ends):
        return None
    close = ends[-1] if ends else at
    return Spans(starts, ends, close) if _closed(raw, close) else None


def _measure(raw: bytes, wire: Sequence[Any], at: int, starts: list[int], ends: list[int]) -> bool:
    for i, message in enumerate(wire):
        if i:
            if at >= len(raw) or raw[at] != COMMA:
                return False
            at += 1
        try:
            encoded = orjson.dumps(message)
        except orjson.JSONEncodeError:
            return False
        if not raw.startswith(encoded, at):
            return False
        starts.append(at)
        at += len(encoded)
        ends.append(at)
    return True


def decode(raw: bytes, old: bytes, wire: Sequence[Any], spans: Spans) -> Decoded | None:
    """`raw` decoded, its messages found in `old` (the previous body, its `wire` array at
    `spans`) taken from there; None when it shares no message with `old` (then decode it
    whole) or is not laid out as `measure` requires.

    The messages taken are the longest run from the first one whose bytes, and all bytes
    before them, are those of `old`, then the longest run found right after it that starts
    a little later in `old` (ST cut the oldest ones). Bytes equal from the start leave a
    decoder in the same state; a run of whole array elements that follows a comma decodes
    to the same values wherever it sits. The rest is decoded behind a stand-in first
    element, from the end of the last run taken."""
    m = len(spans.starts)
    if not m or not raw.startswith(HEAD):
        return None
    view = memoryview(old)
    starts, ends = spans.starts, spans.ends
    kept = _extent(raw, view, ends, 0, 0, m, 0)
    if not kept:
        return None
    new_starts, new_ends = starts[:kept], ends[:kept]
    taken = list(range(kept))
    at = ends[kept - 1]
    if kept < m and at < len(raw) and raw[at] == COMMA:
        # The messages after a cut: the previous ones that now follow right after.
        for first in range(kept + 1, min(m, kept + 1 + MAX_DROPPED)):
            if raw.startswith(view[starts[first] : ends[first]], at + 1):
                delta = at + 1 - starts[first]
                run = _extent(raw, view, ends, starts[first], first, m, delta)
                new_starts += [s + delta for s in starts[first : first + run]]
                new_ends += [e + delta for e in ends[first : first + run]]
                taken += range(first, first + run)
                at = new_ends[-1]
                break
    try:
        body = orjson.loads(b'{"messages":[0' + raw[at:])
    except orjson.JSONDecodeError:
        return None
    fresh = body["messages"]
    if type(fresh) is not list or fresh[:1] != [0]:
        return None
    del fresh[0]
    if fresh and raw[at] != COMMA:
        return None
    if not _measure(raw, fresh, at + 1, new_starts, new_ends):
        return None
    close = new_ends[-1]
    if not _closed(raw, close):
        return None
    body["messages"] = [*(wire[i] for i in taken), *fresh]
    return Decoded(body, Spans(new_starts, new_ends, close), taken)


def _closed(raw: bytes, close: int) -> bool:
    """Whether the `messages` array ends at `close`, and no second `messages` key follows
    (a decoder keeps the last one: such a body is decoded whole)."""
    return close < len(raw) and raw[close] == CLOSE and raw.find(KEY, close) == -1


def _extent(
    raw: bytes, old: memoryview, ends: list[int], base: int, first: int, stop: int, delta: int
) -> int:
    """How many of the messages `first`..`stop - 1` of `old` follow `old[base]` in `raw`
    moved by `delta` bytes: all bytes from `base` to the last one's end equal."""
    if raw.startswith(old[base : ends[stop - 1]], base + delta):
        return stop - first
    done, at, step = first, base, BLOCK
    while done < stop:
        upto = min(stop, done + step)
        if raw.startswith(old[at : ends[upto - 1]], at + delta):
            at, done = ends[upto - 1], upto
        elif step > 1:
            step = 1  # the differing message is in this block: find it one by one
        else:
            break
    return done - first


def splice(raw: bytes, spans: Spans, pieces: Sequence[bytes | tuple[int, int]]) -> bytes:
    """A body like `raw` whose `messages` are `pieces`: encoded messages, and (first, end)
    runs of `raw`'s own messages, copied as they are."""
    view = memoryview(raw)
    starts, ends = spans.starts, spans.ends
    out: list[bytes | memoryview] = [view[: len(HEAD)]]
    for i, piece in enumerate(pieces):
        if i:
            out.append(b",")
        if isinstance(piece, tuple):
            first, end = piece
            out.append(view[starts[first] : ends[end - 1]])
        else:
            out.append(piece)
    out.append(view[spans.close :])
    return b"".join(out)
