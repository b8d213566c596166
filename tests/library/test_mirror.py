"""The mirror of ST's chat files in the store (`proxy.library.mirror`), through the library that
drives it: what is read and when, deletions and renames, the files beside the chats."""

from __future__ import annotations

import json
import logging
import random
from pathlib import Path

import pytest

from proxy.core import fingerprints as index_module
from proxy.core.fingerprints import index_message, message_fingerprint
from proxy.core.models import ChatMessage
from proxy.identify.chat_index import TEXT_KEPT
from proxy.identify.reasoning import DEFAULT_REASONING, ReasoningFormat
from proxy.library.chats import ChatLibrary
from proxy.library.mirror import chat_record, read_chat_file
from proxy.sillytavern.chatfile import parse_chat
from proxy.sillytavern.layout import GroupInfo, locate
from proxy.store import Store
from tests.memory.story import Story
from tests.spies import spy
from tests.st_data import (
    MARKERS,
    SOLO,
    SOLO_ID,
    save_like_st,
    timeline,
)


async def test_unchanged_files_are_not_read_again(
    tmp_path: Path, library: ChatLibrary, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert library.data_dir is not None
    user = library.data_dir / "default-user"
    last = [s for s in timeline() if s.kind == "file" and s.file.startswith("chats/")][-1]
    save_like_st(user / last.file, last.data)
    await library.index_all()
    await library.store.close()

    reopened = ChatLibrary(library.data_dir, Store(tmp_path / "store.sqlite3"))
    reads = spy(monkeypatch, Path, "read_bytes")
    count = await reopened.index_all()
    assert count == 1
    assert not [path for (path,) in reads if path.suffix == ".jsonl"]
    assert SOLO_ID in reopened.index.entries


async def test_deleted_chat_is_marked_and_a_renamed_one_keeps_its_data(
    library: ChatLibrary,
) -> None:
    assert library.data_dir is not None
    user = library.data_dir / "default-user"
    header = (
        b'{"chat_metadata":{"integrity":"slug-1"},"user_name":"unused","character_name":"unused"}'
    )
    lines = [
        header,
        b'{"name":"Seraphina","is_user":false,"mes":"Welcome.","send_date":"2026-05-01T12:00:00.000Z"}',
        b'{"name":"Alex","is_user":true,"mes":"Hi.","send_date":"2026-05-01T12:01:00.000Z"}',
    ]
    old = user / "chats" / "Seraphina" / "Old name.jsonl"
    save_like_st(old, b"\n".join(lines))
    await library.refresh([old])
    uids = [
        m.uid
        for m in (
            await library.store.call(
                lambda db: db.messages("default-user/chats/Seraphina/Old name")
            )
        )
    ]
    (
        await library.store.call(
            lambda db: db.set_enabled("default-user/chats/Seraphina/Old name", False)
        )
    )

    # ST renames by copying to the new name, then deleting the old file.
    new = old.with_name("New name.jsonl")
    save_like_st(new, b"\n".join(lines))
    old.unlink()
    await library.refresh([new, old])
    renamed = await library.store.call(lambda db: db.chat("default-user/chats/Seraphina/New name"))
    assert renamed is not None and renamed.enabled is False
    assert [m.uid for m in (await library.store.call(lambda db: db.messages(renamed.id)))] == uids
    assert (
        await library.store.call(lambda db: db.chat("default-user/chats/Seraphina/Old name"))
    ) is None

    new.unlink()
    await library.refresh([new])
    gone = await library.store.call(lambda db: db.chat(renamed.id))
    assert gone is not None and gone.deleted
    assert renamed.id not in library.index.entries
    # Named again (the OS's notification, then the watcher's batch): deleted once.
    assert await library.refresh([new]) == []


async def test_a_renamed_group_chat_from_before_st_1_15_keeps_its_data(
    library: ChatLibrary,
) -> None:
    """A group chat file of ST before 1.15 has no header, so no integrity slug: renamed, it
    is the deleted group chat whose file it is line for line (and no other)."""
    assert library.data_dir is not None
    folder = library.data_dir / "default-user" / "group chats"
    lines = [
        b'{"name":"Seraphina","is_user":false,"mes":"Welcome.","send_date":"2026-05-01T12:00:00.000Z"}',
        b'{"name":"Alex","is_user":true,"mes":"Hi both.","send_date":"2026-05-01T12:01:00.000Z"}',
    ]
    old = folder / "2026-05-01@12h00m00s.jsonl"
    save_like_st(old, b"\n".join(lines))
    await library.refresh([old])
    old_id = "default-user/group chats/2026-05-01@12h00m00s"
    uids = [m.uid for m in await library.store.call(lambda db: db.messages(old_id))]
    assert len(uids) == 2

    new = folder / "The tavern.jsonl"
    save_like_st(new, b"\n".join(lines))
    old.unlink()
    await library.refresh([new, old])
    new_id = "default-user/group chats/The tavern"
    assert [m.uid for m in await library.store.call(lambda db: db.messages(new_id))] == uids
    assert await library.store.call(lambda db: db.chat(old_id)) is None

    # Deleted, then a new group chat that starts the same but is not that file: its own.
    new.unlink()
    await library.refresh([new])
    other = folder / "2026-05-02@09h00m00s.jsonl"
    save_like_st(other, lines[0])
    await library.refresh([other])
    other_id = "default-user/group chats/2026-05-02@09h00m00s"
    got = [m.uid for m in await library.store.call(lambda db: db.messages(other_id))]
    assert len(got) == 1 and not set(got) & set(uids)
    gone = await library.store.call(lambda db: db.chat(new_id))
    assert gone is not None and gone.deleted


async def test_persona_and_groups_are_reread_when_their_files_change(
    library: ChatLibrary,
) -> None:
    assert library.data_dir is not None
    user = library.data_dir / "default-user"
    settings = user / "settings.json"
    settings.write_text(json.dumps({"username": "Alex"}))
    assert await library.store.call(lambda db: library.persona("default-user")) == "Alex"
    settings.write_text(json.dumps({"username": "Arden"}))
    assert await library.store.call(lambda db: library.persona("default-user")) == "Alex"  # cached
    await library.refresh([settings])
    assert await library.store.call(lambda db: library.persona("default-user")) == "Arden"
    assert library.prompt_formats() == []  # settings.json without `power_user`
    power = {"instruct": {"enabled": False}, "context": {"chat_start": "<START>"}}
    settings.write_text(json.dumps({"username": "Arden", "power_user": power}))
    await library.refresh([settings])
    # How ST writes prompts, read anew: with no reasoning template, only ST's default
    # reasoning markers are looked for in requests.
    assert library.prompt_formats() == [{**power, "reasoning": {}}]
    assert list(library.index.reasoning) == [DEFAULT_REASONING]
    thinking = {"prefix": "<thinking>", "suffix": "</thinking>", "separator": "\n"}
    power["reasoning"] = thinking
    settings.write_text(json.dumps({"username": "Arden", "power_user": power}))
    await library.refresh([settings])
    mine = ReasoningFormat("<thinking>", "</thinking>", "\n")
    assert library.index.reasoning == (mine, DEFAULT_REASONING)

    group = user / "groups" / "1.json"
    group.parent.mkdir()
    group.write_text(json.dumps({"id": 1, "name": "Old", "members": [], "chats": ["g"]}))
    assert (await library.store.call(lambda db: library.group("default-user", "g"))).name == "Old"  # type: ignore[union-attr]
    group.write_text(json.dumps({"id": 1, "name": "New", "members": [], "chats": ["g"]}))
    await library.refresh([group])
    assert (await library.store.call(lambda db: library.group("default-user", "g"))).name == "New"  # type: ignore[union-attr]
    # A new chat of the group, its group file written first and not read again since:
    # a lookup takes the cache (the lore's, after every generation: no read for a chat no
    # group names), the chat's own read (its first save, before the watcher names that
    # file) reads the groups again.
    group.write_text(json.dumps({"id": 1, "name": "New", "members": [], "chats": ["g", "h"]}))
    assert await library.store.call(lambda db: library.group("default-user", "h")) is None
    mirror = library.mirror
    read = await library.store.call(lambda db: mirror.group("default-user", "h", reading=True))
    assert read is not None and read.name == "New"
    assert (await library.store.call(lambda db: library.group("default-user", "h"))) == read
    assert (
        await library.store.call(lambda db: mirror.group("default-user", "x", reading=True)) is None
    )


async def test_a_chat_saved_over_and_over_mirrors_as_a_fresh_read_would(tmp_path: Path) -> None:
    """Re-reads after the first take over the lines a save kept (no digest, no parse):
    whatever the saves did, the mirror is what reading each file from scratch gives."""
    data = tmp_path / "data"
    path = data / "default-user" / SOLO
    lines = [json.dumps({"chat_metadata": {"integrity": "x"}, "user_name": "unused"})]
    lines += [json.dumps({"name": "A", "is_user": i % 2 == 1, "mes": f"m{i}"}) for i in range(6)]
    save_like_st(path, "\n".join(lines).encode())
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    rng = random.Random(4)
    kept = 0
    for step in range(60):
        change = rng.choice(["append", "append", "last", "middle", "delete", "header"])
        text = json.dumps({"name": "A", "is_user": step % 2 == 0, "mes": f"s{step}"})
        if change == "append":
            lines.append(text)
        elif change == "last":
            lines[-1] = text
        elif change == "middle" and len(lines) > 2:
            lines[rng.randrange(1, len(lines) - 1)] = text
        elif change == "delete" and len(lines) > 2:
            del lines[rng.randrange(1, len(lines))]
        elif change == "header":
            lines[0] = json.dumps({"chat_metadata": {"integrity": f"h{step}"}})
        raw = "\n".join(lines).encode()
        save_like_st(path, raw)
        assert await library.ensure_fresh(SOLO_ID)
        split = library.mirror.splits.take(SOLO_ID)
        assert split is not None
        kept += split.reused
        library.mirror.splits.keep(SOLO_ID, split)
        mirrored = await library.store.call(lambda db: db.messages(SOLO_ID))
        fresh = parse_chat(raw)
        assert [(m.position, m.digest, m.message.mes) for m in mirrored] == [
            (i, line.digest, message.mes)
            for i, (line, message) in enumerate(zip(fresh.lines, fresh.messages, strict=True))
            if message is not None
        ], (step, change)
        entry = library.index.entries[SOLO_ID]
        visible = [m for m in fresh.messages if m is not None and not m.is_system]
        assert [m.fps for m in entry.tail] == [
            index_message(0, m.is_user, m.name, m.mes).fps for m in visible
        ][-len(entry.tail) :]
        assert [m.text for m in entry.tail][-TEXT_KEPT:] == [m.mes for m in visible][-TEXT_KEPT:]
    assert kept > 0  # the fast path was taken, not only the full one
    await library.store.close()


async def test_links_out_of_the_data_folder_are_not_followed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(4)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.jsonl").write_bytes(story.path.read_bytes())
    (outside / "chats").mkdir()
    (outside / "chats" / "Bea - 1.jsonl").write_bytes(story.path.read_bytes())
    (story.path.parent / "Linked - 1.jsonl").symlink_to(outside / "secret.jsonl")
    (data / "default-user" / "chats" / "Bea").symlink_to(outside / "chats")
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    assert await library.index_all() == 1
    assert list(library.index.entries) == [story.chat_id]
    await library.refresh([story.path.parent / "Linked - 1.jsonl"])
    assert list(library.index.entries) == [story.chat_id]
    await library.store.close()


async def test_the_messages_a_save_added_are_fingerprinted_when_it_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The request that follows a save carries the messages it added for the first time:
    their fingerprints are worked out when the save is read (worker thread), so the
    request finds them in the memo instead of normalising them on its way."""
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(12)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    message_fingerprint.cache_clear()  # another test's chat may have had the same texts
    story.grow(2)  # a reply and the user's next message
    await library.refresh([story.path])
    calls = spy(monkeypatch, index_module, "normalize")
    request = story.request()["messages"]
    messages = [ChatMessage(m["role"], m["content"]) for m in request]
    found = (await library.identify_request(messages, MARKERS)).identification
    await library.store.close()
    normalised = [text for (text,) in calls]
    assert found is not None and found.chat_id == story.chat_id and found.target_message == 14
    assert story.messages[-1]["mes"] not in normalised
    assert story.messages[-2]["mes"] not in normalised


async def test_a_new_chat_is_read_once_and_its_bad_line_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import proxy.library.mirror

    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(4)
    with story.path.open("ab") as chat:
        chat.write(b"{not json\n")
    parsed = spy(monkeypatch, proxy.library.mirror, "parse_chat")
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    with caplog.at_level(logging.WARNING):
        await library.index_all()
    await library.store.close()
    warned = [r.getMessage() for r in caplog.records if "malformed" in r.getMessage()]
    assert len(warned) == 1 and "skipped 1 malformed line(s): line 6: not JSON" in warned[0]
    assert len(parsed) == 1  # before, twice: once more to see whether it was a renamed chat


async def test_a_chat_renamed_between_its_stat_and_its_read_is_no_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ST renamed the chat (or deleted it) while its re-read was starting: the event for
    that follows, and nothing is wrong. A file that cannot be read is another matter."""
    data = tmp_path / "data"
    story = Story(data, ends=set())
    story.grow(4)
    library = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await library.index_all()
    story.grow(2)
    read_bytes = Path.read_bytes

    def failing(error: OSError) -> None:
        def read(path: Path) -> bytes:
            if path == story.path:
                raise error
            return read_bytes(path)

        monkeypatch.setattr(Path, "read_bytes", read)

    with caplog.at_level(logging.WARNING):
        failing(FileNotFoundError(2, "No such file or directory"))
        assert await library.refresh([story.path]) == []
        assert not caplog.records
        failing(PermissionError(13, "Permission denied"))
        assert await library.refresh([story.path]) == []
        assert [r.getMessage() for r in caplog.records] == [
            f"cannot read chat {story.path}: Permission denied"
        ]
    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    [read] = await library.refresh([story.path])
    assert read.entry is not None and read.entry.total == 6
    await library.store.close()


def test_a_chat_record_says_whose_chat_it_is_from_its_header_or_its_group() -> None:
    solo = locate("default-user/chats/Ava/one.jsonl")
    assert solo is not None
    header = {"user_name": "Tom", "character_name": "Ava",
              "chat_metadata": {"integrity": "slug-1", "main_chat": "zero"}}  # fmt: skip
    lines = [json.dumps(header), json.dumps({"name": "Ava", "mes": "Hi."}), "{broken"]
    parsed = parse_chat("\n".join(lines).encode())
    record = chat_record(solo, None, parsed, (123, 4_000_000_000), b"h", enabled=False)
    assert (record.id, record.kind, record.character) == (solo.chat_id, "character", "Ava")
    assert (record.integrity, record.main_chat, record.enabled) == ("slug-1", "zero", False)
    assert (record.size, record.updated, record.messages, record.bad_lines) == (123, 4.0, 1, 1)
    # A group chat from before ST 1.15: no header; the group's file says where it branched.
    group = locate("default-user/group chats/g1.jsonl")
    assert group is not None
    info = GroupInfo("g1", "Tavern", ("ava.png",), (), {"g1": "the first"})
    bare = chat_record(group, info, parse_chat(b'{"name": "Ava", "mes": "Hi."}\n'), (1, 1), b"h")
    assert (bare.group_name, bare.main_chat, bare.integrity, bare.enabled) == (
        "Tavern",
        "the first",
        None,
        None,
    )


def test_a_chat_file_gone_or_unreadable_is_none_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert read_chat_file(tmp_path / "gone.jsonl") is None
    (tmp_path / "a folder.jsonl").mkdir()
    with caplog.at_level(logging.WARNING):
        assert read_chat_file(tmp_path / "a folder.jsonl") is None
    assert "cannot read chat" in caplog.text
    (tmp_path / "ok.jsonl").write_bytes(b"{}\n")
    assert read_chat_file(tmp_path / "ok.jsonl") == b"{}\n"
