"""The operation queue: the proxy's own LLM work, persisted, ordered, bounded.

A job is written to the store before `enqueue` returns, bound to its chat and to a hash of
the content it was made from. The runner takes the most urgent runnable job, by priority
(`proxy.core.operations.PRIORITIES`: running recap, scene recap, scene-break detection,
message recap). At most `concurrency` jobs run per upstream, with an optional pause after
each call. A failure is retried with exponential backoff (10 s doubling up to 300 s) until
`max_attempts`, then the job is `failed` with its error kept; a `Refused` call (401/403 and
other 4xx, see `proxy.errors`) is not retried.
A job's result is applied and the job marked `done` in one transaction, after checking
that its input is still what it was made from: content that changed while the job ran
makes it run again with the new content, content that went away drops it. After a stop,
jobs that were running are queued again; results are never applied twice. Finished jobs
are forgotten after `keep_done_days` (looked at on start-up, then daily).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from proxy.core.headers import redact_secrets
from proxy.core.operations import OPERATIONS, PRIORITIES, Operation
from proxy.errors import JobFailure, NoCredentials
from proxy.observe.events import EventBus
from proxy.settings import QueueSettings
from proxy.store import Database, Store, log_failed
from proxy.store.jobs import STALE, Job, Payload
from proxy.tasks import TaskSet
from proxy.waits import SERVING

log = logging.getLogger(__name__)

Apply = Callable[[Database], None]
DAY = 86400.0


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job to write: what it is for, and the input hash it was made from."""

    chat_id: str
    operation: Operation
    dedup_key: str
    payload: Payload
    input_hash: str
    upstream: str


def write_job(
    db: Database, job: JobSpec, now: float, failed_since: float | None = None
) -> tuple[int, bool]:
    """Persist a job at its operation's priority (store thread): (id, True) when new. A job
    that failed on the same input after `failed_since` (None: ever) is not made again."""
    return db.jobs.enqueue(
        chat_id=job.chat_id,
        operation=job.operation.value,
        priority=PRIORITIES[job.operation],
        dedup_key=job.dedup_key,
        payload=job.payload,
        input_hash=job.input_hash,
        upstream=job.upstream,
        now=now,
        failed_since=failed_since,
    )


class Handler(Protocol):
    """What the queue needs of an operation's handler."""

    async def run(self, job: Job) -> Apply:
        """Do the job's work (the LLM call); return the step that applies its result.

        The step runs on the store's thread inside the transaction that marks the job
        done. Raise `JobFailure` (or any error: it is retried) when the work failed."""
        ...

    def still_current(self, db: Database, job: Job) -> bool:
        """Whether what the job was made for is still there and unchanged (store thread)."""
        ...


