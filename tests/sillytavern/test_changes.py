"""The OS's notifications of writes to chat folders, and when a request may skip the stat
of its chat's file: never past a write, never for long, never again once one was missed."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

from proxy.core.models import ChatMessage
from proxy.library.chats import ChatLibrary
from proxy.library.watcher import Watcher
from proxy.sillytavern.changes import RECHECK, ChangeFeed, Freshness
from proxy.store import Store
from tests.memory.story import Story
from tests.spies import spy
from tests.st_data import MARKERS, save_like_st

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


async def until(condition: Callable[[], bool]) -> None:
    for _ in range(200):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the notification never came")


async def arrive() -> None:
    """What a request sent from now on goes through: the server waits on its socket, and
    the loop's poll finds the bytes there."""
    loop = asyncio.get_running_loop()
    a, b = socket.socketpair()
    with a, b:
        a.setblocking(False)
        received = asyncio.ensure_future(loop.sock_recv(a, 1))
        await asyncio.sleep(0)  # the server is waiting before the client sends
        b.send(b"x")
        await received


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def checked_chat(tmp_path: Path) -> tuple[Clock, Freshness, str]:
    """A feed on (on the running loop), and chat `u/chats/A/a` found as indexed now."""
    clock = Clock()
    fresh = Freshness(str(tmp_path), clock)
    name = str(tmp_path / "u/chats/A/a.jsonl")
    save_like_st(Path(name), b"{}")
    assert fresh.start()
    fresh.follow(name)
    fresh.checked("u/chats/A/a", name, same=True)
    return clock, fresh, name


async def test_a_save_renamed_into_a_watched_folder_is_reported(tmp_path: Path) -> None:
    changed: list[str] = []
    lost: list[bool] = []
    feed = ChangeFeed.open(changed.append, lambda: lost.append(True))
    assert feed is not None
    folder = tmp_path / "chats" / "Seraphina"
    folder.mkdir(parents=True)
    assert feed.watch(str(folder)) and feed.watch(str(folder))  # once is enough
    save_like_st(folder / "chat.jsonl", b"{}")
    await until(lambda: str(folder / "chat.jsonl") in changed)
    # The folder going is a loss: whatever was checked there is unsure now.
    (folder / "chat.jsonl").unlink()
    folder.rmdir()
    await until(lambda: bool(lost))
    assert str(folder) not in feed.folders
    assert not feed.watch(str(tmp_path / "missing"))
    feed.close()


async def test_a_checked_chat_is_unchanged_until_written_or_for_a_while(tmp_path: Path) -> None:
    clock = Clock()
    fresh = Freshness(str(tmp_path), clock)
    name = str(tmp_path / "default-user/chats/A/a.jsonl")
    save_like_st(Path(name), b"{}")
    assert not fresh.unchanged("default-user/chats/A/a")  # no feed: every request stats
    assert fresh.start()
    fresh.follow(name)
    fresh.checked("default-user/chats/A/a", name, same=True)
    assert fresh.unchanged("default-user/chats/A/a")
    save_like_st(Path(name), b'{"a": 1}')
    await arrive()
    assert not fresh.unchanged("default-user/chats/A/a")
    fresh.checked("default-user/chats/A/a", name, same=False)  # announced: no alarm
    assert fresh.feed is not None
    fresh.checked("default-user/chats/A/a", name, same=True)
    assert fresh.unchanged("default-user/chats/A/a")
    clock.now += RECHECK
    assert not fresh.unchanged("default-user/chats/A/a")  # checked again now and then
    # A folder that is not watched is never taken as unchanged.
    other = str(tmp_path / "elsewhere/b.jsonl")
    fresh.checked("../elsewhere/b", other, same=True)
    assert not fresh.unchanged("../elsewhere/b")
    fresh.stop()


async def test_a_chat_under_a_read_is_not_as_indexed_until_the_read_is_in(
    tmp_path: Path,
) -> None:
    """A read that a save's notification started takes that notification with it; while
    it runs, the chat is not taken as indexed (a request that stopped waiting for it stats
    the file), and once it is in, no stat is needed."""
    _, fresh, name = checked_chat(tmp_path)
    chat = "u/chats/A/a"
    save_like_st(Path(name), b'{"a": 1}')
    await until(lambda: not fresh.unchanged(chat))  # the notification came
    watched = fresh.watching()
    fresh.reading(chat)
    assert not fresh.unchanged(chat)  # under way
    fresh.read([(chat, name)], watched)
    assert fresh.unchanged(chat)
    fresh.stop()


