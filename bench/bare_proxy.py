"""The yardstick for bench/overhead.py: the least an aiohttp reverse proxy can do.

    python bench/bare_proxy.py --port P --upstream http://127.0.0.1:Q

It reads the request body, sends it on with the client's headers (hop-by-hop ones left
out) over one pooled session, and writes the answer back as its chunks arrive. No
parsing, no routing, no error handling: what a hop costs in aiohttp, nothing more.
"""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
from aiohttp import web

HOP = {"host", "connection", "content-length", "transfer-encoding", "keep-alive"}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    args = parser.parse_args()
    session = aiohttp.ClientSession(auto_decompress=False)
    upstream = args.upstream.rstrip("/")

    async def relay(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        async with session.request(
            request.method, upstream + request.rel_url.raw_path_qs, data=body, headers=headers
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            for name, value in answer.headers.items():
                if name.lower() not in HOP:
                    response.headers.add(name, value)
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application(client_max_size=64 * 1024**2)
    app.router.add_route("*", "/{tail:.*}", relay)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", args.port).start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
