"""The proxy with a real ST data folder: /recap/api, identification on the chat path."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp.test_utils import TestClient

from proxy.library.chats import ChatLibrary
from proxy.runtime.runtime import build_runtime
from proxy.store import Store
from proxy.web import make_app
from proxy.web.keys import RUNTIME
from tests.adapters.captures import SOURCES, chats_before, generations
from tests.conftest import FakeLLM, make_settings
from tests.st_data import GROUP_ID, SOLO_ID, final_state

Snapshot = dict[str, tuple[int, str]]


def snapshot(folder: Path) -> Snapshot:
    return {
        str(p.relative_to(folder)): (p.stat().st_mtime_ns, hashlib.sha1(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def st_data(tmp_path: Path) -> Path:
    data = tmp_path / "st" / "data"
    final_state(data / "default-user")
    return data


@pytest.fixture
async def client(
    aiohttp_client: Callable[..., Any], fake_llm: FakeLLM, st_data: Path, tmp_path: Path
) -> TestClient[Any, Any]:
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "sillytavern.data_dir": str(st_data),
            "store.path": str(tmp_path / "store.sqlite3"),
            "injection.position": "in_chat",
            "injection.depth": 1,
        }
    )
    app = make_app(build_runtime(settings))
    test_client: TestClient[Any, Any] = await aiohttp_client(app)
    # The initial index runs in the background: wait for it, and fail if it found less.
    await asyncio.wait_for(app[RUNTIME].memory_parts().library.indexed.wait(), 10)
    assert len(app[RUNTIME].memory_parts().library.index.entries) == 2
    return test_client


def group_name() -> str:
    folder = Path(__file__).parent.parent / "data/st-1.12.6/final/groups"
    return str(json.loads(next(folder.glob("*.json")).read_text())["name"])


def request_body(**changes: Any) -> dict[str, Any]:
    """The last solo request of the capture, against the final chat file: a swipe."""
    lines = (Path(__file__).parent.parent / "data/st-1.12.6/requests.jsonl").read_text()
    records = [json.loads(line) for line in lines.splitlines()]
    body = next(r["body"] for r in records if r["step"] == "14_send_08")
    return {**body, **changes}


async def test_list_and_show_chats(client: TestClient[Any, Any]) -> None:
    chats = await (await client.get("/recap/api/chats")).json()
    assert [c["id"] for c in chats] == [SOLO_ID, GROUP_ID]
    solo = chats[0]
    assert solo == {
        **solo,
        "user": "default-user",
        "kind": "character",
        "name": "Seraphina",  # as the chat calls her, not her folder (default_Seraphina)
        "messages": 16,
        "enabled": None,  # its own on/off: the default,
        "on": True,  # which is on
    }
    assert chats[1]["kind"] == "group"
    assert chats[1]["name"] == group_name()
    detail = await (await client.get(f"/recap/api/chats/{quote(SOLO_ID)}")).json()
    assert detail["id"] == SOLO_ID
    assert [m["index"] for m in detail["visible"]] == list(range(16))
    assert detail["visible"][1] == {**detail["visible"][1], "role": "user", "name": "User"}
    group = await (await client.get(f"/recap/api/chats/{quote(GROUP_ID)}")).json()
    assert group["visible"][0]["index"] == 1  # the hidden "group chat created" notice is not listed
    missing = await client.get("/recap/api/chats/default-user/chats/nope/nope")
    assert missing.status == 404


async def test_identify_endpoint(client: TestClient[Any, Any]) -> None:
    body = request_body()
    answer = await (await client.post("/recap/api/identify", json=body)).json()
    assert answer == {
        "chat": SOLO_ID,
        "confidence": 1.0,
        "generation": "swipe",
        "target_message": 15,
    }
    bad = await client.post("/recap/api/identify", data=b"{nope")
    assert bad.status == 400 and "JSON" in (await bad.json())["error"]["message"]


async def test_chat_requests_carry_their_chat(
    client: TestClient[Any, Any], fake_llm: FakeLLM
) -> None:
    response = await client.post("/v1/chat/completions", json=request_body(stream=False))
    assert response.status == 200
    assert response.headers["X-Recap-Chat"] == quote(SOLO_ID, safe="")


async def test_header_and_st_metadata_name_the_chat(
    client: TestClient[Any, Any], fake_llm: FakeLLM
) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "Summarise."},
            {"role": "user", "content": "Nothing from any chat."},
        ],
        "model": "m",
    }
    by_header = await client.post(
        "/v1/chat/completions",
        json=body,
        headers={"X-ST-Chat-Id": "Seraphina - 2023-5-12 @21h 32m 29s 224ms"},
    )
    assert by_header.headers["X-Recap-Chat"] == quote(SOLO_ID, safe="")

    metadata = {"version": "1.0", "chat": "2026-11-22@15h51m10s", "operation": "chat-8"}
    block = f"<ST_METADATA>\n{json.dumps(metadata)}\n</ST_METADATA>\n\n"
    tagged = {
        **body,
        "messages": [{"role": "system", "content": block + "Summarise."}, body["messages"][1]],
    }
    by_block = await client.post("/v1/chat/completions", json=tagged)
    assert by_block.headers["X-Recap-Chat"] == quote(GROUP_ID, safe="")
    sent = json.loads(fake_llm.state.seen[-1].body)
    assert sent["messages"][0]["content"] == "Summarise."  # the block never reaches the model
    unknown = await client.post("/v1/chat/completions", json=body)
    assert unknown.headers["X-Recap-Chat"] == ""


async def test_depth_counts_the_chat_file_not_st_injections(
    aiohttp_client: Callable[..., Any], fake_llm: FakeLLM, st_data: Path, tmp_path: Path
) -> None:
    library = ChatLibrary(st_data, Store(tmp_path / "s.sqlite3"))
    await library.index_all()
    from proxy.chat.providers import ChatMemory

    provider = ChatMemory(
        library,
        values=lambda chat: {"running_recap": f"memory of {chat.rsplit('/', 1)[-1][:9]}"},
    )
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "injection.position": "in_chat",
            "injection.depth": 2,
            "injection.template": "{{running_recap}}",
        }
    )
    client = await aiohttp_client(make_app(build_runtime(settings, provider=provider)))
    body = request_body()
    # ST's Author's Note sits at depth 1, before the last chat message.
    note = {"role": "system", "content": "[Author's note: it is raining.]"}
    body["messages"].insert(len(body["messages"]) - 1, note)
    await client.post("/v1/chat/completions", json=body)
    sent = json.loads(fake_llm.state.seen[-1].body)["messages"]
    at = next(i for i, m in enumerate(sent) if m["content"] == "memory of Seraphina")
    # exactly two chat messages follow it; the note does not count
    after = [m for m in sent[at + 1 :] if m is not note and m != note]
    assert len(after) == 2
    assert sent[-2] == note
    await library.store.close()


async def test_nothing_is_written_into_st_data(st_data: Path, client: TestClient[Any, Any]) -> None:
    before = snapshot(st_data)
    await client.post("/recap/api/identify", json=request_body())
    await client.post("/v1/chat/completions", json=request_body(stream=False))
    await client.get("/recap/api/chats")
    await client.close()
    assert snapshot(st_data) == before


async def test_without_a_data_folder_the_api_says_so(
    aiohttp_client: Callable[..., Any], fake_llm: FakeLLM
) -> None:
    settings = make_settings(**{"upstream.base_url": fake_llm.base_url})
    client = await aiohttp_client(make_app(build_runtime(settings)))
    response = await client.get("/recap/api/chats")
    assert response.status == 503
    assert (await response.json())["error"]["type"] == "no_data_folder"
    chat = await client.post("/v1/chat/completions", json=request_body(stream=False))
    assert chat.status == 200


async def test_lore_of_a_generated_message(
    aiohttp_client: Callable[..., Any], fake_llm: FakeLLM, st_data: Path, tmp_path: Path
) -> None:
    from proxy.web.keys import RUNTIME
    from tests.lore_data import entry, write_card, write_world

    user = st_data / "default-user"
    write_world(
        user,
        "Eldoria",
        {"0": entry(0, "Seraphina's glade is warded."), "1": entry(1, "Never in this prompt.")},
    )
    write_card(user, "default_Seraphina", "Seraphina", "Eldoria")
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "sillytavern.data_dir": str(st_data),
            "store.path": str(tmp_path / "store.sqlite3"),
        }
    )
    app = make_app(build_runtime(settings))
    client = await aiohttp_client(app)
    await asyncio.wait_for(app[RUNTIME].memory_parts().library.indexed.wait(), 10)
    assert len(app[RUNTIME].memory_parts().library.index.entries) == 2
    body = request_body(stream=True)
    body["messages"].insert(1, {"role": "system", "content": "Seraphina's glade is warded."})
    response = await client.post("/v1/chat/completions", json=body)
    await response.read()  # the answer streams while the snapshot is made beside it
    await app[RUNTIME].memory_parts().lore.drain()
    # The final file's last reply (index 15) is being swiped: the snapshot is for swipe 1.
    url = f"/recap/api/chats/{quote(SOLO_ID)}/messages/15/lore"
    lore = await (await client.get(url + "?swipe=1")).json()
    assert [(e["world"], e["uid"]) for e in lore["active"]] == [("Eldoria", 0)]
    assert [(e["world"], e["uid"]) for e in lore["inactive"]] == [("Eldoria", 1)]
    assert lore["generation"] == "swipe" and lore["swipe"] == 1
    assert (await client.get(url)).status == 404  # swipe 0 was made before the proxy
    assert (await client.get(url + "?swipe=x")).status == 400


@pytest.mark.parametrize("run", ["claude/stream", "textgen-koboldcpp/chatml_stream"])
async def test_identify_endpoint_takes_claude_and_text_bodies(
    aiohttp_client: Callable[..., Any], tmp_path: Path, run: str
) -> None:
    data = tmp_path / "data"
    [chat] = chats_before(SOURCES / run, "06_swipe", data)
    settings = make_settings(
        **{"sillytavern.data_dir": str(data), "store.path": str(tmp_path / "store.sqlite3")}
    )
    app = make_app(build_runtime(settings))
    client = await aiohttp_client(app)
    await asyncio.wait_for(app[RUNTIME].memory_parts().library.indexed.wait(), 10)
    body = generations(run)["06_swipe"]
    answer = await (await client.post("/recap/api/identify", data=body)).json()
    chat_id = str(chat.relative_to(data).with_suffix(""))
    assert (answer["chat"], answer["generation"]) == (chat_id, "swipe")
