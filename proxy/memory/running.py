"""The running recap's coverage: which version covers which scenes, and what goes when a
scene it was built on changes. Store thread (each function takes the `Database`).

Versions are ordered by the position of the scene they folded in last, not by version
number: an edit makes a new version of the same coverage, a pruned scene takes its own
version and every later one with it (they were built on it).
"""

from __future__ import annotations

import logging

from proxy.store import Database
from proxy.store.records import RunningRecap

log = logging.getLogger(__name__)

# The sources of versions the user wrote (through the page, the API or the CLI; in a
# branch, also those written in its parent): those never go to make room for a fold done
# again. The LLM's work, the proxy's or an extension's (imported, inherited from a
# branch's parent), can be done again.
YOURS = frozenset({"edit"})


def newest_at(db: Database, chat_id: str, position: int | None) -> tuple[int, int] | None:
    """(version, the position it covers through) of the newest version covering only
    scenes before `position` (None: the newest of all)."""
    best: tuple[int, int] | None = None
    for version, _, at in db.memory.running_at(chat_id):
        if at is None or (position is not None and at >= position):
            continue
        if best is None or (at, version) > (best[1], best[0]):
            best = (version, at)
    return best


def running_before(db: Database, chat_id: str, position: int | None) -> RunningRecap | None:
    """The newest running recap version covering only scenes before `position` (None:
    the newest of all)."""
    found = newest_at(db, chat_id, position)
    return None if found is None else db.memory.running_version(chat_id, found[0])


def covered_through(db: Database, chat_id: str) -> int:
    """The newest position the newest running recap covers (-1: none)."""
    found = newest_at(db, chat_id, None)
    return -1 if found is None else found[1]


def drop_running_from(db: Database, chat_id: str, position: int) -> bool:
    """Drop the versions that fold in a scene at or after `position` (its recap changed),
    so that planning folds from there again; True when the change is folded in. The user's
    own versions (`YOURS`) are never dropped for that: when one folds in a scene at or after
    `position`, only the versions of later scenes than the newest such one go (planning
    folds those again onto it), and the change itself is not folded in (False): what the
    user wrote stands for the story up to its scene."""
    versions = db.memory.running_at(chat_id)
    stale = [(v, at) for v, _, at in versions if at is None or at >= position]
    if not stale:
        return True
    sources = db.memory.running_sources(chat_id)
    yours = [(v, at) for v, at in stale if sources.get(v) in YOURS and at is not None]
    if not yours:
        db.memory.drop_running(chat_id, [v for v, _ in stale])
        return True
    newest = max(at for _, at in yours)
    later = [v for v, at in stale if at is None or at > newest]
    log.info(
        "%s: a scene recap changed before the running recap version(s) you wrote (%s): "
        "they stay, and the change is not folded in by itself%s",
        chat_id,
        ", ".join(str(v) for v, _ in yours),
        f"; the {len(later)} version(s) after them are folded again" if later else "",
    )
    if later:
        db.memory.drop_running(chat_id, later)
    return False


def prune(db: Database, chat_id: str) -> None:
    """Drop running recap versions whose scene went (deleted, hidden, no recap), with
    every later version, which was built on them."""
    memory = db.memory
    valid = {b.uid for b in memory.breaks(chat_id) if b.visible and b.current is not None}
    versions = memory.running_at(chat_id)
    for i, (_, uid, _) in enumerate(versions):
        if uid is not None and uid not in valid:
            memory.drop_running(chat_id, [v for v, _, _ in versions[i:]])
            return
