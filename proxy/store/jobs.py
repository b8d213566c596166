"""The job table: the persistent half of the operation queue (see `proxy.memory.calls.jobs`).

Every method runs on the store's one worker thread. State changes that must not be split
(apply a result and mark its job done) happen in one transaction.
"""

from __future__ import annotations

import sqlite3
import textwrap
from collections.abc import Callable, Collection
from dataclasses import dataclass, replace
from typing import Any

import orjson

from proxy.core.jsontypes import JSONObject
from proxy.errors import NoCredentials
from proxy.store.records import Table

# A job's payload: what it is about (uids, not positions), stored as JSON.
Payload = JSONObject

LIVE = ("queued", "running")
# How the error kept on a job that waits for its chat's key and model begins (the queue
# keeps `<exception type>: <message>`).
WAITING_FOR_MODEL = f"{NoCredentials.__name__}: "
STALE = "its input changed, went or is covered"  # why a job was dropped
JOB_COLUMNS = (
    "id, chat_id, operation, priority, dedup_key, payload, input_hash, upstream, state, "
    "attempts, not_before, error, created, updated"
)


@dataclass(frozen=True, slots=True)
class Job:
    id: int
    chat_id: str
    operation: str
    priority: int
    dedup_key: str
    payload: Payload
    input_hash: str
    upstream: str
    state: str
    attempts: int
    not_before: float
    error: str | None
    created: float
    updated: float

    @property
    def waiting_for(self) -> str | None:
        """What a queued job that met an error waits for: `model` (its chat's key and
        model, which only the chat's next request brings) or `retry` (after a failed
        call, at `not_before`); None for any other job."""
        if self.state != "queued" or not self.error:
            return None
        return "model" if self.error.startswith(WAITING_FOR_MODEL) else "retry"

    @property
    def held(self) -> str | None:
        """`waiting_for` in a few words, for a progress line or a badge: `waiting for a
        model`, or `retrying: ` and the failure's reason (`the API answered 503`, without
        the error's type, operation and the body it quoted); None for any other job."""
        if self.waiting_for is None:
            return None
        if self.waiting_for == "model":
            return "waiting for a model"
        message = (self.error or "").partition(": ")[2]
        message = message.removeprefix(f"{self.operation}: ")
        reason = message.split(": ", 1)[0] or message
        return f"retrying: {textwrap.shorten(reason, 60, placeholder='...')}"

    def public(self) -> JSONObject:
        """The job as the API shows it."""
        return {
            "id": self.id,
            "chat": self.chat_id,
            "operation": self.operation,
            "priority": self.priority,
            "state": self.state,
            "waiting_for": self.waiting_for,
            "held": self.held,
            "attempts": self.attempts,
            "not_before": self.not_before,
            "error": self.error,
            "created": self.created,
            "updated": self.updated,
        }


def _job(row: sqlite3.Row | tuple[Any, ...]) -> Job:
    values = list(row)
    values[5] = orjson.loads(values[5])
    return Job(*values)


# The error a job keeps when how it ended could not be written (the store failing).
LOST = "its outcome could not be kept: the store failed"


