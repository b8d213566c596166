"""Recalling older scenes: the search terms of what is happening now, the choice of the
scene recaps that fit the budget, and their text (`{{relevant_scenes}}`). Pure.

The ranking itself is SQLite's FTS5 with bm25 over the scene recaps (see
`proxy.store.search`); this module decides what to ask it and what to keep of its
answer. What the user just wrote is asked first, on its own, so that a question about an
old scene is not drowned by the words of the messages before it; those messages are
asked second (their rarest words), for what is left of the budget. Only words that can
rank a scene are asked: not the characters' names or the commonest English words, not a
word no scene recap holds, and not one in more than a fifth of the chat's scenes. That
keeps each query to a few short lists, well under a millisecond on the chat path.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

MAX_TERMS = 12
COMMON_SHARE = 0.2  # a word in more than this share of a chat's scenes ranks nothing
COMMON_FROM = 10  # scenes a chat needs before its own common words are worked out
HEADING = "Earlier scenes that bear on what is happening now, in story order:"

WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")

# Function words and role-play filler: in nearly every scene, they would rank every scene
# alike. A fixed list because the query must be built in microseconds on the chat path.
STOPWORDS = frozenset(
    """
    a about above after again against ago all almost along already also although always am
    among an and another any anyone anything are around as ask asked at away back be
    because been before being below beside best better between both but by came can
    cannot could did didn do does doesn doing don done down during each either else even
    ever every few for from get gets getting give given go goes going gone got had has
    have having he her here hers herself him himself his how however i if in into is isn
    it its itself just know knew let like likely look looked looks made make many may
    me might mine more most much must my myself need never new next no nor not nothing
    now of off often oh ok okay on once one only onto or other our ours out over own
    perhaps quite rather really right said same say says see seem seemed seems she
    should since so some something still such sure take tell than that the their theirs
    them themselves then there these they thing things think this those though through
    thus to too took toward towards under until up upon us very was wasn way we well
    went were what when where whether which while who whom whose why will with within
    without won would yeah yes yet you your yours yourself
    """.split()  # noqa: SIM905 (a word list reads better as text)
)


def words_of(text: str) -> frozenset[str]:
    """The words of a text, normalised as search terms are."""
    return frozenset(word.replace("'", "") for word in WORD.findall(text.lower()))


@dataclass(frozen=True, slots=True, eq=False)
class Vocabulary:
    """How many of a chat's scenes each word is in: a word in none cannot match, and a
    word in many ranks nothing (both are left out of a query)."""

    counts: Mapping[str, int] = field(default_factory=dict)
    scenes: int = 0

    @classmethod
    def of(cls, scenes: Iterable[frozenset[str]]) -> Vocabulary:
        counts: Counter[str] = Counter()
        total = 0
        for words in scenes:
            counts.update(words)
            total += 1
        return cls(dict(counts), total)

    def weight(self, word: str) -> int | None:
        """How many scenes hold `word` (or its plain singular), or None when it is in
        none or in too many to rank anything."""
        found = self.counts.get(word) or self.counts.get(word.removesuffix("s"))
        if not found:
            return None
        if self.scenes >= COMMON_FROM and found > self.scenes * COMMON_SHARE:
            return None
        return found


def search_terms(
    texts: Sequence[str],
    vocabulary: Vocabulary,
    ignore: Iterable[str] = (),
    *,
    limit: int = MAX_TERMS,
    rarest: bool = False,
) -> list[str]:
    """The distinct words of `texts` (newest last) that can rank a scene: the newest
    text's first, or the rarest first (`rarest`); at most `limit`. `ignore` holds names."""
    return list(_terms(tuple(texts), vocabulary, tuple(ignore), limit, rarest))


@lru_cache(maxsize=256)
def _terms(
    texts: tuple[str, ...],
    vocabulary: Vocabulary,
    ignore: tuple[str, ...],
    limit: int,
    rarest: bool,
) -> tuple[str, ...]:
    # Memoised: a regenerated reply, a swipe or a continue asks with the same texts.
    skip = _skipped(ignore)
    found: dict[str, int] = {}
    seen: set[str] = set()  # singulars: "keys" and "key" are asked once
    for text in reversed(texts):
        for word, single, weight in _weighted(text, vocabulary):
            if word in skip or single in seen:
                continue
            seen.add(single)
            if weight is not None:
                found[word] = weight
    terms = sorted(found, key=found.__getitem__) if rarest else list(found)
    return tuple(terms[:limit])


@lru_cache(maxsize=512)
def _weighted(text: str, vocabulary: Vocabulary) -> tuple[tuple[str, str, int | None], ...]:
    """The distinct words of a text that could be terms, in order, with their plain
    singulars and their weight in the chat's scenes. Memoised per text and vocabulary (a
    vocabulary is replaced, never changed, when the chat's scenes change): consecutive
    requests of a chat carry mostly the same messages."""
    found: dict[str, tuple[str, str, int | None]] = {}
    for word in WORD.findall(text.lower()):
        word = word.replace("'", "")
        if word not in found and (len(word) >= 3 or word.isdigit()):
            found[word] = (word, word.removesuffix("s"), vocabulary.weight(word))
    return tuple(found.values())


@lru_cache(maxsize=256)
def _skipped(names: tuple[str, ...]) -> frozenset[str]:
    """Stop words and the words of these names (a chat's names: the same on every request)."""
    return STOPWORDS | {word.lower() for name in names for word in WORD.findall(name)}


def match_query(terms: Sequence[str]) -> str:
    """An FTS5 query matching any of the terms (each quoted: never FTS5 syntax)."""
    return " OR ".join(f'"{term}"' for term in terms)


@dataclass(frozen=True, slots=True)
class SceneCard:
    """A finished scene as recall offers it."""

    uid: int  # the scene's break (its last message)
    last: int  # the position of that message
    name: str
    recap: str
    tokens: int  # of its entry in `{{relevant_scenes}}`, separator included
    words: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def entry(self) -> str:
        return scene_entry(self.name, self.recap)


def scene_entry(name: str, recap: str) -> str:
    return f"[{name}] {recap}" if name else recap


def pick_scenes(
    ranked: Sequence[int],
    cards: Mapping[int, SceneCard],
    before: int | None,
    budget: int,
) -> list[SceneCard]:
    """The best-ranked scenes that fit in `budget` tokens (one that does not fit is passed
    over for a smaller one after it), never a scene ending at or after `before` (still in
    the prompt); in story order."""
    chosen: list[SceneCard] = []
    spent = 0
    for uid in ranked:
        card = cards.get(uid)
        if card is None or (before is not None and card.last >= before):
            continue
        if spent + card.tokens > budget:
            continue
        spent += card.tokens
        chosen.append(card)
    chosen.sort(key=lambda c: c.last)
    return chosen


def render_scenes(chosen: Sequence[SceneCard]) -> str:
    """`{{relevant_scenes}}`: the chosen scenes under a one-line heading."""
    if not chosen:
        return ""
    return HEADING + "\n\n" + "\n\n".join(card.entry for card in chosen)
