"""The story's entities: its people, places, items and groups, and what is known of them.
Pure.

A running recap must stay short, so condensing it drops detail; recall brings back whole
scenes by their words. Entities keep what the story established about each one, gathered
from every scene it appears in: the scene recap's answer lists them (`entities_of`), and
the registry is those lists merged by name or alias, case-insensitively (`registry`), each
fact tied to the scene it came from, so that a scene recapped again, edited or deleted
takes its facts along (the store keeps them per scene recap version). A request gets the
cards of the entities its newest messages mention (`Mentions`, `cards_within`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import ahocorasick

TYPES = ("character", "place", "item", "group", "other")
HEADING = "Who and what the story names now, with what is known of them:"
NAME_LONGEST = 80  # characters of a name or alias; a longer one is no name
FACT_LONGEST = 400  # characters of a fact; a longer one is a recap, not a fact
_WORD = re.compile(r"\w", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Mention:
    """An entity as one scene recap's answer gives it."""

    name: str
    type: str
    aliases: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()


def entities_of(value: object) -> list[Mention]:
    """The entities a scene recap's answer lists (its `entities` value). Lenient: an entry
    that is not an object, or has no name, is left out, and the recap stands without it; an
    unknown type is `other`; names, aliases and facts are trimmed, blank and overlong ones
    dropped, repeats kept once. Two entries of one name are one."""
    if not isinstance(value, list):
        return []
    found: dict[str, Mention] = {}
    for item in value:
        if not isinstance(item, Mapping):
            continue
        name = _text(item.get("name"), NAME_LONGEST)
        if name is None:
            continue
        kind = item.get("type")
        kind = kind.strip().lower() if isinstance(kind, str) else "other"
        aliases = _texts(item.get("aliases"), NAME_LONGEST, exclude=name)
        facts = _texts(item.get("facts"), FACT_LONGEST)
        key = name.casefold()
        if key in found:  # the model listed it twice: one entity
            was = found[key]
            aliases = unique((*was.aliases, *aliases), exclude=name)
            facts = unique((*was.facts, *facts))
            kind, name = was.type, was.name
        found[key] = Mention(name, kind if kind in TYPES else "other", aliases, facts)
    return list(found.values())


def _text(value: object, longest: int) -> str | None:
    if not isinstance(value, str):
        return None
    text = " ".join(value.split())
    return text if text and len(text) <= longest else None


def _texts(value: object, longest: int, exclude: str = "") -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        return ()
    return unique((t for v in value if (t := _text(v, longest)) is not None), exclude=exclude)


def unique(texts: Iterable[str], exclude: str = "") -> tuple[str, ...]:
    seen = {exclude.casefold()} if exclude else set()
    kept: list[str] = []
    for text in texts:
        if text.casefold() not in seen:
            seen.add(text.casefold())
            kept.append(text)
    return tuple(kept)


@dataclass(frozen=True, slots=True)
class Fact:
    """What a scene established about an entity: its text, and the scene (its break's
    message uid) and the position the scene ends at, which orders the facts in story
    order (a later one overrides an earlier: alive, then dead)."""

    text: str
    scene: int
    position: int
    # Where it comes from: a scene's recap, condensing (`condense_entity`), the user's
    # edit, or an extension's lorebook entry (`proxy.core.entity_changes`).
    source: str = "scene"


@dataclass(frozen=True, slots=True)
class Entity:
    """An entity of the registry: its name (as its first mention wrote it), its type, the
    other names it goes by, and its facts in story order."""

    name: str
    type: str
    aliases: tuple[str, ...]
    facts: tuple[Fact, ...]
    # What changes made of it (`proxy.core.entity_changes`): written by the user (kept as
    # written until released), deleted, or its facts condensed (by that change's id).
    edited: bool = False
    deleted: bool = False
    condensed: int | None = None
    # The facts its scenes (and imports) gave: `facts` unless edited or condensed.
    from_scenes: tuple[Fact, ...] = ()
    # Every name it went by, shown or not (a name an edit took away still finds it).
    known_as: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


def registry(
    mentions: Iterable[tuple[int, int, Mention]], links: Iterable[Sequence[str]] = ()
) -> list[Entity]:
    """The entities of a chat from its scenes' mentions, each `(scene, position, mention)`:
    mentions that share a name or an alias (case-insensitively, transitively: Aldric, then
    Brother Aldric with the alias Aldric) are one entity, as are the names of each of
    `links` (a user's merge). Its name is its earliest mention's, its type the newest
    mention's that says more than `other`; in story order, the entities by their first
    scene. A mention at a negative position is no scene's: an extension's entry, imported
    (`proxy.core.entity_changes`), older than the story's first scene."""
    ordered = sorted(mentions, key=lambda m: (m[1], m[0]))
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for _, _, mention in ordered:
        keys = [n.casefold() for n in (mention.name, *mention.aliases)]
        first = root(keys[0])
        for key in keys[1:]:
            other = root(key)
            if other != first:
                parent[other] = first
    for names in links:
        keys = [root(n.casefold()) for n in names]
        for other in keys[1:]:
            if root(other) != root(keys[0]):
                parent[root(other)] = root(keys[0])
    groups: dict[str, list[tuple[int, int, Mention]]] = {}
    for scene, position, mention in ordered:
        groups.setdefault(root(mention.name.casefold()), []).append((scene, position, mention))
    entities: list[Entity] = []
    for group in groups.values():
        name = group[0][2].name
        typed = [m.type for _, _, m in group if m.type != "other"]
        aliases = unique((n for _, _, m in group for n in (m.name, *m.aliases)), exclude=name)
        facts: list[Fact] = []
        said: set[str] = set()
        for scene, position, mention in group:
            for text in mention.facts:
                if text.casefold() not in said:  # told again by a later scene: once
                    said.add(text.casefold())
                    source = "scene" if position >= 0 else "imported"
                    facts.append(Fact(text, scene, position, source))
        told = tuple(facts)
        kind = typed[-1] if typed else "other"
        entities.append(Entity(name, kind, aliases, told, from_scenes=told))
    return entities


