"""The operation queue with fake handlers: order, retries, failures, changed input, restarts."""

from __future__ import annotations

import asyncio
import time
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from proxy.core.operations import OPERATIONS, Operation
from proxy.errors import JobFailure, NoCredentials, Unauthorized
from proxy.memory.calls.jobs import Apply, JobQueue
from proxy.memory.ops.handler import gone
from proxy.settings import QueueSettings
from proxy.sillytavern.chatfile import STMessage
from proxy.store import Database, Store
from proxy.store.jobs import STALE, Job
from tests.test_store import record
from tests.waiting import until

FAST = QueueSettings(backoff_seconds=0.01, backoff_cap_seconds=0.04, max_attempts=3)


class Fake:
    """A handler whose behaviour each test scripts; it records what it applied."""

    def __init__(self) -> None:
        self.outcomes: dict[str, list[Any]] = {}  # dedup key -> per attempt: None ok, or error
        self.applied: list[tuple[str, str]] = []
        self.current: dict[str, str] = {}  # dedup key -> the input hash that is current
        self.gate: asyncio.Event | None = None
        self.in_flight = 0
        self.max_in_flight = 0
        self.order: list[str] = []
        self.missed: set[str] = set()  # dedup keys whose first run finds no input

    async def run(self, job: Job) -> Apply:
        self.order.append(job.dedup_key)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(0.005)
            if job.dedup_key in self.missed and job.attempts == 1:
                return gone
            script = self.outcomes.get(job.dedup_key, [])
            outcome = script[job.attempts - 1] if job.attempts - 1 < len(script) else None
            if outcome is not None:
                raise outcome
        finally:
            self.in_flight -= 1
        return lambda db: self.applied.append((job.dedup_key, job.input_hash))

    def still_current(self, db: Database, job: Job) -> bool:
        return self.current.get(job.dedup_key, job.input_hash) == job.input_hash


def save_empty(db: Database, chat_id: str) -> None:
    db.save_chat(record(chat_id), [], [], lambda i: STMessage(), [])


@pytest.fixture
async def setup(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = Store(tmp_path / "s.sqlite3")
    for chat_id in ("a", "b"):
        await store.call(partial(save_empty, chat_id=chat_id))
    fake = Fake()
    handlers = dict.fromkeys(OPERATIONS, fake)
    yield store, fake, handlers
    await store.close()


async def test_order_dedup_and_success(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.pause()
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "m1", {}, "h1", "up")
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "m1", {}, "h1", "up")  # deduplicated
        await queue.enqueue("a", Operation.DETECT_SCENE_BREAK, "d1", {}, "h", "up")
        await queue.enqueue("a", Operation.RUNNING_RECAP, "r1", {}, "h", "up")
        await queue.enqueue("a", Operation.SCENE_RECAP, "s1", {}, "h", "up")
        assert len(await queue.jobs()) == 4
        await queue.resume()
        await queue.idle()
    assert fake.order == ["r1", "s1", "d1", "m1"]
    assert sorted(fake.applied) == [("d1", "h"), ("m1", "h1"), ("r1", "h"), ("s1", "h")]
    assert {j.state for j in await JobQueue(store, handlers, FAST).jobs()} == {"done"}


async def test_retries_back_off_then_succeed_or_fail(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.outcomes = {
        "flaky": [JobFailure("429 too many requests"), None],
        "broken": [JobFailure("500")] * 5,
        "denied": [Unauthorized("401 bad key")],
        "bug": [RuntimeError("boom"), None],
    }
    async with JobQueue(store, handlers, FAST) as queue:
        for key in fake.outcomes:
            await queue.enqueue("a", Operation.MESSAGE_RECAP, key, {}, "h", f"up-{key}")
        await queue.idle()
        jobs = {j.dedup_key: j for j in await queue.jobs()}
    assert (jobs["flaky"].state, jobs["flaky"].attempts) == ("done", 2)
    assert (jobs["bug"].state, jobs["bug"].attempts) == ("done", 2)
    assert (jobs["broken"].state, jobs["broken"].attempts) == ("failed", 3)
    assert jobs["broken"].error == "JobFailure: 500"
    assert (jobs["denied"].state, jobs["denied"].attempts) == ("failed", 1)
    assert "401" in (jobs["denied"].error or "")
    assert ("broken", "h") not in fake.applied


async def test_changed_input_is_redone_and_vanished_input_dropped(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.gate = asyncio.Event()
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "edited", {"text": "v1"}, "v1", "up1")
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "deleted", {}, "x", "up2")
        await until(lambda: fake.in_flight == 2, "both jobs running")
        # While both run: one message is edited (new content), the other deleted.
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "edited", {"text": "v2"}, "v2", "up1")
        fake.current["deleted"] = "gone"
        fake.gate.set()
        await queue.idle()
        jobs = {j.dedup_key: j for j in await queue.jobs()}
    assert fake.applied == [("edited", "v2")]  # the old content was never applied
    assert jobs["edited"].payload == {"text": "v2"} and jobs["edited"].state == "done"
    assert jobs["deleted"].state == "dropped"


