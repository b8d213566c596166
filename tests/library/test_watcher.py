"""The watcher over a real temp folder, with files saved the way ST saves them."""

from __future__ import annotations

import asyncio
import logging
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from watchfiles import watch

from proxy.library.chats import ChatLibrary
from proxy.library.watcher import Watcher, is_relevant, watch_roots
from proxy.store import Store
from tests.memory.story import Story
from tests.st_data import SOLO, SOLO_ID, save_like_st, timeline


@pytest.mark.parametrize(
    ("rel", "relevant"),
    [
        ("default-user/chats/Seraphina/Seraphina - 2026-05-01@14h03m22s123ms.jsonl", True),
        ("default-user/group chats/2026-05-02@09h15m00s001ms.jsonl", True),
        ("alice/chats/Orin/My renamed chat.jsonl", True),
        ("default-user/groups/1746170100000.json", True),
        ("default-user/chats/Seraphina/Seraphina - x.jsonl.4184720981", False),
        ("default-user/backups/chat_seraphina_20260501-140322.jsonl", False),
        ("default-user/chats/Seraphina/notes.txt", False),
        ("default-user/chats/Seraphina.jsonl", False),
        ("_storage/whatever.jsonl", False),
        ("default-user/settings.json", True),  # global lorebooks
        ("default-user/worlds/Eldoria.json", True),
        ("default-user/characters/Seraphina.png", True),
        ("default-user/characters/Seraphina.webp", False),
        ("default-user/worlds/sub/Eldoria.json", False),
        ("default-user/secrets.json", False),
    ],
)
def test_path_filter(rel: str, relevant: bool) -> None:
    assert is_relevant(rel) is relevant


async def wait_for(condition, timeout: float = 10.0, what: str = "") -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"the watcher did not catch up: {what}")
        await asyncio.sleep(0.02)


async def test_changes_reach_the_mirror(tmp_path: Path) -> None:
    data = tmp_path / "data"
    user = data / "default-user"
    user.mkdir(parents=True)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    versions = [s for s in timeline() if s.kind == "file" and s.file == SOLO]
    async with Watcher(library, debounce_ms=50) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        for version in versions:
            save_like_st(user / version.file, version.data)
            expected = version.data.count(b"\n")  # lines minus the header
            await wait_for(
                lambda expected=expected: (
                    SOLO_ID in library.index.entries
                    and library.index.entries[SOLO_ID].total == expected
                ),
                what=f"{version.step}: want {expected}, have "
                f"{getattr(library.index.entries.get(SOLO_ID), 'total', None)}",
            )
        # a temp file and a backup are not chats
        (user / "backups").mkdir()
        (user / "backups" / "chat_x.jsonl").write_bytes(versions[0].data)
        (user / (SOLO + ".123456")).write_bytes(versions[0].data)
        (user / SOLO).unlink()
        await wait_for(lambda: SOLO_ID not in library.index.entries)
    assert [c.id for c in (await library.store.call(lambda db: db.chats()))] == []
    chat = await library.store.call(lambda db: db.chat(SOLO_ID))
    assert chat is not None and chat.deleted


async def test_a_folder_the_os_will_not_watch_is_left_out_and_the_rest_is_watched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Root can read every folder, so the OS's refusal is played by a watch that refuses,
    # as watchfiles does, any set of paths that covers the private folder.
    data = tmp_path / "data"
    private = (data / "private").resolve()
    private.mkdir(parents=True)
    refusals = 0

    def picky_watch(*paths: Path, **options: Any) -> Any:
        nonlocal refusals
        if any(private.is_relative_to(Path(p)) for p in paths):
            refusals += 1
            raise PermissionError(f'Permission denied (os error 13) about ["{private}"]')
        return watch(*paths, **options)

    monkeypatch.setattr("proxy.library.watcher.watch", picky_watch)
    story = Story(data, ends=set())
    story.grow(2)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    with caplog.at_level(logging.WARNING, logger="proxy.library.watcher"):
        async with Watcher(library, debounce_ms=10) as watcher:
            await asyncio.wait_for(watcher.ready.wait(), 5)
            story.grow(2)
            await wait_for(lambda: library.index.entries[story.chat_id].total == 4)
    assert refusals == 1 and watcher.excluded == {private}
    said = [r.getMessage() for r in caplog.records if "cannot watch" in r.getMessage()]
    assert len(said) == 1 and str(private) in said[0]
    await library.store.close()


def test_watch_roots_split_around_an_excluded_folder(tmp_path: Path) -> None:
    for folder in ("a/x", "a/y", "b"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "a" / "settings.json").write_text("{}")
    roots = watch_roots(tmp_path, {tmp_path / "a" / "x"})
    assert roots == [tmp_path / "a" / "settings.json", tmp_path / "a" / "y", tmp_path / "b"]
    assert watch_roots(tmp_path, set()) == [tmp_path]


async def test_an_idle_watch_leaves_the_event_loop_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # watchfiles ends a wait every 100 ms with nothing; those stay in the watch thread.
    # Only the first (the OS watch is in place) and real changes reach the event loop.
    story = Story(tmp_path / "data", ends=set())
    story.grow(2)
    library = ChatLibrary(tmp_path / "data", Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    waits = 0

    def counted_watch(*paths: Path, **options: Any) -> Any:
        nonlocal waits
        for changes in watch(*paths, **options):
            waits += not changes
            yield changes

    monkeypatch.setattr("proxy.library.watcher.watch", counted_watch)
    loop = asyncio.get_running_loop()
    handed = 0
    threadsafe = loop.call_soon_threadsafe

    def counting(*args: Any, **kwargs: Any) -> Any:
        nonlocal handed
        handed += threading.current_thread().name == "st-data-watch"
        return threadsafe(*args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    async with Watcher(library, debounce_ms=10) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        await asyncio.sleep(0.6)
        assert waits >= 4 and handed == 1
        story.grow(2)
        await wait_for(lambda: library.index.entries[story.chat_id].total == 4)
        assert handed == 2
        thread = watcher._thread
        assert thread is not None and thread.is_alive()
    assert not thread.is_alive()  # stopped and joined with the app
    await library.store.close()


async def test_a_data_folder_deleted_and_put_back_is_read_and_watched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    story = Story(data, set())
    story.grow(6)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    backup = tmp_path / "backup"
    shutil.copytree(data, backup)
    async with Watcher(library, debounce_ms=20, gone_poll=0.05) as watcher:
        told: list[str] = []  # the page's health band hears of both at once
        watcher.on_state.append(told.append)
        await asyncio.wait_for(watcher.ready.wait(), 5)
        # Gone (ST reinstalled, a backup about to be restored): said, in /health too.
        with caplog.at_level(logging.WARNING, logger="proxy.library.watcher"):
            shutil.rmtree(data)
            await wait_for(lambda: watcher.state == "missing", what="the folder's loss")
        assert "is gone" in caplog.text
        await wait_for(lambda: story.chat_id not in library.index.entries, what="deleted")
        # Back: its chat returns with what the store kept, and the folder is watched anew.
        shutil.copytree(backup, data)
        await wait_for(lambda: story.chat_id in library.index.entries, what="read again")
        await wait_for(lambda: watcher.state == "running", what="watched again")
        assert told == ["missing", "running"]
        other = Story(data, set(), char="Bea")
        other.grow(4)
        await wait_for(lambda: other.chat_id in library.index.entries, what="a new chat")
        story.grow(2)
        await wait_for(lambda: library.index.entries[story.chat_id].total == 8, what="a save")
    await library.store.close()