async def test_a_change_no_notification_announced_turns_the_feed_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock, fresh, name = checked_chat(tmp_path)
    clock.now += RECHECK  # a network share: the write below is never announced
    fresh.checked("u/chats/A/a", name, same=False)
    assert fresh.feed is None and not fresh.unchanged("u/chats/A/a")
    assert "changed without an OS notification" in caplog.text
    assert "force_polling" in caplog.text


async def test_a_change_whose_notification_is_still_queued_is_no_alarm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A stat that sees a write the loop has not read the event of yet (an unrelated
    request, right as ST saves): the event is read there and then, and the feed stays."""
    clock, fresh, name = checked_chat(tmp_path)
    clock.now += RECHECK
    save_like_st(Path(name), b'{"b": 2}')  # no loop iteration since: the event is queued
    fresh.checked("u/chats/A/a", name, same=False)
    assert fresh.feed is not None
    assert "without an OS notification" not in caplog.text
    fresh.stop()


async def test_lost_notifications_forget_every_check(tmp_path: Path) -> None:
    fresh = Freshness(str(tmp_path), Clock())  # the time stands: only the loss can tell
    names = [str(tmp_path / f"u/chats/{c}/x.jsonl") for c in "AB"]
    for name in names:
        save_like_st(Path(name), b"{}")
    assert fresh.start()
    for name in names:
        fresh.follow(name)
    fresh.checked("u/chats/A/x", names[0], same=True)
    fresh.checked("u/chats/B/x", names[1], same=True)
    assert fresh.unchanged("u/chats/A/x")
    Path(names[1]).unlink()
    Path(names[1]).parent.rmdir()  # B's folder goes: nothing checked holds any more
    await until(lambda: not fresh.unchanged("u/chats/A/x"))
    assert not fresh.unchanged("u/chats/B/x")
    fresh.stop()


async def following(tmp_path: Path) -> tuple[Story, ChatLibrary]:
    """A story's chat (greeting and first message) indexed by a library that follows the
    OS's notifications."""
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(2)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    assert library.follow_changes()
    await library.index_all()
    return story, library


async def stop_with_the_feed_on(library: ChatLibrary, caplog: pytest.LogCaptureFixture) -> None:
    """The notifications stayed on all along (no write went unannounced); then stop."""
    assert library.freshness is not None and library.freshness.feed is not None
    assert "without an OS notification" not in caplog.text
    library.stop_following()
    await library.store.close()


async def test_with_notifications_a_request_after_a_save_sees_it_and_others_skip_the_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """ST saves the user's message (temp file, then rename) and then sends the request:
    the request always finds it, with no watcher re-reading at all here; a request after
    which nothing was written does not stat the file."""
    story, library = await following(tmp_path)

    def request() -> list[ChatMessage]:
        return [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]

    stats = spy(monkeypatch, os, "stat")
    caplog.set_level(logging.WARNING)
    for _ in range(40):
        story.grow(2)  # a reply, then the user's next message: the file ends with it
        await arrive()
        found = (await library.identify_request(request(), MARKERS)).identification
        assert found is not None and found.chat_id == story.chat_id
        assert found.generation == "normal" and found.target_message == len(story.messages)
        checked = len(stats)
        again = (await library.identify_request(request(), MARKERS)).identification
        assert again == found
        assert len(stats) == checked  # nothing written since: no stat
    await stop_with_the_feed_on(library, caplog)


