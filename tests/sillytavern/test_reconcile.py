"""Change events and stable identity for what ST does to a chat, on hand-made files."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from proxy.library.chats import ChatLibrary
from proxy.sillytavern.reconcile import Event, Moves, moved_older
from proxy.store import Store
from tests.st_data import save_like_st

HEADER: dict[str, Any] = {
    "chat_metadata": {"integrity": "slug"},
    "user_name": "unused",
    "character_name": "unused",
}
CHAT = "default-user/chats/Seraphina/Seraphina - 1"


def msg(i: int, **extra: Any) -> dict[str, Any]:
    user = i % 2 == 1
    return {
        "name": "Alex" if user else "Seraphina",
        "is_user": user,
        "is_system": False,
        "send_date": f"2026-05-01T12:00:{i:02d}.000Z",
        "mes": f"message {i}",
        **extra,
    }


@pytest.fixture
async def chat(tmp_path: Path):  # type: ignore[no-untyped-def]
    data = tmp_path / "data"
    library = ChatLibrary(data, Store(tmp_path / "s.sqlite3"))
    path = data / f"{CHAT}.jsonl"

    async def save(
        messages: list[dict[str, Any]], header: dict[str, Any] = HEADER, target: Path = path
    ) -> list[tuple[str, int]]:
        save_like_st(target, b"\n".join(json.dumps(o).encode() for o in [header, *messages]))
        results = await library.refresh([target])
        return [(e.kind, e.index) for r in results for e in r.events]

    save.library = library  # type: ignore[attr-defined]
    yield save
    await library.store.close()


async def uids(library: ChatLibrary, chat_id: str = CHAT) -> list[int]:
    return [m.uid for m in (await library.store.call(lambda db: db.messages(chat_id)))]


async def test_hide_unhide_edit_swipe_delete_first(chat) -> None:  # type: ignore[no-untyped-def]
    library = chat.library
    base = [msg(i) for i in range(6)]
    assert await chat(base) == [("added", i) for i in range(6)]
    first = await uids(library)

    hidden = [*base[:2], {**base[2], "is_system": True}, *base[3:]]
    assert await chat(hidden) == [("hidden", 2)]
    assert await chat(base) == [("unhidden", 2)]
    edited = [*base[:3], {**base[3], "mes": "message 3, edited"}, *base[4:]]
    assert await chat(edited) == [("edited", 3)]
    swiped = [
        *edited[:4],
        {
            **edited[4],
            "mes": "again",
            "swipes": ["message 4", "again"],
            "swipe_id": 1,
            "send_date": "2026-05-01T13:00:00.000Z",
        },
        edited[5],
    ]
    assert await chat(swiped) == [("swiped", 4)]
    assert await chat(swiped[1:]) == [("deleted", 0)]
    assert await uids(library) == first[1:]
    assert [m.position for m in (await library.store.call(lambda db: db.messages(CHAT)))] == list(
        range(5)
    )
    stored = await library.store.call(lambda db: db.messages(CHAT))
    assert stored[2].message.mes == "message 3, edited"
    assert stored[3].message.swipe_count == 2


async def test_a_branch_is_its_own_chat_and_the_parent_keeps_its_data(chat) -> None:  # type: ignore[no-untyped-def]
    library = chat.library
    base = [msg(i) for i in range(4)]
    await chat(base)
    parent = await uids(library)
    assert library.data_dir is not None
    branch_path = library.data_dir / f"{CHAT} - Branch #1.jsonl"
    header = {
        "chat_metadata": {**HEADER["chat_metadata"], "main_chat": "Seraphina - 1"},
        "user_name": "unused",
        "character_name": "unused",
    }
    events = await chat(base[:3], header=header, target=branch_path)
    assert events == [("added", 0), ("added", 1), ("added", 2)]
    branch = await library.store.call(lambda db: db.chat(f"{CHAT} - Branch #1"))
    assert branch is not None and branch.main_chat == "Seraphina - 1"
    assert await uids(library) == parent
    assert set(await uids(library, branch.id)).isdisjoint(parent)


async def test_identical_messages_and_moves_keep_order(chat) -> None:  # type: ignore[no-untyped-def]
    library = chat.library
    same = {"name": "Alex", "is_user": True, "mes": "..."}
    await chat([msg(0), same, msg(2), same, msg(4)])
    before = await uids(library)
    # delete the middle one; the identical twin after it keeps its identity
    assert await chat([msg(0), same, same, msg(4)]) == [("deleted", 2)]
    assert await uids(library) == [before[0], before[1], before[3], before[4]]


@pytest.mark.parametrize(
    ("events", "total", "moved"),
    [
        ([Event("added", 9)], 10, False),  # ST saved the user's message
        ([Event("added", 8), Event("added", 9)], 10, False),  # a group's two replies
        ([Event("swiped", 9, 1)], 10, False),  # a swipe or continue of the last reply
        ([Event("swiped", 8, 1), Event("added", 9)], 10, False),  # and the next message
        ([Event("deleted", 10, 1), Event("deleted", 11, 2)], 10, False),  # the last two
        ([Event("deleted", 4, 1)], 10, True),  # one in the middle: the later ones move
        ([Event("added", 4)], 10, True),
        ([Event("edited", 3, 1)], 10, True),  # an old message's recap is of another text
        ([Event("hidden", 3, 1)], 10, True),
        ([Event("deleted", 9, 1), Event("added", 9)], 10, True),  # the last one replaced
    ],
)
def test_a_re_read_tells_whether_older_messages_moved(
    events: list[Event], total: int, moved: bool
) -> None:
    assert moved_older(events, total) is moved


@pytest.mark.parametrize("seed", range(40))
def test_moves_follow_each_message_over_a_re_read(seed: int) -> None:
    """Messages deleted and added anywhere (the order of the rest kept, as alignment keeps
    it): each message kept is found at its new place, and stretches end where they did."""
    rng = random.Random(seed)
    old = list(range(rng.randint(0, 30)))
    new: list[int | None] = [m for m in old if rng.random() > 0.25]
    for _ in range(rng.randint(0, 4)):
        new.insert(rng.randint(0, len(new)), None)
    events = [Event("deleted", m, m) for m in old if m not in new]
    events += [Event("added", i) for i, m in enumerate(new) if m is None]
    events += [Event("edited", i, m) for i, m in enumerate(new) if m is not None and m % 7 == 3]
    moves = Moves.of(events)
    where = {m: i for i, m in enumerate(new) if m is not None}
    assert moves.changed == {i for i, m in enumerate(new) if m is not None and m % 7 == 3}
    for m in [*old, len(old)]:
        assert moves.new(m) == where.get(m, None if m < len(old) else len(new))
        kept_from = [where[k] for k in old[m:] if k in where]
        assert moves.bound(m) == (kept_from[0] if kept_from else len(new))
        if m < len(old):
            kept_to = [where[k] for k in old[: m + 1] if k in where]
            assert moves.last(m) == (kept_to[-1] if kept_to else -1)
