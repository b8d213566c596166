"""What a cassette keeps of an exchange: everything but the secrets."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from proxy.core.headers import PIECE, redact_secrets
from proxy.upstream.cassette import (
    Exchange,
    Recorder,
    configured_keys,
    decode_body,
    decode_chunk,
    load_cassette,
)
from tests.conftest import make_settings


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


def test_the_access_key_and_the_configs_keys_are_redacted() -> None:
    """`X-Recap-Key` is a secret header; keys the config holds are redacted wherever they
    stand, even in an exchange that never carried them."""
    exchange = Exchange(
        method="POST",
        path="/v1/chat/completions",
        query="",
        headers=[("X-Recap-Key", "proxy-door-key-1234")],
        body=b'{"note": "door proxy-door-key-1234, upstream configured-upstream-55"}',
        chunks=[(0.0, b"data: configured-upstream-55\n\n")],
    )
    cassette = exchange.to_cassette(frozenset({"configured-upstream-55"}))
    written = json.dumps(cassette)
    assert "proxy-door-key-1234" not in written and "configured-upstream-55" not in written
    assert cassette["request"]["headers"] == [["X-Recap-Key", "<redacted>"]]


def test_the_configs_keys_are_every_key_it_holds() -> None:
    settings = make_settings(
        **{
            "server.access_key": "door-key-123",
            "upstream.api_key": "up-key-456",
            "memory.llm.api_key": "llm-key-789",
            "upstream.routes": [{"prefix": "/c", "base_url": "http://x", "api_key": "route-1"}],
        }
    )
    assert configured_keys(settings) == {"door-key-123", "up-key-456", "llm-key-789", "route-1"}


def test_a_body_over_the_limit_is_its_size_and_hash() -> None:
    big = b'{"prompt": "' + b"x" * 2000 + b'"}'
    exchange = Exchange(
        method="POST", path="/v1/completions", query="", headers=[], body=big,
        upstream_body=big, limit=1000,
    )  # fmt: skip
    for i in range(30):
        exchange.received(i / 10, b"y" * 100)
    cassette = exchange.to_cassette()
    digest = hashlib.sha256(big).hexdigest()
    for part in ("request", "upstream_request"):
        assert cassette[part]["body_size"] == len(big)
        assert cassette[part]["body_sha256"] == digest
        assert "body" not in cassette[part]
        with pytest.raises(ValueError, match="not recorded"):
            decode_body(cassette[part])
    response = cassette["response"]
    assert response["chunks"] == [] and response["chunks_size"] == 3000
    assert response["chunks_sha256"] == hashlib.sha256(b"y" * 3000).hexdigest()
    assert exchange.chunks == []  # not held in memory either


def test_a_long_text_is_redacted_in_pieces_with_no_key_missed() -> None:
    """Pieces are cut at quotes and line breaks, where no key stands: a key right at a
    piece's edge is redacted as one anywhere else."""
    filler = "word " * 13_100  # 65,500 characters: the first key straddles the cut
    text = filler + "sk-abcdefghijklmnopqrstuvwxyz" + ' "' + filler + "configured-key-000\n"
    text = text * 4
    redacted = redact_secrets(text, {"configured-key-000"})
    assert "sk-abc" not in redacted and "configured-key-000" not in redacted
    assert redacted.count("<redacted>") == 8
    assert len(text) > 4 * PIECE


async def test_recording_a_huge_body_writes_its_hash(tmp_path: Path) -> None:
    recorder = Recorder(tmp_path, max_body=1024, secrets=lambda: frozenset({"zzz-config-key"}))
    exchange = Exchange(
        method="POST", path="/v1/chat/completions", query="", headers=[],
        body=b"a" * 5000, seq=recorder.next_seq(), limit=recorder.max_body,
    )  # fmt: skip
    exchange.received(0.1, b"answer zzz-config-key")
    written = recorder.write(exchange)
    cassette = load_cassette(written)
    assert cassette["request"]["body_size"] == 5000
    assert decode_chunk(cassette["response"]["chunks"][0]) == b"answer <redacted>"
    assert written.stat().st_size < 4096
