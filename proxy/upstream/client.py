"""The HTTP client towards LLM APIs: aiohttp's, set up for a proxy that relays bytes.

One `Client` per `proxy.upstream.upstreams.Upstream`. It keeps aiohttp's protections (header size
and count limits, keep-alive handled by the book, a POST on a stale connection never sent
twice, trailers never read as headers) and adds what relaying needs:

- answers are never decoded (`auto_decompress=False`): the bytes a client receives are
  the bytes the upstream sent, and `Content-Encoding` travels with them; aiohttp's own
  `User-Agent`, `Accept`, `Accept-Encoding` and `Content-Type` are not added;
- the connection limit is per upstream host, and waiting for a free connection counts
  against `connect_timeout`; a request that finds them all busy says so;
- an HTTP proxy (`upstream.proxy`, a route's, or the environment's), a CA file to trust,
  or no verification at all;
- every failure of the library comes out as the proxy's own `UpstreamError`.

Why aiohttp's and not our own: a hand-written client over httptools saved about 0.3 ms a
request, against a model's first token in 0.2-10 s, and lacked proxies, private CAs and
the limits a hostile server needs; this one has them, kept up by others.
"""

from __future__ import annotations

import base64
import logging
import ssl
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

import aiohttp
from yarl import URL

from proxy.core.guard import is_loopback
from proxy.core.headers import Headers
from proxy.errors import UpstreamError, UpstreamTimeout, UpstreamUnreachable
from proxy.settings import UpstreamSettings

log = logging.getLogger(__name__)

# Added by aiohttp unless skipped: the upstream sees the client's headers, not ours.
SKIP_AUTO_HEADERS: Final = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")

Host = tuple[str, str, int | None]  # scheme, host, port: what the connection limit counts


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
class Via:
    """The HTTP proxy a request goes through (`url` None: straight to the upstream)."""

    url: URL | None = None
    headers: dict[str, str] | None = None  # its `Proxy-Authorization`, when it wants one

    @classmethod
    def of(cls, proxy: str | URL | None) -> Via:
        if proxy is None:
            return DIRECT
        url = URL(proxy)
        if url.user is None:
            return cls(url)
        # Sent as `Proxy-Authorization`, never in a URL that could be logged.
        return cls(url.with_user(None), {"Proxy-Authorization": basic(url)})


DIRECT: Final = Via()


class Proxies:
    """Which proxy each upstream host is reached through: the route's own
    (`[[upstream.routes]] proxy`), else `upstream.proxy`, else the environment's
    (`HTTPS_PROXY`, `HTTP_PROXY`, `NO_PROXY`, read once), except for a loopback host:
    a proxy in the environment is for the internet, as in Go's and curl's rules for
    `localhost`."""

    def __init__(self, settings: UpstreamSettings) -> None:
        self.default = Via.of(settings.proxy) if settings.proxy else None
        self.routes = {_host(URL(r.base_url)): Via.of(r.proxy) for r in settings.routes if r.proxy}
        # The environment's (on macOS and Windows, the system's settings when it has none).
        self.env = urllib.request.getproxies()
        self._chosen: dict[Host, Via] = {}

    def via(self, url: URL) -> Via:
        host = _host(url)
        chosen = self._chosen.get(host)
        if chosen is None:
            chosen = self._chosen[host] = self._choose(url, host)
        return chosen

    def _choose(self, url: URL, host: Host) -> Via:
        if host in self.routes:
            return self.routes[host]
        if self.default is not None:
            return self.default
        name = url.host or ""
        if is_loopback(name.strip("[]")) or urllib.request.proxy_bypass(name):
            return DIRECT
        proxy = self.env.get(url.scheme)
        return Via.of(proxy) if proxy else DIRECT


def basic(url: URL) -> str:
    """The `Basic` credentials of a URL's `user:password@` (aiohttp's `BasicAuth` is on
    its way out, and this is all of it that is needed)."""
    pair = f"{url.user or ''}:{url.password or ''}".encode()
    return "Basic " + base64.b64encode(pair).decode("ascii")


def _host(url: URL) -> Host:
    return (url.scheme, (url.host or "").lower(), url.port)


def tls_context(settings: UpstreamSettings) -> ssl.SSLContext | bool:
    """How HTTPS upstreams are checked: the system's authorities and `ca_file`'s, or not
    at all (`verify = false`). Reads CA files: its owner calls it off the event loop."""
    if not settings.verify:
        return False
    context = ssl.create_default_context()
    if settings.ca_file is not None:
        context.load_verify_locations(cafile=str(settings.ca_file))
    return context