class JobTable(Table):
    def enqueue(
        self,
        *,
        chat_id: str,
        operation: str,
        priority: int,
        dedup_key: str,
        payload: Payload,
        input_hash: str,
        upstream: str,
        now: float,
        failed_since: float | None = None,
    ) -> tuple[int, bool]:
        """Persist a job; returns (id, True) when new. A live job with the same key absorbs
        the request, taking the new content if it changed (a running one is redone). A job
        that failed on the same input after `failed_since` (None: ever) stands for it."""
        encoded = orjson.dumps(dict(payload)).decode()
        with self.transaction():
            row = self.db.execute(
                "SELECT id, input_hash FROM jobs WHERE dedup_key=? AND state IN ('queued', "
                "'running')",
                (dedup_key,),
            ).fetchone()
            if row is None:
                # A job that failed on this very input stays failed (its error visible)
                # until the user retries it: planning must not re-create it forever.
                row = self.db.execute(
                    "SELECT id, input_hash FROM jobs WHERE dedup_key=? AND state='failed' "
                    "AND input_hash=? AND updated>=? ORDER BY id DESC LIMIT 1",
                    (dedup_key, input_hash, -1.0 if failed_since is None else failed_since),
                ).fetchone()
            if row is not None:
                if row[1] != input_hash:
                    self.db.execute(
                        "UPDATE jobs SET payload=?, input_hash=?, updated=? WHERE id=?",
                        (encoded, input_hash, now, row[0]),
                    )
                return int(row[0]), False
            # A failed job this one is made again for is over: kept, it would count as
            # failed for good (the page, `memory`, /health, doctor) once this one succeeds.
            self.db.execute("DELETE FROM jobs WHERE dedup_key=? AND state='failed'", (dedup_key,))
            cursor = self.db.execute(
                f"INSERT INTO jobs ({JOB_COLUMNS}) VALUES "
                "(NULL,?,?,?,?,?,?,?,'queued',0,?,NULL,?,?)",
                (chat_id, operation, priority, dedup_key, encoded, input_hash, upstream,
                 now, now, now),
            )  # fmt: skip
            return int(cursor.lastrowid or 0), True

    def failed_since(self, dedup_key: str, since: float) -> bool:
        """Whether the newest job with this key failed after `since` (and nothing live
        replaced it)."""
        row = self.db.execute(
            "SELECT state, updated FROM jobs WHERE dedup_key=? ORDER BY id DESC LIMIT 1",
            (dedup_key,),
        ).fetchone()
        return row is not None and row[0] == "failed" and row[1] >= since

    def first_failure(self, chat_id: str, since: float) -> float | None:
        """When the oldest failure of a chat since `since` happened, among failed jobs
        that no later job with the same key replaced."""
        row = self.db.execute(
            "SELECT MIN(f.updated) FROM jobs f WHERE f.chat_id=? AND f.state='failed' AND "
            "f.updated>=? AND NOT EXISTS (SELECT 1 FROM jobs j WHERE "
            "j.dedup_key=f.dedup_key AND j.id>f.id)",
            (chat_id, since),
        ).fetchone()
        return None if row[0] is None else float(row[0])

    def claim_next(self, now: float, busy: Collection[str]) -> Job | None:
        """Mark the most urgent runnable job running and return it."""
        excluded = ",".join("?" * len(busy))
        where = f"AND upstream NOT IN ({excluded})" if busy else ""
        with self.transaction():
            row = self.db.execute(
                f"SELECT {JOB_COLUMNS} FROM jobs WHERE state='queued' AND not_before<=? "
                f"{where} ORDER BY priority, id LIMIT 1",
                (now, *busy),
            ).fetchone()
            if row is None:
                return None
            self.db.execute(
                "UPDATE jobs SET state='running', attempts=attempts+1, updated=? WHERE id=?",
                (now, row[0]),
            )
        job = _job(row)
        return replace(job, state="running", attempts=job.attempts + 1)

    def next_due(self) -> float | None:
        row = self.db.execute("SELECT MIN(not_before) FROM jobs WHERE state='queued'").fetchone()
        return None if row[0] is None else float(row[0])

    def complete(
        self,
        job: Job,
        now: float,
        still_current: Callable[[Job], bool],
        apply: Callable[[], None],
    ) -> str:
        """Apply a finished job's result and mark it done, atomically. Returns the state:
        `done`; `queued` when its input changed while it ran (it is redone with the new
        content); `dropped` when what it was made for is gone or different."""
        with self.transaction():
            row = self.db.execute(
                "SELECT input_hash, state FROM jobs WHERE id=?", (job.id,)
            ).fetchone()
            if row is None or row[1] != "running":
                return "dropped"  # cleared while it ran
            if row[0] != job.input_hash:
                self._set(job.id, "queued", now, attempts=0, error=None, not_before=now)
                return "queued"
            if not still_current(job):
                self._set(job.id, "dropped", now, error=STALE)
                return "dropped"
            apply()
            self._set(job.id, "done", now, error=None)
            return "done"

    def retry_later(self, job: Job, now: float, when: float, error: str) -> None:
        self._set(job.id, "queued", now, error=error, not_before=when)

    def park(self, job: Job, now: float, when: float, error: str) -> None:
        """Queue again for later without counting the attempt."""
        self._set(job.id, "queued", now, error=error, not_before=when, attempts=job.attempts - 1)

    def hurry(self, chat_id: str, now: float) -> None:
        self.db.execute(
            "UPDATE jobs SET not_before=? WHERE chat_id=? AND state='queued' AND not_before>?",
            (now, chat_id, now),
        )

    def hurry_waiting(self, now: float) -> int:
        """Jobs waiting for a model, of every chat, due now (a model may be known now)."""
        return self.db.execute(
            "UPDATE jobs SET not_before=? WHERE state='queued' AND not_before>? "
            "AND substr(error, 1, ?) = ?",
            (now, now, len(WAITING_FOR_MODEL), WAITING_FOR_MODEL),
        ).rowcount

    def fail(self, job: Job, now: float, error: str) -> None:
        self._set(job.id, "failed", now, error=error)

    def drop(self, job: Job, now: float, reason: str) -> None:
        self._set(job.id, "dropped", now, error=reason)

    def recover(self, now: float) -> int:
        """Jobs left running by a stop: queued again (their results were never applied)."""
        cursor = self.db.execute(
            "UPDATE jobs SET state='queued', updated=? WHERE state='running'", (now,)
        )
        return cursor.rowcount

    def requeue(self, job_ids: Collection[int], now: float, max_attempts: int) -> int:
        """These jobs, if still running (how they ended was never kept), queued again, or
        failed once they used up their attempts (each was a call to the LLM)."""
        marks = ",".join("?" * len(job_ids))
        cursor = self.db.execute(
            "UPDATE jobs SET state=CASE WHEN attempts >= ? THEN 'failed' ELSE 'queued' END, "
            "error=COALESCE(error, ?), updated=? "
            f"WHERE state='running' AND id IN ({marks})",
            (max_attempts, LOST, now, *job_ids),
        )
        return cursor.rowcount

    def retry(self, job_id: int, now: float) -> bool:
        cursor = self.db.execute(
            "UPDATE jobs SET state='queued', attempts=0, error=NULL, not_before=?, updated=? "
            "WHERE id=? AND state IN ('failed', 'dropped') AND NOT EXISTS (SELECT 1 FROM jobs j "
            "WHERE j.dedup_key=jobs.dedup_key AND j.state IN ('queued', 'running'))",
            (now, now, job_id),
        )
        return cursor.rowcount == 1

    def clear(self, chat_id: str | None = None) -> int:
        """Remove waiting, failed and dropped jobs (of one chat); running ones finish."""
        where, params = _of_chat(chat_id)
        return self.db.execute(
            f"DELETE FROM jobs WHERE state IN ('queued', 'failed', 'dropped') {where}", params
        ).rowcount

    def prune(self, before: float) -> int:
        """Forget finished jobs (done, dropped) last changed before `before`: the queue's
        history, which no planning reads (a failed job, which planning does, stays)."""
        return self.db.execute(
            "DELETE FROM jobs WHERE state IN ('done', 'dropped') AND updated<?", (before,)
        ).rowcount

    def newest_done(self, chat_id: str | None, shown: int) -> tuple[list[Job], int]:
        """The work not done (queued, running, failed, dropped), then the newest `shown`
        done jobs, in id order; and how many older done jobs were left out."""
        where, params = _of_chat(chat_id)
        rows = self.db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state!='done' {where}", params
        ).fetchall()
        rows += self.db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE state='done' {where} ORDER BY id DESC LIMIT ?",
            (*params, shown),
        ).fetchall()
        (done,) = self.db.execute(
            f"SELECT COUNT(*) FROM jobs WHERE state='done' {where}", params
        ).fetchone()
        jobs = sorted((_job(r) for r in rows), key=lambda j: j.id)
        return jobs, int(done) - sum(1 for j in jobs if j.state == "done")

    def live_or_after(self, chat_id: str | None, after: int) -> list[Job]:
        """The jobs queued or running, and every job newer than job `after`, in id order:
        what a watcher of work it started (`backfill`) needs, and not the older history."""
        where, params = _of_chat(chat_id)
        rows = self.db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE (state IN ('queued', 'running') OR id>?) "
            f"{where} ORDER BY id",
            (after, *params),
        )
        return [_job(r) for r in rows]

    def list(self, chat_id: str | None = None, states: Collection[str] = ()) -> list[Job]:
        clauses, params = [], []
        if chat_id is not None:
            clauses.append("chat_id=?")
            params.append(chat_id)
        if states:
            clauses.append(f"state IN ({','.join('?' * len(states))})")
            params.extend(states)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        rows = self.db.execute(
            f"SELECT {JOB_COLUMNS} FROM jobs {where} ORDER BY priority, id", params
        )
        return [_job(r) for r in rows]

    def paused(self) -> bool:
        row = self.db.execute("SELECT value FROM settings_kv WHERE key='queue_paused'").fetchone()
        return row is not None and row[0] == "1"

    def set_paused(self, paused: bool) -> None:
        self.db.execute(
            "INSERT INTO settings_kv (key, value) VALUES ('queue_paused', ?) "
            "ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            ("1" if paused else "0",),
        )

    def _set(self, job_id: int, state: str, now: float, **fields: Any) -> None:
        sets = ["state=?", "updated=?", *(f"{name}=?" for name in fields)]
        self.db.execute(
            f"UPDATE jobs SET {', '.join(sets)} WHERE id=?",
            (state, now, *fields.values(), job_id),
        )


def _of_chat(chat_id: str | None) -> tuple[str, tuple[str, ...]]:
    """The condition that keeps one chat's jobs (`AND chat_id=?`, to follow a WHERE) and its
    parameter; nothing for every chat's."""
    return ("AND chat_id=?", (chat_id,)) if chat_id is not None else ("", ())
