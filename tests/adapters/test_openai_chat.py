from __future__ import annotations

import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.openai_chat import OpenAIChatAdapter, _read, _read_each
from proxy.core.models import Insertion, Role
from proxy.errors import AdapterError
from tests.adapters.edits import memory_edits
from tests.core.st_requests import st_body

ADAPTER = OpenAIChatAdapter()


def test_parses_a_real_st_request() -> None:
    parsed = ADAPTER.parse(st_body("stream-12-17_group_send_01"))
    assert parsed.stream is True
    assert parsed.model == "fake-model"
    assert parsed.messages[5].name == "example_user"
    assert parsed.messages[7].text.startswith("[Start a new group chat")


def test_content_arrays_give_their_text() -> None:
    raw = json.dumps(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "look"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                        {"type": "text", "text": "here"},
                    ],
                }
            ]
        }
    ).encode()
    assert ADAPTER.parse(raw).messages[0].text == "look\nhere"


def test_apply_keeps_every_other_field() -> None:
    original = {
        "messages": [
            {"role": "system", "content": "main"},
            {
                "role": "user",
                "name": "Arden",
                "content": [
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
                ],
            },
            {"role": "assistant", "content": None, "tool_calls": [{"id": "1"}]},
        ],
        "model": "m",
        "zeta_unknown": {"nested": [1, 2.5, None]},
        "temperature": 0.7,
        "logit_bias": {},
        "stream": True,
    }
    parsed = ADAPTER.parse(json.dumps(original).encode())
    out = json.loads(ADAPTER.apply(parsed, (Insertion(1, Role.SYSTEM, "MEMORY", 1),)))
    assert list(out) == list(original)
    assert out["messages"].pop(1) == {"role": "system", "content": "MEMORY"}
    assert out == original


def test_apply_handles_integers_beyond_64_bits() -> None:
    raw = b'{"messages":[{"role":"user","content":"x"}],"seed":123456789012345678901234567890}'
    parsed = ADAPTER.parse(raw)
    out = ADAPTER.apply(parsed, (Insertion(0, Role.SYSTEM, "M", 1),))
    assert b"123456789012345678901234567890" in out


@pytest.mark.parametrize(
    "message",
    [
        # Only messages with more than string values are walked for such numbers: these.
        '{"role":"tool","content":"x","tool_call_id":"c","n":123456789012345678901234567890}',
        '{"role":"user","content":[{"type":"text","text":"x","w":123456789012345678901234567}]}',
        '{"role":"user","content":"x","name":123456789012345678901234567890}',
    ],
)
def test_integers_beyond_64_bits_inside_a_message_survive(message: str) -> None:
    history = ",".join(f'{{"role":"user","content":"m{i}"}}' for i in range(5))
    raw = f'{{"messages":[{history},{message}],"seed":1}}'.encode()
    out = ADAPTER.apply(ADAPTER.parse(raw), (Insertion(0, Role.SYSTEM, "M", 1),))
    number = message.rsplit(":", 1)[1].rstrip("}]")
    assert number.encode() in out


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"model": "m"}', "no `messages` list"),
        (b'{"messages": [{"content": "x"}]}', "messages[0]"),
        (b'{"messages": ["x"]}', "messages[0]"),
    ],
)
def test_bad_bodies_are_named(raw: bytes, message: str) -> None:
    with pytest.raises(AdapterError, match=message.replace("[", r"\[").replace("]", r"\]")):
        ADAPTER.parse(raw)


def test_two_parts_and_left_out_messages_in_one_go() -> None:
    messages = [{"role": "system", "content": "main"}] + [
        {"role": "user" if i % 2 else "assistant", "content": f"m{i}"} for i in range(6)
    ]
    parsed = ADAPTER.parse(json.dumps({"messages": messages}).encode())
    parts = (
        Insertion(0, Role.SYSTEM, "STABLE", 1, part="stable"),
        Insertion(5, Role.SYSTEM, "CHANGING", 1, part="changing"),
    )
    out = json.loads(ADAPTER.apply(parsed, parts, {6: "m5 (edited)"}, drop=(1, 2)))
    assert [m["content"] for m in out["messages"]] == [
        "STABLE",
        "main",
        "m2",
        "m3",
        "CHANGING",
        "m4",
        "m5 (edited)",
    ]
    # At one index, in the order given; after the last message too.
    same = (
        Insertion(7, Role.SYSTEM, "A", 1),
        Insertion(7, Role.USER, "B", 1, part="changing"),
    )
    out = json.loads(ADAPTER.apply(parsed, same))
    assert [m["content"] for m in out["messages"][-2:]] == ["A", "B"]
    assert out["messages"][-1]["role"] == "user"


@settings(max_examples=300, deadline=None)
@given(size=st.integers(0, 12), data=st.data())
def test_apply_by_slices_is_apply_message_by_message(size: int, data: st.DataObject) -> None:
    """Whatever the insertions, replacements and left-out runs: each message goes once,
    in order, and each part goes before the message at its index (after the last one at
    the end)."""
    wire = [{"role": "user", "content": f"m{i}", "name": "x"} for i in range(size)]
    parsed = ADAPTER.parse(json.dumps({"messages": wire, "n": 1}).encode())
    parts, replaced, gone = data.draw(memory_edits(size))
    expected: list[str] = []
    for i in range(size + 1):
        expected += [part.text for part in parts if part.index == i]
        if i < size and i not in gone:
            expected.append(replaced.get(i, f"m{i}"))
    out = json.loads(ADAPTER.apply(parsed, parts, replaced, gone))
    assert [m["content"] for m in out["messages"]] == expected
    assert out["n"] == 1 and all(
        m.get("name") == "x" for m in out["messages"] if m["role"] == "user"
    )


_VALUES = st.one_of(
    st.none(),
    st.integers(-3, 3),
    st.text(max_size=3),
    st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": st.text(max_size=3)})),
)


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "assistant"]), "content": st.text(max_size=5)},
                optional={"name": _VALUES, "tool_call_id": _VALUES},
            ),
            st.fixed_dictionaries({}, optional={"role": _VALUES, "content": _VALUES}),
            _VALUES,
        ),
        max_size=6,
    ),
    st.integers(0, 3),
)
def test_the_fast_read_is_the_checked_one(wire: list[object], first: int) -> None:
    """Whatever the messages hold: the same messages and the same indices of those holding
    more than strings as the message-by-message loop, or the same error."""
    try:
        expected = _read_each(wire, first)
    except AdapterError as exc:
        with pytest.raises(AdapterError, match=re.escape(str(exc))):
            _read(wire, first)
        return
    assert _read(wire, first) == expected
