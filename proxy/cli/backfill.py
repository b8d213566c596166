"""`recap-proxy backfill`: a chat's whole memory built by the running server, watched
with a progress line that says what holds the work up."""

from __future__ import annotations

import asyncio
import shlex
import sys
import time
from typing import Any
from urllib.parse import quote

from proxy.cli.server import Server

POLL_SECONDS = 0.5


async def backfill(server: Server, chat: str, base: str, *, wait: bool) -> int:
    """Queue the chat's upkeep, then (with `wait`) draw its progress until no job of the
    chat is left; 1 when a job failed or the chat's memory is off."""
    queue = f"/recap/api/queue?chat={quote(chat, safe='')}"
    # The newest job of the chat so far is among the work not done and the newest done.
    known = (await server.call("GET", f"{queue}&done=1"))["jobs"]
    before = max((j["id"] for j in known), default=0)
    # Then each look lists only what is live and what came after: not the chat's history.
    queue = f"{queue}&after={before}"
    started = await server.call("POST", f"{base}/backfill")
    if started.get("memory_on") is False:
        print(
            f"{chat}: memory is off for this chat, so it has no upkeep to do: "
            f"`recap-proxy memory {shlex.quote(chat)} --on` turns it on (unless [memory] "
            "enabled or [injection] turns it off for every chat)",
            file=sys.stderr,
        )
        return 1
    print(f"{chat}: {started['queued']} job(s) queued", file=sys.stderr)
    if started.get("waiting_for_model"):
        print(
            "the jobs wait for a model: chat once in this chat through the proxy, or set "
            "[memory.llm] model (and api_key if needed)",
            file=sys.stderr,
        )
    if not wait:
        return 0
    began = time.monotonic()
    quiet = 0  # polls in a row with nothing queued or running
    drawn = 0  # the length of the progress line last drawn
    try:
        while True:
            listing = await server.call("GET", queue)
            # The chat's work is done when none of its jobs is left, those queued before
            # this command (by its requests, say, or an earlier backfill) too; the counts
            # are of this command's own.
            live = [j for j in listing["jobs"] if j["state"] in ("queued", "running")]
            ours = [j for j in listing["jobs"] if j["id"] > before]
            finished = sum(1 for j in ours if j["state"] not in ("queued", "running"))
            failed = sum(1 for j in ours if j["state"] == "failed")
            overview = await server.call("GET", f"{base}/memory")
            # Planning follows each finished job: work is done only when two polls in a
            # row find nothing queued or running.
            quiet = 0 if live else quiet + 1
            drawn = _progress(
                overview,
                finished,
                failed,
                time.monotonic() - began,
                quiet >= 2,
                _held(live),
                drawn,
            )
            if quiet >= 2:
                break
            if listing["paused"]:
                print("\nthe queue is paused: `recap-proxy queue resume`", file=sys.stderr)
                return 1
            await asyncio.sleep(POLL_SECONDS)
    except asyncio.CancelledError:
        # Ctrl-C: the line ends, and the user learns the work is not lost with the bar.
        print(
            "\nstopped watching; the jobs go on in the server "
            f"(`recap-proxy memory {shlex.quote(chat)}`)",
            file=sys.stderr,
        )
        raise
    print(file=sys.stderr)
    for failure in overview.get("failures", []):
        print(f"failed: {failure['operation']}: {failure['error']}", file=sys.stderr)
    open_scene = describe_open_scene(overview, await server.call("GET", f"{base}/scenes"))
    if open_scene:
        # What the bar leaves unsaid: the open scene is recapped once a break closes it.
        print(f"not covered: {open_scene}", file=sys.stderr)
    return 1 if failed else 0


def describe_open_scene(overview: dict[str, Any], scenes: list[dict[str, Any]]) -> str:
    """The open scene's messages and when its next scene-break check comes ("" when the
    chat has none after its last scene)."""
    first = max((int(s["index"]) + 1 for s in scenes if s["visible"]), default=0)
    last = int(overview.get("messages") or 0) - 1
    if last < first:
        return ""
    span = f"messages #{first}-{last}, the open scene (recapped once a scene break ends it)"
    wait = overview.get("scene_check_in")
    if wait is None:
        return span
    if wait == 0:
        return f"{span}; a scene-break check is due"
    return f"{span}; next scene-break check after {wait} more message(s)"


def _held(jobs: list[dict[str, Any]]) -> str:
    """Why the work stands still, for the progress line ("" when nothing holds it): a
    queued job that already met an error waits for a model or for its retry. Without this
    the bar would count the seconds and nothing else while, say, the API is down."""
    for job in jobs:
        if job["waiting_for"] == "model":
            return f"{job['held']} (chat once in this chat, or set [memory.llm] model)"
        if job["held"]:
            return str(job["held"])
    return ""


def _progress(
    overview: dict[str, Any],
    calls: int,
    failed: int,
    seconds: float,
    done: bool,
    held: str = "",
    drawn: int = 0,
) -> int:
    """One line, redrawn over the last one (`drawn` characters long): how far the running
    recap covers the chat, scenes found and folded in, jobs done, failures, time, and
    what holds the work up (`held`). Returns the line's length."""
    width = 30
    total = max(1, int(overview.get("messages") or 0))
    covered = int(overview.get("covered_through", -1)) + 1
    filled = width if done else min(width, width * covered // total)
    bar = "#" * filled + "." * (width - filled)
    running = overview.get("running_recap") or {}
    folded = int(running.get("scene_count") or 0)
    extra = f", {failed} failed" if failed else ""
    line = (
        f"[{bar}] {covered:,}/{total:,} messages covered, {overview['scenes']} scene(s) "
        f"({folded} folded in), {calls} job(s) done{extra}, {seconds:.0f} s"
        + (f"; {held}" if held else "")
    )
    # Spaces over what is left of a longer line (a note that went away).
    print("\r" + line.ljust(drawn), end="", file=sys.stderr, flush=True)
    return len(line)
