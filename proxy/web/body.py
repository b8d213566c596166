"""A chat request's body, read once on the chat path.

aiohttp's `Request.read()` gathers the body through a loop of reads into a `bytearray`,
then copies that into `bytes`: two copies and a dozen Python calls on every request,
whatever its size. A chat request nearly always arrives whole with its headers (ST sends
a small body in one packet), so by the time the handler runs the server has the body
buffered and has seen its end: then it is taken from the buffer as it lies. Anything
else (a body still arriving, one past the size limit, one read already) goes through
`read()`, with its limit check and its 413.
"""

from __future__ import annotations

from aiohttp import web

# ST sends the whole prompt in one body; 100k-token chats are several MB.
MAX_BODY_BYTES = 256 * 1024 * 1024


# The request's own storage, for a body taken from the buffer (`web.RequestKey`: aiohttp
# 3.12, the least version the project takes).
_BODY = web.RequestKey("recap_proxy_body", bytes)


async def read_body(request: web.Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request's body, as `request.read()` would answer it (`limit`: the app's
    `client_max_size`, which `read()` enforces). Once a body is read here, it is asked of
    this again, never of `request.read()`: the buffer it was taken from is empty."""
    taken: bytes | None = request.get(_BODY)
    if taken is not None:
        return taken
    content = request.content
    # The server has fed the whole body and no one has taken any of it yet.
    if content.is_eof() and not content.at_eof() and content.total_bytes <= limit:
        taken = request[_BODY] = await content.readany()
        return taken
    return await request.read()
