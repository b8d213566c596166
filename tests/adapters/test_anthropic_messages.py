"""Anthropic Messages bodies as ST 1.12.6 sends them to Claude through its reverse proxy
(`tests/data/sources/claude/`): read into the canonical list, identified, and given
memory where each position says, with ST's merging."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from adapters.anthropic_messages import AnthropicMessagesAdapter
from adapters.base import Places
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.core.placement import find_history
from tests.adapters.captures import MARKERS, SOURCES, identify_at
from tests.adapters.captures import generations as captured
from tests.adapters.edits import layout_of, taken_apart

CLAUDE = SOURCES / "claude"
ADAPTER = AnthropicMessagesAdapter()


def generations(variant: str) -> dict[str, bytes]:
    return captured("claude/" + variant)


def body_of(raw: bytes) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(raw)
    return result


def roles(body: dict[str, Any]) -> list[str]:
    return [m["role"] for m in body["messages"]]


def insert(raw: bytes, index: int, role: Role = Role.SYSTEM, text: str = "MEMORY") -> bytes:
    parsed = ADAPTER.parse(raw)
    return ADAPTER.apply(parsed, (Insertion(index, role, text, 1),))


@pytest.mark.parametrize(
    "variant", ["stream", "nonstream", "stream_sysprompt", "stream_authorsnote"]
)
def test_the_canonical_list_finds_the_history_as_for_an_openai_request(variant: str) -> None:
    for step, raw in generations(variant).items():
        parsed = ADAPTER.parse(raw)
        span = find_history(parsed.messages, MARKERS)
        history = [parsed.messages[i] for i in span.indices]
        greeting = [m for m in history if m.text.startswith("*You wake with a start")]
        assert len(greeting) == 1 and greeting[0].role == "assistant", step
        assert parsed.messages[span.start - 1].text.startswith("[Start a new Chat]")
        if step == "07_continue":
            assert parsed.messages[-1].role == "system"  # ST's nudge, a system message again
        else:
            assert history[-1].role == "user"
        assert parsed.stream is (variant != "nonstream")
        assert parsed.model is not None


def test_before_and_in_prompt_go_into_system() -> None:
    raw = generations("stream")["05_send_03"]
    before = body_of(insert(raw, 0))
    assert before["system"] == "MEMORY"
    assert before["messages"] == body_of(raw)["messages"]  # the turns as they were
    parsed = ADAPTER.parse(raw)
    in_prompt = body_of(insert(raw, 1))
    assert in_prompt["system"] == "MEMORY" and len(in_prompt["messages"]) == len(
        parsed.body["messages"]
    )
    sysprompt = generations("stream_sysprompt")["05_send_03"]
    original = body_of(sysprompt)["system"]
    assert body_of(insert(sysprompt, 0))["system"] == "MEMORY\n\n" + original
    assert body_of(insert(sysprompt, 1))["system"] == original + "\n\nMEMORY"
    # A block list stays one, its cached blocks untouched.
    blocks = body_of(sysprompt)
    blocks["system"] = [{"type": "text", "text": original, "cache_control": {"type": "ephemeral"}}]
    raw_blocks = json.dumps(blocks).encode()
    placed = body_of(insert(raw_blocks, 0))["system"]
    assert placed[0] == {"type": "text", "text": "MEMORY"} and placed[1] == blocks["system"][0]


@pytest.mark.parametrize("depth", [0, 1, 2, 3])
@pytest.mark.parametrize("role", [Role.SYSTEM, Role.USER, Role.ASSISTANT])
def test_in_chat_merges_into_a_neighbour_and_keeps_the_turns_alternating(
    depth: int, role: Role
) -> None:
    raw = generations("stream")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    index = span.indices[-depth] if depth else span.end
    placed = body_of(insert(raw, index, role))
    turns = placed["messages"]
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(turns))
    assert turns[0]["role"] == "user"
    texts = [m["content"] for m in turns]
    holder = next(i for i, t in enumerate(texts) if "MEMORY" in t)
    original = [m["content"] for m in body_of(raw)["messages"]]
    # The memory sits so that exactly `depth` of the original turns follow it.
    wanted_role = "assistant" if role is Role.ASSISTANT else "user"
    if texts[holder] == "MEMORY":
        assert turns[holder]["role"] == wanted_role
        assert texts[holder + 1 :] == original[len(original) - depth :]
    elif texts[holder].startswith("MEMORY\n\n"):
        assert texts[holder] == "MEMORY\n\n" + original[len(original) - depth]
    else:
        assert texts[holder] == original[len(original) - depth - 1] + "\n\nMEMORY"
    assert turns[holder]["role"] == wanted_role


def test_left_out_turns_keep_the_rest_alternating() -> None:
    raw = generations("stream")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    # Three turns out (greeting, user, assistant): two user turns meet and merge.
    drop = span.indices[:3]
    out = body_of(ADAPTER.apply(parsed, (), None, drop))
    assert roles(out) == ["user", "assistant", "user"]
    original = body_of(raw)["messages"]
    assert out["messages"][0]["content"] == original[0]["content"] + "\n\n" + original[4]["content"]


@pytest.mark.parametrize(
    "variant", ["stream", "nonstream", "stream_sysprompt", "stream_authorsnote"]
)
def test_left_out_turns_never_leave_the_assistant_first(variant: str) -> None:
    # Claude refuses a conversation that starts with the assistant. With the system prompt
    # apart, ST's first turn is the user's and the greeting follows: leaving out the
    # oldest turns (trimming, a stepped start) keeps the newest user turn before the rest.
    for raw in generations(variant).values():
        parsed = ADAPTER.parse(raw)
        span = find_history(parsed.messages, MARKERS)
        for count in range(1, len(span.indices)):
            turns = body_of(ADAPTER.apply(parsed, (), None, span.indices[:count]))["messages"]
            assert turns[0]["role"] == "user"
    raw = generations("stream_sysprompt")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    original = body_of(raw)["messages"]
    assert [m["role"] for m in original[:4]] == ["user", "assistant", "user", "assistant"]
    turns = body_of(ADAPTER.apply(parsed, (), None, span.indices[:3]))["messages"]
    assert turns == original[2:]  # the third turn, the user's, stays with what follows
    # What is reported as left out (`X-Recap-Trimmed`, the preview) is what went.
    assert ADAPTER.leaves_out(parsed, span.indices[:3]) == tuple(span.indices[:2])
    assert ADAPTER.leaves_out(parsed, span.indices[:2]) == tuple(span.indices[:2])


def test_the_head_and_the_replacements_stay_whole() -> None:
    raw = generations("stream")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    head = [i for i, m in enumerate(parsed.messages) if layout_of(parsed, Places).where[i] < 0]
    out = body_of(ADAPTER.apply(parsed, (), {head[0]: "changed"}, head))
    assert out["messages"] == body_of(raw)["messages"]


async def test_every_captured_request_is_identified(tmp_path: Path) -> None:
    for variant in ("stream", "stream_sysprompt", "stream_authorsnote"):
        kinds = [
            await identify_at(
                CLAUDE / variant, step, ADAPTER.parse(raw).messages, tmp_path / variant / step
            )
            for step, raw in generations(variant).items()
        ]
        assert kinds == ["normal"] * 3 + ["swipe", "continue"], variant


def test_the_two_memory_parts_each_go_to_their_place() -> None:
    """The stable part at the top of `system`, the changing one in the chat at depth 2,
    with the left-out turns gone; the turns still alternate."""
    raw = generations("stream_sysprompt")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    parts = (
        Insertion(0, Role.SYSTEM, "STABLE", 1, part="stable"),
        Insertion(span.indices[-2], Role.SYSTEM, "CHANGING", 1, part="changing"),
    )
    out = body_of(ADAPTER.apply(parsed, parts, None, span.indices[:1]))
    original = body_of(raw)
    assert out["system"] == "STABLE\n\n" + original["system"]
    assert all(a["role"] != b["role"] for a, b in itertools.pairwise(out["messages"]))
    holder = next(m for m in out["messages"] if "CHANGING" in m["content"])
    # Two of the original turns follow the changing part.
    tail = [m["content"] for m in original["messages"][-2:]]
    assert out["messages"][-1]["content"] == tail[-1]
    assert holder["content"].endswith("CHANGING") or holder["content"].startswith("CHANGING")
    # Both at the top: they keep their order there.
    both = (parts[0], Insertion(0, Role.SYSTEM, "CHANGING", 1, part="changing"))
    top = body_of(ADAPTER.apply(parsed, both))["system"]
    assert top == "STABLE\n\nCHANGING\n\n" + original["system"]


def test_a_turn_taken_apart_goes_only_with_all_of_its_parts() -> None:
    raw = generations("stream_sysprompt")["05_send_03"]
    parsed = ADAPTER.parse(raw)
    original = body_of(raw)["messages"]
    assert parsed.layout is not None and parsed.layout.merges
    # The user's first turn after the greeting (the body's third) was two messages ST
    # merged: its parts share its place.
    turn = layout_of(parsed, Places).where.index(2)
    text = parsed.messages[turn].text
    taken_apart(parsed, {turn: [ChatMessage("user", text), ChatMessage("system", "[Nudge]")]})
    assert layout_of(parsed, Places).where[turn - 1 : turn + 3] == (1, 2, 2, 3)
    assert len(parsed.messages) == len(layout_of(parsed, Places).where)
    # One part out: the turn stays; both out: it goes, and the greeting before it too.
    assert ADAPTER.leaves_out(parsed, [turn]) == ()
    assert body_of(ADAPTER.apply(parsed, (), None, [turn]))["messages"] == original
    gone = ADAPTER.leaves_out(parsed, [turn - 1, turn, turn + 1])
    assert gone == (turn - 1, turn, turn + 1)
    out = body_of(ADAPTER.apply(parsed, (), None, gone))["messages"]
    assert out == [original[0], *original[3:]]
    # Memory before the second part goes before the whole turn, merged into it.
    placed = body_of(ADAPTER.apply(parsed, (Insertion(turn + 1, Role.SYSTEM, "MEMORY", 1),)))
    assert placed["messages"][2]["content"] == "MEMORY\n\n" + original[2]["content"]
