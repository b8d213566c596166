"""The door: every request passes the `Host`, `Origin` and access-key checks of
`proxy.core.guard` before anything is forwarded, identified or changed; the proxy answers
CORS itself.

`OPTIONS` never goes upstream: an allowed origin gets a preflight answer, and its real
requests get `Access-Control-Allow-Origin` (set as each response is prepared, streams
included); the upstream's own `Access-Control-*` headers are dropped by the relay. A
change to the memory (`POST/PUT/PATCH/DELETE /recap/...`) must come as JSON: a page cannot
send that cross-site without a preflight, which the origin check refuses.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.core.guard import (
    LivePolicy,
    access_allowed,
    carries_access_key,
    host_allowed,
    origin_allowed,
)
from proxy.errors import (
    ForbiddenOrigin,
    MisdirectedHost,
    MissingAccessKey,
    PayloadTooLarge,
    UnsupportedMediaType,
)
from proxy.web.page import is_page

log = logging.getLogger(__name__)


POLICY = web.AppKey("guard_policy", LivePolicy)
CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# POSTs that change nothing: they take a chat request's body and show what it would get.
READ_ONLY = frozenset({"/recap/api/identify", "/recap/api/preview"})
EXPOSED = "X-Recap-Chat, X-Recap-Injected, X-Recap-Trimmed"
METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"
# The largest body the proxy's own API reads: a chat request to preview or identify (a
# 100k-token prompt is under 1 MB); chat bodies going upstream have the app's own limit.
API_MAX_BODY = 8 * 1024 * 1024


@web.middleware
async def guard_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    policy = request.app[POLICY].current
    host = request.headers.get("Host")
    origin = request.headers.get("Origin")
    if not host_allowed(host, policy):
        log.warning("refused a request for host %r (not this proxy's name)", host)
        raise MisdirectedHost(
            f"this proxy does not answer to the host {host!r}; add it to server.allowed_hosts "
            "if you reach the proxy by that name"
        )
    if not origin_allowed(origin, host, policy):
        log.warning("refused a request from the web page origin %r", origin)
        raise ForbiddenOrigin(
            f"pages of {origin!r} may not use this proxy; add the origin to "
            "server.allowed_origins if it is yours"
        )
    if request.method == "OPTIONS":
        return _preflight(request)
    if not is_page(request.method, request.path) and not access_allowed(
        request.path, request.headers, policy
    ):
        raise MissingAccessKey(
            "this proxy needs its access key (server.access_key): send it as "
            "`Authorization: Bearer <key>` (ST's API key field) or `X-Recap-Key: <key>`"
        )
    if (
        request.method in CHANGES
        and request.path.startswith("/recap/")
        and request.path not in READ_ONLY
        and request.content_type != "application/json"
    ):
        raise UnsupportedMediaType(
            f"{request.method} {request.path} takes an application/json body (`{{}}` when "
            "there is nothing to say)"
        )
    if request.path.startswith("/recap/api/") and request.body_exists:
        length = request.content_length
        if length is not None and length > API_MAX_BODY:
            raise PayloadTooLarge(
                f"{request.method} {request.path} takes at most {API_MAX_BODY // 2**20} MB; "
                f"this body has {length} bytes"
            )
        # A body of unstated length (chunked) is cut off at the same size as it is read.
        request = request.clone(client_max_size=API_MAX_BODY)
    return await handler(request)


def _preflight(request: web.Request) -> web.Response:
    response = web.Response(status=204, headers={"Allow": METHODS})
    if _cors_origin(request) is not None:
        requested = request.headers.get("Access-Control-Request-Headers")
        response.headers["Access-Control-Allow-Methods"] = METHODS
        if requested:
            response.headers["Access-Control-Allow-Headers"] = requested
        response.headers["Access-Control-Max-Age"] = "600"
    return response


def _cors_origin(request: web.Request) -> str | None:
    """The calling page's origin when it may read the answer (the checks let it in)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    policy, host = request.app[POLICY].current, request.headers.get("Host")
    allowed = host_allowed(host, policy) and origin_allowed(origin, host, policy)
    return origin if allowed else None


def api_headers(request: web.Request) -> CIMultiDictProxy[str]:
    """The request's headers meant for the API: an `Authorization` or `x-api-key` that is
    the proxy's access key is left out, so that it is neither forwarded nor kept as the
    chat's key for the proxy's own calls. (`X-Recap-Key` never crosses: `request_headers`
    drops it.)
    Copied only in that case: most requests pass as they came."""
    ours = carries_access_key(request.headers, request.app[POLICY].current)
    if not ours:
        return request.headers
    kept = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in ours)
    return CIMultiDictProxy(kept)


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """`on_response_prepare`: CORS for the allowed origin that called, on every answer."""
    origin = _cors_origin(request)
    if origin is None:
        return
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Access-Control-Expose-Headers"] = EXPOSED
    response.headers.add("Vary", "Origin")
