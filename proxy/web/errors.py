"""Where errors become HTTP answers: one middleware, one body.

Every error the proxy answers with, from any route, is the OpenAI-style
`{"error": {"message", "type", "code"}}` that ST knows how to show, with the status the
error tree (`proxy.errors`) gives it. Handlers raise; they never build error bodies. The
server's own refusals (413, 405, ...) get the same body, and anything unexpected is a 500
with that body too: its traceback goes to the log, never to the client. Upstream error
*responses* are not errors: the relay passes them through untouched.
"""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.errors import RecapProxyError
from proxy.store import file_error

log = logging.getLogger(__name__)


def error_json(exc: RecapProxyError) -> web.Response:
    return web.json_response(exc.to_json(), status=exc.status)


def _body(status: int, code: str, message: str) -> web.Response:
    return web.json_response(
        {"error": {"message": message, "type": code, "code": code}}, status=status
    )


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except RecapProxyError as exc:
        if exc.status >= 500:
            log.warning("%s %s: %s", request.method, request.rel_url.raw_path, exc)
        return error_json(exc)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = (exc.reason or "error").lower().replace(" ", "_")
        return _body(exc.status, code, exc.text or exc.reason or code)
    except Exception as exc:
        if file_error(exc):  # a full disk, say: the store has logged it, once
            log.warning("%s %s failed: %s", request.method, request.rel_url.raw_path, exc)
            return _body(503, "store_failing", f"the proxy's store failed ({exc}); "
                         "`recap-proxy doctor` says how to mend it")  # fmt: skip
        log.exception("%s %s failed", request.method, request.rel_url.raw_path)
        return _body(500, "internal_error", "the proxy failed on this request; its log says why")
