"""An upstream that answers from cassettes; a request no cassette expects fails the test."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from proxy.core.headers import response_headers
from proxy.upstream.cassette import decode_body, decode_chunk, load_cassette

CASSETTES = Path(__file__).resolve().parent.parent / "cassettes"


def all_cassettes() -> list[Path]:
    return sorted(CASSETTES.rglob("*.json"))


@dataclass
class Replayer:
    cassettes: list[dict[str, Any]]
    base_path: str = "/v1"
    unmatched: list[str] = field(default_factory=list)
    served: list[dict[str, Any]] = field(default_factory=list)

    def find(self, method: str, path: str, query: str, body: bytes) -> dict[str, Any] | None:
        """The first matching cassette not played yet (a swipe repeats a request exactly)."""
        matches = [
            cassette
            for cassette in self.cassettes
            if cassette["upstream_request"]["method"] == method
            and self.base_path + cassette["upstream_request"]["path"] == path
            and cassette["upstream_request"].get("query", "") == query
            and decode_body(cassette["upstream_request"]) == body
        ]
        fresh = [c for c in matches if not any(c is s for s in self.served)]
        return fresh[0] if fresh else matches[0] if matches else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        path, query = request.rel_url.raw_path, request.rel_url.raw_query_string
        cassette = self.find(request.method, path, query, body)
        if cassette is None:
            self.unmatched.append(f"{request.method} {path}?{query} ({len(body)} bytes)")
            return web.Response(status=599, text="no cassette matches this request")
        self.served.append(cassette)
        recorded = cassette["response"]
        response = web.StreamResponse(status=recorded["status"], reason=recorded.get("reason"))
        for name, value in response_headers(tuple(p) for p in recorded["headers"]):
            response.headers.add(name, value)
        await response.prepare(request)
        for chunk in recorded["chunks"]:
            await response.write(decode_chunk(chunk))
            await asyncio.sleep(0)
        await response.write_eof()
        return response


def make_replay_app(paths: list[Path]) -> tuple[web.Application, Replayer]:
    replayer = Replayer([load_cassette(p) for p in paths])
    app = web.Application(client_max_size=512 * 1024 * 1024)
    app.router.add_route("*", "/{tail:.*}", replayer.handle)
    return app, replayer
