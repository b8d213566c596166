"""A chat's memory view carried over a re-read of its file (event loop).

The view is built by planning, and planning waits until the request that follows ST's
save is answered (it does not compete with it for the CPU). When the user deleted an
older message and sends at once, that request comes before the next view: the one it
finds holds recaps and held messages by the positions from before the deletion. Moved
with the re-read's events instead, every position is the file's again: a deleted
message's recap does not go in (the user deleted it for a reason), and the recap of a
message that moved down into ST's cut does.
"""

from __future__ import annotations

import dataclasses

from proxy.library.mirror import Refreshed
from proxy.memory.views.view import MemoryView
from proxy.sillytavern.reconcile import Moves, moved_older


def carried(view: MemoryView, result: Refreshed) -> MemoryView:
    """`view` as it holds after `result`, a re-read of its chat with events."""
    if result.entry is None or not moved_older(result.events, result.entry.total):
        # Only the newest messages changed (ST saved a message, a swipe): the older ones
        # kept their places, and the view holds for the file as it is now.
        if view.file_hash is not None and view.file_hash == result.replaced:
            return dataclasses.replace(view, file_hash=result.file_hash)
        return view
    if view.file_hash is not None and view.file_hash == result.file_hash:
        return view  # built from the store after the re-read (planning ran in between)
    if view.outdated or view.file_hash is None or view.file_hash != result.replaced:
        # Built from another version than the one re-read: where its messages went is not
        # known. The history's stepped start waits for the next view (`history_start`).
        return dataclasses.replace(view, outdated=True)
    moves = Moves.of(result.events)
    changed = moves.changed

    def kept(old: int) -> int | None:
        # A changed message's recap is of its old text (or it is now hidden): it is
        # planned again, and until then it has none to stand in for it.
        new = moves.new(old)
        return None if new is None or new in changed else new

    lacking = {new for new in map(moves.new, view.lacking) if new is not None}
    lacking.update(changed, moves.added)
    cutoff = _last(moves, view.cutoff)
    first = min((*changed, *moves.added), default=None)
    # A covered message edited (or one added, shown or hidden among them): the covered
    # texts are of what was there, not of what ST sends now, and leaving history out by
    # them could take the new text for the old one as ST changed it on its way
    # (`proxy.core.trim.droppable`). Nothing is left out until planning reads them again.
    stale = cutoff is not None and first is not None and first <= cutoff
    scenes = {
        uid: dataclasses.replace(card, last=moves.last(card.last))
        for uid, card in view.scenes.items()
    }
    return dataclasses.replace(
        view,
        covered_through=_last(moves, view.covered_through),
        cutoff=cutoff,
        shelf=view.shelf.moved(kept),
        lacking=tuple(sorted(lacking)),
        unscanned=range(moves.bound(view.unscanned.start), moves.bound(view.unscanned.stop)),
        scenes=scenes,
        file_hash=result.file_hash,
        outdated=stale,
    )


def _last(moves: Moves, old: int | None) -> int | None:
    if old is None:
        return None
    new = moves.last(old)
    return new if new >= 0 else None
