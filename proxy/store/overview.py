"""Every chat's memory at a glance, in a few grouped queries (store thread): the chat
list of the dashboard shows hundreds of chats, and one query per chat would be slow."""

from __future__ import annotations

import sqlite3

from proxy.core.jsontypes import JSONObject
from proxy.store.jobs import WAITING_FOR_MODEL

STATES = ("queued", "running", "failed")


def idle() -> JSONObject:
    """The summary of a chat whose memory never started."""
    queue: JSONObject = dict.fromkeys(STATES, 0)
    return {"active": False, "scenes": 0, "running_version": None, "queue": queue}


def chat_summaries(db: sqlite3.Connection) -> dict[str, JSONObject]:
    """chat -> `{active, scenes, running_version, queue: {queued, running, failed}}`, for
    the chats that have any memory state or jobs."""
    found: dict[str, JSONObject] = {}

    def entry(chat: str) -> JSONObject:
        return found.setdefault(chat, idle())

    for chat, active, current in db.execute(
        "SELECT chat_id, active, current_recap FROM memory_state"
    ):
        entry(chat).update(active=bool(active), running_version=current)
    for chat, newest in db.execute(
        "SELECT chat_id, MAX(version) FROM running_recaps GROUP BY chat_id"
    ):
        if entry(chat)["running_version"] is None:
            entry(chat)["running_version"] = newest
    for chat, count in db.execute(
        "SELECT chat_id, COUNT(*) FROM scene_breaks WHERE visible = 1 GROUP BY chat_id"
    ):
        entry(chat)["scenes"] = count
    for chat, state, count in db.execute(
        "SELECT chat_id, state, COUNT(*) FROM jobs WHERE state IN (?, ?, ?) "
        "GROUP BY chat_id, state",
        STATES,
    ):
        queue = entry(chat)["queue"]
        assert isinstance(queue, dict)
        queue[state] = count
    return found


def probe(db: sqlite3.Connection, now: float) -> dict[str, int]:
    """A write the store must be able to make, then its queue's jobs by state and, of the
    queued ones, those waiting for a model (`/health`: `doctor` says what to do)."""
    db.execute(
        "INSERT INTO settings_kv (key, value) VALUES ('health_probe', ?) "
        "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
        (repr(now),),
    )
    (waiting,) = db.execute(
        "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND substr(error, 1, ?) = ?",
        (len(WAITING_FOR_MODEL), WAITING_FOR_MODEL),
    ).fetchone()
    return {**queue_counts(db), "waiting_for_model": int(waiting)}


def newest_failure(db: sqlite3.Connection) -> str | None:
    """The newest failed job's operation and error (why the memory of some chat is not
    being built: a model that copies the prompt back, a refused key), or None."""
    row = db.execute(
        "SELECT operation, error FROM jobs WHERE state = 'failed' ORDER BY updated DESC LIMIT 1"
    ).fetchone()
    if row is None:
        return None
    operation, error = row
    return f"{operation}: {(error or 'failed')[:300]}"


def queue_counts(db: sqlite3.Connection) -> dict[str, int]:
    """Jobs by state: queued, running, failed."""
    counts = dict.fromkeys(STATES, 0)
    for state, count in db.execute(
        "SELECT state, COUNT(*) FROM jobs WHERE state IN (?, ?, ?) GROUP BY state", STATES
    ):
        counts[state] = count
    return counts
