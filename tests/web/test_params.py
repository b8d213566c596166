"""Hostile input on every `/recap` route: huge numbers, bad UTF-8, deep nesting, wrong
types, garbage. Every answer is JSON, and bad input is a 4xx: never a 500, never a trace."""

from __future__ import annotations

import itertools
import json
import random
import re
from typing import Any

from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory

NUMBERS = ["0", "5", "2147483648", "99999999999999999999999"]
CHATS = [CHAT_ID, "nope", "x" * 3000, "a/../../b", "%00", "%ff%fe"]
FIELDS = ["recap", "content", "version", "current_version", "name", "scene_name", "enabled",
          "excluded", "visible"]  # fmt: skip
BODIES: list[bytes | None] = [
    None,
    b"",
    b"\xff\xfe\x00 not utf-8",
    b"[" * 5000,
    b'{"a":' * 3000 + b"1" + b"}" * 3000,
    b'{"version": 99999999999999999999999}',
    b'{"version": 1e999, "content": null}',
    b'{"recap": 5, "enabled": "yes", "excluded": 3, "name": [], "visible": {}}',
    b'"just a string"',
    b"null",
    b"{}",
]


def garbage(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "big", "float", "str", "bool", "null", "list", "dict"][: 8 if depth < 3 else 6]
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.randint(-(2**31), 2**31)
    if kind == "big":
        return rng.choice([2**63 - 1, -(2**63), 10**15])
    if kind == "float":
        return rng.choice([0.5, -1e300, 3.0])
    if kind == "str":
        return rng.choice(["", "x" * rng.randint(1, 5000), "\u0000\ud7ff", "💥"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [garbage(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(FIELDS): garbage(rng, depth + 1) for _ in range(rng.randint(0, 4))}


# Routes that answer no JSON: the event stream (tested in test_events_api) and the page.
NOT_JSON = ("/recap/api/events", "/recap/static", "/recap/{")


def paths(formatter: str) -> list[str]:
    names = re.findall(r"{(\w+)}", formatter)
    values = {
        "chat_id": CHATS,
        "index": NUMBERS,
        "job": NUMBERS,
        "action": ["pause", "resume", "bogus"],
    }
    out = []
    for combo in itertools.product(*(values.get(n, ["x"]) for n in names)):
        path = formatter
        for name, value in zip(names, combo, strict=True):
            path = path.replace("{" + name + "}", value, 1)
        out.append(path)
    return out


async def test_every_recap_route_answers_hostile_input_with_json_and_no_500(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8}, **{"memory.llm.model": "fake-model"})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    rng = random.Random(20261122)
    routes = [
        r for r in memory.app.router.routes()
        if r.resource is not None and r.resource.canonical.startswith("/recap")
        and r.method not in ("HEAD", "*")  # no body by definition; the not-found catch-all
        and not r.resource.canonical.startswith(NOT_JSON)
        and r.resource.canonical not in ("/recap", "/recap/")  # the page (test_page)
    ]  # fmt: skip
    assert len(routes) > 20
    tried = 0
    for route in routes:
        assert route.resource is not None
        info = route.resource.get_info()
        formatter = info.get("formatter") or info.get("path") or route.resource.canonical
        for path in paths(formatter):
            bodies = BODIES if route.method != "GET" else [None]
            randoms = [json.dumps(garbage(rng)).encode() for _ in range(3)]
            for body in bodies + (randoms if route.method != "GET" else []):
                response = await memory.client.request(
                    route.method,
                    path,
                    data=body,
                    headers={"Content-Type": "application/json"} if body is not None else {},
                )
                tried += 1
                text = await response.text()
                assert response.status < 500, (route.method, path[:80], body and body[:60], text)
                assert text, (route.method, path[:80], response.status)
                data = json.loads(text)  # always JSON
                if response.status >= 400:
                    assert set(data["error"]) == {"message", "type", "code"}
                    assert "Traceback" not in text
    assert tried > 500
    # and the story's memory still works after all that
    overview = await memory.client.get(f"/recap/api/chats/{CHAT_ID}/memory")
    assert overview.status == 200