def card(entity: Entity, facts: Sequence[Fact] | None = None) -> str:
    """An entity as the memory holds it: one line, its name, type and other names, then
    its facts (`facts`: these of them), oldest first."""
    also = f"; also {', '.join(entity.aliases)}" if entity.aliases else ""
    told = "; ".join(f.text.rstrip(".") for f in (entity.facts if facts is None else facts))
    return f"- {entity.name} ({entity.type}{also}): {told}." if told else ""


class Mentions:
    """Which entities a text mentions: any of their names, as a whole word, any case. One
    Aho-Corasick pass over the text (a C automaton, built once per registry: a thousand
    names against a long request would otherwise cost a thousand searches)."""

    def __init__(self, entities: Sequence[Entity]) -> None:
        self._automaton: ahocorasick.Automaton | None = None
        by_name: dict[str, list[int]] = {}
        for i, entity in enumerate(entities):
            for name in entity.names:
                by_name.setdefault(name.casefold(), []).append(i)
        if by_name:
            automaton = ahocorasick.Automaton()
            for key, which in by_name.items():
                automaton.add_word(key, (len(key), tuple(which)))
            automaton.make_automaton()
            self._automaton = automaton

    def newest_first(self, texts: Sequence[str]) -> list[int]:
        """The entities `texts` mention (oldest text first), by index: those of the newest
        text first, then the ones only older texts mention, each once."""
        order: list[int] = []
        seen: set[int] = set()
        for text in reversed(texts):
            # Within a text, the one mentioned last first.
            for entity, _ in sorted(self._found(text), key=lambda hit: -hit[1]):
                if entity not in seen:
                    seen.add(entity)
                    order.append(entity)
        return order

    def _found(self, text: str) -> list[tuple[int, int]]:
        """(entity, where its latest mention ends) for each entity `text` mentions."""
        if self._automaton is None or not text:
            return []
        lowered = text.casefold()
        found: dict[int, int] = {}
        for end, (length, which) in self._automaton.iter(lowered):
            start = end - length + 1
            if _word_at(lowered, start - 1) or _word_at(lowered, end + 1):
                continue  # inside a longer word: "Al" in "Aldric"
            for i in which:
                found[i] = max(found.get(i, -1), end)
        return list(found.items())


def _word_at(text: str, at: int) -> bool:
    return 0 <= at < len(text) and _WORD.match(text[at]) is not None


def named_in(mentions: Sequence[Mention], text: str) -> list[Mention]:
    """The mentions whose name or an alias `text` names, as `Mentions` finds them (a whole
    word, any case), in their order: a scene recap keeps only the entities its scene names."""
    found = set(
        Mentions([Entity(m.name, m.type, m.aliases, ()) for m in mentions]).newest_first([text])
    )
    return [mention for i, mention in enumerate(mentions) if i in found]


def capped(entity: Entity, budget: int, count: Callable[[str], int]) -> tuple[str, int]:
    """The entity's card and its tokens: whole, or, over `budget` alone, with its newest
    facts that fit ("" when none does). Made when the registry changes (off the request
    path), so that a request only adds up what it picks."""
    line = card(entity)
    cost = count(line) if line else 0
    if cost <= budget:
        return line, cost
    for keep in range(len(entity.facts) - 1, 0, -1):
        line = card(entity, entity.facts[-keep:])
        cost = count(line)
        if cost <= budget:
            return line, cost
    return "", 0


def cards_within(
    cards: Sequence[tuple[str, int]], order: Sequence[int], budget: int
) -> tuple[str, int]:
    """`{{entities}}`: the cards (each `(line, tokens)`) of the entities in `order`, most
    recently mentioned first, as many whole ones as `budget` holds, in that order, under
    a one-line heading (the memory's frame reserve holds it); and their tokens. One that
    does not fit is passed over for the next that does."""
    lines: list[str] = []
    spent = 0
    for i in order:
        line, cost = cards[i]
        if line and spent + cost <= budget:
            lines.append(line)
            spent += cost
    return (HEADING + "\n" + "\n".join(lines), spent) if lines else ("", 0)
