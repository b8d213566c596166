"""The operation queue: the proxy's own LLM work, persisted, ordered, bounded.

A job is written to the store before `enqueue` returns, bound to its chat and to a hash of
the content it was made from. The runner takes the most urgent runnable job, by priority:

    running_recap (10) < scene_recap (20) < detect_scene_break (30) < message_recap (40)

(lower first: folding a finished scene into the running recap matters most, a message
recap least). At most `concurrency` jobs run per upstream, with an optional pause after
each call. A failure is retried with exponential backoff (10 s doubling up to 300 s) until
`max_attempts`, then the job is `failed` with its error kept; 401/403 are not retried.
A job's result is applied and the job marked `done` in one transaction, after checking
that its input is still what it was made from: content that changed while the job ran
makes it run again with the new content, content that went away drops it. After a stop,
jobs that were running are queued again; results are never applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from functools import partial
from typing import Any, Protocol

from proxy.errors import RecapProxyError
from proxy.library import ChatLibrary
from proxy.settings import QueueSettings
from proxy.store.jobs import Job

log = logging.getLogger(__name__)

PRIORITIES = {
    "running_recap": 10,
    "scene_recap": 20,
    "detect_scene_break": 30,
    "message_recap": 40,
}


class JobFailure(RecapProxyError):
    """A job that did not succeed. `retry` says whether another attempt can help."""

    retry = True


class Refused(JobFailure):
    """The LLM refused the request itself (a 4xx): the same request would fail again."""

    retry = False


class Unauthorized(Refused):
    """401/403 from the LLM: retrying with the same key cannot help."""


class NoCredentials(JobFailure):
    """Nothing says which model or key to use yet (no request of the chat since start-up
    and no `[memory.llm]` model): the job waits for the chat's next request."""


class Handler(Protocol):
    async def run(self, job: Job) -> Callable[[], None]:
        """Do the job's work (the LLM call); return the step that applies its result.

        The step runs on the store's thread inside the transaction that marks the job
        done. Raise `JobFailure` (or any error: it is retried) when the work failed."""
        ...

    def still_current(self, job: Job) -> bool:
        """Whether what the job was made for is still there and unchanged (store thread)."""
        ...


