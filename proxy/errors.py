"""The error tree of recap-proxy, drawn once.

    RecapProxyError                 anything the proxy itself raises on purpose
    ├── ConfigError                 bad settings: names the key and what was expected
    ├── RequestError                a client request we cannot interpret (fail-open: forward as is)
    │   └── AdapterError            the body does not fit the wire format of its route
    ├── TemplateError               a template file is missing or unreadable
    ├── NotFound                    the API named a chat, message or scene that is not there -> 404
    ├── Conflict                    a correction that cannot apply now                     -> 409
    ├── JobFailure                  one of the proxy's own LLM jobs failed (`proxy.jobs`); retried
    │   └── Refused                 the LLM refused it (4xx): not retried
    │       └── Unauthorized        401/403
    └── UpstreamError               we could not get an answer from the upstream API
        ├── UpstreamUnreachable     connect refused, DNS, reset before a response  -> 502
        └── UpstreamTimeout         connect or read timeout                        -> 504

Upstream *error responses* (a 429 or a 500 with a body) are not errors here: they are
relayed to the client untouched. Errors are mapped to HTTP answers only at the edge
(`proxy.web`), and after the first byte of a stream an error can only end the stream.
"""

from __future__ import annotations


class RecapProxyError(Exception):
    """Base of every error the proxy raises on purpose."""


class ConfigError(RecapProxyError):
    """Settings could not be loaded; the message names each bad key."""


class RequestError(RecapProxyError):
    """A client request we cannot interpret; the original bytes still go upstream."""


class AdapterError(RequestError):
    """The body does not match the wire format of its route."""


class TemplateError(RecapProxyError):
    """A template is missing or unreadable."""


class NotFound(RecapProxyError):
    """The API was asked about something that does not exist (answered with 404)."""


class Conflict(RecapProxyError):
    """A correction that cannot be applied in the current state (answered with 409)."""


class UpstreamError(RecapProxyError):
    """No usable answer from the upstream API."""

    status = 502
    error_type = "upstream_error"

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code

    def to_openai(self) -> dict[str, dict[str, str]]:
        """The OpenAI-style error body that clients such as ST know how to show."""
        return {"error": {"message": str(self), "type": self.error_type, "code": self.code}}


class UpstreamUnreachable(UpstreamError):
    """The upstream could not be reached or dropped the connection before answering."""

    status = 502
    error_type = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    """The upstream did not connect or answer in time."""

    status = 504
    error_type = "upstream_timeout"
