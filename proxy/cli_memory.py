"""The memory commands of `recap-proxy`: they talk to the running server's API.

The server owns the memory (its queue, the chats' keys kept in memory, the views the chat
path reads), so these commands ask it rather than open the store beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from proxy.core.export import FORMATS
from proxy.core.guard import KEY_HEADER
from proxy.errors import RecapProxyError
from proxy.settings import Settings, load_settings
from proxy.sillytavern.layout import data_dir_for, holds_st_user

POLL_SECONDS = 0.5
SHOWN_DONE = 10  # done jobs `queue` lists without --all


def add_memory_commands(sub: Any, config_arg: Any) -> None:
    def server_arg(p: argparse.ArgumentParser) -> None:
        config_arg(p)
        p.add_argument("--server", help="the running proxy (default: from [server] settings)")

    chat_help = "chat id, file name, or character/group name (newest chat)"
    backfill = sub.add_parser("backfill", help="build memory for an existing chat, with progress")
    server_arg(backfill)
    backfill.add_argument("chat", help=chat_help)
    backfill.add_argument("--no-wait", action="store_true", help="queue the work and return")

    memory = sub.add_parser("memory", help="show a chat's memory; turn it on or off")
    server_arg(memory)
    memory.add_argument("chat", help=chat_help)
    toggle = memory.add_mutually_exclusive_group()
    toggle.add_argument("--on", dest="enabled", action="store_const", const=True)
    toggle.add_argument("--off", dest="enabled", action="store_const", const=False)
    toggle.add_argument("--default", dest="enabled", action="store_const", const="default")
    memory.add_argument("--json", action="store_true", help="print JSON")
    memory.add_argument(
        "--copy-from",
        metavar="OTHER",
        help="start this chat from another chat's current running recap",
    )

    export = sub.add_parser("export", help="write a chat's memory as Markdown, JSON or ST lore")
    server_arg(export)
    export.add_argument("chat", help=chat_help)
    export.add_argument("--format", choices=list(FORMATS), default="markdown")
    export.add_argument(
        "-o", "--output", type=Path, help="file to write (default: standard output)"
    )

    breaks = sub.add_parser("scene-break", help="set (or --remove) a scene break on a message")
    server_arg(breaks)
    breaks.add_argument("chat", help=chat_help)
    breaks.add_argument("index", type=int, help="the message's index (ST's message id)")
    breaks.add_argument("--remove", action="store_true")

    regenerate = sub.add_parser("regenerate", help="write a recap again")
    server_arg(regenerate)
    regenerate.add_argument("chat", help=chat_help)
    regenerate.add_argument("what", choices=["scene", "running", "message"])
    regenerate.add_argument("index", type=int, nargs="?", help="scene end or message index")

    queue = sub.add_parser("queue", help="see or control the queue of the proxy's own LLM work")
    server_arg(queue)
    queue.add_argument(
        "action", nargs="?", default="list", choices=["list", "pause", "resume", "clear", "retry"]
    )
    queue.add_argument("job", type=int, nargs="?", help="job id, for retry")
    queue.add_argument("--chat", help="only this chat (list, clear)")
    queue.add_argument(
        "--all",
        action="store_true",
        help=f"list every done job (else the newest {SHOWN_DONE}, with all jobs not done)",
    )


class Server:
    def __init__(
        self, base: str, session: aiohttp.ClientSession, access_key: str | None = None
    ) -> None:
        self.base = base.rstrip("/")
        self.session = session
        self.headers = {KEY_HEADER: access_key} if access_key else {}

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        """The server's JSON answer; its error message as `RecapProxyError`."""
        return orjson.loads(await self._send(method, path, body))

    async def text(self, path: str) -> str:
        """A GET whose answer is a file (an export), not JSON."""
        return (await self._send("GET", path, None)).decode("utf-8")

    async def _send(self, method: str, path: str, body: Any) -> bytes:
        if method != "GET" and body is None:
            body = {}  # changes always go as JSON: the server takes nothing else
        try:
            async with self.session.request(
                method, self.base + path, json=body, headers=self.headers
            ) as response:
                raw = await response.read()
        except aiohttp.ClientConnectionError:
            raise RecapProxyError(
                f"no recap-proxy server at {self.base}: start it with `recap-proxy serve` "
                "(or pass --server URL)"
            ) from None
        if response.status >= 400:
            try:
                data = orjson.loads(raw)
                message = data["error"]["message"] if isinstance(data, dict) else data
            except (orjson.JSONDecodeError, KeyError, TypeError):
                # Not the API's own error (another server on the port, a proxy between):
                # the route it went to helps.
                message = f"{method} {path}: {raw.decode('utf-8', 'replace')}"
            # The API's own error names the chat and message already: the route (a long
            # percent-encoded chat id) would only bury it.
            raise RecapProxyError(str(message))
        return raw

    async def chat_id(self, name: str) -> str:
        chats = await self.call("GET", "/recap/api/chats")
        chosen, note = pick_chat(name, chats)
        if note:
            print(f"recap-proxy: {note}", file=sys.stderr)
        return chosen


