"""`recap-proxy chats` and `recap-proxy identify`: asked of the proxy that serves the
store when one runs, else answered by reading ST's data folder into the store (the folder
it mirrors, never another) with no server at all."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson

from adapters import formats
from adapters.text_completions import NAME as TEXT
from proxy.chat.providers import CHAT_ID_HEADER, identify_parsed
from proxy.cli.server import Server
from proxy.core.guard import reachable
from proxy.errors import AdapterError, RecapProxyError
from proxy.library.chats import ChatLibrary
from proxy.observe.logs import setup_logging
from proxy.settings import Settings, load_settings
from proxy.sillytavern.layout import data_dir_for, same_folder
from proxy.store import Store
from proxy.store.lock import serving

# What `chats` lists of each chat (`proxy.web.api.chat_summary`), from a server's answer too.
SUMMARY = ("id", "user", "kind", "name", "owner", "file", "messages", "updated")
START_WAIT = 3.0  # seconds a starting proxy's port is waited for


def read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise RecapProxyError(f"cannot read {path}: {exc.strerror}") from None


def _settings(args: argparse.Namespace) -> Settings:
    settings = load_settings(
        args.config,
        overrides={"sillytavern.data_dir": str(args.st_data) if args.st_data else None},
    )
    setup_logging("warning")
    return settings


@contextlib.asynccontextmanager
async def _served(settings: Settings) -> AsyncIterator[Server | None]:
    """The proxy that serves the configured store, if one runs (its lock file says where
    it listens), to be asked instead of indexing beside it: two writers of one mirror
    would each miss the changes the other read first. None when none answers."""
    listening = serving(settings.store.resolved_path())
    if listening is None:
        yield None
        return
    key = settings.server.access_key
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        server = Server(reachable(*listening), session, key.get_secret_value() if key else None)
        root = await _root(server, settings, listening)
        if root is not None:
            _reads_the_folder_given(server, root, settings)
        yield server if root is not None else None


async def _root(
    server: Server, settings: Settings, listening: tuple[str, int]
) -> dict[str, object] | None:
    """Its `GET /`, when a recap-proxy answers there; None when nothing does (the pid is
    another process's now), or no proxy. A proxy that is starting holds the store's lock
    before its port opens: the port is waited for, as long as the lock file still names
    it, for up to `START_WAIT` seconds. Its refusal (no access key) is raised."""
    deadline = time.monotonic() + START_WAIT
    while True:
        try:
            async with server.session.get(server.base + "/", headers=server.headers) as answer:
                status, raw = answer.status, await answer.read()
            break
        except aiohttp.ClientConnectionError:
            gone = serving(settings.store.resolved_path()) != listening
            if gone or time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.05)
        except (aiohttp.ClientError, TimeoutError):
            return None
    if status in (401, 403):
        raise server.error("GET", "/", raw)
    try:
        root = orjson.loads(raw) if status == 200 else None
    except orjson.JSONDecodeError:
        return None
    return root if isinstance(root, dict) and root.get("service") == "recap-proxy" else None


def _reads_the_folder_given(server: Server, root: dict[str, object], settings: Settings) -> None:
    """Refuse a data folder given (`--st-data`, the config) that the server does not read."""
    served, given = root.get("st_data"), settings.sillytavern.data_dir
    if given is None:
        return
    found = data_dir_for(given)
    if not isinstance(served, str) or found is None or not same_folder(served, found):
        raise RecapProxyError(
            f"the recap-proxy serving this store ({server.base}) reads SillyTavern's data "
            f"folder {served}, not {found or given}: leave out --st-data to see its chats, "
            "or give that folder a store of its own ([store] path in another config, "
            "--config)"
        )


@contextlib.asynccontextmanager
async def _open_library(settings: Settings) -> AsyncIterator[ChatLibrary]:
    """ST's chats, indexed into the configured store (closed on the way out)."""
    store_path = settings.store.resolved_path()
    async with Store(store_path) as store:
        mirrored = await store.call(lambda db: db.mirrored_folder())
        data_dir = _folder_to_index(settings, mirrored, store_path)
        library = ChatLibrary(data_dir, store)
        await library.index_all()
        yield library


def _folder_to_index(settings: Settings, mirrored: str | None, store_path: Path) -> Path:
    """The data folder given (`--st-data` or the config), else the one the store mirrors
    (which `serve --st-data` may have named), else one in the usual places. Never another
    folder than the store's: reading one into it marks every chat of the other deleted,
    the running server's too."""
    configured = settings.sillytavern.data_dir
    data_dir = data_dir_for(configured, mirrored)
    if data_dir is None:
        where = "in the usual places" if configured is None else f"at {configured} (no such folder)"
        raise RecapProxyError(
            f"no SillyTavern data folder {where}: pass --st-data DIR or set sillytavern.data_dir"
        )
    if mirrored is not None and not same_folder(mirrored, data_dir):
        raise RecapProxyError(
            f"the store {store_path} mirrors SillyTavern's data folder {mirrored}, not "
            f"{data_dir}: reading {data_dir} into it would mark that folder's chats deleted. "
            f"Leave out --st-data to read {mirrored}, give {data_dir} a store of its own "
            f"([store] path in another config, --config), or move this store to it with "
            f"`recap-proxy serve --st-data {data_dir}`"
        )
    return data_dir


async def run_chats(args: argparse.Namespace) -> int:
    from proxy.web.api import chat_summary

    settings = _settings(args)
    async with _served(settings) as server:
        if server is not None:
            listed = await server.call("GET", "/recap/api/chats")
            rows = [{key: chat.get(key) for key in SUMMARY} for chat in listed]
            where = f"the folder {server.base} serves"
        else:
            async with _open_library(settings) as library:
                rows = [chat_summary(r) for r in await library.store.chats()]
            where = str(library.data_dir)
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
        return 0
    if not rows:
        print(f"no chats under {where}", file=sys.stderr)
        return 0
    width = max(len(str(row["name"])) for row in rows)
    print(f"{'MESSAGES':>8}  {'UPDATED':<16}  {'KIND':<9}  {'NAME':<{width}}  ID")
    for row in rows:
        updated = row["updated"]
        when = time.strftime(
            "%Y-%m-%d %H:%M", time.localtime(updated if isinstance(updated, float) else 0)
        )
        name = str(row["name"])
        print(f"{row['messages']:>8}  {when:<16}  {row['kind']:<9}  {name:<{width}}  {row['id']}")
    return 0


async def run_identify(args: argparse.Namespace) -> int:
    from proxy.web.api import identification_json

    raw = read_bytes(args.request) if args.request else sys.stdin.buffer.read()
    adapter = formats().for_body(raw)
    try:
        # A body that is not one is said before the data folder is indexed; a text prompt
        # is read after, split into turns by the instruct template ST's settings name.
        parsed = adapter.parse(raw) if adapter.name != TEXT else None
        settings = _settings(args)
        async with _served(settings) as server:
            if server is not None:
                named = {CHAT_ID_HEADER: args.chat_id} if args.chat_id else {}
                answer = await server.post_bytes("/recap/api/identify", raw, named)
                print(json.dumps(answer, indent=2))
                return 0 if answer.get("chat") is not None else 1
        async with _open_library(settings) as library:
            if parsed is None:
                parsed = formats(library.prompt_formats).for_body(raw).parse(raw)
            markers = settings.injection.history_start_markers
            found = await identify_parsed(library, parsed, markers, args.chat_id)
    except AdapterError as exc:
        print(f"recap-proxy: {args.request or 'stdin'}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(identification_json(found.identification), indent=2))
    return 0 if found.identification is not None else 1