async def test_a_job_that_missed_its_input_runs_again(setup) -> None:  # type: ignore[no-untyped-def]
    """Its input was not there when it ran but is at its end (it changed and changed
    back meanwhile): it runs again, neither failed nor applied to nothing."""
    store, fake, handlers = setup
    fake.missed = {"moved"}
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "moved", {}, "h", "up")
        await queue.idle()
        [job] = await queue.jobs()
    assert (job.state, job.attempts) == ("done", 2)
    assert fake.applied == [("moved", "h")]


async def test_concurrency_is_per_upstream(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    async with JobQueue(store, handlers, FAST) as queue:
        for i in range(4):
            await queue.enqueue("a", Operation.MESSAGE_RECAP, f"x{i}", {}, "h", "one")
        await queue.idle()
        assert fake.max_in_flight == 1
        fake.max_in_flight = 0
        for i in range(4):
            await queue.enqueue("b", Operation.MESSAGE_RECAP, f"y{i}", {}, "h", f"api-{i}")
        await queue.idle()
    assert fake.max_in_flight > 1


async def test_restart_runs_interrupted_jobs_once(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.gate = asyncio.Event()
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.enqueue("a", Operation.SCENE_RECAP, "done-before", {}, "h", "up1")
        await queue.enqueue("a", Operation.SCENE_RECAP, "interrupted", {}, "h", "up2")
        fake.gate.set()
        await until(lambda: ("done-before", "h") in fake.applied, "the first job applied")
        fake.gate.clear()
        await queue.enqueue("a", Operation.SCENE_RECAP, "stuck", {}, "h", "up3")
        await until(lambda: fake.in_flight > 0, "a job running")
    # stopped with "stuck" (and maybe "interrupted") running
    fake.gate.set()
    applied_before = list(fake.applied)
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.idle()
        jobs = {j.dedup_key: j for j in await queue.jobs()}
    assert {j.state for j in jobs.values()} == {"done"}
    keys = [k for k, _ in fake.applied]
    assert sorted(set(keys)) == ["done-before", "interrupted", "stuck"]
    assert len(keys) == len(set(keys))  # nothing applied twice
    assert applied_before.count(("done-before", "h")) == 1


async def test_pause_resume_retry_clear(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.outcomes = {"denied": [Unauthorized("403")]}
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "denied", {}, "h", "up")
        await queue.idle()
        (job,) = await queue.jobs(states=("failed",))
        fake.outcomes.clear()  # the user fixed the key
        await queue.pause()
        assert await queue.retry(job.id)
        await queue.looked()  # the runner has looked for work since the retry
        assert (await queue.jobs())[0].state == "queued"  # paused: not run
        await queue.resume()
        await queue.idle()
        assert (await queue.jobs())[0].state == "done"
        await queue.pause()
        await queue.enqueue("b", Operation.MESSAGE_RECAP, "later", {}, "h", "up")
        assert await queue.clear("b") == 1
        assert [j.dedup_key for j in await queue.jobs()] == ["denied"]
        with pytest.raises(ValueError, match="unknown operation"):
            await queue.enqueue("a", "bake_cake", "k", {}, "h", "up")  # type: ignore[arg-type]


async def test_a_key_the_api_echoes_is_not_kept_in_the_jobs_error(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.outcomes = {
        "echo": [Unauthorized("401: invalid key my-chat-key-1234 (also sk-abcdefghijklmnopqr)")]
    }
    queue = JobQueue(store, handlers, FAST, secrets=lambda: {"my-chat-key-1234"})
    async with queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "echo", {}, "h", "up")
        await queue.idle()
        [job] = await queue.jobs()
    assert job.state == "failed" and job.error is not None
    assert "my-chat-key-1234" not in job.error and "sk-abcdefghijklmnopqr" not in job.error
    assert job.error == "Unauthorized: 401: invalid key <redacted> (also <redacted>)"


async def test_the_runner_stops_when_it_is_woken_as_it_is_stopped(setup) -> None:  # type: ignore[no-untyped-def]
    """Woken (a plan enqueued work) at the very moment it is stopped, the runner still
    stops: on 3.11 an `asyncio.wait_for` cancelled just as its event is set returns instead
    of raising, and a shutdown then waited for the runner for good."""
    store, _, handlers = setup
    queue = JobQueue(store, handlers, FAST)
    # A job is due in a minute: the runner waits with a timeout (with none, 3.11's
    # `wait_for` awaits the event directly and is not affected).
    queue._next = lambda db, now, busy, lost: (False, None, now + 60)  # type: ignore[method-assign]
    await queue.__aenter__()
    await asyncio.sleep(0.05)  # the runner waits for work
    queue.wake()
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(queue.__aexit__(None, None, None), 5)
    assert loop.time() - started < 1  # at once, not when the 5 s cancel it again


async def test_finished_jobs_are_forgotten_after_keep_done_days(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    day = 86400.0
    now = [1_000_000.0]
    fake.outcomes = {"denied": [Unauthorized("401")]}
    fake.current = {"gone": "other"}  # its input changed: dropped
    settings = QueueSettings(backoff_seconds=0.01, max_attempts=1, keep_done_days=7)
    async with JobQueue(store, handlers, settings, clock=lambda: now[0]) as queue:
        for key in ("old", "denied", "gone"):
            await queue.enqueue("a", Operation.MESSAGE_RECAP, key, {}, "h", "up")
        await queue.idle()
        now[0] += 6.5 * day
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "new", {}, "h", "up")
        await queue.idle()
    states = {j.dedup_key: j.state for j in await queue.jobs()}
    assert states == {"old": "done", "denied": "failed", "gone": "dropped", "new": "done"}
    # Started again a day later: the finished jobs of over a week ago go, the failed one
    # (which planning reads) and the newer one stay.
    now[0] += day
    async with JobQueue(store, handlers, settings, clock=lambda: now[0]) as queue:
        await queue.looked()
        assert {j.dedup_key for j in await queue.jobs()} == {"denied", "new"}
        # Running on: the daily look forgets the newer one a week after it finished.
        now[0] += 6.5 * day
        queue.wake()
        await queue.looked()
        assert {j.dedup_key for j in await queue.jobs()} == {"denied"}


async def test_a_queued_job_says_what_it_waits_for(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    fake.outcomes = {
        "no-model": [NoCredentials("no model for the proxy's own calls yet")],
        "flaky": [JobFailure("the API answered 503")],
    }
    settings = QueueSettings(backoff_seconds=60, backoff_cap_seconds=60)
    async with JobQueue(store, handlers, settings) as queue:
        for key in ("no-model", "flaky", "fine"):
            await queue.enqueue("a", Operation.MESSAGE_RECAP, key, {}, "h", f"up-{key}")
        await until(lambda: len(fake.order) == 3, "each job run once")
        jobs: dict[str, Job] = {}

        async def recorded() -> bool:
            # A job's outcome is written after its handler returns, beside the runner's
            # looks for work: wait for the three, not for the runner.
            found = {j.dedup_key: j for j in await queue.jobs()}
            jobs.update(found)
            return found["fine"].state == "done" and all(
                found[k].error for k in ("no-model", "flaky")
            )

        await until(recorded, "each outcome recorded")
    assert {k: j.waiting_for for k, j in jobs.items()} == {
        "no-model": "model", "flaky": "retry", "fine": None
    }  # fmt: skip
    assert jobs["no-model"].public()["waiting_for"] == "model"
    # In a few words, for a progress line or a badge: the reason without the error's type.
    assert {k: j.held for k, j in jobs.items()} == {
        "no-model": "waiting for a model", "flaky": "retrying: the API answered 503", "fine": None
    }  # fmt: skip
    assert (jobs["no-model"].state, jobs["no-model"].attempts) == ("queued", 0)  # not used up


async def test_a_job_for_what_went_does_not_wait_for_a_model(setup) -> None:  # type: ignore[no-untyped-def]
    """A chat renamed while it was planned: the job made under its old name finds no key
    and model there (they went with the chat), and no input either. It is dropped, not
    kept waiting for a request that will never come under that name."""
    store, fake, handlers = setup
    fake.outcomes = {k: [NoCredentials("no model yet")] for k in ("gone", "waits")}
    fake.current = {"gone": "changed since"}
    settings = QueueSettings(backoff_seconds=60, backoff_cap_seconds=60)
    async with JobQueue(store, handlers, settings) as queue:
        for key in ("gone", "waits"):
            await queue.enqueue("a", Operation.MESSAGE_RECAP, key, {}, "h", "up")

        async def ended() -> bool:
            found = {j.dedup_key: j for j in await queue.jobs()}
            return found["gone"].state == "dropped" and found["waits"].error is not None

        await until(ended, "both outcomes recorded")
        jobs = {j.dedup_key: j for j in await queue.jobs()}
    assert (jobs["gone"].error, jobs["gone"].waiting_for) == (STALE, None)
    assert (jobs["waits"].state, jobs["waits"].waiting_for) == ("queued", "model")


async def test_a_look_after_a_job_lists_what_is_live_and_what_came_after(setup) -> None:  # type: ignore[no-untyped-def]
    store, fake, handlers = setup
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "old", {}, "h", "up")
        await queue.idle()
        await queue.pause()
        held = await queue.enqueue("a", Operation.MESSAGE_RECAP, "held", {}, "h", "up")
        fake.gate = asyncio.Event()
        start = max(j.id for j in await queue.jobs("a"))
        await queue.resume()
        await until(lambda: fake.in_flight == 1, "the held job running, at the gate")
        await queue.pause()
        newer = await queue.enqueue("a", Operation.SCENE_RECAP, "newer", {}, "h", "up")
        await queue.enqueue("b", Operation.SCENE_RECAP, "other chat", {}, "h", "up")

        looked = await queue.live_or_after("a", start)
        # `held` (running, older than `start`) and `newer`; not the done `old`, nor b's.
        assert [(j.id, j.state) for j in looked] == [(held, "running"), (newer, "queued")]
        assert [j.dedup_key for j in await queue.live_or_after(None, newer)] == [
            "held",
            "newer",
            "other chat",
        ]
        fake.gate.set()
        await queue.resume()
        await queue.idle()
        assert [j.dedup_key for j in await queue.live_or_after("a", start)] == ["newer"]


async def test_the_queue_outlives_a_store_that_cannot_be_written(  # type: ignore[no-untyped-def]
    setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A full disk, a read-only file, another process holding the lock: the runner cannot
    # claim a job, nor a job keep its result. Once the store takes writes, it goes on,
    # and the job whose result could not be kept is run again.
    store, fake, handlers = setup

    def writable(on: bool) -> Any:
        return store.call(lambda db: db.db.execute(f"PRAGMA query_only={0 if on else 1}"))

    fake.gate = asyncio.Event()
    async with JobQueue(store, handlers, FAST, store_retry=0.01) as queue:
        await queue.enqueue("a", Operation.MESSAGE_RECAP, "kept", {}, "h", "up")
        await until(lambda: fake.in_flight == 1, "the job running")
        # Queued behind it (one job at a time per upstream): claimed once it ends.
        await queue.enqueue("b", Operation.MESSAGE_RECAP, "later", {}, "h", "up")
        await writable(False)
        fake.gate.set()  # its result comes while the store cannot keep it
        await until(lambda: fake.in_flight == 0 and not queue._tasks, "the job ended")
        await asyncio.sleep(0.05)  # the runner meets the failing store, more than once
        assert fake.applied == []
        await writable(True)
        await until(lambda: len(fake.applied) == 2, "both jobs done once it takes writes")
        await queue.idle()
        jobs = {j.dedup_key: j.state for j in await queue.jobs()}
    assert jobs == {"kept": "done", "later": "done"}
    assert sorted(fake.applied) == [("kept", "h"), ("later", "h")]


async def test_a_lost_job_is_queued_again_unless_it_used_up_its_attempts(setup) -> None:  # type: ignore[no-untyped-def]
    # Each claim was a call to the LLM: a job whose end the store could never keep is not
    # called for without end.
    store, _, handlers = setup
    async with JobQueue(store, handlers, FAST) as queue:
        await queue.pause()
        for key in ("fresh", "spent"):
            await queue.enqueue("a", Operation.MESSAGE_RECAP, key, {}, "h", "up")

    def lose(db: Database) -> int:
        later = time.time() + 60
        claimed = [db.jobs.claim_next(later, set()) for _ in range(2)]
        db.db.execute("UPDATE jobs SET attempts=3 WHERE dedup_key='spent'")
        return db.jobs.requeue([job.id for job in claimed if job is not None], later, 3)

    assert await store.call(lose) == 2
    jobs = {j.dedup_key: j for j in await JobQueue(store, handlers, FAST).jobs()}
    assert (jobs["fresh"].state, jobs["spent"].state) == ("queued", "failed")
    assert jobs["spent"].error == "its outcome could not be kept: the store failed"
