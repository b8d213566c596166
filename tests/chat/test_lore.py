"""Lorebook snapshots over the real ST capture: each reply lists the entries its prompt had."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from adapters import formats
from adapters.openai_chat import OpenAIChatAdapter
from proxy.chat.lore import LoreService
from proxy.core.fingerprints import normalize
from proxy.library.chats import ChatLibrary
from proxy.store import Store
from tests.adapters.captures import SOURCES, chats_before, generations, records
from tests.lore_data import entry, glade_content, write_card, write_settings, write_world
from tests.st_data import CAPTURE, GROUP_ID, MARKERS, SOLO_ID, save_like_st, timeline

ADAPTER = OpenAIChatAdapter()


def lore_folder(user: Path) -> str:
    glade = glade_content(CAPTURE / "requests.jsonl")
    write_world(
        user,
        "Eldoria",
        {
            "0": entry(0, glade, key=["glade", "forest"]),
            "1": entry(1, "{{char}} guards the Shadowfang border for {{user}}.", key=["border"]),
            "2": entry(2, "Eldoria is old.", constant=True),
            "3": entry(3, "Disabled.", disable=True),
        },
    )
    write_world(user, "Common", {"0": entry(0, "The moon is silver.", key=["moon"])})
    write_world(user, "Unused", {"0": entry(0, "Never applies.")})
    (user / "worlds" / "Broken.json").write_text("{oops")
    write_card(user, "default_Seraphina", "Seraphina", "Eldoria")
    write_card(user, "Orin", "Orin", None)
    write_settings(user, global_books=["Common", "Broken", "Missing"])
    return glade


def lore_library(tmp_path: Path) -> tuple[ChatLibrary, LoreService, Path]:
    """A data folder with books, cards and settings; its library and lore service."""
    user = tmp_path / "data" / "default-user"
    user.mkdir(parents=True)
    lore_folder(user)
    library = ChatLibrary(tmp_path / "data", Store(tmp_path / "store.sqlite3"))
    return library, LoreService(library.store, library), user


async def replay(tmp_path: Path) -> tuple[ChatLibrary, LoreService]:
    library, service, user = lore_library(tmp_path)
    await library.index_all()
    for step in timeline():
        if step.kind == "file":
            save_like_st(user / step.file, step.data)
            await library.refresh([user / step.file])
            continue
        assert step.body is not None
        parsed = ADAPTER.parse(json.dumps(step.body).encode())
        found = await library.identify_request(parsed.messages, MARKERS)
        assert found.identification is not None
        service.record_later(found.identification, parsed.messages)
        await service.drain()
    return library, service


async def lore_of(
    library: ChatLibrary, chat_id: str, index: int, swipe: int
) -> dict[str, Any] | None:
    message = await library.store.call(lambda db: db.message_at(chat_id, index))
    assert message is not None
    return await library.store.call(lambda db: db.lore.snapshot_for(message.uid, swipe))


def keys(entries: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(e["world"], e["uid"]) for e in entries}


async def request_of(
    library: ChatLibrary, lines: list[dict[str, Any]], *system: str
) -> tuple[Any, list[Any]]:
    """ST's request for a chat file's `lines` (header first) after `system` prompts, and
    how the library identifies it."""
    body = {
        "messages": [
            *({"role": "system", "content": text} for text in system),
            {"role": "system", "content": "[Start a new Chat]"},
            *(
                {"role": "user" if x["is_user"] else "assistant", "content": x["mes"]}
                for x in lines[1:]
            ),
        ]
    }
    parsed = ADAPTER.parse(json.dumps(body).encode())
    found = await library.identify_request(parsed.messages, MARKERS)
    assert found.identification is not None
    return found.identification, parsed.messages


async def save_lines(library: ChatLibrary, chat: Path, lines: list[dict[str, Any]]) -> None:
    save_like_st(chat, b"\n".join(json.dumps(x).encode() for x in lines))
    await library.refresh([chat])


@pytest.fixture
async def replayed(tmp_path: Path):  # type: ignore[no-untyped-def]
    library, service = await replay(tmp_path)
    yield library, service
    await library.store.close()


async def test_each_reply_lists_the_entries_of_its_prompt(replayed) -> None:  # type: ignore[no-untyped-def]
    library, _ = replayed
    applicable = {("Eldoria", 0), ("Eldoria", 1), ("Eldoria", 2), ("Common", 0)}
    # The reply to the third message was generated with the glade entry in its prompt
    # (final file: message 6 is that reply).
    third = await lore_of(library, SOLO_ID, 6, 0)
    assert third is not None
    assert keys(third["active"]) == {("Eldoria", 0)}
    assert keys(third["inactive"]) == applicable - {("Eldoria", 0)}
    assert third["active"][0]["strategy"] == "normal"
    assert third["active"][0]["keys"] == ["glade", "forest"]
    # ...the first reply had none.
    first = await lore_of(library, SOLO_ID, 2, 0)
    assert first is not None and first["active"] == []
    assert keys(first["inactive"]) == applicable


async def test_swipes_keep_their_own_and_continue_binds_to_its_message(replayed) -> None:  # type: ignore[no-untyped-def]
    library, _ = replayed
    # message 13 in the final file: swiped (swipe 1), then continued
    assert await lore_of(library, SOLO_ID, 13, 0) is not None  # the original reply
    swiped = await lore_of(library, SOLO_ID, 13, 1)
    assert swiped is not None and swiped["generation"] in {"swipe", "continue"}
    message = await library.store.call(lambda db: db.message_at(SOLO_ID, 13))
    assert message is not None
    rows = await library.store.call(
        lambda db: db.db.execute(
            "SELECT generation, swipe FROM lore_snapshots WHERE message_uid=? ORDER BY id",
            (message.uid,),
        ).fetchall()
    )
    # made at index 14; the deletion of message 8 later moved the message, not its lore
    assert [tuple(r) for r in rows] == [("normal", 0), ("swipe", 1), ("continue", 1)]


async def test_group_members_books_apply(replayed) -> None:  # type: ignore[no-untyped-def]
    library, _ = replayed
    seraphina_turn = await lore_of(library, GROUP_ID, 5, 0)
    assert seraphina_turn is not None
    assert keys(seraphina_turn["active"]) == {("Eldoria", 0)}


async def test_deleted_messages_take_their_snapshots(replayed) -> None:  # type: ignore[no-untyped-def]
    library, _ = replayed
    # The capture deleted the reply at index 8 (to the fourth message); its snapshot went.
    bound = await library.store.call(
        lambda db: db.db.execute(
            "SELECT COUNT(*) FROM lore_snapshots WHERE chat_id=? AND message_uid IS NOT NULL",
            (SOLO_ID,),
        ).fetchone()[0]
    )
    made = await library.store.call(
        lambda db: db.db.execute(
            "SELECT COUNT(*) FROM lore_snapshots WHERE chat_id=?", (SOLO_ID,)
        ).fetchone()[0]
    )
    assert (made, bound) == (9, 9)  # ten solo generations, one reply deleted


async def test_a_book_edited_between_generations(tmp_path: Path) -> None:
    library, service, user = lore_library(tmp_path)
    chat = user / "chats" / "default_Seraphina" / "c.jsonl"
    header = {
        "chat_metadata": {"integrity": "x"},
        "user_name": "unused",
        "character_name": "unused",
    }
    lines: list[dict[str, Any]] = [
        header,
        {"name": "Seraphina", "is_user": False, "mes": "Welcome."},
        {"name": "User", "is_user": True, "mes": "The border?"},
    ]
    save_like_st(chat, b"\n".join(json.dumps(x).encode() for x in lines))
    await library.index_all()

    async def generate(prompt_lore: str, reply: str) -> None:
        ident, messages = await request_of(library, lines, "Main.", prompt_lore)
        service.record_later(ident, messages)
        await service.drain()
        lines.append({"name": "Seraphina", "is_user": False, "mes": reply})
        await save_lines(library, chat, lines)

    await generate("Seraphina guards the Shadowfang border for User.", "I do.")
    new_text = "{{char}} watches the northern border for {{user}}."
    path = write_world(user, "Eldoria", {"1": entry(1, new_text, key=["border"])})
    service.invalidate([path])
    lines.append({"name": "User", "is_user": True, "mes": "And now?"})
    await save_lines(library, chat, lines)
    await generate("Seraphina watches the northern border for User.", "Still.")
    chat_id = "default-user/chats/default_Seraphina/c"
    before, after = await lore_of(library, chat_id, 2, 0), await lore_of(library, chat_id, 4, 0)
    assert before is not None and after is not None
    assert keys(before["active"]) == {("Eldoria", 1)}
    assert keys(after["active"]) == {("Eldoria", 1)}
    assert before["active"][0]["content_hash"] != after["active"][0]["content_hash"]
    await library.store.close()


async def test_active_lore_of_a_scene(replayed) -> None:  # type: ignore[no-untyped-def]
    _library, service = replayed
    # Messages 0..7 of the solo chat: the reply at 6 carried the glade entry.
    text = await service.active_lore(SOLO_ID, 0, 7)
    assert text.startswith('- entry 0: User: "What is the glade?"')
    assert text.count("\n") == 0
    assert await service.active_lore(SOLO_ID, 0, 3) == ""
    assert await service.active_lore("no/such/chat", 0, 3) == ""


# -- every connection type ST uses (the captures under tests/data/sources) ----------------

LORE_RUNS = ["claude/stream", "claude/stream_sysprompt", "openai-reverse-proxy/stream",
             "textgen-generic/chatml_stream", "textgen-generic/noinstruct_stream",
             "textgen-ollama/chatml_stream", "kobold-classic/chatml_stream"]  # fmt: skip


def eldoria() -> list[str]:
    """What Seraphina's "Eldoria" book put into a prompt, one exchange an entry (ST joins
    the entries it inserts with a line break, so each is found on its own)."""
    prompt = json.loads(generations("textgen-generic/chatml_stream")["05_send_03"])["prompt"]
    found = re.findall(r'User: "What[^\n]*\nSeraphina: [^\n]*', prompt)
    assert len(found) == 5
    return found


def strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


@pytest.mark.parametrize("step", ["04_send_02", "05_send_03", "06_swipe", "07_continue"])
@pytest.mark.parametrize("run", LORE_RUNS)
async def test_every_connection_records_the_entries_its_prompt_had(
    tmp_path: Path, run: str, step: str
) -> None:
    """Anthropic bodies and text prompts are read like chat messages: an entry is active
    when its text is in what was sent, whatever the wire format cut it into."""
    data = tmp_path / "data"
    paths = chats_before(SOURCES / run, step, data)
    user = data / "default-user"
    entries = eldoria()
    write_world(user, "Eldoria", {str(i): entry(i, t) for i, t in enumerate(entries)})
    write_card(user, "default_Seraphina", "Seraphina", "Eldoria")
    write_settings(user, global_books=[])
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    service = LoreService(library.store, library)
    await library.index_all()
    raw = generations(run)[step]
    path = records(run, "requests")[0]["path"]
    adapter = formats(None).for_path(path if run.startswith("claude") else "/v1/completions")
    if run.startswith("openai"):
        adapter = formats(None).for_path("/v1/chat/completions")
    assert adapter is not None
    parsed = adapter.parse(raw)
    found = await library.identify_request(parsed.messages, MARKERS)
    ident = found.identification
    assert ident is not None and ident.target_message is not None
    service.record_later(ident, parsed.messages)
    await service.drain()
    after = SOURCES / run / "chats" / step / "chats"
    for chat in paths:
        chat.write_bytes((after / chat.relative_to(user / "chats")).read_bytes())
    await library.refresh(paths)
    sent = normalize("\n".join(strings(json.loads(raw))))
    expected = {("Eldoria", i) for i, text in enumerate(entries) if normalize(text) in sent}
    assert bool(expected) == (step != "04_send_02")  # ST's own scan: none on the second
    swipe = 1 if step in ("06_swipe", "07_continue") else 0  # the continue goes on the swipe
    snap = await lore_of(library, ident.chat_id, ident.target_message, swipe)
    await library.store.close()
    assert snap is not None and keys(snap["active"]) == expected


async def test_a_chat_no_book_applies_to_skips_the_store_until_one_does(tmp_path: Path) -> None:
    """Its requests cost the store thread nothing; a book that comes to apply (the chat's
    own, set in ST, or a global one) is recorded from the next request on."""
    user = tmp_path / "data" / "default-user"
    user.mkdir(parents=True)
    write_card(user, "Orin", "Orin", None)
    write_world(user, "Common", {"0": entry(0, "The moon is silver.", key=["moon"])})
    library = ChatLibrary(tmp_path / "data", Store(tmp_path / "store.sqlite3"))
    service = LoreService(library.store, library)
    chat = user / "chats" / "Orin" / "c.jsonl"
    lines: list[dict[str, Any]] = [
        {"chat_metadata": {"integrity": "x"}, "user_name": "u", "character_name": "Orin"},
        {"name": "Orin", "is_user": False, "mes": "Hello."},
    ]
    calls = []
    run = library.store.call

    async def counted(work: Any) -> Any:
        calls.append(work)
        return await run(work)

    library.store.call = counted  # type: ignore[method-assign,assignment]

    async def generate(text: str) -> tuple[dict[str, Any] | None, int]:
        """A request and its reply: the reply's snapshot, and the store calls it took."""
        lines.append({"name": "User", "is_user": True, "mes": text})
        await save_lines(library, chat, lines)
        # The entry's text in the prompt, as ST puts an active entry there.
        ident, messages = await request_of(library, lines, "The moon is silver.")
        calls.clear()
        service.record_later(ident, messages)
        await service.drain()
        used = len(calls)
        lines.append({"name": "Orin", "is_user": False, "mes": "Yes."})
        await save_lines(library, chat, lines)
        return await lore_of(library, "default-user/chats/Orin/c", len(lines) - 2, 0), used

    assert await generate("The moon?") == (None, 1)  # worked out once
    assert await generate("The moon again?") == (None, 0)  # then skipped
    # The chat gets its own book in ST: its file says so.
    lines[0]["chat_metadata"]["world_info"] = "Common"
    snapshot, _ = await generate("And the moon now?")
    assert snapshot is not None and keys(snapshot["active"]) == {("Common", 0)}
    # Off again, then a global book: the settings file changed.
    del lines[0]["chat_metadata"]["world_info"]
    assert (await generate("Moon?"))[0] is None
    assert await generate("Moon, once more?") == (None, 0)
    write_settings(user, global_books=["Common"])
    service.invalidate([user / "settings.json"])
    snapshot, _ = await generate("The moon, finally?")
    assert snapshot is not None and keys(snapshot["active"]) == {("Common", 0)}
    await library.store.close()
