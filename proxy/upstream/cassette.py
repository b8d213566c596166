"""Cassettes: one proxied exchange written down, for `serve --record` and for test replay.

A cassette is one JSON file:

    {"format": "recap-proxy-cassette/1", "recorded_at": "...", "meta": {...},
     "request":          {"method", "path", "query", "headers": [[k, v]...], <body>},
     "upstream_request": {"method", "path", "query", "headers": [[k, v]...], <body>},
     "response":         {"status", "reason", "headers": [[k, v]...],
                          "chunks": [{"t": seconds, "text": "..."} | {"t": ..., "b64": "..."}]}}

`request` is what the client (ST) sent us, `upstream_request` what we sent on (its `path`
is relative to the base URL it went to, or absolute when outside it: `/completion` beside
a `.../v1` base), and `response.chunks` the upstream's bytes in the
pieces and at the times they arrived. A body is stored as `"body"` (decoded JSON) when
re-encoding it gives back the exact bytes, else as `"body_text"` or `"body_b64"`.
Secrets are redacted before anything is written: auth headers (the proxy's own
`X-Recap-Key` among them), key-like query parameters and JSON fields, and, in every body
and response chunk, the keys the exchange carried, the keys the config holds, and anything
that looks like a key.

A body larger than `[record] max_body_mb` (a request's, or an answer's chunks together) is
written as its size and SHA-256 only (`"body_size"`, `"body_sha256"`; `"chunks_size"`,
`"chunks_sha256"`): a huge exchange neither fills the disk nor keeps the writer thread
redacting it for seconds (the regex holds the interpreter while it runs, so long texts
are redacted in pieces, between which the event loop gets its turn).
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import itertools
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from proxy.core.headers import (
    Headers,
    header_secrets,
    redact_headers,
    redact_json,
    redact_query,
    redact_secrets,
)
from proxy.settings import Settings

FORMAT = "recap-proxy-cassette/1"
MAX_BODY: Final = 8 * 1024 * 1024  # bytes: `[record] max_body_mb`'s default


def encode_body(
    raw: bytes | None,
    *,
    redact: bool = True,
    known: frozenset[str] = frozenset(),
    limit: int = MAX_BODY,
) -> dict[str, Any]:
    if not raw:
        return {"body": None}
    if len(raw) > limit:
        return {"body_size": len(raw), "body_sha256": hashlib.sha256(raw).hexdigest()}
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        redacted = redact_json(value, known) if redact else value
        # Exact bytes when re-encoding gives them back; a secret outweighs exactness.
        if orjson.dumps(value) == raw or redacted != value:
            return {"body": redacted}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(raw).decode("ascii")}
    return {"body_text": redact_secrets(text, known) if redact else text}


def decode_body(part: dict[str, Any]) -> bytes:
    if "body_size" in part:
        raise ValueError(f"the body was not recorded, only its size ({part['body_size']} bytes)")
    if "body_b64" in part:
        return base64.b64decode(part["body_b64"])
    if "body_text" in part:
        return str(part["body_text"]).encode("utf-8")
    value = part.get("body")
    return b"" if value is None else orjson.dumps(value)


def encode_chunk(t: float, data: bytes, known: frozenset[str] = frozenset()) -> dict[str, Any]:
    try:
        return {"t": round(t, 4), "text": redact_secrets(data.decode("utf-8"), known)}
    except UnicodeDecodeError:
        # Compressed or binary: nothing readable to redact in it.
        return {"t": round(t, 4), "b64": base64.b64encode(data).decode("ascii")}


def decode_chunk(chunk: dict[str, Any]) -> bytes:
    if "b64" in chunk:
        return base64.b64decode(chunk["b64"])
    return str(chunk["text"]).encode("utf-8")


@dataclass(slots=True)
class Exchange:
    """One exchange as it happens; `to_cassette` writes it down with secrets redacted."""

    method: str
    path: str
    query: str
    headers: Headers
    body: bytes
    upstream_path: str = ""
    upstream_headers: Headers = field(default_factory=list)
    upstream_body: bytes | None = None
    status: int | None = None
    reason: str | None = None
    response_headers: Headers = field(default_factory=list)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    error: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    seq: int = 0  # order of arrival, which names the file
    limit: int = MAX_BODY  # bytes of chunks kept; past it only their size and hash
    chunks_size: int = 0
    _hash: Any = field(default_factory=hashlib.sha256, repr=False)

    def received(self, t: float, chunk: bytes) -> None:
        """One chunk of the answer, `t` seconds after the request went."""
        self.chunks_size += len(chunk)
        self._hash.update(chunk)
        if self.chunks_size <= self.limit:
            self.chunks.append((t, chunk))
        elif self.chunks:
            self.chunks.clear()  # over the limit: the size and hash stand for them all

    def to_cassette(self, secrets: frozenset[str] = frozenset()) -> dict[str, Any]:
        """The cassette, with the exchange's own keys and `secrets` redacted."""
        query = redact_query(self.query)
        known = secrets | header_secrets([*self.headers, *self.upstream_headers])
        limit = self.limit
        cassette: dict[str, Any] = {
            "format": FORMAT,
            "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "meta": self.meta,
            "request": {
                "method": self.method,
                "path": self.path,
                "query": query,
                "headers": [list(p) for p in redact_headers(self.headers)],
                **encode_body(self.body, known=known, limit=limit),
            },
            "upstream_request": {
                "method": self.method,
                "path": self.upstream_path,
                "query": query,
                "headers": [list(p) for p in redact_headers(self.upstream_headers)],
                **encode_body(self.upstream_body, known=known, limit=limit),
            },
            "response": {
                "status": self.status,
                "reason": self.reason,
                "headers": [list(p) for p in redact_headers(self.response_headers)],
                "chunks": [encode_chunk(t, data, known) for t, data in self.chunks],
            },
        }
        if self.chunks_size > limit:
            response = cassette["response"]
            response["chunks_size"] = self.chunks_size
            response["chunks_sha256"] = self._hash.hexdigest()
        if self.error:
            cassette["response"]["error"] = redact_secrets(self.error, known)
        return cassette


