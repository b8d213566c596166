"""`/recap/api/...`: the chats as the proxy knows them, identification, lore snapshots.

Handlers raise from the error tree (`proxy.errors`); `proxy.web.errors` answers.
"""

from __future__ import annotations

import time

from aiohttp import web

from proxy.chat.providers import CHAT_ID_HEADER, identify_parsed
from proxy.core.jsontypes import JSONObject
from proxy.core.models import Identification
from proxy.errors import NotFound, Unavailable
from proxy.library.chats import ChatLibrary
from proxy.store import Database
from proxy.store.overview import chat_summaries, idle
from proxy.store.records import ChatRecord, MessageRecord
from proxy.web.keys import ENGINE, FORMATS, LIBRARY, SETTINGS, VITALS
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


def library_of(request: web.Request) -> ChatLibrary:
    library = request.app.get(LIBRARY)
    if library is None:
        raise unavailable(
            request,
            "no SillyTavern data folder: set sillytavern.data_dir or start with --st-data",
            "no_data_folder",
        )
    return library


def unavailable(request: web.Request, reason: str, code: str) -> Unavailable:
    """The memory's API without its parts: why (a store that could not be used comes
    first: the parts were left out for it, whatever the settings say)."""
    problem = request.app[VITALS].store_problem
    if problem is not None:
        return Unavailable(
            f"no memory: the store is unusable ({problem}); `recap-proxy doctor` says how "
            "to mend it",
            code="store_unusable",
        )
    return Unavailable(reason, code=code)


async def list_chats(request: web.Request) -> web.Response:
    """Every chat, with its memory at a glance (`enabled`: its own on/off, null for the
    default; `on`: what that comes to, null without memory; `memory`: scenes, running
    version, queue; `usage`: the proxy's calls)."""
    engine = request.app.get(ENGINE)

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

    return web.json_response(await library_of(request).store.call(work))


async def _chat_and_messages(request: web.Request) -> tuple[ChatRecord, list[MessageRecord]]:
    store = library_of(request).store
    chat_id = request.match_info["chat_id"]
    record = await store.chat(chat_id)
    if record is None or record.deleted:
        raise NotFound(f"no chat {chat_id!r}")
    return record, await store.messages(chat_id)


async def chat_messages(request: web.Request) -> web.Response:
    """`GET /recap/api/chats/{id}/messages`: every message of the chat, hidden ones too
    (`hidden`), whole (the dashboard's chat view)."""
    _, messages = await _chat_and_messages(request)
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


async def get_chat(request: web.Request) -> web.Response:
    record, messages = await _chat_and_messages(request)
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


async def identify_request(request: web.Request) -> web.Response:
    library = library_of(request)
    raw = await request.read()
    parsed = request.app[FORMATS].for_body(raw).parse(raw)  # AdapterError: a 400
    markers = request.app[SETTINGS].injection.history_start_markers
    found = await identify_parsed(library, parsed, markers, request.headers.get(CHAT_ID_HEADER))
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


async def message_lore(request: web.Request) -> web.Response:
    """`{active, inactive}` lorebook entries of a generated message (and swipe)."""
    store = library_of(request).store
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


def add_api_routes(app: web.Application) -> None:
    app.router.add_get("/recap/api/chats", list_chats)
    app.router.add_get("/recap/api/chats/{chat_id:.+}/messages", chat_messages)
    # Before the catch-all chat route: chat ids contain slashes.
    app.router.add_get(r"/recap/api/chats/{chat_id:.+}/messages/{index:\d+}/lore", message_lore)
    app.router.add_get("/recap/api/chats/{chat_id:.+}", get_chat)
    app.router.add_post("/recap/api/identify", identify_request)