class JobQueue:
    """Runs jobs from the store; an async context manager that owns its runner task."""

    def __init__(
        self,
        library: ChatLibrary,
        handlers: Mapping[str, Handler],
        settings: QueueSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.library = library
        self.handlers = dict(handlers)
        self.settings = settings
        self.clock = clock
        self._wake = asyncio.Event()
        self._running: dict[str, int] = {}  # upstream -> jobs in flight
        self._cooling: dict[str, float] = {}  # upstream -> time its pause ends
        self._tasks: set[asyncio.Task[None]] = set()
        self._runner: asyncio.Task[None] | None = None
        # Called on the event loop after each job ends (done, dropped, failed or retried):
        # the memory engine plans what follows from it.
        self.on_settled: list[Callable[[Job], Awaitable[object]]] = []

    async def __aenter__(self) -> JobQueue:
        recovered = await self.library.run(lambda: self.library.store.jobs.recover(self.clock()))
        if recovered:
            log.info("%d interrupted job(s) queued again", recovered)
        self._runner = asyncio.create_task(self._run(), name="job-queue")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- control ---------------------------------------------------------------------------

    async def enqueue(
        self,
        chat_id: str,
        operation: str,
        dedup_key: str,
        payload: Mapping[str, Any],
        input_hash: str,
        upstream: str,
    ) -> int:
        """Persist a job (or refresh the live one with the same key); returns its id."""
        if operation not in PRIORITIES:
            raise ValueError(f"unknown operation {operation!r}")
        job_id, _ = await self.library.run(
            lambda: self.library.store.jobs.enqueue(
                chat_id=chat_id,
                operation=operation,
                priority=PRIORITIES[operation],
                dedup_key=dedup_key,
                payload=payload,
                input_hash=input_hash,
                upstream=upstream,
                now=self.clock(),
            )
        )
        self._wake.set()
        return job_id

    async def hurry(self, chat_id: str) -> None:
        """Run a chat's waiting jobs now (its key and model just became known)."""
        await self.library.run(lambda: self.library.store.jobs.hurry(chat_id, self.clock()))
        self._wake.set()

    def wake(self) -> None:
        """Look for work now (after jobs were written to the store directly)."""
        self._wake.set()

    async def pause(self) -> None:
        await self.library.run(lambda: self.library.store.jobs.set_paused(True))

    async def resume(self) -> None:
        await self.library.run(lambda: self.library.store.jobs.set_paused(False))
        self._wake.set()

    async def retry(self, job_id: int) -> bool:
        done = await self.library.run(lambda: self.library.store.jobs.retry(job_id, self.clock()))
        self._wake.set()
        return done

    async def clear(self, chat_id: str | None = None) -> int:
        return await self.library.run(lambda: self.library.store.jobs.clear(chat_id))

    async def jobs(self, chat_id: str | None = None, states: tuple[str, ...] = ()) -> list[Job]:
        return await self.library.run(lambda: self.library.store.jobs.list(chat_id, states))

    async def idle(self) -> None:
        """Wait until nothing is queued or running (tests, `backfill`)."""
        while True:
            live = await self.jobs(states=("queued", "running"))
            if not live and not self._tasks:
                return
            await asyncio.sleep(0.01)

    # -- the runner ------------------------------------------------------------------------

    async def _run(self) -> None:
        jobs = self.library.store.jobs
        while True:
            self._wake.clear()
            now = self.clock()
            busy = {u for u, n in self._running.items() if n >= self.settings.concurrency}
            busy |= {u for u, until in self._cooling.items() if until > now}
            paused = await self.library.run(jobs.paused)
            job = None if paused else await self.library.run(partial(jobs.claim_next, now, busy))
            if job is not None:
                self._start(job)
                continue
            wait = None
            if not paused:
                due = await self.library.run(jobs.next_due)
                cooling = [until for until in self._cooling.values() if until > now]
                candidates = [t for t in [due, *cooling] if t is not None]
                if candidates:
                    wait = max(0.0, min(candidates) - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=wait)

    def _start(self, job: Job) -> None:
        self._running[job.upstream] = self._running.get(job.upstream, 0) + 1
        task = asyncio.create_task(self._execute(job), name=f"job {job.id} {job.operation}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _execute(self, job: Job) -> None:
        store = self.library.store
        handler = self.handlers.get(job.operation)
        try:
            if handler is None:
                raise Unauthorized(f"no handler for operation {job.operation!r}")
            apply = await handler.run(job)
            state = await self.library.run(
                lambda: store.jobs.complete(job, self.clock(), handler.still_current, apply)
            )
            log.debug("job %d %s: %s", job.id, job.operation, state)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self.library.run(partial(self._failed, job, exc))
        finally:
            # Before the next job is claimed: what follows from this one may come first.
            for callback in self.on_settled:
                try:
                    await callback(job)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.exception("after job %d", job.id)
            self._running[job.upstream] -= 1
            if self.settings.delay_seconds:
                self._cooling[job.upstream] = self.clock() + self.settings.delay_seconds
            self._wake.set()

    def _failed(self, job: Job, exc: Exception) -> None:
        jobs = self.library.store.jobs
        now = self.clock()
        error = f"{type(exc).__name__}: {exc}"
        if isinstance(exc, NoCredentials):
            # Not the job's fault: it waits, without using up its attempts, until the
            # chat's next request brings a key and model (see `hurry`).
            jobs.park(job, now, now + self.settings.backoff_cap_seconds, error)
            return
        retry = getattr(exc, "retry", True)
        if not retry or job.attempts >= self.settings.max_attempts:
            log.warning("job %d %s for %s failed: %s", job.id, job.operation, job.chat_id, error)
            jobs.fail(job, now, error)
            return
        backoff = min(
            self.settings.backoff_seconds * 2 ** (job.attempts - 1),
            self.settings.backoff_cap_seconds,
        )
        log.info("job %d %s: %s; retrying in %.0f s", job.id, job.operation, error, backoff)
        jobs.retry_later(job, now, now + backoff, error)
