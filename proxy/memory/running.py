"""The running recap's coverage: which version covers which scenes, and what goes when a
scene it was built on changes. Store thread (each function takes the `Database`).

Versions are ordered by the position of the scene they folded in last, not by version
number: an edit makes a new version of the same coverage, a pruned scene takes its own
version and every later one with it (they were built on it).
"""

from __future__ import annotations

from proxy.store import Database
from proxy.store.memory import RunningRecap


def running_before(db: Database, chat_id: str, position: int | None) -> RunningRecap | None:
    """The newest running recap version covering only scenes before `position` (None:
    the newest of all)."""
    memory = db.memory
    best: tuple[int, int] | None = None
    found: RunningRecap | None = None
    for version in memory.running_recaps(chat_id):
        at = memory.position_of(version.new_scene_uid) if version.new_scene_uid else -1
        if at is None or (position is not None and at >= position):
            continue
        key = (at, version.version)
        if best is None or key > best:
            best, found = key, version
    return found


def covered_through(db: Database, chat_id: str) -> int:
    """The newest position the newest running recap covers (-1: none)."""
    latest = running_before(db, chat_id, None)
    at = db.memory.position_of(latest.new_scene_uid) if latest else None
    return -1 if at is None else at


def drop_running_from(db: Database, chat_id: str, position: int) -> None:
    """Drop the versions that fold in a scene at or after `position` (it changed)."""
    memory = db.memory
    stale = []
    for version in memory.running_recaps(chat_id):
        at = memory.position_of(version.new_scene_uid) if version.new_scene_uid else -1
        if at is None or at >= position:
            stale.append(version.version)
    if stale:
        memory.drop_running(chat_id, stale)


def prune(db: Database, chat_id: str) -> None:
    """Drop running recap versions whose scene went (deleted, hidden, no recap), with
    every later version, which was built on them."""
    memory = db.memory
    valid = {b.uid for b in memory.breaks(chat_id) if b.visible and b.current is not None}
    versions = memory.running_recaps(chat_id)
    for i, version in enumerate(versions):
        if version.new_scene_uid is not None and version.new_scene_uid not in valid:
            memory.drop_running(chat_id, [v.version for v in versions[i:]])
            return
