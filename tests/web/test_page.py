"""The dashboard's files and what it reads: served by the proxy, open without the access
key (they hold no data), small; the chat list, the messages and the budget it shows."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from proxy.chat.providers import NoMemory
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from proxy.web.page import STATIC
from tests.conftest import make_settings
from tests.memory.story import CHAT_ID, Story
from tests.memory_env import MemoryFactory

CHAT = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"


async def test_the_page_loads_without_the_key_and_its_data_needs_it(aiohttp_client: Any) -> None:
    settings = make_settings(**{"server.access_key": "s3cret"})
    client = await aiohttp_client(make_app(build_runtime(settings, provider=NoMemory())))
    page = await client.get("/recap/")
    assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    html = await page.text()
    assert "/recap/static/chat.js" in html and "http" not in html.replace("http-equiv", "")
    kinds = {
        "app.js": "javascript",
        "chat.js": "javascript",
        "entities.js": "javascript",
        "app.css": "text/css",
    }
    for name, kind in kinds.items():
        answer = await client.get(f"/recap/static/{name}")
        assert answer.status == 200 and kind in answer.headers["Content-Type"]
    assert (await client.get("/recap/static/secrets.json")).status == 404
    assert (await client.get("/recap/static/..%2F..%2Fkeys.py")).status == 404
    moved = await client.get("/recap", allow_redirects=False)
    assert moved.status == 302 and moved.headers["Location"] == "/recap/"
    assert (await client.get("/recap/api/queue")).status == 401  # the data is not open
    assert (await client.get("/recap/api/queue", headers={"X-Recap-Key": "s3cret"})).status != 401


def test_the_first_load_is_small_and_fetches_nothing_from_outside() -> None:
    files = sorted(STATIC.iterdir())
    assert {f.name for f in files} == {"index.html", "app.js", "chat.js", "entities.js", "app.css"}
    assert sum(f.stat().st_size for f in files) < 100 * 1024
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert "https://" not in text and "http://" not in text, path.name


async def test_the_root_names_the_dashboard(aiohttp_client: Any) -> None:
    client = await aiohttp_client(make_app(build_runtime(make_settings(), provider=NoMemory())))
    root = await (await client.get("/")).json()
    assert root["dashboard"].endswith("/recap/")


async def test_what_the_page_reads(memory_proxy: MemoryFactory) -> None:
    def build(story: Story) -> None:
        story.grow(16)
        story.messages[3]["is_system"] = True  # hidden in ST
        story.save()

    memory = await memory_proxy(0, {8}, build=build, **{"memory.message_recaps": False})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.current_running(CHAT_ID) is not None)
    chats = await (await memory.client.get("/recap/api/chats")).json()
    chat = next(c for c in chats if c["id"] == CHAT_ID)
    assert chat["enabled"] is None and chat["memory"]["scenes"] == 1
    assert chat["memory"]["running_version"] == 1 and chat["memory"]["active"] is True
    assert chat["usage"]["today"]["calls"] >= 3 and chat["usage"]["total"]["prompt_tokens"] > 0
    # What the API said each call cost (the fake says its cl100k counts), summed.
    spent = [sum(counts[i] for counts in memory.fake.state.usage.values()) for i in range(3)]
    total = chat["usage"]["total"]
    assert [total["calls"], total["prompt_tokens"], total["answer_tokens"]] == spent
    messages = await (await memory.client.get(CHAT + "/messages")).json()
    assert len(messages) == 16 and messages[3]["hidden"] is True
    assert messages[0]["text"] == memory.story.messages[0]["mes"]  # whole, not cut
    preview = await (await memory.client.get(CHAT + "/preview")).json()
    budget = preview["budget"]
    assert budget["memory"] == preview["injected"]["tokens"] > 0
    assert budget["left_out"] > 0 and budget["sent"] > 0  # history through 8 is covered
    assert preview["placement"] == {"position": "before_prompt", "depth": 2, "role": "system"}
