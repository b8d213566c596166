"""What a cassette keeps of an exchange: everything but the secrets."""

from __future__ import annotations

import json

from proxy.cassette import Exchange, decode_chunk


def test_keys_echoed_anywhere_are_redacted() -> None:
    exchange = Exchange(
        method="POST",
        path="/v1/chat/completions",
        query="key=sk-query-secret-12345",
        headers=[("Authorization", "Bearer my-client-key-777")],
        body=b'{"messages": [{"role": "user", "content": "my key is my-client-key-777"}]}',
        upstream_headers=[("Authorization", "Bearer my-client-key-777")],
        upstream_body=b"plain my-client-key-777",
        status=401,
        response_headers=[("Content-Type", "application/json")],
        chunks=[(0.0, b'{"error": "invalid key my-client-key-777 / sk-abcdefghijklmnop99"}')],
        error="upstream said my-client-key-777",
    )
    written = json.dumps(exchange.to_cassette())
    assert "my-client-key-777" not in written
    assert "sk-abcdefghijklmnop99" not in written and "sk-query-secret" not in written
    chunk = exchange.to_cassette()["response"]["chunks"][0]
    assert decode_chunk(chunk).startswith(b'{"error": "invalid key <redacted>')