class JobQueue:
    """Runs jobs from the store; an async context manager that owns its runner task."""

    def __init__(
        self,
        store: Store,
        handlers: Mapping[Operation, Handler],
        settings: QueueSettings,
        *,
        clock: Callable[[], float] = time.time,
        secrets: Callable[[], Iterable[str]] = tuple,
        events: EventBus | None = None,
        store_retry: float = SERVING.store_retry,
    ) -> None:
        """`store_retry`: seconds before the runner looks again when the store failed it."""
        self.store = store
        self.store_retry = store_retry
        self.events = events
        # The keys a failure may echo (an API's error body often quotes the key it got):
        # they are redacted from the error kept on the job and from the log.
        self.secrets = secrets
        self.handlers = dict(handlers)
        self.settings = settings
        self.clock = clock
        self._wake = asyncio.Event()
        self._running: dict[str, int] = {}  # upstream -> jobs in flight
        self._cooling: dict[str, float] = {}  # upstream -> time its pause ends
        self._tasks = TaskSet()
        self._runner: asyncio.Task[None] | None = None
        self._passes = 0  # times the runner has looked for work
        self._prune_at = 0.0  # when finished jobs are next looked at (start-up, then daily)
        self._passed = asyncio.Event()
        # Jobs that ended while the store could not keep how (a full disk): still
        # `running` there, queued again once it takes writes.
        self._lost: set[int] = set()
        self._stalled = False  # the runner's last look at the store failed
        # Called on the event loop after each job ends (done, dropped, failed or retried):
        # the memory engine plans what follows from it.
        self.on_settled: list[Callable[[Job], Awaitable[object]]] = []

    async def __aenter__(self) -> JobQueue:
        recovered = await self.store.call(lambda db: db.jobs.recover(self.clock()))
        if recovered:
            log.info("%d interrupted job(s) queued again", recovered)
        self._runner = asyncio.create_task(self._run(), name="job-queue")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        await self._tasks.cancel()

    # -- control ---------------------------------------------------------------------------

    async def enqueue(
        self,
        chat_id: str,
        operation: Operation,
        dedup_key: str,
        payload: Payload,
        input_hash: str,
        upstream: str,
    ) -> int:
        """Persist a job (or refresh the live one with the same key); returns its id."""
        if operation not in OPERATIONS:
            raise ValueError(f"unknown operation {operation!r}")
        job = JobSpec(chat_id, Operation(operation), dedup_key, payload, input_hash, upstream)
        job_id, _ = await self.store.call(lambda db: write_job(db, job, self.clock()))
        self._announce(job_id, chat_id, operation, "queued")
        self._wake.set()
        return job_id

    async def hurry(self, chat_id: str) -> None:
        """Run a chat's waiting jobs now (its key and model just became known)."""
        await self.store.call(lambda db: db.jobs.hurry(chat_id, self.clock()))
        self._wake.set()

    async def hurry_waiting(self) -> None:
        """Run the jobs that wait for a model now, every chat's (the settings changed)."""
        hurried = await self.store.call(lambda db: db.jobs.hurry_waiting(self.clock()))
        if hurried:
            log.info("%d job(s) that waited for a model try again", hurried)
        self._wake.set()

    def wake(self) -> None:
        """Look for work now (after jobs were written to the store directly)."""
        self._wake.set()

    async def pause(self) -> None:
        await self.store.call(lambda db: db.jobs.set_paused(True))

    async def resume(self) -> None:
        await self.store.call(lambda db: db.jobs.set_paused(False))
        self._wake.set()

    async def paused(self) -> bool:
        return await self.store.call(lambda db: db.jobs.paused())

    async def retry(self, job_id: int) -> bool:
        done = await self.store.call(lambda db: db.jobs.retry(job_id, self.clock()))
        self._wake.set()
        return done

    async def clear(self, chat_id: str | None = None) -> int:
        return await self.store.call(lambda db: db.jobs.clear(chat_id))

    async def jobs(self, chat_id: str | None = None, states: tuple[str, ...] = ()) -> list[Job]:
        return await self.store.call(lambda db: db.jobs.list(chat_id, states))

    async def newest_done(self, chat_id: str | None, shown: int) -> tuple[list[Job], int]:
        """The jobs not done and the newest `shown` done ones; how many older were left."""
        return await self.store.call(lambda db: db.jobs.newest_done(chat_id, shown))

    async def live_or_after(self, chat_id: str | None, after: int) -> list[Job]:
        """The jobs queued or running, and every job newer than job `after`."""
        return await self.store.call(lambda db: db.jobs.live_or_after(chat_id, after))

    async def looked(self) -> None:
        """Wait until the runner has looked for work twice since this call, so at least
        once with everything written before it (tests: a paused queue claims nothing)."""
        for _ in range(2):
            seen = self._passes
            while self._passes == seen:
                self._passed.clear()
                self._wake.set()
                await self._passed.wait()

    async def idle(self) -> None:
        """Wait until nothing is queued or running (tests, `backfill`)."""
        while True:
            live = await self.jobs(states=("queued", "running"))
            if not live and not self._tasks:
                return
            await asyncio.sleep(0.01)

    # -- the runner ------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            self._wake.clear()
            now = self.clock()
            if now >= self._prune_at:
                self._prune_at = now + DAY
                await self._prune(now)
            busy = {u for u, n in self._running.items() if n >= self.settings.concurrency}
            busy |= {u for u, until in self._cooling.items() if until > now}
            lost = frozenset(self._lost)
            try:
                paused, job, due = await self.store.call(
                    partial(self._next, now=now, busy=busy, lost=lost)
                )
            except Exception:
                # The store failing (a full disk, a lock held elsewhere) must not end the
                # queue for good: it looks again, and says so once.
                if not self._stalled:
                    log_failed(log, "the job queue cannot claim work; looking again every "
                               "%.0f s", self.store_retry)  # fmt: skip
                self._stalled = True
                await asyncio.sleep(self.store_retry)
                continue
            if self._stalled:
                log.info("the job queue runs again")
            self._stalled = False
            self._lost -= lost  # not those lost while it looked
            self._passes += 1
            self._passed.set()
            if job is not None:
                self._start(job)
                continue
            wait = None
            if not paused:
                cooling = [until for until in self._cooling.values() if until > now]
                candidates = [t for t in [due, *cooling, self._prune_at] if t is not None]
                if candidates:
                    wait = max(0.0, min(candidates) - self.clock())
            # `asyncio.timeout`, not `wait_for`: on 3.11 a `wait_for` cancelled just as the
            # event is set returns instead of raising, and the runner then never stops
            # (a shutdown waited on it for good).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    async def _prune(self, now: float) -> None:
        """Forget finished jobs older than `keep_done_days`: a long story leaves thousands,
        which every look at the queue (the page, `backfill`'s polls) would list."""
        days = self.settings.keep_done_days
        try:
            pruned = await self.store.call(lambda db: db.jobs.prune(now - days * DAY))
        except Exception:
            log.exception("forgetting finished jobs failed")  # the queue runs on regardless
            return
        if pruned:
            log.info("forgot %d finished job(s) older than %g day(s)", pruned, days)

    def _next(
        self, db: Database, now: float, busy: set[str], lost: frozenset[int]
    ) -> tuple[bool, Job | None, float | None]:
        """(paused, the job claimed, when the next queued job is due): one store call,
        which first queues again the `lost` jobs."""
        if lost:
            db.jobs.requeue(lost, now, self.settings.max_attempts)
        if db.jobs.paused():
            return True, None, None
        job = db.jobs.claim_next(now, busy)
        return False, job, None if job is not None else db.jobs.next_due()

    def _announce(
        self, job_id: int, chat_id: str, operation: str, state: str, error: str | None = None
    ) -> None:
        if self.events is not None:
            self.events.publish("job", job=job_id, chat=chat_id, operation=operation,
                                state=state, error=error)  # fmt: skip

    def _start(self, job: Job) -> None:
        self._announce(job.id, job.chat_id, job.operation, "running")
        self._running[job.upstream] = self._running.get(job.upstream, 0) + 1
        self._tasks.spawn(self._execute(job), f"job {job.id} {job.operation}")

    async def _execute(self, job: Job) -> None:
        known = job.operation in OPERATIONS
        handler = self.handlers.get(Operation(job.operation)) if known else None
        try:
            if handler is None:
                # A programming error (an operation nobody handles), not the LLM's doing:
                # the job fails at once and says why; retrying cannot help.
                log.error("no handler for operation %r (job %d)", job.operation, job.id)
                error = f"no handler for operation {job.operation!r}"
                await self.store.call(lambda db: db.jobs.fail(job, self.clock(), error))
                return
            apply = await handler.run(job)
            state = await self.store.call(
                lambda db: db.jobs.complete(
                    job, self.clock(), lambda j: handler.still_current(db, j), lambda: apply(db)
                )
            )
            log.debug("job %d %s: %s", job.id, job.operation, state)
            self._announce(job.id, job.chat_id, job.operation, state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            try:
                state, error = await self.store.call(partial(self._failed, job=job, exc=exc))
            except Exception:
                log_failed(log, "job %d %s: how it ended cannot be kept; it runs again",
                           job.id, job.operation)  # fmt: skip
                self._lost.add(job.id)
            else:
                self._announce(job.id, job.chat_id, job.operation, state, error)
        finally:
            # Before the next job is claimed: what follows from this one may come first.
            for callback in self.on_settled:
                try:
                    await callback(job)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log_failed(log, "after job %d", job.id)
            self._running[job.upstream] -= 1
            if self.settings.delay_seconds:
                self._cooling[job.upstream] = self.clock() + self.settings.delay_seconds
            self._wake.set()

    def _failed(self, db: Database, job: Job, exc: Exception) -> tuple[str, str]:
        """Fail the job or queue it again; returns its state (`failed`, `retrying`,
        `waiting` for credentials) and the error kept on it."""
        jobs = db.jobs
        now = self.clock()
        error = redact_secrets(f"{type(exc).__name__}: {exc}", self.secrets())
        if isinstance(exc, NoCredentials):
            handler = self.handlers.get(Operation(job.operation))
            if handler is not None and not handler.still_current(db, job):
                # Made for what is gone (a chat renamed while it was planned, whose key
                # and model went to its new name): nothing to wait for.
                jobs.drop(job, now, STALE)
                return "dropped", STALE
            # Not the job's fault: it waits, without using up its attempts, until the
            # chat's next request brings a key and model (see `hurry`).
            jobs.park(job, now, now + self.settings.backoff_cap_seconds, error)
            return "waiting", error
        retry = exc.retry if isinstance(exc, JobFailure) else True
        if not retry or job.attempts >= self.settings.max_attempts:
            log.warning("job %d %s for %s failed: %s", job.id, job.operation, job.chat_id, error)
            jobs.fail(job, now, error)
            return "failed", error
        backoff = min(
            self.settings.backoff_seconds * 2 ** (job.attempts - 1),
            self.settings.backoff_cap_seconds,
        )
        log.info("job %d %s: %s; retrying in %.0f s", job.id, job.operation, error, backoff)
        jobs.retry_later(job, now, now + backoff, error)
        return "retrying", error
