"""Who may use the proxy: hosts, origins and the access key, decided from facts."""

from __future__ import annotations

import pytest

from proxy.core.guard import (
    GuardPolicy,
    access_allowed,
    carries_access_key,
    host_allowed,
    normalize_origin,
    origin_allowed,
    reachable,
    split_host,
)

LOCAL = GuardPolicy.of("127.0.0.1")


@pytest.mark.parametrize(
    ("host", "allowed"),
    [
        (None, True),  # no Host: not a browser that was rebound
        ("127.0.0.1:8765", True),
        ("localhost:8765", True),
        ("[::1]:8765", True),
        ("127.0.0.2", True),
        ("evil.example:8765", False),  # DNS rebinding names the attacker's domain
        ("192.168.1.5:8765", False),  # not the bind address
        ("localhost.evil.example", False),
    ],
)
def test_hosts_on_loopback(host: str | None, allowed: bool) -> None:
    assert host_allowed(host, LOCAL) is allowed


def test_hosts_when_reached_over_the_network() -> None:
    wildcard = GuardPolicy.of("0.0.0.0", allowed_hosts=["Recap.LAN"])
    assert host_allowed("192.168.1.5:8765", wildcard)  # an IP literal cannot be rebound
    assert host_allowed("recap.lan:8765", wildcard)
    assert not host_allowed("evil.example", wildcard)
    bound = GuardPolicy.of("192.168.1.5")
    assert host_allowed("192.168.1.5:8765", bound) and not host_allowed("10.0.0.9", bound)


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, True),  # ST's server, curl, the CLI
        ("http://127.0.0.1:8765", True),  # the proxy's own pages
        ("http://localhost:8765", True),  # the same, by its other loopback name
        ("http://localhost:8000", True),  # SillyTavern's page
        ("http://127.0.0.1:8000", True),
        ("https://evil.example", False),
        ("http://evil.example:8765", False),
        ("null", False),  # sandboxed frames, local files
        ("http://localhost:3000", False),  # another local app
        ("http://192.168.1.20:8000", False),  # ST elsewhere: only when the user says so
        ("garbage", False),
    ],
)
def test_origins(origin: str | None, allowed: bool) -> None:
    assert origin_allowed(origin, "127.0.0.1:8765", LOCAL) is allowed


def test_the_users_own_origins() -> None:
    policy = GuardPolicy.of("127.0.0.1", allowed_origins=["HTTP://192.168.1.20:8000/"])
    assert origin_allowed("http://192.168.1.20:8000", "127.0.0.1:8765", policy)
    assert normalize_origin("https://Example.com:443/") == "https://example.com"
    assert split_host("[::1]:8765") == ("::1", 8765) and split_host("localhost") == (
        "localhost",
        None,
    )


def test_the_access_key() -> None:
    policy = GuardPolicy.of("0.0.0.0", access_key="s3cret")
    assert access_allowed("/v1/chat/completions", {"Authorization": "Bearer s3cret"}, policy)
    assert access_allowed("/v1/models", {"X-Recap-Key": "s3cret"}, policy)
    assert access_allowed("/recap/api/chats", {"X-Recap-Key": "s3cret"}, policy)
    # the bearer form is ST's API key field: only on the API routes
    assert not access_allowed("/recap/api/chats", {"Authorization": "Bearer s3cret"}, policy)
    assert not access_allowed("/v1/models", {"Authorization": "Bearer sk-real"}, policy)
    assert not access_allowed("/v1/models", {}, policy)
    # every path that goes upstream takes it in the key field ST has for that API
    assert access_allowed("/completion", {"Authorization": "Bearer s3cret"}, policy)
    assert access_allowed("/claude/v1/messages", {"x-api-key": "s3cret"}, policy)
    assert not access_allowed("/recap/api/chats", {"x-api-key": "s3cret"}, policy)
    assert carries_access_key({"Authorization": "Bearer s3cret"}, policy) == ("authorization",)
    assert carries_access_key({"x-api-key": "s3cret"}, policy) == ("x-api-key",)
    assert not carries_access_key({"Authorization": "Bearer sk-real"}, policy)
    assert access_allowed("/v1/models", {}, LOCAL)  # no key set: nothing asked


def test_a_listening_address_becomes_the_url_it_answers_at() -> None:
    assert reachable("127.0.0.1", 8765) == "http://127.0.0.1:8765"
    assert reachable("0.0.0.0", 9100) == "http://127.0.0.1:9100"  # a wildcard: on loopback
    assert reachable("", 9100) == "http://127.0.0.1:9100"
    assert reachable("::1", 8765) == "http://[::1]:8765"
    assert reachable("[::1]", 8765) == "http://[::1]:8765"
    assert reachable("recap.lan", 80) == "http://recap.lan:80"
