"""`/recap/api/...`: the chats as the proxy knows them, identification, lore snapshots.

Handlers raise from the error tree (`proxy.errors`); `proxy.web.errors` answers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial

from aiohttp import web

from adapters import Formats
from proxy.chat.injection import Injector
from proxy.chat.providers import CHAT_ID_HEADER, identify_parsed
from proxy.core.jsontypes import JSONObject
from proxy.core.models import Identification
from proxy.errors import NotFound, Unavailable
from proxy.library.chats import ChatLibrary
from proxy.memory.calls.jobs import JobQueue
from proxy.memory.edits.actions import MemoryActions
from proxy.memory.engine import MemoryEngine
from proxy.observe.events import EventBus
from proxy.observe.vitals import Vitals
from proxy.runtime.runtime import Runtime
from proxy.store import Database
from proxy.store.overview import chat_summaries, idle
from proxy.store.records import ChatRecord, MessageRecord
from proxy.web.params import path_number, query_number

SHORT_TEXT = 200


def chat_summary(record: ChatRecord) -> JSONObject:
    return {
        "id": record.id,
        "user": record.user,
        "kind": record.kind,
        "name": record.display_name,
        # Whose chat it is: the character's folder (its card's name) or the group's id.
        "owner": record.group_id if record.kind == "group" else record.character,
        "file": record.file,
        "messages": record.messages,
        "updated": record.updated,
    }


NO_ENGINE = (
    "the memory engine is not running (no SillyTavern data folder, or the server runs "
    "with a fixed memory)"
)


@dataclass(frozen=True, slots=True)
class Parts:
    """What the API's handlers use, handed to each at its route (`partial(handler,
    parts)`). The memory's parts are None without a data folder or a usable store."""

    vitals: Vitals
    formats: Formats
    injector: Injector
    events: EventBus
    markers: tuple[str, ...]
    library: ChatLibrary | None = None
    engine: MemoryEngine | None = None
    actions: MemoryActions | None = None

    @classmethod
    def of(cls, runtime: Runtime) -> Parts:
        return cls(
            runtime.vitals,
            runtime.formats,
            runtime.injector,
            runtime.events,
            tuple(runtime.settings.injection.history_start_markers),
            runtime.library,
            runtime.engine,
            runtime.actions,
        )

    def chats(self) -> ChatLibrary:
        if self.library is None:
            raise self.unavailable(
                "no SillyTavern data folder: set sillytavern.data_dir or start with --st-data",
                "no_data_folder",
            )
        return self.library

    def memory(self) -> MemoryActions:
        if self.actions is None:
            raise self.unavailable(NO_ENGINE, "no_memory_engine")
        return self.actions

    def queue(self) -> JobQueue:
        if self.engine is None:
            raise self.unavailable(NO_ENGINE, "no_memory_engine")
        return self.engine.queue

    def unavailable(self, reason: str, code: str) -> Unavailable:
        """The memory's API without its parts: why (a store that could not be used comes
        first: the parts were left out for it, whatever the settings say)."""
        problem = self.vitals.store_problem
        if problem is not None:
            return Unavailable(
                f"no memory: the store is unusable ({problem}); `recap-proxy doctor` says "
                "how to mend it",
                code="store_unusable",
            )
        return Unavailable(reason, code=code)


async def list_chats(parts: Parts, request: web.Request) -> web.Response:
    """Every chat, with its memory at a glance (`enabled`: its own on/off, null for the
    default; `on`: what that comes to, null without memory; `memory`: scenes, running
    version, queue; `usage`: the proxy's calls)."""
    engine = parts.engine

    def work(db: Database) -> list[JSONObject]:
        memory = chat_summaries(db.db)
        usage = db.usage.totals(time.time())
        return [
            {
                **chat_summary(r),
                "enabled": r.enabled,
                "on": engine.memory_on(r.id, r.enabled) if engine is not None else None,
                "memory": memory.get(r.id) or idle(),
                "usage": {k: dict(v) for k, v in usage.get(r.id, {}).items()},
            }
            for r in db.chats()
        ]

    return web.json_response(await parts.chats().store.call(work))


async def _chat_and_messages(
    parts: Parts, request: web.Request
) -> tuple[ChatRecord, list[MessageRecord]]:
    store = parts.chats().store
    chat_id = request.match_info["chat_id"]
    record = await store.chat(chat_id)
    if record is None or record.deleted:
        raise NotFound(f"no chat {chat_id!r}")
    return record, await store.messages(chat_id)


async def chat_messages(parts: Parts, request: web.Request) -> web.Response:
    """`GET /recap/api/chats/{id}/messages`: every message of the chat, hidden ones too
    (`hidden`), whole (the dashboard's chat view)."""
    _, messages = await _chat_and_messages(parts, request)
    return web.json_response(
        [
            {
                "index": m.position,
                "role": _role(m.message.is_user, m.message.narrator),
                "name": m.message.name,
                "text": m.message.mes,
                "hidden": m.message.is_system,
                "swipe": m.message.swipe_id or 0,
                "swipes": m.message.swipe_count,
                "date": m.message.send_date,
            }
            for m in messages
        ]
    )


def _role(is_user: bool, narrator: bool) -> str:
    return "user" if is_user else "system" if narrator else "assistant"


async def get_chat(parts: Parts, request: web.Request) -> web.Response:
    record, messages = await _chat_and_messages(parts, request)
    visible = [
        {
            "index": m.position,
            "role": _role(m.message.is_user, m.message.narrator),
            "name": m.message.name,
            "text": m.message.mes[:SHORT_TEXT],
            "swipes": m.message.swipe_count,
        }
        for m in messages
        if not m.message.is_system
    ]
    return web.json_response({**chat_summary(record), "visible": visible})


async def identify_request(parts: Parts, request: web.Request) -> web.Response:
    library = parts.chats()
    raw = await request.read()
    parsed = parts.formats.for_body(raw).parse(raw)  # AdapterError: a 400
    chosen = request.headers.get(CHAT_ID_HEADER)
    found = await identify_parsed(library, parsed, list(parts.markers), chosen)
    return web.json_response(identification_json(found.identification))


def identification_json(ident: Identification | None) -> JSONObject:
    if ident is None:
        return {"chat": None, "confidence": 0.0, "generation": None, "target_message": None}
    return {
        "chat": ident.chat_id,
        "confidence": ident.confidence,
        "generation": ident.generation,
        "target_message": ident.target_message,
    }


async def message_lore(parts: Parts, request: web.Request) -> web.Response:
    """`{active, inactive}` lorebook entries of a generated message (and swipe)."""
    store = parts.chats().store
    chat_id = request.match_info["chat_id"]
    index = path_number(request, "index")
    asked = query_number(request, "swipe")

    def find(db: Database) -> JSONObject | None:
        message = db.message_at(chat_id, index)
        if message is None:
            return None
        swipe = asked if asked is not None else message.message.swipe_id or 0
        found = db.lore.snapshot_for(message.uid, swipe)
        return None if found is None else {"swipe": swipe, **found}

    snapshot = await store.call(find)
    if snapshot is None:
        raise NotFound(f"no lorebook snapshot for message {index} of {chat_id!r}")
    return web.json_response(snapshot)


def add_api_routes(app: web.Application, parts: Parts) -> None:
    r = app.router
    r.add_get("/recap/api/chats", partial(list_chats, parts))
    r.add_get("/recap/api/chats/{chat_id:.+}/messages", partial(chat_messages, parts))
    # Before the catch-all chat route: chat ids contain slashes.
    lore = r"/recap/api/chats/{chat_id:.+}/messages/{index:\d+}/lore"
    r.add_get(lore, partial(message_lore, parts))
    r.add_get("/recap/api/chats/{chat_id:.+}", partial(get_chat, parts))
    r.add_post("/recap/api/identify", partial(identify_request, parts))
