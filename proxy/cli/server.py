"""The running proxy as the CLI's memory commands reach it: its API (`Server`), where it
listens, and which chat a name the user typed stands for (`pick_chat`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from proxy.core.guard import KEY_HEADER, reachable
from proxy.errors import RecapProxyError
from proxy.settings import Settings
from proxy.store.lock import serving


class Server:
    """The running proxy's API, as the memory commands call it."""

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

    async def post_bytes(self, path: str, raw: bytes, headers: dict[str, str]) -> Any:
        """A body sent as it is (a request as ST sent it, for `identify`); the JSON answer."""
        sent = {"Content-Type": "application/json", **headers}
        return orjson.loads(await self._send("POST", path, None, raw=raw, headers=sent))

    async def _send(
        self,
        method: str,
        path: str,
        body: Any,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        if method != "GET" and body is None and raw is None:
            body = {}  # changes always go as JSON: the server takes nothing else
        try:
            async with self.session.request(
                method,
                self.base + path,
                json=body if raw is None else None,
                data=raw,
                headers={**self.headers, **(headers or {})},
            ) as response:
                raw = await response.read()
        except aiohttp.ClientConnectionError:
            raise RecapProxyError(
                f"no recap-proxy server at {self.base}: start it with `recap-proxy serve` "
                "(or pass --server URL)"
            ) from None
        if response.status >= 400:
            raise self.error(method, path, raw)
        return raw

    @staticmethod
    def error(method: str, path: str, raw: bytes) -> RecapProxyError:
        """The error an answer of the server says (its API's message)."""
        try:
            data = orjson.loads(raw)
            message = data["error"]["message"] if isinstance(data, dict) else data
        except (orjson.JSONDecodeError, KeyError, TypeError):
            # Not the API's own error (another server on the port, a proxy between): the
            # route it went to helps.
            message = f"{method} {path}: {raw.decode('utf-8', 'replace')}"
        # The API's own error names the chat and message already: the route (a long
        # percent-encoded chat id) would only bury it.
        return RecapProxyError(str(message))

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
    folded = bare.casefold()
    near = [c["id"] for c in newest if folded and folded in Path(c["file"]).stem.casefold()]
    if near:
        listed = "\n  ".join(near[:5])
        raise RecapProxyError(f"no chat named {wanted!r}; its name is part of:\n  {listed}")
    raise RecapProxyError(f"no chat named {wanted!r} (see `recap-proxy chats`)")


def server_url(args: argparse.Namespace, settings: Settings) -> str:
    """`--server`, else where the proxy serving the store listens (its lock file says: a
    `serve --port N` is found), else the address `[server]` sets."""
    if args.server:
        return str(args.server)
    listening = serving(settings.store.resolved_path())
    if listening is not None:
        return reachable(*listening)
    return reachable(settings.server.host, settings.server.port)
