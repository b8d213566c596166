"""What the user, condensing and imports change of the story's entities, over what the
scenes say. Pure.

The registry (`proxy.core.entities.registry`) is made anew from the scenes' mentions
whenever a scene recap changes, so nothing done to an entity can be written into it.
What is done is kept beside it instead, as changes in the order they were made, each
naming its entity by a name it went by then; `resolve` applies them over the registry
made anew. A change whose entity is gone (its scenes deleted) finds none and waits: it
applies again should a scene name it again.

- `edit`: the user wrote the entity (name, type, aliases, facts); it shows as written,
  whatever later scenes say, until a `release`. Its names join the entity's, so that a
  later scene naming it by a name the user gave adds to the same entity.
- `delete`: the entity shows nowhere (a later scene naming it does not bring it back)
  until a `release`.
- `merge`: two entities are one, under the name of the one merged into.
- `condense`: its facts rewritten shorter (`condense_entity`). It stands while every
  scene fact it rewrote (`covers`) still stands: a scene recapped again or deleted undoes
  it, and the facts it took show whole until condensed again. Facts told since are shown
  after it.
- `import`: an entity an extension kept (ST-Auto-Recap's lorebook entries): its facts
  count as older than the story's first scene.

Old changes stay: the newest that applies wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pydantic import BaseModel, field_validator

from proxy.core.entities import FACT_LONGEST, Entity, Fact, Mention, registry, unique

KINDS = ("edit", "delete", "release", "merge", "condense", "import")


@dataclass(frozen=True, slots=True)
class Change:
    """One change of an entity; `key` is a name it went by when the change was made (a
    merge's: the entity merged away)."""

    kind: str
    key: str
    name: str = ""  # edit and import: its name; merge: the entity it went into
    type: str = ""
    aliases: tuple[str, ...] = ()
    facts: tuple[str, ...] = ()
    covers: tuple[str, ...] = ()  # condense: the scene facts it rewrote
    id: int = 0
    made: float = 0.0


def _links(changes: Sequence[Change]) -> list[tuple[str, ...]]:
    links: list[tuple[str, ...]] = []
    for change in changes:
        if change.kind == "merge" and change.name:
            links.append((change.key, change.name))
        elif change.kind == "edit":
            links.append((change.key, *(n for n in (change.name, *change.aliases) if n)))
    return links


def resolve(
    mentions: Iterable[tuple[int, int, Mention]], changes: Sequence[Change]
) -> list[Entity]:
    """The chat's entities: its scenes' `mentions` (as `registry` takes them) with
    `changes` applied in their order. A deleted entity is in the list, marked."""
    # An entity imported again (the extension's book changed): its newest import.
    newest = {c.key.casefold(): c for c in changes if c.kind == "import"}
    imported = [
        (0, -1, Mention(c.name or c.key, c.type or "other", c.aliases, c.facts))
        for c in newest.values()
    ]
    entities = registry([*imported, *mentions], _links(changes))
    index = {n.casefold(): i for i, e in enumerate(entities) for n in e.names}
    user: dict[int, Change] = {}
    naming: dict[int, str] = {}
    condensing: dict[int, Change] = {}
    for change in changes:
        i = index.get(change.key.casefold())
        if i is None:
            continue
        for name in (change.name, *change.aliases):
            if name:
                index.setdefault(name.casefold(), i)
        if change.kind in ("edit", "delete"):
            user[i] = change
        elif change.kind == "release":
            user.pop(i, None)
        elif change.kind == "merge" and change.name:
            naming[i] = change.name
        elif change.kind == "condense" and _stands(change, entities[i]):
            condensing[i] = change
    known: dict[int, list[str]] = {}
    for key, i in index.items():
        known.setdefault(i, []).append(key)
    return [
        replace(
            _applied(e, naming.get(i), condensing.get(i), user.get(i)), known_as=tuple(known[i])
        )
        for i, e in enumerate(entities)
    ]


def _stands(change: Change, entity: Entity) -> bool:
    told = {f.text.casefold() for f in entity.from_scenes}
    return bool(change.covers) and all(text.casefold() in told for text in change.covers)


def _applied(
    entity: Entity, name: str | None, condense: Change | None, user: Change | None
) -> Entity:
    if name is not None and name.casefold() in {n.casefold() for n in entity.names}:
        entity = replace(entity, name=name, aliases=unique(entity.names, exclude=name))
    if condense is not None:
        covered = {text.casefold() for text in condense.covers}
        rewritten = [f for f in entity.facts if f.text.casefold() in covered]
        newest = rewritten[-1]
        facts = [Fact(t, newest.scene, newest.position, "condensed") for t in condense.facts]
        facts += [f for f in entity.facts if f.text.casefold() not in covered]
        facts.sort(key=lambda f: f.position)  # stable: the condensed ones keep their order
        entity = replace(entity, facts=tuple(facts), condensed=condense.id)
    if user is None:
        return entity
    if user.kind == "delete":
        return replace(entity, deleted=True)
    name = user.name or entity.name
    return replace(
        entity,
        name=name,
        type=user.type or entity.type,
        aliases=unique(user.aliases, exclude=name),
        facts=tuple(Fact(text, 0, -1, "edit") for text in user.facts),
        edited=True,
        condensed=None,
    )


def find(entities: Sequence[Entity], name: str) -> Entity | None:
    """The entity that goes by `name`: its name or an alias, any case, or a name it went
    by before an edit (`resolve`'s entities know them)."""
    key = name.strip().casefold()
    for entity in entities:
        if key in {n.casefold() for n in (*entity.names, *entity.known_as)}:
            return entity
    return None


def edited(
    entity: Entity,
    *,
    name: str | None = None,
    type: str | None = None,
    aliases: Sequence[str] | None = None,
    facts: Sequence[str] | None = None,
) -> Change:
    """The `edit` change that writes `entity` with what is given changed: the whole
    entity as the user will see it (a PATCH gives some fields, a PUT all)."""
    return Change(
        "edit",
        entity.name,
        name=name if name is not None else entity.name,
        type=type if type is not None else entity.type,
        aliases=tuple(aliases) if aliases is not None else entity.aliases,
        facts=tuple(facts) if facts is not None else tuple(f.text for f in entity.facts),
    )


class CondensedFacts(BaseModel):
    """`condense_entity`'s answer: the facts rewritten, trimmed, each once."""

    facts: list[str]

    @field_validator("facts")
    @classmethod
    def _some(cls, value: list[str]) -> list[str]:
        texts = unique(" ".join(t.split()) for t in value if t.strip())
        if not texts:
            raise ValueError("no facts")
        if any(len(t) > FACT_LONGEST for t in texts):
            raise ValueError(f"a fact over {FACT_LONGEST} characters is no fact")
        return list(texts)
