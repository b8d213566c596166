"""The chat library against the real ST capture: mirror, change events, identification."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from adapters.openai_chat import OpenAIChatAdapter
from proxy.core.fingerprints import message_fingerprint
from proxy.core.models import ChatMessage, Identification
from proxy.library.chats import ChatLibrary, Refreshed
from proxy.library.watcher import Watcher
from proxy.sillytavern.layout import ChatLocation, locate, newest_first
from proxy.store import Database, Store
from tests.memory.story import Story
from tests.st_data import (
    GROUP_ID,
    MARKERS,
    SOLO_ID,
    final_state,
    save_like_st,
    timeline,
)
from tests.waiting import until

ADAPTER = OpenAIChatAdapter()

# What each captured request is, given the chat file as it was when ST sent it.
EXPECTED = [
    ("03_send_01", SOLO_ID, "normal", 2),
    ("04_send_02", SOLO_ID, "normal", 4),
    ("05_send_03", SOLO_ID, "normal", 6),
    ("06_send_04", SOLO_ID, "normal", 8),
    ("07_send_05", SOLO_ID, "normal", 10),
    ("08_send_06", SOLO_ID, "normal", 12),
    ("09_send_07", SOLO_ID, "normal", 14),
    ("10_swipe", SOLO_ID, "swipe", 14),
    ("13_continue", SOLO_ID, "continue", 13),
    ("14_send_08", SOLO_ID, "normal", 15),
    ("17_group_send_01", GROUP_ID, "normal", 4),
    ("17_group_send_01", GROUP_ID, "normal", 5),
    ("18_group_send_02", GROUP_ID, "normal", 7),
    ("18_group_send_02", GROUP_ID, "normal", 8),
]


async def test_capture_replay_identifies_every_request_and_mirrors_every_change(
    library: ChatLibrary,
) -> None:
    assert library.data_dir is not None
    user = library.data_dir / "default-user"
    steps = timeline()
    identified = []
    events: dict[str, list[tuple[str, int]]] = {}
    current = {"step": ""}
    library.listeners.append(
        lambda r: events.setdefault(current["step"], []).extend((e.kind, e.index) for e in r.events)
    )
    for i, step in enumerate(steps):
        if step.kind == "file":
            current["step"] = step.step
            save_like_st(user / step.file, step.data)
            # The watcher sees most saves; the user's message saved right before a request
            # is left to the request's own freshness check.
            next_is_request = i + 1 < len(steps) and steps[i + 1].kind == "request"
            if not next_is_request:
                await library.refresh([user / step.file])
            continue
        assert step.body is not None
        parsed = ADAPTER.parse(json.dumps(step.body).encode())
        found = await library.identify_request(parsed.messages, MARKERS)
        ident = found.identification
        assert ident is not None, step.step
        # The memoised fingerprints answer as fresh ones do.
        message_fingerprint.cache_clear()
        assert await library.identify_request(parsed.messages, MARKERS) == found, step.step
        identified.append((step.step, ident.chat_id, ident.generation, ident.target_message))
        assert ident.confidence == 1.0, step.step
        # the request messages the chat knows are marked as its history
        assert len(ident.history) == ident.matched >= 2
    assert identified == EXPECTED
    assert events["10_swipe"] == [("swiped", 14)]
    assert events["11_edit"] == [("edited", 5)]
    assert events["12_delete"] == [("deleted", 8)]
    assert events["13_continue"] == [("edited", 13)]


async def test_message_identity_survives_edit_delete_and_swipe(library: ChatLibrary) -> None:
    assert library.data_dir is not None
    user = library.data_dir / "default-user"
    uids_by_step = {}
    for step in timeline():
        if step.kind == "file" and step.file.startswith("chats/"):
            save_like_st(user / step.file, step.data)
            await library.refresh([user / step.file])
            uids_by_step[step.step] = [
                m.uid for m in (await library.store.call(lambda db: db.messages(SOLO_ID)))
            ]
    before, after_delete = uids_by_step["11_edit"], uids_by_step["12_delete"]
    assert after_delete == before[:8] + before[9:]  # message 8 went, the rest kept their uid
    assert uids_by_step["10_swipe"] == uids_by_step["09_send_07"]
    assert uids_by_step["14_send_08"][:-2] == after_delete


async def test_serving_another_data_folder_says_so_and_the_first_comes_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    final_state(first / "default-user")
    (second / "default-user").mkdir(parents=True)
    chat_id = SOLO_ID
    store = Store(tmp_path / "store.sqlite3")
    async with store:
        await ChatLibrary(first, store).index_all()
        assert await store.call(lambda db: db.mirrored_folder()) == str(first.resolve())
        with caplog.at_level(logging.WARNING, logger="proxy.library.chats"):
            await ChatLibrary(second, store).index_all()
        [warning] = [r.getMessage() for r in caplog.records]
        assert f"mirrored SillyTavern's data folder {first.resolve()}" in warning
        assert f"it mirrors {second} from now on" in warning
        gone = await store.call(lambda db: db.chat(chat_id))
        assert gone is not None and gone.deleted
        # Served again within the week, the first folder's chat is back, messages and all.
        await ChatLibrary(first, store).index_all()
        back = await store.call(lambda db: db.chat(chat_id))
        assert back is not None and not back.deleted and back.messages == gone.messages


async def test_a_request_at_any_moment_around_a_save_is_identified(tmp_path: Path) -> None:
    """ST saves the user's message (temp file, then rename) just before it sends the
    request; the watcher re-reads the file at the same time. Whenever the request comes,
    before, during or after that re-read, it is identified as the chat."""
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(2)  # the greeting and the user's first message
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    delays = [0.0, 0.002, 0.005, 0.01, 0.015, 0.02, 0.03, 0.05]
    misses: list[tuple[int, float, str]] = []
    async with Watcher(library, debounce_ms=10) as watcher:
        await asyncio.wait_for(watcher.ready.wait(), 5)
        for attempt in range(240):
            story.grow(2)  # a reply, then the user's next message: the file ends with it
            delay = delays[attempt % len(delays)]
            await asyncio.sleep(delay)
            request = story.request()["messages"]
            messages = [ChatMessage(m["role"], m["content"]) for m in request]
            found = (await library.identify_request(messages, MARKERS)).identification
            if found is None or found.chat_id != story.chat_id or found.generation != "normal":
                misses.append((attempt, delay, repr(found)))
    await library.store.close()
    assert misses == [], f"{len(misses)} of 240 requests not identified: {misses[:5]}"


async def test_without_notifications_a_reopened_checkpoints_story_is_still_found(
    tmp_path: Path,
) -> None:
    """No OS notifications (a network share): nothing says which chat ST just saved. The
    story has three checkpoints, each indexed after it and holding its newest messages;
    the user goes back to the story and sends a message: the request is the story's."""
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(10)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    for i in range(3):
        checkpoint = story.path.with_name(f"Checkpoint #{i} - x.jsonl")
        save_like_st(checkpoint, story.path.read_bytes())
        await library.refresh([checkpoint])
    story.grow(2)  # a reply and the user's next message, in the story
    messages = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
    found = (await library.identify_request(messages, MARKERS)).identification
    await library.store.close()
    assert found is not None and found.chat_id == story.chat_id
    assert found.target_message == 12


