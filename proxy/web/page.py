"""The dashboard at `/recap/`: static files inside the package, over `/recap/api`.

No build step and nothing from outside: `index.html`, `app.js` and `app.css` are served
as they are. They hold no data, so they load without the access key; the page asks for
the key once per browser session and sends it with every API call.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from proxy.errors import NotFound

STATIC = Path(__file__).parent / "static"
PAGE = "/recap/"
FILES = {"app.js", "chat.js", "entities.js", "app.css"}
# Answers of the page's own files: revalidated each time (an upgrade shows at once).
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def is_page(method: str, path: str) -> bool:
    """A request for the page itself (no data: open without the access key)."""
    return method in ("GET", "HEAD") and (
        path in ("/recap", PAGE) or path.startswith("/recap/static/")
    )


async def index(request: web.Request) -> web.StreamResponse:
    return web.FileResponse(STATIC / "index.html", headers=HEADERS)


async def to_page(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound(PAGE)


async def static_file(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name not in FILES:
        raise NotFound(f"no such file of the dashboard: {name}")
    return web.FileResponse(STATIC / name, headers=HEADERS)


def add_page_routes(app: web.Application) -> None:
    app.router.add_get("/recap", to_page)
    app.router.add_get(PAGE, index)
    app.router.add_get("/recap/static/{name}", static_file)
