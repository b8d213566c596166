"""The only owner of the connections towards LLM APIs (`proxy.upstream.client.Client`, whose
failures are the proxy's own `UpstreamError`s), and where each route's API is found.

`send_to` answers with an `UpstreamResponse`: status, headers and the body as an async
iterator of the bytes as they arrive. Nothing else in the proxy sees the client library's
types, so the relay and the LLM client have one seam to fake in tests.

Responses are never decoded here: the bytes a client receives are the bytes the upstream
sent, compressed or not, and the `Content-Encoding` header travels with them. The
upstream sees the client's headers, not ours: no `User-Agent`, `Accept-Encoding` or
`Content-Type` of the proxy's own is added.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from types import TracebackType

from pydantic import SecretStr
from yarl import URL

from proxy.errors import UpstreamError
from proxy.settings import UpstreamSettings
from proxy.upstream.client import Client, UpstreamResponse, tls_context

log = logging.getLogger(__name__)


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
        self._client: Client | None = None
        self.retarget(settings)

    def retarget(self, settings: UpstreamSettings) -> None:
        """The APIs and keys from `settings` (a reload: requests under way keep theirs;
        the session's limits and timeouts stay as they started)."""
        self.base_url = URL(settings.base_url)
        self.api_key = _key(settings.api_key)
        self.default = Target(self.base_url, self.api_key)
        if self._client is not None:
            self._client.retarget(settings)
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
        tls = await asyncio.to_thread(tls_context, settings)
        if tls is False:
            log.warning(
                "upstream.verify is false: HTTPS upstreams' certificates are not checked, "
                "so anyone on the way could read your API key and chats (upstream.ca_file "
                "trusts a private CA instead)"
            )
        self._client = Client(settings, tls)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None

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
        if self._client is None:
            raise RuntimeError("Upstream used outside its `async with`")
        return await self._client.send(method, url, headers, body)


__all__ = ["Target", "Upstream", "UpstreamError", "UpstreamResponse"]
