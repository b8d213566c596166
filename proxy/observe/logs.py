"""How the proxy logs when it runs as a service: text or JSON lines, and the access log.

The JSON formatter is a dozen lines over the standard library (a dependency for it would
be larger than it). The access log is a middleware that exists only when it is turned on
(`server.access_log`), so that it costs nothing otherwise; it writes the method, the path
without its query (an API key can ride in one), the status, the time taken and what the
proxy did, never a body or a header.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from datetime import UTC, datetime
from urllib.parse import unquote

from aiohttp import web
from aiohttp.typedefs import Handler

ACCESS = logging.getLogger("proxy.access")


class JSONFormatter(logging.Formatter):
    """One JSON object per record: `time` (UTC, ISO 8601), `level`, `logger`, `message`,
    and `exception` when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def setup_logging(level: str, form: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if form == "json":
        handler.setFormatter(JSONFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's own access log prints raw request lines (queries included): ours says less.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # watchfiles logs every batch of changes at INFO; the library logs what matters.
    logging.getLogger("watchfiles").setLevel(logging.WARNING)


@web.middleware
async def access_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    started = time.perf_counter()
    status: int | str = "-"
    response: web.StreamResponse | None = None
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except BaseException:
        status = "aborted"  # the client went away, or the handler failed
        raise
    finally:
        elapsed = (time.perf_counter() - started) * 1000
        extra = ""
        if response is not None and "X-Recap-Chat" in response.headers:
            chat = as_text(response.headers["X-Recap-Chat"])
            extra = f" chat={chat} injected={response.headers.get('X-Recap-Injected', '0')}"
        ACCESS.info("%s %s %s %.1f ms%s", request.method, request.path, status, elapsed, extra)


def as_text(header: str) -> str:
    """A chat id as the log shows it: as text, not percent-encoded as its header carries
    it, and quoted when it holds spaces (ST's file names do)."""
    text = unquote(header) or "-"
    return json.dumps(text, ensure_ascii=False) if any(c.isspace() for c in text) else text
