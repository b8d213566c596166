"""The only owner of the `aiohttp.ClientSession` towards LLM APIs, and the one place
where the client library's errors become ours.

`send_to` answers with an `UpstreamResponse`: status, headers and the body as an async
iterator of the bytes as they arrive. Nothing else in the proxy sees aiohttp's client
types, so the relay and the LLM client have one seam to fake in tests.

Responses are never decoded here (`auto_decompress=False`): the bytes a client receives
are the bytes the upstream sent, compressed or not, and the `Content-Encoding` header
travels with them. aiohttp's automatic `User-Agent`, `Accept-Encoding` and `Content-Type`
are suppressed so that the upstream sees the client's headers, not ours.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from types import TracebackType

import aiohttp
from pydantic import SecretStr
from yarl import URL

from proxy.core.headers import Headers
from proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import UpstreamSettings

SKIP_AUTO_HEADERS = ("User-Agent", "Accept-Encoding", "Content-Type")


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
        url = self.base_url.with_path(path or "/", encoded=True)
        return url.with_query(None) if not query else URL(f"{url}?{query}", encoded=True)


def _key(secret: SecretStr | None) -> str | None:
    return secret.get_secret_value() if secret is not None else None


class Upstream:
    """Sends requests to `base_url` (and the named routes' APIs); an async context manager
    that owns the one session they share."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self.retarget(settings)
        self._session: aiohttp.ClientSession | None = None

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
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.settings.max_connections),
            timeout=aiohttp.ClientTimeout(
                total=None,
                connect=self.settings.connect_timeout,
                sock_read=self.settings.read_timeout,
            ),
            auto_decompress=False,
            skip_auto_headers=SKIP_AUTO_HEADERS,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

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
        if self._session is None:
            raise RuntimeError("Upstream used outside its `async with`")
        try:
            response = await self._session.request(
                method,
                url,
                headers=list(headers),
                data=body if body else None,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise _mapped(exc, url, started=False) from exc
        chunked = "chunked" in response.headers.get("Transfer-Encoding", "")
        return UpstreamResponse(
            status=response.status,
            reason=response.reason or "",
            headers=list(response.headers.items()),
            chunks=_chunks(response, url),
            content_length=None if chunked else response.content_length,
            on_release=response.release,
            on_close=response.close,
        )


async def _chunks(response: aiohttp.ClientResponse, url: URL) -> AsyncIterator[bytes]:
    try:
        async for chunk in response.content.iter_any():
            yield chunk
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise _mapped(exc, url, started=True) from exc


def _mapped(exc: Exception, url: URL, *, started: bool) -> UpstreamError:
    """The client library's failure as ours."""
    if isinstance(exc, TimeoutError):
        if started:
            return UpstreamTimeout(f"upstream stopped sending ({exc!r})", code="upstream_timeout")
        return UpstreamTimeout(
            f"upstream {url.origin()} did not answer in time ({type(exc).__name__})",
            code="upstream_timeout",
        )
    if started:
        return UpstreamUnreachable(f"upstream connection broke ({exc!r})", code="upstream_broken")
    return UpstreamUnreachable(
        f"cannot reach upstream {url.origin()}: {exc}", code="upstream_unreachable"
    )


__all__ = ["Target", "Upstream", "UpstreamError", "UpstreamResponse"]
