"""The only owner of the connections towards LLM APIs (`proxy.pool.Pool`, whose
failures are the proxy's own `UpstreamError`s), and where each route's API is found.

`send_to` answers with an `UpstreamResponse`: status, headers and the body as an async
iterator of the bytes as they arrive. Nothing else in the proxy sees the client's types,
so the relay and the LLM client have one seam to fake in tests.

Responses are never decoded here: the bytes a client receives are the bytes the upstream
sent, compressed or not, and the `Content-Encoding` header travels with them. The
upstream sees the client's headers, not ours: no `User-Agent`, `Accept-Encoding` or
`Content-Type` of the proxy's own is added.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache, partial
from types import TracebackType

from pydantic import SecretStr
from yarl import URL

from proxy.core.headers import Headers
from proxy.errors import UpstreamError
from proxy.pool import Pool
from proxy.settings import UpstreamSettings


def _no() -> bool:
    return False


def _nothing() -> None:
    return None


@dataclass(eq=False)
class UpstreamResponse:
    """An answer that has started: its status line and headers, and its body to come.

    Iterating `chunks` yields the body as it arrives; a failure on the way raises
    `UpstreamError`. Call `release` after reading it whole (the connection is reused) or
    `close` to drop the connection (the upstream stops generating).
    """

    status: int
    reason: str
    headers: Headers
    chunks: AsyncIterator[bytes]
    content_length: int | None = None  # only when the upstream sent one (not chunked)
    on_release: Callable[[], None] = field(default=_nothing, repr=False)
    on_close: Callable[[], None] = field(default=_nothing, repr=False)
    # Whether body bytes (or the body's end) are at hand now, with no wait.
    at_hand: Callable[[], bool] = field(default=_no, repr=False)

    def header(self, name: str) -> str | None:
        wanted = name.lower()
        return next((v for k, v in self.headers if k.lower() == wanted), None)

    async def read(self) -> bytes:
        """The whole body (for the proxy's own calls, never for relayed answers)."""
        return b"".join([chunk async for chunk in self.chunks])

    def release(self) -> None:
        self.on_release()

    def close(self) -> None:
        self.on_close()


@dataclass(frozen=True, slots=True)
class Target:
    """An API the proxy forwards to: its base URL, and the key that replaces the client's.

    `url_for` maps a proxied path: `/v1/<rest>` to `<base_url>/<rest>` (ST's URL for an
    OpenAI-compatible API ends in `/v1`), any other path to the same path on `base_url`
    without its trailing `/v1` (llama.cpp's `/completion`, Ollama's `/api/generate`,
    KoboldCpp's `/api/extra/...` next to its `/v1`)."""

    base_url: URL
    api_key: str | None = None
    prefix: str = ""  # the route's path prefix on the proxy; "" for `upstream.base_url`

    def url_for(self, path: str, query: str = "") -> URL:
        if path == "/v1" or path.startswith("/v1/"):
            return self._url(self.base_url.path.rstrip("/") + path[3:], query)
        return self.root_url(path, query)

    def root_url(self, path: str, query: str = "") -> URL:
        """`path` on the server itself: under `base_url` without its trailing `/v1`
        (`/v1/chat/completions` of a local server whose base URL has no `/v1`)."""
        base = self.base_url.path.rstrip("/")
        return self._url((base[:-3] if base.endswith("/v1") else base) + path, query)

    def _url(self, path: str, query: str) -> URL:
        if not query:
            return _joined(self.base_url, path or "/")
        url = self.base_url.with_path(path or "/", encoded=True)
        return URL(f"{url}?{query}", encoded=True)  # as it came (it may hold a key)


# Memoised: a chat client asks for the same few paths all along, and a URL built anew
# works out its host, port and path again for the request line.
@lru_cache(maxsize=256)
def _joined(base: URL, path: str) -> URL:
    return base.with_path(path, encoded=True).with_query(None)


def _key(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


class Upstream:
    """Sends requests to `base_url` (and the named routes' APIs); an async context manager
    that owns the one session they share."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self.retarget(settings)
        self._pool: Pool | None = None

    def retarget(self, settings: UpstreamSettings) -> None:
        """The APIs and keys from `settings` (a reload: requests under way keep theirs;
        the session's limits and timeouts stay as they started)."""
        self.base_url = URL(settings.base_url)
        self.api_key = _key(settings.api_key)
        self.default = Target(self.base_url, self.api_key)
        # Longest prefix first: `/claude/test` wins over `/claude` for its own paths.
        self.routes = sorted(
            (Target(URL(r.base_url), _key(r.api_key), r.prefix) for r in settings.routes),
            key=lambda t: len(t.prefix),
            reverse=True,
        )

    def route(self, prefix: str) -> Target:
        """The API of a route prefix ("" or one no longer configured: `base_url`'s)."""
        return next((t for t in self.routes if t.prefix == prefix), self.default)

    def resolve(self, path: str) -> tuple[Target, str]:
        """The API a proxied path goes to, and the path with its route prefix taken off."""
        for target in self.routes:
            if path == target.prefix or path.startswith(target.prefix + "/"):
                return target, path[len(target.prefix) :] or "/"
        return self.default, path

    async def __aenter__(self) -> Upstream:
        settings = self.settings
        # The system's CA files are read here, off the loop, not under the first HTTPS
        # request (a route may turn HTTPS on a reload, so it is built whatever the URLs).
        context = await asyncio.to_thread(ssl.create_default_context)
        self._pool = Pool(
            settings.max_connections, settings.connect_timeout, settings.read_timeout, context
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def url_for(self, tail: str, query: str = "") -> URL:
        """`<base_url>/<tail>?<query>`, with the query string kept as it came."""
        return self.default.url_for("/v1/" + tail.lstrip("/"), query)

    async def send_to(
        self,
        method: str,
        url: URL,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
    ) -> UpstreamResponse:
        """Send one request to a whole URL (`Target.url_for`, `url_for`); the caller must
        release or close the response. Raises `UpstreamUnreachable` or `UpstreamTimeout`
        when no response arrives."""
        if self._pool is None:
            raise RuntimeError("Upstream used outside its `async with`")
        conn, exchange = await self._pool.request(method, url, headers, body)
        return UpstreamResponse(
            status=conn.status,
            reason=conn.reason,
            headers=conn.headers,
            chunks=conn.chunks(),
            content_length=None if conn.chunked else conn.length,
            on_release=partial(conn.release, exchange),
            on_close=partial(conn.drop, exchange),
            at_hand=partial(conn.at_hand, exchange),
        )


__all__ = ["Target", "Upstream", "UpstreamError", "UpstreamResponse"]
