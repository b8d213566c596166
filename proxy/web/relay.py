"""Relaying one request upstream and its answer back, byte for byte.

The answer is written to the client as it arrives (`UpstreamResponse.chunks`), never
decoded or re-chunked. Our own failures before the answer starts become the JSON error of
`proxy.web.errors` (502 unreachable, 504 timeout); after the first byte they can only end
the stream, which is cut off without its terminating chunk so that the client sees it
broke. When the client goes away, the handler is cancelled and the upstream connection is
closed with it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiohttp import web
from yarl import URL

from proxy.core.headers import Headers, request_headers, response_headers
from proxy.errors import UpstreamError
from proxy.observe.metrics import Metrics
from proxy.observe.vitals import Vitals
from proxy.tasks import TaskSet
from proxy.upstream.cassette import Exchange, Recorder
from proxy.upstream.upstreams import Target, Upstream
from proxy.web.errors import error_json

log = logging.getLogger(__name__)


class Relay:
    """Sends requests through the `Upstream` and streams answers back."""

    def __init__(
        self,
        upstream: Upstream,
        recorder: Recorder | None = None,
        vitals: Vitals | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.upstream = upstream
        self.recorder = recorder
        self.vitals = vitals or Vitals()
        self.metrics = metrics or Metrics()
        self._writes = TaskSet()

    def start_exchange(self, request: web.Request, body: bytes) -> Exchange | None:
        if self.recorder is None:
            return None
        return Exchange(
            method=request.method,
            path=request.rel_url.raw_path,
            query=request.rel_url.raw_query_string,
            headers=list(request.headers.items()),
            body=body,
            seq=self.recorder.next_seq(),
            limit=self.recorder.max_body,
        )

    async def forward(
        self,
        request: web.Request,
        target: Target,
        path: str,
        body: bytes | None,
        client_headers: Mapping[str, str],
        *,
        extra: Iterable[tuple[str, str]] = (),
        exchange: Exchange | None = None,
        wire: str = "other",
        arrived: float | None = None,
    ) -> web.StreamResponse:
        """Send `path` (the request's, its route prefix taken off) to `target`. `wire`:
        the request's format (for the metrics); `arrived`: when it came in (perf_counter)."""
        extra = list(extra)
        timing = _Timing(wire, target.prefix, arrived or time.perf_counter())
        headers = request_headers(client_headers.items(), target.api_key)
        url = target.url_for(path, request.rel_url.raw_query_string)
        if exchange is not None:
            base = target.base_url.raw_path.rstrip("/")
            under = url.raw_path.startswith(base + "/")
            exchange.upstream_path = url.raw_path[len(base) :] if under else url.raw_path
            exchange.upstream_headers = headers
            exchange.upstream_body = body
        try:
            return await self._forward(request, url, headers, body, extra, exchange, timing)
        except asyncio.CancelledError:
            log.info(
                "%s %s: client disconnected; upstream request cancelled",
                request.method,
                request.rel_url.raw_path,
            )
            raise
        finally:
            if exchange is not None:
                self._record(exchange)

    async def _forward(
        self,
        request: web.Request,
        url: URL,
        headers: Headers,
        body: bytes | None,
        extra: Headers,
        exchange: Exchange | None,
        timing: _Timing,
    ) -> web.StreamResponse:
        started = time.monotonic()
        metrics = self.metrics
        metrics.latency(timing.wire, time.perf_counter() - timing.arrived)
        try:
            upstream = await self.upstream.send_to(request.method, url, headers, body)
        except UpstreamError as exc:
            log.warning("%s %s: %s", request.method, request.rel_url.raw_path, exc)
            self.vitals.failed(str(exc))
            metrics.relayed(timing.route, exc.status, timing.wire)
            if exchange is not None:
                exchange.status, exchange.error = exc.status, str(exc)
            return error_response(exc, extra)
        self.vitals.answered(upstream.status)
        metrics.relayed(timing.route, upstream.status, timing.wire)

        response = _Answer(status=upstream.status, reason=upstream.reason)
        for name, value in response_headers(upstream.headers):
            response.headers.add(name, value)
        for name, value in extra:
            response.headers[name] = value
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        if exchange is not None:
            exchange.status, exchange.reason = upstream.status, upstream.reason
            exchange.response_headers = list(upstream.headers)
        complete = False
        try:
            writer = await response.prepare(request)
            if writer is not None and not upstream.at_hand():
                # Nothing to send with the headers yet (a stream's first token is to
                # come): they go now, as the upstream sent them.
                writer.send_headers()
            first = True
            async for chunk in upstream.chunks:
                if exchange is not None:
                    exchange.received(time.monotonic() - started, chunk)
                await response.write(chunk)
                if first:
                    first = False
                    elapsed = time.perf_counter() - timing.arrived
                    metrics.first_byte_after(timing.wire, elapsed)
            await response.write_eof()
            complete = True
        except ConnectionResetError:
            # Writing to ST failed.
            log.info("%s %s: client went away", request.method, request.rel_url.raw_path)
            if exchange is not None:
                exchange.error = "client disconnected"
        except UpstreamError as failure:
            log.warning(
                "%s %s: upstream failed after the answer started: %s",
                request.method,
                request.rel_url.raw_path,
                failure,
            )
            if exchange is not None:
                exchange.error = str(failure)
            self.vitals.failed(f"the answer broke off: {failure}")
            # The status line is gone already: all we can do is end the stream broken.
            if request.transport is not None:
                request.transport.close()
        finally:
            if complete:
                upstream.release()
            else:
                # Cancelled (the client pressed Stop) or broken: drop the upstream connection
                # so that the upstream stops generating.
                upstream.close()
                if exchange is not None and exchange.error is None:
                    exchange.error = "client disconnected"
        return response

    def _record(self, exchange: Exchange) -> None:
        recorder = self.recorder
        if recorder is None:
            return
        self._writes.spawn(
            asyncio.to_thread(_write_quietly, recorder, exchange), name="record-cassette"
        )

    async def drain(self) -> None:
        """Wait for cassette writes still under way (at shutdown)."""
        await self._writes.drain()


@dataclass(frozen=True, slots=True)
class _Timing:
    wire: str  # the request's format, for the metrics
    route: str  # the upstream route's prefix ("" for `upstream.base_url`)
    arrived: float  # perf_counter when the request came in


def _write_quietly(recorder: Recorder, exchange: Exchange) -> None:
    try:
        recorder.write(exchange)
    except OSError as exc:
        log.error("cannot write cassette into %s: %s", recorder.folder, exc)


class _Answer(web.StreamResponse):
    """A relayed answer whose headers go out in one write with the first body bytes when
    those are at hand already (a whole JSON answer, usually): ST gets it in one packet,
    not two. aiohttp sends a StreamResponse's headers at once unless told otherwise;
    `_forward` sends them itself when there is nothing to go with them."""

    _send_headers_immediately = False


def error_response(exc: UpstreamError, extra: Iterable[tuple[str, str]] = ()) -> web.Response:
    """Our own failure before the answer started, as the error body ST shows in a toast."""
    response = error_json(exc)
    for name, value in extra:
        response.headers[name] = value
    return response
