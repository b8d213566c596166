"""The error tree of recap-proxy, drawn once.

    RecapProxyError                 anything the proxy itself raises on purpose
    ├── ConfigError                 bad settings: names the key and what was expected
    ├── StoreBusy                   another recap-proxy already serves this store
    ├── StoreUnusable               the store file cannot be opened: damaged, not a store, newer
    ├── RequestError                a request we cannot interpret                          -> 400
    │   └── AdapterError            the body does not fit the wire format of its route
    ├── TemplateError               a template file is missing or unreadable
    ├── NotFound                    the API named a chat, message or scene that is not there -> 404
    ├── Conflict                    a correction that cannot apply now                     -> 409
    ├── Unavailable                 the API needs a part that is not running (no data folder) -> 503
    ├── Refusal                     a caller the proxy does not serve, refused before anything runs
    │   ├── MissingAccessKey        `server.access_key` is set and the request lacks it    -> 401
    │   ├── ForbiddenOrigin         a web page of another origin                           -> 403
    │   ├── UnsupportedMediaType    a change to the memory whose body is not JSON           -> 415
    │   ├── PayloadTooLarge         a `/recap/api` body over its limit, refused unread      -> 413
    │   └── MisdirectedHost         a `Host` this proxy does not answer to (DNS rebinding)  -> 421
    ├── JobFailure                  one of the proxy's own LLM jobs failed; retried
    │   ├── NoCredentials           no model or key known yet: waits for the chat's next request
    │   └── Refused                 the LLM refused it (4xx): not retried
    │       └── Unauthorized        401/403
    ├── EmbeddingFailure            the embeddings API gave no vectors: recall goes on by words
    └── UpstreamError               we could not get an answer from the upstream API
        ├── UpstreamUnreachable     connect refused, DNS, reset before a response  -> 502
        └── UpstreamTimeout         connect or read timeout                        -> 504

Upstream *error responses* (a 429 or a 500 with a body) are not errors here: they are
relayed to the client untouched. On the chat path a `RequestError` means "forward the
bytes as they came" (fail-open); on `/recap/api` it is the client's 400. Errors become
HTTP answers in one place, `proxy.web.errors`, every one as the OpenAI-style body
`{"error": {"message", "type", "code"}}` that ST shows in a toast. After the first byte of
a stream an error can only end the stream.
"""

from __future__ import annotations


class RecapProxyError(Exception):
    """Base of every error the proxy raises on purpose."""

    status = 500
    code = "internal_error"
    error_type: str | None = None  # the body's `type`, when it says more than `code`

    def to_json(self) -> dict[str, dict[str, str]]:
        """The OpenAI-style error body that clients such as ST know how to show."""
        kind = self.error_type or self.code
        return {"error": {"message": str(self), "type": kind, "code": self.code}}


class ConfigError(RecapProxyError):
    """Settings could not be loaded; the message names each bad key."""


class StoreBusy(RecapProxyError):
    """Another running recap-proxy holds the store (it would run the same queue)."""


class StoreUnusable(RecapProxyError):
    """The store file cannot be opened: damaged, not a store, read-only or written by a
    newer recap-proxy (what SQLite said is in the message)."""


class RequestError(RecapProxyError):
    """A client request we cannot interpret; on the chat path the bytes still go upstream."""

    status = 400
    code = "bad_request"


class AdapterError(RequestError):
    """The body does not match the wire format of its route."""


class UnknownPromptFormat(AdapterError):
    """A text prompt in no instruct template the proxy knows: it goes on unchanged."""


class TemplateError(RecapProxyError):
    """A template is missing or unreadable."""


class NotFound(RecapProxyError):
    """The API was asked about something that does not exist."""

    status = 404
    code = "not_found"


class Conflict(RecapProxyError):
    """A correction that cannot be applied in the current state."""

    status = 409
    code = "conflict"


class Unavailable(RecapProxyError):
    """The API needs a part of the proxy that is not running; `code` says which."""

    status = 503

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class Refusal(RecapProxyError):
    """A caller the proxy does not serve: refused before anything is forwarded or changed."""

    status = 403
    code = "forbidden"


class MissingAccessKey(Refusal):
    status = 401
    code = "invalid_access_key"


class ForbiddenOrigin(Refusal):
    status = 403
    code = "forbidden_origin"


class UnsupportedMediaType(Refusal):
    status = 415
    code = "unsupported_media_type"


class PayloadTooLarge(Refusal):
    status = 413
    code = "payload_too_large"


class MisdirectedHost(Refusal):
    status = 421
    code = "misdirected_request"


class JobFailure(RecapProxyError):
    """A job that did not succeed. `retry` says whether another attempt can help."""

    retry = True


class NoCredentials(JobFailure):
    """Nothing says which model or key to use yet (no request of the chat since start-up
    and no `[memory.llm]` model): the job waits for the chat's next request."""


class InputMissed(JobFailure):
    """The job did not find its input when it ran, though it is there again once the job
    ends (message recaps whose messages a running recap covered as the job started, until
    a scene folded again uncovered them): another attempt reads it again."""


class Refused(JobFailure):
    """The LLM refused the request itself (a 4xx): the same request would fail again."""

    retry = False


class Unauthorized(Refused):
    """401/403 from the LLM: retrying with the same key cannot help."""


class EmbeddingFailure(RecapProxyError):
    """The embeddings API gave no usable vectors (unreachable, an error answer, a body of
    another shape, too slow). Nothing waits on it: recall goes on by words alone."""


class UpstreamError(RecapProxyError):
    """No usable answer from the upstream API."""

    status = 502
    error_type = "upstream_error"

    def __init__(self, message: str, *, code: str) -> None:
        super().__init__(message)
        self.code = code


class UpstreamUnreachable(UpstreamError):
    """The upstream could not be reached or dropped the connection before answering."""

    status = 502
    error_type = "upstream_unreachable"


class UpstreamTimeout(UpstreamError):
    """The upstream did not connect or answer in time."""

    status = 504
    error_type = "upstream_timeout"
