"""An upstream faked at the seam the relay and the LLM client use (`Upstream.send_to`): no
socket, answers scripted chunk by chunk, failures injected where a test wants them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

from yarl import URL

from proxy.core.headers import Headers
from proxy.errors import UpstreamError
from proxy.settings import UpstreamSettings
from proxy.upstream.upstreams import Upstream, UpstreamResponse


@dataclass
class Script:
    """One answer: status, headers, chunks; `fail_after` chunks then `failure` is raised
    (or, with no chunks, raised instead of answering)."""

    status: int = 200
    headers: Headers = field(default_factory=lambda: [("Content-Type", "text/event-stream")])
    chunks: list[bytes] = field(default_factory=list)
    failure: UpstreamError | None = None
    fail_after: int | None = None
    hold: asyncio.Event | None = None  # the body waits for it after the first chunk


@dataclass
class Sent:
    method: str
    tail: str  # the path after the base URL's, else the whole path
    headers: Headers
    body: bytes | None
    released: bool = False
    closed: bool = False
    path: str = ""  # the whole path it went to


class FakeUpstream(Upstream):
    def __init__(self, *scripts: Script) -> None:
        super().__init__(UpstreamSettings(base_url="http://upstream.invalid/v1"))
        self.scripts = list(scripts)
        self.sent: list[Sent] = []

    async def __aenter__(self) -> FakeUpstream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def send_to(
        self,
        method: str,
        url: URL,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
    ) -> UpstreamResponse:
        script = self.scripts.pop(0)
        base = self.base_url.raw_path.rstrip("/") + "/"
        path = url.raw_path
        tail = path[len(base) :] if path.startswith(base) else path
        sent = Sent(method, tail, list(headers), body, path=path)
        self.sent.append(sent)
        if script.failure is not None and script.fail_after is None:
            raise script.failure

        async def chunks() -> AsyncIterator[bytes]:
            for i, chunk in enumerate(script.chunks):
                if script.fail_after is not None and i == script.fail_after:
                    assert script.failure is not None
                    raise script.failure
                yield chunk
                if script.hold is not None:
                    await script.hold.wait()

        def release() -> None:
            sent.released = True

        def close() -> None:
            sent.closed = True

        return UpstreamResponse(
            status=script.status,
            reason="OK" if script.status == 200 else "Error",
            headers=script.headers,
            chunks=chunks(),
            on_release=release,
            on_close=close,
        )
