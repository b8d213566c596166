"""Which headers cross the proxy, and how secrets are kept out of what is shown or kept."""

from __future__ import annotations

from proxy.core.headers import (
    REDACTED,
    header_secrets,
    redact_json,
    redact_secrets,
    request_headers,
    response_headers,
    safe_url,
)


def test_what_the_client_tells_the_proxy_stays_here() -> None:
    sent = request_headers(
        [
            ("Authorization", "Bearer sk-client"),
            ("Cookie", "session=1"),
            ("Origin", "http://localhost:8000"),
            ("Referer", "http://localhost:8000/"),
            ("X-Recap-Key", "s3cret"),
            ("Content-Encoding", "gzip"),  # the server decoded the body already
            ("Content-Type", "application/json"),
            ("Host", "127.0.0.1:8765"),
        ],
        api_key=None,
    )
    assert sent == [("Authorization", "Bearer sk-client"), ("Content-Type", "application/json")]


def test_cors_is_the_proxys_own() -> None:
    relayed = response_headers(
        [("Access-Control-Allow-Origin", "*"), ("access-control-allow-credentials", "true"),
         ("Content-Type", "text/event-stream")]
    )  # fmt: skip
    assert relayed == [("Content-Type", "text/event-stream")]


def test_urls_are_shown_without_credentials() -> None:
    assert safe_url("https://me:pw@api.example/v1?key=abc&x=1") == (
        "https://api.example/v1?key=REDACTED&x=1"
    )
    assert safe_url("http://127.0.0.1:5001/v1") == "http://127.0.0.1:5001/v1"


def test_known_and_key_like_secrets_are_redacted() -> None:
    text = 'bad key "sk-abcdefghijklmnop1234" (Bearer abc.def-ghi_jkl) for my-own-key-123'
    redacted = redact_secrets(text, known={"my-own-key-123"})
    assert "sk-abcdefghijklmnop" not in redacted and "abc.def-ghi_jkl" not in redacted
    assert "my-own-key-123" not in redacted and redacted.count(REDACTED) == 3
    assert redact_secrets("the risk-management-of-the-kingdom plan") == (
        "the risk-management-of-the-kingdom plan"
    )
    assert header_secrets([("Authorization", "Bearer sk-1"), ("X-Api-Key", "k2")]) == {
        "sk-1",
        "k2",
    }
    assert redact_json(
        {"api_key": "x", "note": "echo my-own-key-123"}, frozenset({"my-own-key-123"})
    ) == {
        "api_key": REDACTED,
        "note": f"echo {REDACTED}",
    }


def test_the_configured_key_goes_where_the_clients_api_takes_it() -> None:
    openai = request_headers([("Authorization", "Bearer sk-client")], api_key="sk-mine")
    assert openai == [("Authorization", "Bearer sk-mine")]
    claude = request_headers(
        [("anthropic-version", "2023-06-01"), ("x-api-key", "proxy-password")], api_key="sk-ant"
    )
    assert claude == [("anthropic-version", "2023-06-01"), ("x-api-key", "sk-ant")]
    # The access key in x-api-key was taken off already: anthropic-version still tells.
    stripped = request_headers([("anthropic-version", "2023-06-01")], api_key="sk-ant")
    assert stripped[-1] == ("x-api-key", "sk-ant")
    bare = request_headers([], api_key="sk-mine")
    assert bare == [("Authorization", "Bearer sk-mine")]


def test_headers_a_connection_header_names_stay_here_wherever_they_stand() -> None:
    sent = request_headers(
        [
            ("X-Before", "1"),
            ("Content-Type", "application/json"),
            ("Connection", "keep-alive, X-BEFORE,x-after , close"),
            ("X-After", "2"),
            ("X-Kept", "3"),
        ],
        api_key=None,
    )
    assert sent == [("Content-Type", "application/json"), ("X-Kept", "3")]
    relayed = response_headers(
        [("X-Hop", "1"), ("Content-Length", "9"), ("connection", "X-Hop"), ("Date", "now")]
    )
    assert relayed == [("Date", "now")]
    # `keep-alive` and `close` name no header of their own: nothing else goes.
    assert response_headers([("Connection", "close"), ("Date", "now")]) == [("Date", "now")]
