"""The proxy's own pauses and time limits, in one place: what serving uses by default, and
what a test sets small (`build_runtime(waits=...)`) instead of sleeping through them.

Each is an upper bound the proxy waits for an event that usually comes sooner (a request,
a file read, a folder appearing), or a pause before it looks again after a failure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Waits:
    # After ST saved the user's message, planning waits this long at most for the chat
    # request that follows (ST builds its prompt in between: tens of milliseconds), so that
    # the proxy's own calls do not compete with it for the CPU.
    request_hold: float = 0.5
    # A chat's first request waits this long at most for its memory to start (planning
    # only, no LLM call), so that it already carries what exists.
    first_request: float = 0.5
    # A request waits this long at most for its chat file to be re-read.
    freshness: float = 1.0
    # How often a data folder that is not there (yet, or any more) is looked for.
    gone_poll: float = 2.0
    # How long the job runner and the planner wait before trying a failing store again.
    store_retry: float = 5.0
    # How long indexing waits before reading again the chats a failing store did not take.
    index_retry: float = 10.0
    # How long scene texts to embed gather before the call that embeds them (a backfill
    # writes a scene recap every few seconds: one call for many, not one each).
    embed_gather: float = 2.0


SERVING = Waits()
