"""Answers in shape: each call asks the server for its operation's JSON shape in the form
the server takes, a server that refuses is asked again without, and a small model that
rambles when left free builds the memory when asked for the shape."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

import pytest

from proxy.core.operations import Operation
from proxy.memory.calls.shapes import (
    SCHEMAS,
    chat_fields,
    completion_fields,
    grammar,
    schema_of,
)
from tests.memory.story import CHAT_ID
from tests.memory_env import Memory, MemoryFactory

NO_RECAPS = {"memory.message_recaps": False, "queue.max_attempts": 1}


def own_calls(memory: Memory) -> list[dict[str, Any]]:
    return [
        json.loads(seen.body)
        for seen in memory.fake.state.seen
        if seen.headers.get("X-Recap-Proxy-Operation")
    ]


async def test_each_call_asks_for_its_operations_shape(memory_proxy: MemoryFactory) -> None:
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    calls = own_calls(memory)
    assert calls
    for body in calls:
        shape = body["response_format"]
        assert isinstance(shape, dict) and shape["type"] == "json_schema"
        named = shape["json_schema"]
        assert named["schema"] == SCHEMAS[Operation(named["name"])]


async def test_a_model_that_rambles_unless_shaped_builds_the_memory(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    memory.fake.state.rambles_unless_shaped = True
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    jobs = await memory.run(lambda db: db.jobs.list(CHAT_ID))
    assert {j.state for j in jobs} == {"done"}


async def test_left_free_the_same_model_fails_plainly_and_nothing_is_lost(
    memory_proxy: MemoryFactory,
) -> None:
    memory = await memory_proxy(
        16, ends={8}, **NO_RECAPS, **{"memory.llm.structured_output": "off"}
    )
    memory.fake.state.rambles_unless_shaped = True
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    assert all("response_format" not in body for body in own_calls(memory))
    [failed] = await memory.run(lambda db: db.jobs.list(CHAT_ID, ("failed",)))
    assert "cut off" in (failed.error or "")
    assert await memory.run(lambda db: db.memory.breaks(CHAT_ID)) == []
    sent = memory.story.request()
    response = await memory.client.post("/v1/chat/completions", json=sent)
    assert response.headers.get("X-Recap-Trimmed", "0") == "0"


async def test_a_server_that_refuses_the_shape_is_asked_without_from_then_on(
    memory_proxy: MemoryFactory, caplog: pytest.LogCaptureFixture
) -> None:
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    memory.fake.state.refuses_shape = True
    caplog.set_level(logging.WARNING, logger="proxy.memory.calls.llm")
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    calls = own_calls(memory)
    forms = [dict(body.get("response_format") or {}).get("type") for body in calls]
    # A JSON schema, then llama.cpp's json_object with the schema, then nothing, for good.
    assert forms[:3] == ["json_schema", "json_object", None] and set(forms[3:]) == {None}
    said = [
        r.getMessage() for r in caplog.records if "refuses structured answers" in r.getMessage()
    ]
    assert len(said) == 2 and "Unrecognized request argument" in said[0]
    assert said[0].endswith("go as json_object ([memory.llm] structured_output)")


async def test_llama_cpp_pythons_server_gets_the_form_it_takes(
    memory_proxy: MemoryFactory,
) -> None:
    """llama-cpp-python's server answers a JSON schema's `response_format` with a 500
    naming it, and takes `json_object` with a schema: the memory builds in that form."""
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    memory.fake.state.json_object_only = True
    memory.fake.state.rambles_unless_shaped = True
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    forms = [dict(body.get("response_format") or {}).get("type") for body in own_calls(memory)]
    assert forms[0] == "json_schema" and set(forms[1:]) == {"json_object"}


def test_each_form_of_the_shape() -> None:
    op = Operation.SCENE_RECAP
    assert chat_fields(op, "json_object") == {
        "response_format": {"type": "json_object", "schema": SCHEMAS[op]}
    }
    assert chat_fields(op, "off") == {}
    assert chat_fields(op, "grammar") == {"grammar": grammar(SCHEMAS[op])}
    assert completion_fields("/completion", op) == {"json_schema": SCHEMAS[op]}
    assert completion_fields("/api/generate", op) == {"format": SCHEMAS[op]}
    assert completion_fields("/api/v1/generate", op) == {"grammar": grammar(SCHEMAS[op])}
    assert completion_fields("/v1/completions", op) == {}


def test_the_grammar_admits_the_answers_the_templates_ask_for() -> None:
    """The GBNF, read back as a regular expression (its rules are regular), matches the
    answers a well-behaved model gives and nothing that breaks the shape."""
    for op, good, bad in (
        (Operation.SCENE_RECAP, '{"scene_name": "The mill", "recap": "Ava hid the \\"key\\".", '
         '"entities": []}', '{"recap": "no title"}'),
        (Operation.SCENE_RECAP, '{"scene_name": "The mill", "recap": "Ava hid the key.", '
         '"entities": [{"name": "Ava", "type": "character", "aliases": [], "facts": '
         '["hid the key", "owns the mill"]}]}',
         '{"scene_name": "x", "recap": "y", "entities": [{"name": "Ava"}]}'),
        (Operation.DETECT_SCENE_BREAK, '{"sceneBreakAt": false, "rationale": "none"}',
         '{"sceneBreakAt": "5", "rationale": "x"}'),
        (Operation.DETECT_SCENE_BREAK, '{"sceneBreakAt": 12, "rationale": "she leaves"}',
         '{"sceneBreakAt": 12}'),
        (Operation.MESSAGE_RECAP, '{"recaps": [{"message": 3, "recap": "a"}, '
         '{"message": 4, "recap": "b"}]}', '{"recaps": [{"recap": "a"}]}'),
        (Operation.RUNNING_RECAP, '{ "recap": "DEVELOPMENTS:\\n- one" }', '{"recap": 3}'),
    ):  # fmt: skip
        pattern = _as_regex(grammar(SCHEMAS[op]))
        assert pattern.fullmatch(good), (op, good)
        assert not pattern.fullmatch(bad), (op, bad)


def _as_regex(gbnf: str) -> re.Pattern[str]:
    """The grammar's rules inlined into one regular expression (they do not recurse)."""
    rules = dict(line.split(" ::= ", 1) for line in gbnf.strip().splitlines())
    terms = {
        "ws": r"[ \t\n]{0,8}",
        "string": r'"(?:[^"\\\x7f\x00-\x1f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"',
        "integer": r"-?[0-9]{1,10}",
        "boolean": r"(?:true|false)",
    }
    out = []
    for token in re.findall(r'"(?:[^"\\]|\\.)*"|\(|\)\*|\)\?|\)|\||[a-z]+', rules["root"]):
        if token.startswith('"'):
            out.append(re.escape(json.loads(token)))
        elif token in terms:
            out.append(terms[token])
        else:
            out.append({"(": "(?:", ")": ")", ")*": ")*", ")?": ")?", "|": "|"}[token])
    return re.compile("".join(out))


