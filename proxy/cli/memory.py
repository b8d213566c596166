"""The memory commands of `recap-proxy`: they talk to the running server's API.

The server owns the memory (its queue, the chats' keys kept in memory, the views the chat
path reads), so these commands ask it rather than open the store beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from proxy.cli.backfill import backfill, describe_open_scene
from proxy.cli.server import Server, server_url
from proxy.core.entities import TYPES
from proxy.core.export import FORMATS
from proxy.errors import RecapProxyError
from proxy.settings import Settings, load_settings
from proxy.sillytavern.layout import data_dir_for, holds_st_user

SHOWN_DONE = 10  # done jobs `queue` lists without --all


def add_memory_commands(sub: Any, config_arg: Any) -> None:
    def server_arg(p: argparse.ArgumentParser) -> None:
        config_arg(p)
        p.add_argument(
            "--server",
            help="the running proxy (default: the one serving the store, else [server] settings)",
        )

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

    entities = sub.add_parser(
        "entities", help="list who and what a chat's memory keeps, with what is known of them"
    )
    server_arg(entities)
    entities.add_argument("chat", help=chat_help)
    entities.add_argument("--json", action="store_true", help="print JSON")
    act = entities.add_mutually_exclusive_group()
    act.add_argument(
        "--edit",
        metavar="NAME",
        help="write an entity as you want it kept (with --name, --type, --alias, --fact), "
        "whatever later scenes say",
    )
    act.add_argument("--delete", metavar="NAME", help="leave an entity out of the memory")
    act.add_argument("--merge", metavar="NAME", help="make NAME and --into one entity")
    act.add_argument(
        "--release", metavar="NAME", help="undo your edit or deletion: what the scenes say"
    )
    entities.add_argument("--into", metavar="OTHER", help="with --merge: the one kept")
    entities.add_argument("--name", help="with --edit: its new name")
    entities.add_argument("--type", choices=list(TYPES), help="with --edit: its type")
    entities.add_argument("--alias", action="append", help="with --edit: its other names (each)")
    entities.add_argument("--fact", action="append", help="with --edit: its facts (each)")

    export = sub.add_parser("export", help="write a chat's memory as Markdown, JSON or ST lore")
    server_arg(export)
    export.add_argument("chat", help=chat_help)
    export.add_argument("--format", choices=list(FORMATS), default="markdown")
    export.add_argument(
        "-o", "--output", type=Path, help="file to write (default: standard output)"
    )

    breaks = sub.add_parser(
        "scene-break", help="set (or --remove) a scene break on a message; --check: look now"
    )
    server_arg(breaks)
    breaks.add_argument("chat", help=chat_help)
    breaks.add_argument("index", type=int, nargs="?", help="the message's index (ST's message id)")
    breaks.add_argument("--remove", action="store_true")
    breaks.add_argument("--check", action="store_true", help="check the open scene for its end now")

    clear = sub.add_parser("clear-recap", help="clear a message's recap (made again when due)")
    server_arg(clear)
    clear.add_argument("chat", help=chat_help)
    clear.add_argument("index", type=int, help="the message's index (ST's message id)")

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


async def run_memory_command(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    key = settings.server.access_key
    async with aiohttp.ClientSession() as session:
        server = Server(
            server_url(args, settings), session, key.get_secret_value() if key else None
        )
        if args.command == "queue":
            return await _queue(server, args)
        chat = await server.chat_id(args.chat)
        base = f"/recap/api/chats/{quote(chat, safe='')}"
        if args.command == "backfill":
            return await backfill(server, chat, base, wait=not args.no_wait)
        if args.command == "memory":
            if args.copy_from:
                other = await server.chat_id(args.copy_from)
                copied = await server.call("POST", f"{base}/memory/copy-from", {"chat": other})
                print(f"{chat} starts from version {copied['version']}, copied from {other}",
                      file=sys.stderr)  # fmt: skip
            return await _memory(server, base, args)
        if args.command == "export":
            return await _export(server, base, args, settings)
        if args.command == "entities":
            return await _entities(server, base, args)
        if args.command == "clear-recap":
            cleared = await server.call("DELETE", f"{base}/messages/{args.index}/recap", {})
            print(json.dumps(cleared))
            return 0
        if args.command == "scene-break" and args.check:
            print(json.dumps(await server.call("POST", f"{base}/scene-check", {})))
            return 0
        if args.command == "scene-break":
            if args.index is None:
                raise RecapProxyError("scene-break needs a message index, or --check")
            method = "DELETE" if args.remove else "PUT"
            print(
                json.dumps(
                    await server.call(method, f"{base}/messages/{args.index}/scene_break", {})
                )
            )
            return 0
        return await _regenerate(server, base, args)


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
    open_scene = describe_open_scene(overview, scenes)
    if open_scene:
        print(f"open     {open_scene}")
    running = overview["running_recap"]
    if running:
        made = f"{running['scene_count']} scene(s), {running['source']}"
        print(f"\nrunning recap v{running['version']} ({made}):")
        print(running["content"])
    return 0


async def _entities(server: Server, base: str, args: argparse.Namespace) -> int:
    one = args.edit or args.delete or args.merge or args.release
    if one:
        path = f"{base}/entities/{quote(one, safe='')}"
        if args.delete:
            found = [await server.call("DELETE", path, {})]
        elif args.release:
            found = [await server.call("POST", f"{path}/release", {})]
        elif args.merge:
            if not args.into:
                raise RecapProxyError("--merge needs --into (the entity kept)")
            found = [await server.call("POST", f"{path}/merge", {"into": args.into})]
        else:
            given = {"name": args.name, "type": args.type, "aliases": args.alias,
                     "facts": args.fact}  # fmt: skip
            changed = {k: v for k, v in given.items() if v is not None}
            if not changed:
                raise RecapProxyError("--edit needs --name, --type, --alias or --fact")
            found = [await server.call("PATCH", path, changed)]
    else:
        found = await server.call("GET", f"{base}/entities")
    if args.json:
        print(json.dumps(found if not one else found[0], indent=2, ensure_ascii=False))
        return 0
    if not found:
        print("no entities yet (each scene recap lists the ones its scene names)")
    for entity in found:
        also = f"; also {', '.join(entity['aliases'])}" if entity["aliases"] else ""
        marks = [m for m in ("edited", "deleted") if entity.get(m)]
        if entity.get("condensed") is not None:
            marks.append("condensed")
        marked = f"  [{', '.join(marks)}]" if marks else ""
        print(f"{entity['name']} ({entity['type']}{also}){marked}")
        for fact in entity["facts"]:
            print(f"  - {fact['text']}{_told(fact)}")
    return 0


def _told(fact: dict[str, Any]) -> str:
    if fact["scene"] is None:
        return "  [yours]" if fact["source"] == "edit" else f"  [{fact['source']}]"
    name = f" {fact['scene_name']}" if fact["scene_name"] else ""
    condensed = ", condensed" if fact["source"] == "condensed" else ""
    return f"  [scene #{fact['scene']}{name}{condensed}]"


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
        # A backfilled story leaves hundreds of done jobs: the work that is not done (queued,
        # running, failed, dropped) comes first, then only the newest done ones.
        query = [f"chat={chat}"] if chat else []
        if not args.all:
            query.append(f"done={SHOWN_DONE}")
        listing = await server.call("GET", "/recap/api/queue?" + "&".join(query))
        print(f"paused: {listing['paused']}")
        if "embeddings" in listing:
            embeddings = listing["embeddings"]
            print(f"embeddings: {embeddings['state']}, {embeddings['waiting']} text(s) waiting")
        jobs = sorted(listing["jobs"], key=lambda j: (j["state"] == "done", int(j["id"])))
        for job in jobs:
            error = f"  {job['error']}" if job["error"] else ""
            print(f"{job['id']:>6} {job['state']:<8} {job['operation']:<22} {job['chat']}{error}")
        if listing.get("older_done"):
            print(
                f"(and {listing['older_done']} older done job(s): `recap-proxy queue --all` "
                "lists them)"
            )
        return 0
    if args.action == "retry":
        if args.job is None:
            raise RecapProxyError("queue retry needs a job id (see `recap-proxy queue`)")
        print(json.dumps(await server.call("POST", f"/recap/api/queue/jobs/{args.job}/retry")))
        return 0
    path = f"/recap/api/queue/{args.action}" + (f"?chat={chat}" if chat else "")
    print(json.dumps(await server.call("POST", path)))
    return 0