def pick_chat(name: str, chats: list[dict[str, Any]]) -> tuple[str, str | None]:
    """The chat a user named: its id, its file name (with or without `.jsonl`, with or
    without its folders), or its character's or group's name (that character's newest
    chat). Returns (id, a note saying which chat a name stood for, or None). A name that
    fits chats of different characters (or users) is an error listing them."""
    wanted = name.strip()
    bare = wanted.removesuffix(".jsonl")
    newest = sorted(chats, key=lambda c: c.get("updated") or 0, reverse=True)
    exact = [c for c in newest if bare in (c["id"], c["file"].removesuffix(".jsonl"))]
    by_file = [c for c in newest if Path(c["file"]).stem == bare]
    by_name = [c for c in newest if c["name"] == wanted] or [
        c for c in newest if c["name"].casefold() == wanted.casefold()
    ]
    for found, what in ((exact, None), (by_file, "file"), (by_name, "name")):
        if not found:
            continue
        owners = {(c["user"], c["kind"], c.get("owner") or c["name"]) for c in found}
        if len(owners) > 1:
            listed = "\n  ".join(f"{c['id']}  ({c['kind']} {c['name']})" for c in found)
            raise RecapProxyError(
                f"{wanted!r} names chats of {len(owners)} different characters or groups; "
                f"name one by its id:\n  {listed}"
            )
        chosen = str(found[0]["id"])
        if what is None or (what == "file" and len(found) == 1):
            return chosen, None
        among = f" (the newest of its {len(found)} chats)" if len(found) > 1 else ""
        return chosen, f"{wanted!r} is {chosen}{among}"
    raise RecapProxyError(f"no chat named {wanted!r} (see `recap-proxy chats`)")


def _server_url(args: argparse.Namespace, settings: Settings) -> str:
    if args.server:
        return str(args.server)
    host = settings.server.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{settings.server.port}"


