"""Which headers cross the proxy, and how secrets are hidden in what we keep.

Hop-by-hop headers (RFC 9110 §7.6.1) describe one connection and stop at the proxy, as do
the ones a `Connection` header names. Framing headers (`Host`, `Content-Length`) are set
anew for the upstream request. Everything else is end-to-end and is forwarded untouched,
`Accept-Encoding` included: the response bytes are relayed without decoding, so the
upstream must only use encodings the client itself accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
REQUEST_FRAMING = frozenset({"host", "content-length"})
# What the client says to the proxy, not to the API: its cookies, the page it came from,
# the proxy's access key. `Content-Encoding` goes too: the server decodes request bodies,
# so the bytes forwarded are never encoded.
NOT_FORWARDED = frozenset({"cookie", "origin", "referer", "x-recap-key", "content-encoding"})
SECRET_HEADERS = frozenset(
    {
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "api-key",
        "x-goog-api-key",
        "cookie",
        "set-cookie",
        "x-recap-key",
    }
)
SECRET_QUERY = re.compile(r"(?i)((?:^|&)(?:key|api_key|apikey|access_token|token)=)[^&]*")
SECRET_BODY_KEY = re.compile(r"(?i)(^|_)(api_?key|apikey|secret|password|access_token)$")
# Strings that look like API keys wherever they stand (an error body that echoes the key,
# a stream that quotes it): OpenAI-style `sk-...` and kin, Google's `AIza...`, bearer tokens.
KEY_LIKE = re.compile(
    r"\b(?:sk|pk|rk|gsk|xai|sess)-[A-Za-z0-9_\-]{12,}|\bAIza[0-9A-Za-z_\-]{30,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/=\-]{12,}"
)
REDACTED = "<redacted>"
REDACTED_IN_URL = "REDACTED"  # needs no percent-encoding, so a replay sends it as written

Headers = list[tuple[str, str]]
Lowered = list[tuple[str, str, str]]  # (lowered name, name, value)

# What never crosses, whatever `Connection` names besides (those go too).
_NOT_TO_UPSTREAM = HOP_BY_HOP | REQUEST_FRAMING | NOT_FORWARDED
_NOT_TO_CLIENT = HOP_BY_HOP | {"content-length"}
# `Connection` options that name no header.
_CONNECTION_OPTIONS = frozenset({"", "keep-alive", "close"})


def _crossing(headers: Iterable[tuple[str, str]], dropped: frozenset[str]) -> Lowered:
    """The headers not in `dropped` nor named by a `Connection` header, each with its name
    lowered: one pass over them, a second only when `Connection` names more than
    `keep-alive` or `close` (this is on every request and every answer)."""
    named: set[str] = set()
    kept: Lowered = []
    for name, value in headers:
        lowered = name.lower()
        if lowered == "connection":
            named.update(t.strip().lower() for t in value.split(","))
        elif lowered not in dropped:
            kept.append((lowered, name, value))
    named -= _CONNECTION_OPTIONS
    return [row for row in kept if row[0] not in named] if named else kept


def request_headers(headers: Iterable[tuple[str, str]], api_key: str | None) -> Headers:
    """Headers to send upstream: end-to-end ones, with `api_key` replacing the client's,
    in the header the client's API takes it in: `x-api-key` for Anthropic's (the client sent
    `x-api-key` or `anthropic-version`, and no `Authorization`), else `Authorization: Bearer`."""
    kept = _crossing(headers, _NOT_TO_UPSTREAM)
    if api_key is None:
        return [(name, value) for _, name, value in kept]
    names = {lowered for lowered, _, _ in kept}
    anthropic = bool(names & {"x-api-key", "anthropic-version"}) and "authorization" not in names
    out = [(k, v) for lowered, k, v in kept if lowered not in ("authorization", "x-api-key")]
    out.append(("x-api-key", api_key) if anthropic else ("Authorization", f"Bearer {api_key}"))
    return out


def response_headers(headers: Iterable[tuple[str, str]]) -> Headers:
    """Headers to relay to the client; the body framing is redone by our server, and CORS
    is the proxy's to answer (an upstream's `Access-Control-Allow-Origin: *` would let
    any page read the answers)."""
    return [
        (name, value)
        for lowered, name, value in _crossing(headers, _NOT_TO_CLIENT)
        if not lowered.startswith("access-control-")
    ]


def _split_secret(value: str) -> tuple[str, str]:
    """(`Bearer `, the token) of an auth header's value; ("", value) with no scheme."""
    scheme, _, rest = value.partition(" ")
    return (f"{scheme} ", rest.strip()) if rest and scheme.isalpha() else ("", value.strip())


def redact_headers(headers: Iterable[tuple[str, str]]) -> Headers:
    """Headers fit to be written down: secret values replaced, the auth scheme kept."""
    return [
        (name, _split_secret(value)[0] + REDACTED if name.lower() in SECRET_HEADERS else value)
        for name, value in headers
    ]


def safe_url(url: str) -> str:
    """A URL fit to show or log: no `user:password@`, key-like query values redacted."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    authority, slash, tail = rest.partition("/")
    authority = authority.rpartition("@")[2]
    path, question, query = tail.partition("?")
    shown = f"{scheme}://{authority}{slash}{path}"
    return f"{shown}?{redact_query(query)}" if question else shown


def redact_secrets(text: str, known: Iterable[str] = ()) -> str:
    """`text` with the `known` secrets and anything key-like replaced by `<redacted>`.

    A long text is redacted piece by piece, cut where no key can stand (a quote or a line
    break): a regex holds the interpreter for as long as it runs, and a cassette of a
    100k-token prompt redacted in one go would stall the event loop for its duration."""
    secrets = sorted({k for k in known if len(k) >= 6}, key=len, reverse=True)
    if len(text) <= PIECE:
        return _redacted(text, secrets)
    return "".join(_redacted(piece, secrets) for piece in _pieces(text))


PIECE = 64 * 1024  # characters redacted at once: well under a millisecond each


def _pieces(text: str) -> Iterator[str]:
    start = 0
    while start < len(text):
        end = start + PIECE
        if end < len(text):
            cuts = [i for i in (text.find('"', end), text.find("\n", end)) if i >= 0]
            end = min(cuts) + 1 if cuts else len(text)
        yield text[start:end]
        start = end


def _redacted(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, REDACTED)
    return KEY_LIKE.sub(
        lambda m: f"Bearer {REDACTED}" if m.group(0)[:6].lower() == "bearer" else REDACTED, text
    )


def header_secrets(headers: Iterable[tuple[str, str]]) -> set[str]:
    """The secret values in headers (an `Authorization`'s token without its scheme)."""
    return {_split_secret(v)[1] for k, v in headers if k.lower() in SECRET_HEADERS}


def redact_query(query: str) -> str:
    return SECRET_QUERY.sub(lambda m: m.group(1) + REDACTED_IN_URL, query)


def redact_json(value: object, known: frozenset[str] = frozenset()) -> object:
    """A copy of a decoded JSON body with secret-looking keys' values replaced, and known
    or key-like secrets in its strings."""
    if isinstance(value, dict):
        return {
            k: REDACTED if SECRET_BODY_KEY.search(k) else redact_json(v, known)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [redact_json(v, known) for v in value]
    if isinstance(value, str):
        return redact_secrets(value, known)
    return value
