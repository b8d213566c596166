"""Trimming: which chat messages of a request the running recap already covers, and may
therefore be left out (the proxy's form of ST-Auto-Recap's auto-hide). Pure.

Only chat-history messages are ever dropped, and only those that line up, in order, with
the chat's covered messages: a request message that matches none of them (the main
prompt, ST's injections, an Author's Note at depth, a message newer than the cutoff)
stays. This is stricter than auto-hide, which hid a scene as soon as its break was
placed, before the running recap held it (its report §15.11).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from proxy.core.identify import fingerprint
from proxy.core.models import ChatMessage

MAX_SKIPPED = 12  # unmatched request messages (injections) tolerated inside the covered run


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
    """Fingerprints of the chat's visible messages up to the cutoff, oldest first."""

    fps: tuple[frozenset[int], ...]
    by_fp: dict[int, list[int]] = field(default_factory=dict)

    @classmethod
    def of(cls, fps: Sequence[frozenset[int]]) -> Covered:
        by_fp: dict[int, list[int]] = {}
        for i, prints in enumerate(fps):
            for fp in prints:
                by_fp.setdefault(fp, []).append(i)
        return cls(tuple(fps), by_fp)


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
    if not covered.fps:
        return []
    prints = [fingerprint(messages[i].text) for i in history]
    dropped: list[int] = []
    j: int | None = None  # next covered message expected
    skipped = 0
    for k, index in enumerate(history):
        if index in keep:
            break
        fp = prints[k]
        if j is None:
            for start in covered.by_fp.get(fp, ()):
                last = start == len(covered.fps) - 1
                following = prints[k + 1] if k + 1 < len(prints) else None
                if last or (following is not None and following in covered.fps[start + 1]):
                    j = start
                    break
            if j is None:
                continue
        if j < len(covered.fps) and fp in covered.fps[j]:
            dropped.append(index)
            j += 1
            skipped = 0
            if j == len(covered.fps):
                break
        else:
            skipped += 1
            if skipped > MAX_SKIPPED:
                break
    return dropped