def configured_keys(settings: Settings) -> frozenset[str]:
    """Every key the config holds: redacted from cassettes wherever it stands."""
    keys = [
        settings.server.access_key,
        settings.upstream.api_key,
        settings.memory.llm.api_key,
        *(route.api_key for route in settings.upstream.routes),
    ]
    return frozenset(k.get_secret_value() for k in keys if k is not None)


def _none() -> frozenset[str]:
    return frozenset()


class Recorder:
    """Writes exchanges into a folder, one file each, named so that they sort in order.
    `secrets`: the keys to redact besides those an exchange carries (the config's, as it
    is now); `max_body`: bytes of a body written whole."""

    def __init__(
        self,
        folder: Path,
        *,
        max_body: int = MAX_BODY,
        secrets: Callable[[], frozenset[str]] = _none,
    ) -> None:
        self.folder = folder
        self.max_body = max_body
        self.secrets = secrets
        self._counter = itertools.count(1)
        self._stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")

    def next_seq(self) -> int:
        return next(self._counter)

    def write(self, exchange: Exchange) -> Path:
        """Blocking; the server calls it in a worker thread, off the event loop."""
        self.folder.mkdir(parents=True, exist_ok=True)
        slug = exchange.path.strip("/").replace("/", "_") or "root"
        name = f"{self._stamp}-{exchange.seq:05d}-{exchange.method.lower()}-{slug}.json"
        target = self.folder / name
        tmp = target.with_suffix(".json.tmp")
        cassette = exchange.to_cassette(self.secrets())
        tmp.write_bytes(orjson.dumps(cassette, option=orjson.OPT_INDENT_2))
        os.replace(tmp, target)
        return target


def load_cassette(path: Path) -> dict[str, Any]:
    data = orjson.loads(path.read_bytes())
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(f"{path} is not a {FORMAT} cassette")
    return data
