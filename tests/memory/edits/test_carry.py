"""Memory leaving a chat (export as Markdown, JSON, an ST World Info book) and entering a
new one (copy-from)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import quote

import pytest

from proxy.errors import RecapProxyError
from proxy.sillytavern.worlds import read_world
from proxy.web.keys import RUNTIME
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import Memory, MemoryFactory, cli

NO_RECAPS = {"memory.message_recaps": False}


def api(chat_id: str) -> str:
    return f"/recap/api/chats/{quote(chat_id, safe='')}"


async def built(memory_proxy: MemoryFactory) -> Memory:
    memory = await memory_proxy(27, {8, 17}, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: len(db.memory.running_recaps(CHAT_ID)) == 2)
    return memory


async def test_export_in_each_format(memory_proxy: MemoryFactory, tmp_path: Path) -> None:
    memory = await built(memory_proxy)
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    response = await memory.client.get(api(CHAT_ID) + "/export?format=markdown")
    assert response.status == 200 and response.content_type == "text/markdown"
    text = await response.text()
    assert text.startswith("# Ava") and running.content in text and "(messages 9-17)" in text
    assert "attachment" in response.headers["Content-Disposition"]
    data = await (await memory.client.get(api(CHAT_ID) + "/export?format=json")).json()
    assert [s["index"] for s in data["scenes"]] == [8, 17]
    assert data["running_recap"]["new_scene_index"] == 17
    world = await (await memory.client.get(api(CHAT_ID) + "/export?format=st-world")).text()
    book = tmp_path / "ava.json"
    book.write_text(world, encoding="utf-8")
    loaded = read_world(book)
    assert loaded is not None and len(loaded.entries) == 3 and loaded.entries[0].constant
    bad = await memory.client.get(api(CHAT_ID) + "/export?format=pdf")
    assert bad.status == 400 and "markdown, json, st-world" in (await bad.text())
    missing = await memory.client.get(api("default-user/chats/Nobody/x") + "/export")
    assert missing.status == 404


async def test_export_from_the_cli_never_into_st_data(
    memory_proxy: MemoryFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await built(memory_proxy)
    out = tmp_path / "out" / "ava.world.json"
    out.parent.mkdir()
    assert await cli(memory, "export", "Ava", "--format", "st-world", "-o", str(out)) == 0
    assert read_world(out) is not None
    assert await cli(memory, "export", "Ava", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["chat"] == CHAT_ID
    data = memory.story.path.parents[3]
    inside = data / "default-user" / "worlds" / "ava.json"
    with pytest.raises(RecapProxyError, match="never writes there"):
        await cli(memory, "export", "Ava", "--format", "st-world", "-o", str(inside),
                  "--config", str(write_config(tmp_path, data)))  # fmt: skip
    assert not inside.exists()


async def test_export_never_into_the_data_folder_serve_was_given(
    memory_proxy: MemoryFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `serve --st-data DIR` and no config: only the server knows the folder (its `/` says).
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)  # no config file either
    memory = await built(memory_proxy)
    data = memory.story.path.parents[3]
    root = await (await memory.client.get("/")).json()
    assert root["st_data"] == str(data)
    (data / "default-user" / "worlds").mkdir()
    inside = data / "default-user" / "worlds" / "ava.json"
    with pytest.raises(
        RecapProxyError, match=re.escape(f"inside SillyTavern's data folder {data}")
    ):
        await cli(memory, "export", "Ava", "--format", "st-world", "-o", str(inside))
    assert not inside.exists()
    # Another install's data folder, which neither the server nor a config names.
    other = tmp_path / "SillyTavern" / "data"
    (other / "default-user" / "chats").mkdir(parents=True)
    (other / "default-user" / "settings.json").write_text("{}", encoding="utf-8")
    (other / "default-user" / "worlds").mkdir()
    elsewhere = other / "default-user" / "worlds" / "ava.json"
    with pytest.raises(RecapProxyError, match="never writes there"):
        await cli(memory, "export", "Ava", "--format", "st-world", "-o", str(elsewhere))
    assert not elsewhere.exists()
    # A folder that merely holds some `chats` folder is not ST's.
    (tmp_path / "notes" / "chats").mkdir(parents=True)
    mine = tmp_path / "ava.md"
    assert await cli(memory, "export", "Ava", "-o", str(mine)) == 0 and mine.exists()
    # A folder that is not there is a plain error, not a traceback.
    with pytest.raises(RecapProxyError, match=r"cannot write .*: No such file or directory"):
        await cli(memory, "export", "Ava", "-o", str(tmp_path / "nowhere" / "ava.md"))


def write_config(tmp_path: Path, data: Path) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(f'[sillytavern]\ndata_dir = "{data}"\n', encoding="utf-8")
    return config


async def test_a_new_chat_starts_from_another_chats_memory(
    memory_proxy: MemoryFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = await built(memory_proxy)
    running = await memory.run(lambda db: db.memory.current_running(CHAT_ID))
    assert running is not None
    new = Story(memory.story.path.parents[3], set(), char="Mira")
    new.grow(4)
    library = memory.app[RUNTIME].memory_parts().library
    await memory.until(lambda db: db.chat(new.chat_id) is not None, settle=False)
    while new.chat_id not in library.index.entries:
        await memory.engine.settle()
    assert await cli(memory, "memory", "Mira", "--copy-from", "Ava") == 0
    assert "copied from " + CHAT_ID in capsys.readouterr().err
    listed = await (await memory.client.get(api(new.chat_id) + "/running")).json()
    assert [(v["source"], v["content"]) for v in listed] == [("copied", running.content)]
    # Its very next request carries it, with no call of the proxy's own and nothing left
    # out (the copied recap covers none of this chat's messages).
    calls = len(memory.fake.state.operations)
    response = await memory.client.post("/v1/chat/completions", json=new.request())
    assert response.headers["X-Recap-Trimmed"] == "0"
    assert running.content in memory.forwarded()[-1]["messages"][0]["content"]
    await memory.engine.settle()
    assert len(memory.fake.state.operations) == calls
    # A chat with memory of its own is not overwritten.
    refused = await memory.client.post(
        api(CHAT_ID) + "/memory/copy-from", json={"chat": new.chat_id}
    )
    assert refused.status == 409 and "of its own" in await refused.text()
    # The CLI says the server's reason.
    with pytest.raises(RecapProxyError, match=r"^a chat cannot copy its own memory$"):
        await cli(memory, "memory", "Ava", "--copy-from", "Ava")