async def test_a_request_that_fits_no_chat_says_why_in_the_debug_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(4)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    stranger = [ChatMessage("system", "[Start a new Chat]"), ChatMessage("user", "Who are you?")]
    nothing = [ChatMessage("system", "Summarise the weather.")]
    edited = [ChatMessage(m["role"], m["content"]) for m in story.request()["messages"]]
    edited[-1] = ChatMessage("user", "A last message the file never had.")
    with caplog.at_level(logging.DEBUG, logger="proxy.library.chats"):
        for messages in (stranger, nothing, edited):
            assert (await library.identify_request(messages, MARKERS)).identification is None
    reasons = [r.getMessage() for r in caplog.records if "not identified" in r.getMessage()]
    assert len(reasons) == 3
    assert "no indexed chat (1) holds any of its newest messages" in reasons[0]
    assert "no chat history" in reasons[1]
    assert "1 chat(s) share its newest messages, but none ends the way it does" in reasons[2]
    await library.store.close()


async def test_after_a_restart_the_chats_saved_last_are_indexed_first(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stories = [Story(data, set(), char=name) for name in ("Ava", "Bea", "Cid")]
    for when, story in zip((300, 100, 200), stories, strict=True):
        story.grow(4)
        os.utime(story.path, (when, when))
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    installed: list[str] = []
    library.listeners.append(lambda result: installed.append(result.chat_id))
    await library.index_all()
    await library.store.close()
    ava, bea, cid = (s.chat_id for s in stories)
    assert installed == [ava, cid, bea]
    # A file gone between the listing and its turn comes last.
    here, gone = locate(f"{bea}.jsonl"), locate("u/chats/X/gone.jsonl")
    assert here is not None and gone is not None
    assert newest_first(data, [gone, here]) == [here, gone]


async def test_a_chat_that_cannot_be_read_does_not_stop_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    data = tmp_path / "data"
    stories = [Story(data, set(), char=name) for name in ("Ava", "Bea", "Cid")]
    for story in stories:
        story.grow(4)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    read = library.mirror.refresh_location

    def broken(db: Database, location: ChatLocation, **kwargs: Any) -> Refreshed | None:
        if location.chat_id == stories[1].chat_id:
            raise ValueError("a chat file no one foresaw")
        return read(db, location, **kwargs)

    monkeypatch.setattr(library.mirror, "refresh_location", broken)
    assert await library.index_all() == 2
    await library.store.close()
    assert f"reading the chat {stories[1].chat_id} failed" in caplog.text
    assert "a chat file no one foresaw" in caplog.text  # with its traceback
    assert set(library.index.entries) == {stories[0].chat_id, stories[2].chat_id}


async def test_a_data_folder_that_cannot_be_read_leaves_its_chats_as_they_were(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Read while it is away (a drive unmounted, a backup being restored): it holds no
    # chat then, but its chats are not gone; marked deleted, they would lose the memory
    # a request finds (until a read brings them back).
    data = tmp_path / "data"
    story = Story(data, set())
    story.grow(4)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    assert await library.index_all() == 1
    data.rename(tmp_path / "away")
    assert await library.index_all() == 0
    assert story.chat_id in library.index.entries
    kept = await library.store.call(lambda db: [c.id for c in db.chats()])
    assert kept == [story.chat_id]  # not marked deleted
    assert f"cannot read SillyTavern's data folder {data}" in caplog.text
    (tmp_path / "away").rename(data)
    await library.index_all()
    assert story.chat_id in library.index.entries
    await library.store.close()


async def asked_while_read(
    library: ChatLibrary, branch: Story, save: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> Identification | None:
    """`save` writes the branch as ST does before its request; the request comes while the
    read the OS's notification started is still under way, and waits for it. What the
    request was identified as."""
    gate = asyncio.Event()
    read = library.refresh

    async def held(paths: list[Path]) -> list[Refreshed]:
        await gate.wait()
        return await read(paths)

    monkeypatch.setattr(library, "refresh", held)
    save()
    await until(lambda: library._early.under_way(branch.chat_id) is not None, "a read")
    messages = [ChatMessage(m["role"], m["content"]) for m in branch.request()["messages"]]
    asking = asyncio.create_task(library.identify_request(messages, MARKERS))
    gate.set()
    found = (await asking).identification
    library.stop_following()
    await library.store.close()
    return found


def branch_of(parent: Story, data: Path) -> Story:
    branch = Story(data, ends=set())
    branch.chat_id = parent.chat_id + " - Branch #1"
    branch.path = data / f"{branch.chat_id}.jsonl"
    return branch


async def test_a_chat_just_saved_is_waited_for_though_only_another_holds_its_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch whose newest messages were hidden, shown again and followed by the user's
    new one: the index's entry of the branch holds none of the request's newest messages,
    its parent holds three of them. The branch ST just saved is read first (hunted seed
    2937: the parent alone was checked, and the request was no chat's)."""
    data = tmp_path / "data"
    parent = Story(data, ends=set())
    parent.grow(11)  # the user speaks at odd positions: the last is a reply
    branch = branch_of(parent, data)
    branch.messages = json.loads(json.dumps(parent.messages))
    for message in branch.messages[8:]:
        message["is_system"] = True  # hidden when the branch was made
    branch.save()
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    assert library.follow_changes()
    await library.index_all()

    def shown_again() -> None:
        for message in branch.messages[8:]:
            message["is_system"] = False
        branch.grow(1)  # the user's next message (11); ST saves, then sends the request

    found = await asked_while_read(library, branch, shown_again, monkeypatch)
    assert found is not None and found.chat_id == branch.chat_id
    assert found.generation == "normal" and found.target_message == 12


async def test_a_new_chat_saved_just_before_its_request_is_read_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A branch ST has just written (its first save, in a folder that holds indexed
    chats), its request sent right after, before the watcher's debounced batch names the
    new file: the OS's notification starts its read, and the request waits for it."""
    data = tmp_path / "data"
    parent = Story(data, ends=set())
    parent.grow(11)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    assert library.follow_changes()
    await library.index_all()
    branch = branch_of(parent, data)
    branch.messages = json.loads(json.dumps(parent.messages[:9]))  # branched at 8
    branch.messages[8]["mes"] = "A line only the branch has, moved here from below."
    # No watcher runs: only the notification can tell of the new file.
    found = await asked_while_read(library, branch, branch.save, monkeypatch)
    assert found is not None and found.chat_id == branch.chat_id
    assert found.confidence == 1.0
