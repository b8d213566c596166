"""A forward HTTP proxy on loopback, as a user's corporate or LAN proxy would be: plain
requests in absolute form (`POST http://host/path HTTP/1.1`) and `CONNECT` tunnels for
HTTPS. It writes down each request line and the `Proxy-Authorization` it was given."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from yarl import URL


@dataclass
class ForwardProxy:
    seen: list[str] = field(default_factory=list)  # request lines, as they came
    auth: list[str | None] = field(default_factory=list)  # each one's Proxy-Authorization
    server: asyncio.Server | None = None
    # Names only this proxy can resolve: a request for one that arrives went through it.
    hosts: dict[str, str] = field(default_factory=dict)

    async def start(self) -> URL:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return URL(f"http://127.0.0.1:{port}")

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
            return
        lines = head.decode("latin-1").split("\r\n")
        self.seen.append(lines[0])
        found = [
            ln.split(":", 1)[1].strip()
            for ln in lines
            if ln.lower().startswith("proxy-authorization:")
        ]
        self.auth.append(found[0] if found else None)
        method, target, version = lines[0].split(" ")
        if method == "CONNECT":
            host, port = target.rsplit(":", 1)
            up_reader, up_writer = await asyncio.open_connection(
                self.hosts.get(host, host), int(port)
            )
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
        else:
            url = URL(target)
            host = url.host or ""
            up_reader, up_writer = await asyncio.open_connection(
                self.hosts.get(host, host), url.port
            )
            kept = [ln for ln in lines[1:] if not ln.lower().startswith("proxy-")]
            origin_form = f"{method} {url.raw_path_qs} {version}"
            up_writer.write("\r\n".join([origin_form, *kept]).encode("latin-1"))
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(Exception):
        writer.close()
