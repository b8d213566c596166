"""A request decoded with the help of the previous one is the request decoded whole; a
body put together from its own bytes is the body re-encoded."""

from __future__ import annotations

import dataclasses
import itertools
import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters import spans
from adapters.base import ParsedRequest
from adapters.openai_chat import OpenAIChatAdapter, _Layout
from proxy.errors import AdapterError
from tests.adapters.edits import layout_of, memory_edits
from tests.core.st_requests import ST_CASSETTES, st_body

ADAPTER = OpenAIChatAdapter()
PAD = "p" * spans.MAP_FROM  # a main prompt long enough for the body to be mapped
SYSTEM = [{"role": "system", "content": PAD}, {"role": "system", "content": "[Start a new Chat]"}]


def compact(body: dict[str, Any]) -> bytes:
    """What ST sends: `JSON.stringify`'s compact JSON."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def request(history: list[dict[str, Any]], **extra: Any) -> bytes:
    return compact({"messages": [*SYSTEM, *history], "model": "m", "stream": True, **extra})


def turn(i: int, text: str = "") -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"({i}) {text}"}


def same_as_whole(raw: bytes, previous: ParsedRequest) -> ParsedRequest:
    got = ADAPTER.parse(raw, previous)
    whole = ADAPTER.parse(raw)
    assert got.body == whole.body and list(got.body) == list(whole.body)
    assert got.messages == whole.messages
    assert got.layout == whole.layout
    assert got.stream == whole.stream and got.model == whole.model
    return got


def test_spans_point_at_each_message() -> None:
    raw = request([turn(i, 'é "q" \\ \n\u2028 😀') for i in range(5)])
    parsed = ADAPTER.parse(raw)
    found = layout_of(parsed, _Layout).spans
    assert found is not None
    wire = parsed.body["messages"]
    assert [orjson.loads(raw[s:e]) for s, e in zip(found.starts, found.ends, strict=True)] == wire
    assert raw[found.close : found.close + 1] == b"]"


def test_only_st_s_compact_layout_is_mapped() -> None:
    history = [turn(i) for i in range(3)]
    loose = json.dumps({"messages": [*SYSTEM, *history]}).encode()
    later = compact({"model": "m", "messages": [*SYSTEM, *history]})
    twice = request(history)[:-1] + b',"messages":[]}'
    small = compact({"messages": history})
    for raw in (loose, later, twice, small):
        assert layout_of(ADAPTER.parse(raw), _Layout).spans is None
    assert ADAPTER.parse(twice).body["messages"] == []  # what a decoder keeps


def test_a_new_turn_decodes_only_the_new_messages() -> None:
    history = [turn(i, "words " * 20) for i in range(40)]
    first = ADAPTER.parse(request(history))
    second = same_as_whole(request([*history, turn(40), turn(41)]), first)
    assert second.carried == 42  # the system messages and the old history
    assert all(a is b for a, b in zip(second.messages, first.messages, strict=False))


def test_st_cutting_the_oldest_messages_keeps_the_rest() -> None:
    history = [turn(i, "words " * 20) for i in range(40)]
    first = ADAPTER.parse(request(history))
    second = same_as_whole(request([*history[3:], turn(40), turn(41)]), first)
    assert second.carried == 2 + 37
    assert second.messages[2] is first.messages[5]


def test_a_depth_injection_that_moved() -> None:
    note = {"role": "system", "content": "[Author's note: rain]"}
    history = [turn(i) for i in range(30)]
    first = ADAPTER.parse(request([*history[:-4], note, *history[-4:]]))
    more = [*history, turn(30), turn(31)]
    second = same_as_whole(request([*more[1:-4], note, *more[-4:]]), first)
    assert second.carried == 2 + 25  # up to where the note was


def test_nothing_shared_decodes_whole() -> None:
    first = ADAPTER.parse(request([turn(i) for i in range(5)]))
    other = [{"role": "system", "content": PAD + "!"}, *[turn(i) for i in range(5)]]
    second = same_as_whole(compact({"messages": other}), first)
    assert second.carried == 0


def test_a_second_messages_key_is_read_as_a_decoder_reads_it() -> None:
    """The last `messages` key is the one that counts, even behind messages shared with
    the previous request."""
    history = [turn(i) for i in range(5)]
    first = ADAPTER.parse(request(history))
    x = json.dumps(turn(9), separators=(",", ":"))
    shared = request(history)[: -len(b'],"model":"m","stream":true}')]
    for raw in (
        shared + f',{x}],"messages":[0,{x}]}}'.encode(),
        shared + f',{x}],"messages":[{x}]}}'.encode(),
    ):
        try:
            whole: Any = ADAPTER.parse(raw).body
        except AdapterError as exc:
            whole = str(exc)
        try:
            got: Any = ADAPTER.parse(raw, first).body
        except AdapterError as exc:
            got = str(exc)
        assert got == whole


def test_a_bad_body_after_a_good_one_is_still_refused() -> None:
    history = [turn(i) for i in range(5)]
    first = ADAPTER.parse(request(history))
    with pytest.raises(AdapterError, match="not valid JSON"):
        ADAPTER.parse(request(history)[:-1], first)  # cut short


texts = st.text(st.characters(codec="utf-8"), max_size=30)  # no lone surrogates
messages = st.builds(
    lambda role, content, name, parts: (
        {"role": role, "content": [{"type": "text", "text": content}, {"n": 2**70}]}
        if parts
        else {"role": role, "content": content, **({"name": name} if name else {})}
    ),
    st.sampled_from(["user", "assistant", "system"]),
    texts,
    st.one_of(st.none(), texts),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    history=st.lists(messages, max_size=40),
    cut=st.integers(0, 40),
    edit=st.one_of(st.none(), st.integers(0, 39)),
    new=st.lists(messages, max_size=4),
    note=st.one_of(st.none(), st.integers(0, 6)),
)
def test_any_next_request_decodes_as_if_whole(
    history: list[dict[str, Any]],
    cut: int,
    edit: int | None,
    new: list[dict[str, Any]],
    note: int | None,
) -> None:
    """ST's next request: the oldest messages cut, one edited, new ones appended, a depth
    injection moved; whatever it shares with the last, it decodes to the same."""
    first = ADAPTER.parse(request(history, temperature=1))
    after = [*history[cut:], *new]
    if edit is not None and edit < len(after):
        after[edit] = {**after[edit], "content": "edited"}
    if note is not None:
        after.insert(max(0, len(after) - note), {"role": "system", "content": "[note]"})
    same_as_whole(request(after, temperature=1), first)


@settings(max_examples=200, deadline=None)
@given(size=st.integers(0, 12), data=st.data())
def test_spliced_bytes_are_the_re_encoded_body(size: int, data: st.DataObject) -> None:
    raw = request([turn(i, "x") for i in range(size)], max_tokens=300)
    parsed = ADAPTER.parse(raw)
    assert layout_of(parsed, _Layout).spans is not None
    whole = dataclasses.replace(
        parsed, layout=dataclasses.replace(layout_of(parsed, _Layout), spans=None)
    )
    parts, replaced, gone = data.draw(memory_edits(len(parsed.messages)))
    assert ADAPTER.apply(parsed, parts, replaced, gone) == ADAPTER.apply(
        whole, parts, replaced, gone
    )


def test_a_message_orjson_would_change_is_not_mapped() -> None:
    """orjson reads integers past 64 bits as floats: such a body is re-encoded the exact
    way, never spliced with a message written back by orjson."""
    big = {"role": "system", "content": PAD, "seed": 2**70}
    raw = compact({"messages": [big, turn(1)]})
    parsed = ADAPTER.parse(raw)
    assert layout_of(parsed, _Layout).spans is None
    out = ADAPTER.apply(parsed, (), {0: "short"})
    assert json.loads(out)["messages"][0] == {"role": "system", "content": "short", "seed": 2**70}


def test_every_real_st_request_decodes_as_if_whole_after_the_one_before() -> None:
    """The requests captured from ST, each after the one before it: each is mapped (ST
    sends compact JSON), and what is taken from the one before decodes as the whole."""
    for series in ("stream", "nonstream"):
        names = sorted(p.stem for p in ST_CASSETTES.glob(f"{series}-*.json"))
        bodies = [raw for raw in map(st_body, names) if raw]
        taken = 0
        for before, raw in itertools.pairwise(bodies):
            wire = orjson.loads(before)["messages"]
            found = spans.measure(before, wire)
            assert found is not None
            decoded = spans.decode(raw, before, wire, found)
            whole = orjson.loads(raw)
            if decoded is not None:
                assert decoded.body == whole
                assert decoded.spans == spans.measure(raw, whole["messages"])
                taken += len(decoded.taken)
        assert taken > 0, series