class Client:
    """aiohttp's session, as the relay and the memory's calls need it."""

    def __init__(self, settings: UpstreamSettings, tls: ssl.SSLContext | bool) -> None:
        self.limit = settings.max_connections
        self.connect_timeout = settings.connect_timeout
        self.proxies = Proxies(settings)
        self._busy: Counter[Host] = Counter()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, limit_per_host=self.limit, ssl=tls),
            timeout=aiohttp.ClientTimeout(
                total=None,
                # Waiting for a free connection counts too (aiohttp's `connect`).
                connect=settings.connect_timeout,
                sock_connect=settings.connect_timeout,
                sock_read=settings.read_timeout,
            ),
            auto_decompress=False,
            skip_auto_headers=SKIP_AUTO_HEADERS,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,  # `Proxies` reads the environment, with the loopback rule
        )

    def retarget(self, settings: UpstreamSettings) -> None:
        """New proxies for new routes (a reload); the limits stay as they started."""
        self.proxies = Proxies(settings)

    async def close(self) -> None:
        await self._session.close()

    async def send(
        self, method: str, url: URL, headers: Iterable[tuple[str, str]], body: bytes | None
    ) -> UpstreamResponse:
        """Send one request; answers once the answer's head is in. Raises
        `UpstreamUnreachable` or `UpstreamTimeout` when no answer arrives."""
        headers = list(headers)
        if url.raw_user is not None:
            # Credentials in a base URL are Basic auth, sent as a header, never in a URL.
            headers = [(k, v) for k, v in headers if k.lower() != "authorization"]
            headers.append(("Authorization", basic(url)))
            url = url.with_user(None)
        via = self.proxies.via(url)
        tunnel = via.headers
        if via.headers is not None and url.scheme == "http":
            # A plain request goes to the proxy whole: its credentials ride on it (only a
            # `CONNECT` carries aiohttp's `proxy_headers`).
            headers.extend(via.headers.items())
            tunnel = None
        host = _host(url)
        self._busy[host] += 1
        try:
            response = await self._session.request(
                method,
                url,
                headers=headers,
                data=body or None,
                allow_redirects=False,
                proxy=via.url,
                proxy_headers=tunnel,
            )
        except BaseException as exc:
            self._busy[host] -= 1
            if isinstance(exc, (TimeoutError, aiohttp.ClientError)):
                raise self._before(exc, url, host) from exc
            raise
        return _wrapped(response, _counted_out(self._busy, host))

    def _before(self, exc: BaseException, url: URL, host: Host) -> UpstreamError:
        """A failure before any answer, as ours."""
        origin = url.origin()
        if isinstance(exc, aiohttp.ConnectionTimeoutError) and self._busy[host] >= self.limit:
            return UpstreamTimeout(
                f"all {self.limit} connections to {origin} are in use and none came free "
                f"in {self.connect_timeout:g} s (upstream.max_connections)",
                code="upstream_busy",
            )
        if isinstance(exc, TimeoutError):
            return UpstreamTimeout(
                f"upstream {origin} did not answer in time ({type(exc).__name__})",
                code="upstream_timeout",
            )
        if isinstance(exc, aiohttp.ClientResponseError):
            # aiohttp's parser refused the answer: a header flood, a line that is not HTTP.
            return UpstreamUnreachable(
                f"malformed answer from upstream {origin}: {_said(exc.message)}",
                code="upstream_malformed",
            )
        return UpstreamUnreachable(
            f"cannot reach upstream {origin}: {_said(exc)}", code="upstream_unreachable"
        )


def _said(what: object, most: int = 300) -> str:
    """What the library said, short: some of its messages quote a whole answer's head."""
    text = str(what)
    return text if len(text) <= most else text[:most] + "..."


def _counted_out(busy: Counter[Host], host: Host) -> Callable[[], None]:
    """Counts the request out of its host's busy connections, once."""
    done = False

    def finished() -> None:
        nonlocal done
        if not done:
            done = True
            busy[host] -= 1

    return finished


def _wrapped(response: aiohttp.ClientResponse, finished: Callable[[], None]) -> UpstreamResponse:
    content = response.content
    early: list[bytes] = []

    def at_hand() -> bool:
        # Bytes read now are the body's first: `chunks` yields them before the rest.
        try:
            data = content.read_nowait()
        except Exception:  # a failure already in: `chunks` raises it
            return True
        if data:
            early.append(data)
        return bool(early) or content.at_eof()

    async def chunks() -> AsyncIterator[bytes]:
        try:
            while early:
                yield early.pop(0)
            async for chunk in content.iter_any():
                yield chunk
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"upstream stopped sending ({_said(repr(exc))})", code="upstream_timeout"
            ) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(
                f"upstream connection broke ({_said(repr(exc))})", code="upstream_broken"
            ) from exc

    def release() -> None:
        response.release()
        finished()

    def close() -> None:
        response.close()
        finished()

    chunked = "chunked" in response.headers.get("Transfer-Encoding", "").lower()
    return UpstreamResponse(
        status=response.status,
        reason=response.reason or "",
        headers=list(response.headers.items()),
        chunks=chunks(),
        content_length=None if chunked else response.content_length,
        on_release=release,
        on_close=close,
        at_hand=at_hand,
    )


__all__ = ["Client", "Proxies", "UpstreamResponse", "Via", "tls_context"]
