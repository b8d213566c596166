"""Where errors become HTTP answers: one middleware, one body.

Every error the proxy answers with, from any route, is the OpenAI-style
`{"error": {"message", "type", "code"}}` that ST knows how to show, with the status the
error tree (`proxy.errors`) gives it. Handlers raise; they never build error bodies.
Upstream error *responses* are not errors: the relay passes them through untouched.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.errors import RecapProxyError

log = logging.getLogger(__name__)


def error_json(exc: RecapProxyError) -> web.Response:
    return web.json_response(exc.to_json(), status=exc.status)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RecapProxyError as exc:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.rel_url.raw_path, exc)
        return error_json(exc)
