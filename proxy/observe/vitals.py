"""What the running proxy knows about its own health, for `GET /health`.

A service manager or a monitoring page asks often and wants one word: `ok`, or
`degraded` with the reason beside it. Degraded means the user's memory is silently not
being kept, or their chats are failing: the store cannot be written, the watch on ST's
data folder died, or the upstream failed the last `FAILING_AFTER` requests in a row
(unreachable, timed out, or 5xx). A 4xx answer is the upstream working as meant (a bad
key is the user's to fix, and `doctor` says so), not a reason to restart anything.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from proxy import __version__
from proxy.core.jsontypes import JSONObject, JSONValue

FAILING_AFTER = 5  # upstream failures in a row before the proxy says it is degraded
REQUEST_WINDOW = 3600.0  # seconds of chat requests `/health` counts (for `doctor`)
# Requests are counted by the minute: a busy proxy keeps 60 counts, not every request.
MINUTE = 60.0


@dataclass(slots=True)
class UpstreamRecord:
    last_status: int | None = None
    last_error: str | None = None
    last_error_at: float | None = None  # Unix time
    failures_in_a_row: int = 0


class Vitals:
    """The upstream's recent outcomes and the proxy's age; the relay reports to it."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.clock = clock
        self.wall = wall
        self.started = clock()
        self.upstream = UpstreamRecord()
        # Why the store could not be used at all (the proxy then runs without memory).
        self.store_problem: str | None = None
        # (minute, outcome -> requests) for the minutes of the last hour that had any.
        self._minutes: deque[tuple[int, dict[str, int]]] = deque()

    def saw(self, outcome: str) -> None:
        """A chat request came in: `identified` as a chat, or `unidentified`."""
        minute = int(self.clock() // MINUTE)
        minutes = self._minutes
        if not minutes or minutes[-1][0] != minute:
            minutes.append((minute, {}))
            while minutes[0][0] <= minute - REQUEST_WINDOW // MINUTE:
                minutes.popleft()
        counts = minutes[-1][1]
        counts[outcome] = counts.get(outcome, 0) + 1

    def recent_requests(self) -> dict[str, int]:
        """Chat requests of the last hour (to the minute) by outcome."""
        oldest = int(self.clock() // MINUTE) - REQUEST_WINDOW // MINUTE
        counts = {"identified": 0, "unidentified": 0}
        for minute, seen in self._minutes:
            if minute > oldest:
                for outcome, count in seen.items():
                    counts[outcome] = counts.get(outcome, 0) + count
        return counts

    def answered(self, status: int) -> None:
        """The upstream answered a relayed request with `status`."""
        record = self.upstream
        record.last_status = status
        if status >= 500:
            self._failed(f"HTTP {status}")
        else:
            record.failures_in_a_row = 0

    def failed(self, error: str) -> None:
        """A relayed request got no answer (unreachable, timed out, broke off)."""
        self.upstream.last_status = None
        self._failed(error)

    def _failed(self, error: str) -> None:
        record = self.upstream
        record.last_error = error
        record.last_error_at = self.wall()
        record.failures_in_a_row += 1

    @property
    def upstream_failing(self) -> bool:
        return self.upstream.failures_in_a_row >= FAILING_AFTER

    def uptime(self) -> float:
        return self.clock() - self.started


@dataclass(frozen=True, slots=True)
class Health:
    """One look at the proxy: each part's state, and the verdict."""

    store: str  # "ok", "none" (no data folder: no store in use) or the error
    watcher: str  # "running", "off" (no data folder or watching off), "missing", "stopped"
    queue: dict[str, int]
    vitals: Vitals
    # The newest failed job's operation and error: why some chat's memory is not built.
    memory_failure: str | None = None
    # Recall by meaning: "off" (no `[memory.embeddings]`), "ok", or "failing: <why>"; and
    # how many requests found their question's vector ready, and how many did not.
    embeddings: str = "off"
    questions: tuple[int, int] = (0, 0)

    @property
    def problems(self) -> list[str]:
        found = []
        if self.store not in ("ok", "none"):
            found.append(f"store: {self.store}")
        if self.watcher == "stopped":
            found.append("the watch on SillyTavern's data folder stopped")
        if self.watcher == "missing":
            found.append(
                "SillyTavern's data folder is missing (not there yet, or gone): its chats are "
                "not followed until it is there"
            )
        if self.embeddings.startswith("failing"):
            found.append(
                f"embeddings: {self.embeddings.removeprefix('failing: ')} (older scenes are "
                "recalled by their words alone until it answers)"
            )
        if self.vitals.upstream_failing:
            found.append(
                f"the upstream failed the last {self.vitals.upstream.failures_in_a_row} "
                f"requests ({self.vitals.upstream.last_error})"
            )
        return found

    def to_json(self) -> JSONObject:
        upstream = self.vitals.upstream
        problems: list[JSONValue] = list(self.problems)
        return {
            "status": "degraded" if problems else "ok",
            "version": __version__,
            "uptime_s": round(self.vitals.uptime(), 1),
            "store": self.store,
            "watcher": self.watcher,
            "queue": dict(self.queue),
            "memory": {"last_failure": self.memory_failure},
            "embeddings": {
                "state": self.embeddings,
                "questions_ready": self.questions[0],
                "questions_not_ready": self.questions[1],
            },
            "upstream": {
                "last_status": upstream.last_status,
                "last_error": upstream.last_error,
                "last_error_at": upstream.last_error_at,
                "failures_in_a_row": upstream.failures_in_a_row,
            },
            "requests": {**self.vitals.recent_requests(), "window_s": int(REQUEST_WINDOW)},
            "problems": problems,
        }