async def test_with_the_watcher_too_a_request_at_any_moment_around_a_save_is_identified(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The watcher re-reads each save while requests come before, during and after that
    re-read; with notifications on, each request is still identified as the chat, and no
    re-read is ever taken for a write that went unannounced."""
    story, library = await following(tmp_path)
    delays = [0.0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05]
    misses: list[tuple[int, float, str]] = []
    async with Watcher(library, debounce_ms=10) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        for attempt in range(160):
            story.grow(2)
            delay = delays[attempt % len(delays)]
            await asyncio.sleep(delay)
            await arrive()
            request = story.request()["messages"]
            messages = [ChatMessage(m["role"], m["content"]) for m in request]
            found = (await library.identify_request(messages, MARKERS)).identification
            if found is None or found.chat_id != story.chat_id or found.generation != "normal":
                misses.append((attempt, delay, repr(found)))
    assert misses == [], f"{len(misses)} of 160 requests not identified: {misses[:5]}"
    await stop_with_the_feed_on(library, caplog)


async def test_a_saved_chat_is_read_at_once_and_its_request_waits_for_that_read_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ST saves, then builds its prompt, then sends: the save's notification starts the
    re-read (no watcher, no request yet), and a request that comes while it runs waits for
    it rather than reading the file a second time."""
    story, library = await following(tmp_path)
    reads = spy(monkeypatch, library, "refresh")
    stats = spy(monkeypatch, os, "stat")
    total = library.index.entries[story.chat_id].total
    story.grow(2)
    await until(lambda: library.index.entries[story.chat_id].total == total + 2)
    assert len(reads) == 1  # by the notification alone
    await arrive()
    messages = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
    checked = len(stats)
    found = (await library.identify_request(messages, MARKERS)).identification
    assert found is not None and found.target_message == len(story.messages)
    assert len(stats) == checked  # what that read took in needs no stat
    for _ in range(10):
        story.grow(2)
        await arrive()  # the request comes at once: the re-read is under way
        messages = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
        found = (await library.identify_request(messages, MARKERS)).identification
        assert found is not None and found.target_message == len(story.messages)
    assert len(reads) == 11  # one per save: no request read the file again
    library.stop_following()
    await library.store.close()


async def test_a_request_known_only_by_messages_just_saved_waits_for_their_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every older message of the chat is hidden: the request's history is the newest
    messages alone, which the index has not read yet when it comes (the store's thread is
    slow: the upkeep's work is ahead of the re-read). The request waits for the re-read
    of the save it follows, not for the watcher's next batch."""
    story, library = await following(tmp_path)
    refresh = library.refresh

    async def slow(paths: list[Path]) -> object:
        await asyncio.sleep(0.05)
        return await refresh(paths)

    monkeypatch.setattr(library, "refresh", slow)
    for message in story.messages:
        message["is_system"] = True
    for _ in range(3):
        story.grow(2)  # a reply and the user's next message; all before them hidden
        await arrive()
        messages = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
        assert len(messages) == 4  # the system prompt, the marker, the two new ones
        found = (await library.identify_request(messages, MARKERS)).identification
        assert found is not None and found.chat_id == story.chat_id
        assert found.target_message == len(story.messages)
        for message in story.messages:
            message["is_system"] = True
    library.stop_following()
    await library.store.close()


async def test_a_checkpoint_opened_again_is_found_among_newer_chats_of_the_same_story(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three checkpoints of the story were saved after it, all holding its newest
    messages. The user goes back to the story and sends a message: the request is its,
    though the index, not having read that save yet, has it as the oldest of the four."""
    story, library = await following(tmp_path)
    story.grow(8)
    await until(partial(grown_to, library, story.chat_id, 10))
    checkpoints = [story.path.with_name(f"Checkpoint #{i} - x.jsonl") for i in range(3)]
    for path in checkpoints:
        save_like_st(path, story.path.read_bytes())
        await library.refresh([path])
    refresh = library.refresh

    async def slow(paths: list[Path]) -> object:
        await asyncio.sleep(0.05)
        return await refresh(paths)

    monkeypatch.setattr(library, "refresh", slow)
    story.grow(2)  # a reply and the user's next message, in the story
    await arrive()
    messages = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
    found = (await library.identify_request(messages, MARKERS)).identification
    assert found is not None and found.chat_id == story.chat_id
    assert found.target_message == 12
    library.stop_following()
    await library.store.close()


def grown_to(library: ChatLibrary, chat_id: str, total: int) -> bool:
    return library.index.entries[chat_id].total == total


async def test_with_the_watcher_too_each_save_is_read_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The notification reads a save at once; the watcher's debounced batch that names the
    same file later finds it vouched for, and does not read it a second time."""
    story, library = await following(tmp_path)
    reads = spy(monkeypatch, library.mirror, "refresh_many")
    async with Watcher(library, debounce_ms=10) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        batches = spy(monkeypatch, watcher, "_apply")
        for _ in range(5):
            story.grow(2)
            await until(partial(grown_to, library, story.chat_id, len(story.messages)))
            await asyncio.sleep(0.3)  # the watcher's batch for that save came and went
    assert len(batches) >= 5 and len(reads) == 5
    library.stop_following()
    await library.store.close()