async def run_memory_command(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    key = settings.server.access_key
    async with aiohttp.ClientSession() as session:
        server = Server(
            _server_url(args, settings), session, key.get_secret_value() if key else None
        )
        if args.command == "queue":
            return await _queue(server, args)
        chat = await server.chat_id(args.chat)
        base = f"/recap/api/chats/{quote(chat, safe='')}"
        if args.command == "backfill":
            return await _backfill(server, chat, base, wait=not args.no_wait)
        if args.command == "memory":
            if args.copy_from:
                other = await server.chat_id(args.copy_from)
                copied = await server.call("POST", f"{base}/memory/copy-from", {"chat": other})
                print(f"{chat} starts from version {copied['version']}, copied from {other}",
                      file=sys.stderr)  # fmt: skip
            return await _memory(server, base, args)
        if args.command == "export":
            return await _export(server, base, args, settings)
        if args.command == "scene-break":
            method = "DELETE" if args.remove else "PUT"
            print(
                json.dumps(
                    await server.call(method, f"{base}/messages/{args.index}/scene_break", {})
                )
            )
            return 0
        return await _regenerate(server, base, args)


async def _backfill(server: Server, chat: str, base: str, *, wait: bool) -> int:
    queue = f"/recap/api/queue?chat={quote(chat, safe='')}"
    before = max((j["id"] for j in (await server.call("GET", queue))["jobs"]), default=0)
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
    open_scene = _open_scene(overview, await server.call("GET", f"{base}/scenes"))
    if open_scene:
        # What the bar leaves unsaid: the open scene is recapped once a break closes it.
        print(f"not covered: {open_scene}", file=sys.stderr)
    return 1 if failed else 0


def _open_scene(overview: dict[str, Any], scenes: list[dict[str, Any]]) -> str:
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


async def _export(server: Server, base: str, args: argparse.Namespace, settings: Settings) -> int:
    text = await server.text(f"{base}/export?format={args.format}")
    if args.output is None:
        sys.stdout.write(text)
        return 0
    target = args.output.expanduser().resolve()
    for data in await _st_folders(server, settings, target):
        if target.is_relative_to(data):
            raise RecapProxyError(
                f"{target} is inside SillyTavern's data folder {data}: recap-proxy never "
                "writes there. Write it elsewhere and import it in ST (World Info: Import)."
            )
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise RecapProxyError(f"cannot write {target}: {exc.strerror}") from None
    print(f"wrote {target}", file=sys.stderr)
    return 0


async def _st_folders(server: Server, settings: Settings, target: Path) -> list[Path]:
    """Every folder that is (or may be) ST's data folder, for a file about to be written:
    the running server's (which `serve --st-data` may have set), the configured one, else
    the one found in the usual places, and any folder above `target` that holds an ST user
    folder (its chats and settings.json)."""
    found = [
        data_dir_for(settings.sillytavern.data_dir),
        *(p for p in target.parents if holds_st_user(p)),
    ]
    served = (await server.call("GET", "/")).get("st_data")
    if isinstance(served, str):
        found.append(Path(served))
    return [p.expanduser().resolve() for p in found if p is not None]


async def _memory(server: Server, base: str, args: argparse.Namespace) -> int:
    if args.enabled is not None:
        enabled = None if args.enabled == "default" else args.enabled
        await server.call("PUT", f"{base}/memory", {"enabled": enabled})
    overview = await server.call("GET", f"{base}/memory")
    scenes = await server.call("GET", f"{base}/scenes")
    if args.json:
        print(json.dumps({**overview, "scene_list": scenes}, indent=2, ensure_ascii=False))
        return 0
    state = {True: "on", False: "off", None: "default"}[overview["enabled"]]
    effect = "on" if overview["on"] else "off"
    if state == "default":
        state = f"default ({effect})"
    elif state != effect:
        state += f" (but {effect}: [injection] enabled or use_global_toggle_state decide)"
    print(f"chat:    {overview['chat']}")
    print(f"memory:  {state}{'' if overview['active'] else ' (not active yet)'}")
    queue = overview["queue"]
    print(
        f"queue:   {queue['queued']} queued, {queue['running']} running, {queue['failed']} failed"
    )
    for held in overview.get("waiting", []):
        if held["waiting_for"] == "model":
            when = "until the chat's next request brings a model"
        else:
            when = "retried at " + time.strftime("%H:%M:%S", time.localtime(held["not_before"]))
        print(f"waiting: {held['operation']} (job {held['job']}), {when}: {held['error']}")
    for failure in overview.get("failures", []):
        print(f"failed:  {failure['operation']} (job {failure['job']}): {failure['error']}")
    if overview.get("failures"):
        print("         (made again by itself after [queue] failed_retry_minutes, or now with "
              "`recap-proxy queue retry ID`)")  # fmt: skip
    print(f"recaps:  {overview['message_recaps']} message recap(s)")
    for scene in scenes:
        hidden = "" if scene["visible"] else " (hidden)"
        origin = f" ({scene['source']})" if scene["source"] in ("imported", "inherited") else ""
        print(f"scene    #{scene['first']}-{scene['index']} {scene['name'] or ''}{hidden}{origin}")
    open_scene = _open_scene(overview, scenes)
    if open_scene:
        print(f"open     {open_scene}")
    running = overview["running_recap"]
    if running:
        made = f"{running['scene_count']} scene(s), {running['source']}"
        print(f"\nrunning recap v{running['version']} ({made}):")
        print(running["content"])
    return 0


async def _regenerate(server: Server, base: str, args: argparse.Namespace) -> int:
    if args.what == "running":
        path = f"{base}/running/regenerate"
    elif args.index is None:
        raise RecapProxyError(f"regenerate {args.what} needs an index")
    elif args.what == "scene":
        path = f"{base}/scenes/{args.index}/regenerate"
    else:
        path = f"{base}/messages/{args.index}/recap/regenerate"
    print(json.dumps(await server.call("POST", path)))
    return 0


async def _queue(server: Server, args: argparse.Namespace) -> int:
    chat = quote(await server.chat_id(args.chat), safe="") if args.chat else None
    if args.action == "list":
        listing = await server.call("GET", "/recap/api/queue" + (f"?chat={chat}" if chat else ""))
        print(f"paused: {listing['paused']}")
        jobs = sorted(listing["jobs"], key=lambda j: int(j["id"]))
        # A backfilled story leaves hundreds of done jobs: the work that is not done (queued,
        # running, failed, dropped) comes first, then only the newest done ones.
        done = [j for j in jobs if j["state"] == "done"]
        hidden = 0 if args.all else max(0, len(done) - SHOWN_DONE)
        for job in [j for j in jobs if j["state"] != "done"] + done[hidden:]:
            error = f"  {job['error']}" if job["error"] else ""
            print(f"{job['id']:>6} {job['state']:<8} {job['operation']:<22} {job['chat']}{error}")
        if hidden:
            print(f"(and {hidden} older done job(s): `recap-proxy queue --all` lists them)")
        return 0
    if args.action == "retry":
        if args.job is None:
            raise RecapProxyError("queue retry needs a job id (see `recap-proxy queue`)")
        print(json.dumps(await server.call("POST", f"/recap/api/queue/jobs/{args.job}/retry")))
        return 0
    path = f"/recap/api/queue/{args.action}" + (f"?chat={chat}" if chat else "")
    print(json.dumps(await server.call("POST", path)))
    return 0
