"""What a user can do to a chat's entities: see them, write one as they want it kept,
delete one, merge two, and release one back to what its scenes say (store thread).

Nothing is rewritten: each is a change kept beside the scenes' mentions
(`proxy.core.entity_changes`), and the chat is planned again, so that its memory view
(and the cards a request gets) follows at once. An entity is named by its name or any of
its aliases, in any case.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar

from proxy.core.entities import FACT_LONGEST, NAME_LONGEST, TYPES, Entity, unique
from proxy.core.entity_changes import Change, edited, find
from proxy.core.jsontypes import JSONObject
from proxy.errors import Conflict, NotFound, RequestError
from proxy.memory.views import readout
from proxy.store import Database, Store
from proxy.store.records import ChatRecord

T = TypeVar("T")


class Clock(Protocol):
    def clock(self) -> float: ...


class Owner(Protocol):
    """The memory actions, as these use them (they own this)."""

    @property
    def store(self) -> Store: ...

    @property
    def engine(self) -> Clock: ...

    def chat_of(self, db: Database, chat_id: str) -> ChatRecord: ...

    async def then_plan(
        self, chat_id: str, work: Callable[[Database], T], since: int | None = None
    ) -> T: ...


class EntityEdits:
    def __init__(self, actions: Owner) -> None:
        self.actions = actions

    async def listed(self, chat_id: str) -> list[JSONObject]:
        def work(db: Database) -> list[JSONObject]:
            self.actions.chat_of(db, chat_id)
            return readout.entities(db, chat_id)

        return await self.actions.store.call(work)

    async def one(self, chat_id: str, name: str) -> JSONObject:
        key = name.strip().casefold()
        for item in await self.listed(chat_id):
            names = [str(item["name"]), *_strings(item["aliases"]), *_strings(item["known_as"])]
            if key in {n.casefold() for n in names}:
                return item
        raise NotFound(f"chat {chat_id!r} has no entity {name!r}")

    def _entity(self, db: Database, chat_id: str, name: str) -> Entity:
        self.actions.chat_of(db, chat_id)
        entity = find(db.entities.registry(chat_id), name)
        if entity is None:
            raise NotFound(f"chat {chat_id!r} has no entity {name!r}")
        return entity

    async def _change(self, chat_id: str, change: Change, shown: str) -> JSONObject:
        """Keep `change` of the entity it names, plan the chat again, and answer the entity
        as it is now (by the name `shown`)."""

        def work(db: Database) -> None:
            entity = self._entity(db, chat_id, change.key)
            # Kept under its name as shown (what the user typed may be an alias an edit
            # later takes away).
            kept = Change(change.kind, entity.name)
            if change.kind == "merge":
                into = self._entity(db, chat_id, change.name)
                if into.name == entity.name:
                    raise Conflict(f"{change.key!r} and {change.name!r} are one entity already")
                kept = Change("merge", entity.name, name=into.name)
            now = self.actions.engine.clock()
            db.entities.change(chat_id, kept, now)
            if kept.kind == "merge" and (entity.edited or into.edited):
                # What the user wrote of either stays written: the one entity is theirs,
                # with both's names and facts.
                facts = unique(f.text for f in (*into.facts, *entity.facts))
                names = unique((*into.aliases, *entity.names), exclude=into.name)
                db.entities.change(chat_id, edited(into, aliases=names, facts=facts), now)

        await self.actions.then_plan(chat_id, work)
        return await self.one(chat_id, shown)

    async def edit(
        self,
        chat_id: str,
        name: str,
        *,
        new_name: str | None = None,
        type: str | None = None,
        aliases: Sequence[str] | None = None,
        facts: Sequence[str] | None = None,
    ) -> JSONObject:
        """Write the entity as the user wants it kept (what is not given stays as shown):
        kept so until released, whatever later scenes say of it."""
        new_name, type, aliases, facts = checked(new_name, type, aliases, facts)

        def work(db: Database) -> str:
            entity = self._entity(db, chat_id, name)
            change = edited(entity, name=new_name, type=type, aliases=aliases, facts=facts)
            db.entities.change(chat_id, change, self.actions.engine.clock())
            return change.name

        shown = await self.actions.then_plan(chat_id, work)
        return await self.one(chat_id, shown)

    async def delete(self, chat_id: str, name: str) -> JSONObject:
        return await self._change(chat_id, Change("delete", name), name)

    async def release(self, chat_id: str, name: str) -> JSONObject:
        """The entity as its scenes say again: the user's edit or deletion undone."""
        return await self._change(chat_id, Change("release", name), name)

    async def merge(self, chat_id: str, name: str, into: str) -> JSONObject:
        """`name` and `into` are one entity from now on, under `into`'s name."""
        return await self._change(chat_id, Change("merge", name, name=into), into)


def _strings(value: object) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


Fields = tuple[str | None, str | None, tuple[str, ...] | None, tuple[str, ...] | None]


def checked(
    name: str | None,
    kind: str | None,
    aliases: Sequence[str] | None,
    facts: Sequence[str] | None,
) -> Fields:
    """An edit's fields (None: not given), trimmed, or a `RequestError` that says what is
    wrong with them."""
    if name is not None:
        name = _name(name, "name")
    if kind is not None:
        kind = kind.strip().lower()
        if kind not in TYPES:
            raise RequestError(f"`type` must be one of {', '.join(TYPES)}")
    names = None if aliases is None else tuple(_name(a, "aliases") for a in aliases)
    texts = None if facts is None else tuple(" ".join(f.split()) for f in facts)
    if texts is not None and any(not t or len(t) > FACT_LONGEST for t in texts):
        raise RequestError(f"each of `facts` must be 1 to {FACT_LONGEST} characters")
    return name, kind, names, texts


def _name(text: str, what: str) -> str:
    text = " ".join(text.split())
    if not text or len(text) > NAME_LONGEST:
        raise RequestError(f"each name in `{what}` must be 1 to {NAME_LONGEST} characters")
    return text
