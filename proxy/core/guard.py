"""Who may use the proxy, decided from a request's facts. Pure.

SillyTavern calls the proxy from its Node server (no `Origin`) or from a page of its own
origin; the user calls it with curl, the CLI or the proxy's own pages. A web page open in
the same browser must not: it would spend the user's API key, or rewrite the memory that
goes into every later request. Three checks keep it out:

- the `Host` a request names must be one the proxy answers to (DNS rebinding names the
  attacker's domain; an IP literal cannot be rebound, so a wildcard bind accepts those);
- the `Origin`, when a browser sends one, must be the proxy's own, SillyTavern's on
  loopback, or one the user allowed;
- with `server.access_key` set, every request carries it (`Authorization: Bearer` on
  `/v1`, which is ST's "Custom API key" field, or `X-Recap-Key` anywhere).
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from urllib.parse import urlsplit

ST_PORTS = (8000,)  # SillyTavern's default port: its pages may call the proxy from there
WILDCARDS = ("0.0.0.0", "::", "")
KEY_HEADER = "X-Recap-Key"


@dataclass(frozen=True, slots=True)
class GuardPolicy:
    bind_host: str = "127.0.0.1"
    allowed_origins: frozenset[str] = field(default_factory=frozenset)
    allowed_hosts: frozenset[str] = field(default_factory=frozenset)
    access_key: str | None = None

    @classmethod
    def of(
        cls,
        bind_host: str,
        allowed_origins: Collection[str] = (),
        allowed_hosts: Collection[str] = (),
        access_key: str | None = None,
    ) -> GuardPolicy:
        origins = {o for o in map(normalize_origin, allowed_origins) if o}
        hosts = {h.strip().lower().strip("[]") for h in allowed_hosts if h.strip()}
        return cls(bind_host.lower(), frozenset(origins), frozenset(hosts), access_key or None)


@lru_cache(maxsize=256)  # every request's `Host`, and few distinct ones
def reachable(host: str, port: int) -> str:
    """The URL a server listening on `host`:`port` answers at: a wildcard host on loopback,
    an IPv6 host in brackets (the CLI and `doctor` asking a running proxy)."""
    host = "127.0.0.1" if host in WILDCARDS else host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


def split_host(host: str) -> tuple[str, int | None]:
    """`[::1]:8765` -> ("::1", 8765); `localhost` -> ("localhost", None)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest.removeprefix(":")
    elif host.count(":") == 1:
        name, _, port = host.partition(":")
    else:
        name, port = host, ""
    return name.rstrip("."), int(port) if port.isdigit() else None


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


@lru_cache(maxsize=256)  # asked for every request's `Host`; parsing an address is not free
def is_loopback(name: str) -> bool:
    address = _ip(name)
    return name == "localhost" or (address is not None and address.is_loopback)


def host_allowed(host: str | None, policy: GuardPolicy) -> bool:
    """Whether the `Host` header names this proxy (a missing one cannot be a rebinding)."""
    if not host:
        return True
    name, _ = split_host(host)
    if is_loopback(name) or name in policy.allowed_hosts:
        return True
    if policy.bind_host in WILDCARDS:
        return _ip(name) is not None
    return name == policy.bind_host.strip("[]")


def normalize_origin(origin: str) -> str | None:
    """`HTTP://LocalHost:8000/` -> `http://localhost:8000`; None for what is no origin."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    default = 80 if parts.scheme == "http" else 443
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


def origin_allowed(origin: str | None, host: str | None, policy: GuardPolicy) -> bool:
    """Whether a request with this `Origin` (None: not from a browser page) may go on.

    Allowed: no `Origin`; the proxy's own origin (the `Host` it was called by, or a
    loopback name on the same port); SillyTavern's loopback origins; the user's list.
    """
    if origin is None:
        return True
    normal = normalize_origin(origin)
    if normal is None:  # "null" (sandboxed frames, files), or garbage
        return False
    if normal in policy.allowed_origins:
        return True
    parts = urlsplit(normal)
    name = (parts.hostname or "").lower()
    port = parts.port or (80 if parts.scheme == "http" else 443)
    if host:
        own_name, own_port = split_host(host)
        own_port = own_port or 80
        same_port = port == own_port
        if same_port and (name == own_name or (is_loopback(name) and is_loopback(own_name))):
            return True
    return is_loopback(name) and port in ST_PORTS


API_KEY_HEADER = "x-api-key"


def _bearer(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


def _is_key(presented: str | None, policy: GuardPolicy) -> bool:
    if presented is None or policy.access_key is None:
        return False
    return hmac.compare_digest(presented.encode(), policy.access_key.encode())


def _api_key_header(headers: Mapping[str, str]) -> str | None:
    return headers.get(API_KEY_HEADER, "").strip() or None


def access_allowed(path: str, headers: Mapping[str, str], policy: GuardPolicy) -> bool:
    """With an access key set, the request carries it: `X-Recap-Key`, or on a path that
    goes upstream in the key field ST has for that API: a bearer token (the Custom
    endpoint's key, Text Completion keys, OpenAI's reverse-proxy password) or `x-api-key`
    (Claude's reverse-proxy password)."""
    if policy.access_key is None:
        return True
    if _is_key(headers.get(KEY_HEADER, "").strip() or None, policy):
        return True
    on_api = not (path == "/recap" or path.startswith("/recap/"))
    return on_api and (
        _is_key(_bearer(headers), policy) or _is_key(_api_key_header(headers), policy)
    )


def carries_access_key(headers: Mapping[str, str], policy: GuardPolicy) -> tuple[str, ...]:
    """The headers (`Authorization`, `x-api-key`) that hold the access key: they are ours,
    not the upstream's, so they are neither forwarded nor kept for the proxy's own calls."""
    found = []
    if _is_key(_bearer(headers), policy):
        found.append("authorization")
    if _is_key(_api_key_header(headers), policy):
        found.append(API_KEY_HEADER)
    return tuple(found)


class LivePolicy:
    """The policy the server checks against, replaced as a whole when the config is
    reloaded (the app's state is fixed once it runs; this holder is not)."""

    def __init__(self, policy: GuardPolicy) -> None:
        self.current = policy