async def test_a_prefill_and_stop_strings_per_operation(memory_proxy: MemoryFactory) -> None:
    """`[memory.llm.operations.scene_recap] prefill` starts the model's turn (the answer is
    read with it in front), and `stop` goes as the API's own stop strings."""
    start = '{"scene_name": "'
    operations = {"scene_recap": {"prefill": start, "stop": ["\n\nUser:"]}}
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS, **{"memory.llm.operations": operations})
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    [scene] = [
        json.loads(s.body)
        for s in memory.fake.state.seen
        if s.headers.get("X-Recap-Proxy-Operation") == "scene_recap"
    ]
    assert scene["messages"][-1] == {"role": "assistant", "content": start}
    assert scene["stop"] == ["\n\nUser:"]
    [found] = await memory.run(lambda db: db.memory.breaks(CHAT_ID))
    [recap] = await memory.run(lambda db: db.memory.scene_recaps(found.uid))
    assert recap.recap.startswith("9 messages")


async def test_koboldcpp_is_asked_for_its_own_grammar(memory_proxy: MemoryFactory) -> None:
    """With `auto`, a server that says it is KoboldCpp (`/api/extra/version`) keeps to
    the shape by a GBNF `grammar`, which it reads, rather than a JSON schema."""
    memory = await memory_proxy(16, ends={8}, **NO_RECAPS)
    memory.fake.state.koboldcpp = True
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID))
    calls = own_calls(memory)
    assert calls and all("grammar" in b and "response_format" not in b for b in calls)
    assert calls[0]["grammar"] == grammar(SCHEMAS[Operation.DETECT_SCENE_BREAK])


def test_a_scene_recap_prompt_that_asks_for_no_entities_gets_the_shape_without_them() -> None:
    op = Operation.SCENE_RECAP
    mine = [{"role": "user", "content": 'Recap it. {"scene_name": "<t>", "recap": "<r>"}'}]
    bundled = [{"role": "user", "content": 'Recap it. {"recap": "<r>", "entities": []}'}]
    assert "entities" not in schema_of(op, mine)["properties"]
    assert schema_of(op, bundled) == schema_of(op) == SCHEMAS[op]
    assert chat_fields(op, "grammar", mine) == {"grammar": grammar(schema_of(op, mine))}
    assert completion_fields("/completion", op, mine) == {"json_schema": schema_of(op, mine)}
    other = Operation.RUNNING_RECAP  # only the scene recap lists entities
    assert schema_of(other, mine) == SCHEMAS[other]
