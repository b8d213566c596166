"""Whether an LLM's answer is a real answer, or the prompt coming back. Pure.

A small or base model asked for memory often does not answer: it copies the prompt back
(its instructions, then its example JSON, which then reads as a valid answer), or, forced
into JSON, fills the template's placeholders in as they stand (`{"recap": "<recap>"}`).
Stored, such an answer is worse than no memory: the running recap "covers" messages that
trimming then leaves out of the chat. So an answer becomes memory only when it passes
these checks; a refused one fails its job with the reason, and nothing is left out.

- **Echo**: the answer holds a line of the template's own text (its instructions, not the
  story it was given: a recap may quote the story).
- **Placeholder**: a field holds one of the template's `<...>` placeholders (those in its
  example answers), or is nothing but a `<...>` token.
- **Unrelated**: a recap shares no word with what it recaps (a cheap guard against an
  answer about something else, such as the instructions).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from proxy.core.replies import ReplyError

ECHO_HINT: Final = (
    "the model copies the prompt back instead of answering: is it an instruction-tuned "
    "(chat) model? A bigger model for the memory's calls helps ([memory.llm])"
)
PLACEHOLDER_HINT: Final = (
    "the model filled the prompt's placeholders in as they stand instead of answering "
    "(a model too small for the memory's calls?)"
)
# A line of the template's own text this long, found in an answer, is an echo: shorter
# ones ("Answer with JSON only:") could be said in a real answer.
ECHO_LINE: Final = 40
_TOKEN = re.compile(r"<[^<>\n]{1,80}>")
_WORD = re.compile(r"[^\W\d_]{4,}")
# Words that say nothing of what a text is about: sharing only these is sharing nothing.
_COMMON: Final = frozenset(
    [
        "that",
        "this",
        "with",
        "from",
        "have",
        "were",
        "they",
        "them",
        "their",
        "there",
        "then",
        "than",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "would",
        "could",
        "should",
        "into",
        "onto",
        "over",
        "under",
        "about",
        "after",
        "before",
        "again",
        "also",
        "just",
        "like",
        "only",
        "some",
        "such",
        "very",
        "been",
        "being",
        "does",
        "done",
        "each",
        "more",
        "most",
        "much",
        "other",
        "both",
        "your",
        "yours",
        "here",
        "said",
        "says",
        "back",
        "down",
        "upon",
        "once",
        "even",
        "ever",
        "every",
    ]
)


class NotAnAnswer(ReplyError):
    """An answer that parsed, but is the prompt coming back, not memory."""


def _squeezed(token: str) -> str:
    return "".join(token.lower().split())


def placeholders(literals: Iterable[str]) -> frozenset[str]:
    """The `<...>` placeholders of a template's example answers (the lines of its own text
    that start with `{`), squeezed: lowercase, no spaces."""
    found: set[str] = set()
    for literal in literals:
        for line in literal.splitlines():
            if line.lstrip().startswith("{"):
                found.update(_squeezed(t) for t in _TOKEN.findall(line))
    return frozenset(found)


def echo_lines(literals: Iterable[str]) -> tuple[str, ...]:
    """The template's own lines long enough to tell an echo (its example answers left
    out: a real answer may be one of them)."""
    lines = {
        " ".join(line.split())
        for literal in literals
        for line in literal.splitlines()
        if not line.lstrip().startswith("{")
    }
    return tuple(sorted(line for line in lines if len(line) >= ECHO_LINE))


class Genuine:
    """The checks for one template's answers (built once per template)."""

    def __init__(self, literals: Sequence[str]) -> None:
        self.placeholders = placeholders(literals)
        self.lines = echo_lines(literals)

    def check_text(self, text: str) -> None:
        """Raises `NotAnAnswer` when the whole answer holds a line of the template."""
        flat = " ".join(text.split())
        for line in self.lines:
            if line in flat:
                raise NotAnAnswer(f"{ECHO_HINT} (it holds the prompt's line {line[:60]!r})")

    def check_fields(self, fields: Iterable[str]) -> None:
        """Raises `NotAnAnswer` when a field holds a placeholder of the template, or is
        nothing but a `<...>` token."""
        for value in fields:
            tokens = _TOKEN.findall(value)
            bare = len(tokens) == 1 and value.strip() == tokens[0]
            hits = [t for t in tokens if _squeezed(t) in self.placeholders]
            if hits or bare:
                raise NotAnAnswer(f"{PLACEHOLDER_HINT} (it says {(hits or tokens)[0]!r})")


# Scripts written without spaces between words (Chinese, Japanese, Korean's Hangul is
# spaced but its words inflect): their "words" are pairs of characters.
_UNSPACED = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


def content_words(text: str) -> set[str]:
    """The words of substance of a text; for a script without spaces between words,
    each pair of neighbouring characters."""
    words = {w for w in _WORD.findall(text.lower()) if w not in _COMMON}
    runs = _UNSPACED.findall(text)
    if not runs:
        return words
    pairs = {run[i : i + 2] for run in runs for i in range(len(run) - 1)}
    return {w for w in words if not _UNSPACED.search(w)} | pairs


def related(recap: str, source: str) -> bool:
    """Whether `recap` is about `source`: it shares a word of substance with it (a recap
    too short to tell passes)."""
    words = content_words(recap)
    return len(words) < 3 or bool(words & content_words(source))


def check_related(recap: str, source: str, what: str) -> None:
    """Raises `NotAnAnswer` when `recap` is not about `source` (`related`)."""
    if not related(recap, source):
        raise NotAnAnswer(f"the {what} shares no word with what it recaps: not a recap of it")
