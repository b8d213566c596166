"""The only owner of the `aiohttp.ClientSession` towards LLM APIs.

Responses are never decoded here (`auto_decompress=False`): the bytes a client receives
are the bytes the upstream sent, compressed or not, and the `Content-Encoding` header
travels with them. aiohttp's automatic `User-Agent`, `Accept-Encoding` and `Content-Type`
are suppressed so that the upstream sees the client's headers, not ours.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import TracebackType

import aiohttp
from yarl import URL

from proxy.errors import UpstreamTimeout, UpstreamUnreachable
from proxy.settings import UpstreamSettings

SKIP_AUTO_HEADERS = ("User-Agent", "Accept-Encoding", "Content-Type")


class Upstream:
    """Sends requests to `base_url`; an async context manager that owns its session."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.settings = settings
        self.base_url = URL(settings.base_url)
        self.api_key = settings.api_key.get_secret_value() if settings.api_key is not None else None
        self._session: aiohttp.ClientSession | None = None

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
        path = self.base_url.path.rstrip("/") + "/" + tail.lstrip("/")
        url = self.base_url.with_path(path, encoded=True)
        return url.with_query(None) if not query else URL(f"{url}?{query}", encoded=True)

    async def send(
        self,
        method: str,
        tail: str,
        query: str,
        headers: Iterable[tuple[str, str]],
        body: bytes | None,
    ) -> aiohttp.ClientResponse:
        """Send one request; the caller must close or release the response.

        Raises `UpstreamUnreachable` or `UpstreamTimeout` when no response arrives.
        """
        if self._session is None:
            raise RuntimeError("Upstream used outside its `async with`")
        url = self.url_for(tail, query)
        try:
            return await self._session.request(
                method,
                url,
                headers=list(headers),
                data=body if body else None,
                allow_redirects=False,
            )
        except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise UpstreamTimeout(
                f"upstream {url.origin()} did not answer in time ({type(exc).__name__})",
                code="upstream_timeout",
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(
                f"cannot reach upstream {url.origin()}: {exc}", code="upstream_unreachable"
            ) from exc
