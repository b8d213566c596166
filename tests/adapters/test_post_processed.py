"""Chat completions that ST's server post-processed ("Prompt Post-Processing": merge,
semi, strict; a single user message: tests/adapters/test_single.py): the real captures of
`openai-reverse-proxy/stream` run through ST's `mergeMessages`
(`tests.memory.st_wire.post_processed`), told for what they are, identified as the
unprocessed ones are, and given memory as ST merges its own prompts."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from adapters.openai_chat import OpenAIChatAdapter
from adapters.post_processed import MergedLayout, merged, post_processing
from proxy.chat.providers import identify_parsed
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.core.placement import find_history
from proxy.library.chats import ChatLibrary
from proxy.store import Store
from tests.adapters.captures import MARKERS, SOURCES, STEPS, chats_before, generations
from tests.adapters.edits import layout_of, taken_apart
from tests.memory.st_wire import PLACEHOLDER, post_processed

RUN = "openai-reverse-proxy/stream"
ADAPTER = OpenAIChatAdapter()
KINDS = {"06_swipe": "swipe", "07_continue": "continue"}
MODES = ("merge", "semi", "strict")


def processed(step: str, mode: str, **extra: Any) -> bytes:
    body = json.loads(generations(RUN)[step])
    body["messages"] = post_processed(body["messages"], mode, "User", "Seraphina")
    return json.dumps({**body, **extra}).encode()


def messages_of(raw: bytes) -> list[dict[str, Any]]:
    result: list[dict[str, Any]] = json.loads(raw)["messages"]
    return result


def roles(raw: bytes) -> list[str]:
    return [m["role"] for m in messages_of(raw)]


def as_st_sends(raw: bytes, mode: str) -> None:
    """What a post-processed request upstream always is: no two neighbours of one role,
    and (semi, strict) no system message after the first."""
    found = roles(raw)
    assert all(a != b for a, b in pairwise(found)), found
    if mode != "merge":
        assert "system" not in found[1:], found


@pytest.mark.parametrize("step", STEPS)
def test_a_processed_request_is_told_by_its_shape(step: str) -> None:
    raw = generations(RUN)[step]
    assert post_processing(ADAPTER.parse(raw).messages) is None  # as ST sent it
    # The continue nudge stays a system message when only merged: "merge" keeps roles.
    assert layout_of(ADAPTER.parse(processed(step, "merge")), MergedLayout).mode == (
        "merge" if step == "07_continue" else "semi"
    )
    for mode in ("semi", "strict"):
        assert layout_of(ADAPTER.parse(processed(step, mode)), MergedLayout).mode == "semi"


def test_what_st_sends_unprocessed_is_not_taken_for_processed() -> None:
    head = ChatMessage("system", "Main.\n\n[Start a new Chat]")
    chat = [ChatMessage("assistant", "Hi."), ChatMessage("user", "Hello.")]
    assert post_processing([head, *chat]) == "semi"
    # The start-of-chat prompt a message of its own (ST's every request unprocessed).
    own = [ChatMessage("system", "Main."), ChatMessage("system", "[Start a new Chat]"), *chat]
    assert post_processing(own) is None
    # No start-of-chat prompt after a blank line; a name (ST's merge folds names away);
    # two neighbours of one role (ST's merge would have joined them).
    assert post_processing([ChatMessage("system", "Main.\n\nMore."), *chat]) is None
    named = [head, ChatMessage("assistant", "Hi.", "Seraphina"), chat[1]]
    assert post_processing(named) is None
    assert post_processing([head, *chat, ChatMessage("user", "Again.")]) is None


@pytest.mark.parametrize("mode", MODES)
def test_the_history_starts_after_the_start_of_chat_prompt(mode: str) -> None:
    parsed = ADAPTER.parse(processed("05_send_03", mode))
    span = find_history(parsed.messages, MARKERS)
    assert parsed.messages[span.start - 1].text.startswith("[Start a new Chat]")
    first = parsed.messages[span.start]
    if mode == "strict":
        # "strict"'s placeholder before the greeting: ST's prompt, not the user's.
        assert (first.role, first.text) == ("system", PLACEHOLDER)
        first = parsed.messages[span.indices[1]]
    assert first.text.startswith("*You wake with a start")
    assert all(m.role == "system" for m in parsed.messages[: span.start])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("step", STEPS)
async def test_each_step_is_identified_as_the_unprocessed_one(
    step: str, mode: str, tmp_path: Path
) -> None:
    chats_before(SOURCES / RUN, step, tmp_path / "data")
    library = ChatLibrary(tmp_path / "data", Store(tmp_path / "s.sqlite3"))
    await library.index_all()
    try:
        parsed = ADAPTER.parse(processed(step, mode))
        found = await identify_parsed(library, parsed, MARKERS, None)
    finally:
        await library.store.close()
    ident = found.identification
    assert ident is not None and ident.confidence == 1.0
    assert ident.generation == KINDS.get(step, "normal")


def memory_parts(at: int) -> tuple[Insertion, ...]:
    return (
        Insertion(0, Role.SYSTEM, "STABLE", 1),
        Insertion(at, Role.SYSTEM, "CHANGING", 1, part="changing"),
    )


@pytest.mark.parametrize("mode", MODES)
def test_memory_goes_in_as_st_merges_its_own_prompts(mode: str) -> None:
    raw = processed("05_send_03", mode)
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    depth_two = span.indices[-2]  # before the newest reply: two chat messages follow
    sent = ADAPTER.apply(parsed, memory_parts(depth_two))
    # No system message follows the first: even "merge" is written as "semi" (a request
    # that does not tell is written so that a server refusing them takes it too).
    as_st_sends(sent, "semi")
    out, before = messages_of(sent), messages_of(raw)
    # Before the main prompt, in the one system message; the rest of it as it came.
    assert out[0]["content"] == "STABLE\n\n" + before[0]["content"]
    # At depth 2: after the user's message before the reply, as the user's (ST makes a
    # prompt there the user's and joins it).
    assert out[-3] == {**before[-3], "content": before[-3]["content"] + "\n\nCHANGING"}
    # Every other message is the one it came as.
    assert out[1:-3] == before[1:-3] and out[-2:] == before[-2:]


def test_a_merged_request_keeps_the_memory_a_system_message() -> None:
    # The continue nudge is a system message after the first: the request was merged, not
    # "semi", and ST would have sent a system prompt at depth 2 as one.
    raw = processed("07_continue", "merge")
    parsed = ADAPTER.parse(raw)
    span = find_history(parsed.messages, MARKERS)
    sent = ADAPTER.apply(parsed, memory_parts(span.indices[-2]))
    as_st_sends(sent, "merge")
    out, before = messages_of(sent), messages_of(raw)
    assert out[-4:] == [{"role": "system", "content": "CHANGING"}, *before[-3:]]
    assert out[1:-4] == before[1:-3]


def test_memory_after_the_main_prompt_stays_inside_the_first_message() -> None:
    raw = processed("05_send_03", "semi")
    parsed = ADAPTER.parse(raw)
    sent = ADAPTER.apply(parsed, (Insertion(1, Role.SYSTEM, "IN PROMPT", 1),))
    main, _, rest = messages_of(raw)[0]["content"].partition("\n\n")
    assert messages_of(sent)[0]["content"] == f"{main}\n\nIN PROMPT\n\n{rest}"
    assert messages_of(sent)[1:] == messages_of(raw)[1:]


@pytest.mark.parametrize("mode", MODES)
def test_left_out_messages_leave_their_neighbours_merged(mode: str) -> None:
    raw = processed("05_send_03", mode)
    parsed = ADAPTER.parse(raw)
    history = find_history(parsed.messages, MARKERS).indices
    chat = [i for i in history if parsed.messages[i].text != PLACEHOLDER]
    # The greeting's reply (a user's) kept, the reply after it left out: two of the
    # user's messages meet, and are joined as ST would join them.
    drop = ADAPTER.leaves_out(parsed, [chat[0], chat[2]])
    sent = ADAPTER.apply(parsed, memory_parts(chat[-2]), drop=drop)
    as_st_sends(sent, mode)
    texts = "\n".join(m["content"] for m in messages_of(sent))
    for i in chat[:3]:
        assert (parsed.messages[i].text in texts) is (i == chat[1])
    joined = parsed.messages[chat[1]].text + "\n\n" + parsed.messages[chat[3]].text
    assert joined in texts


def test_a_turn_taken_apart_is_written_back_whole_around_the_memory() -> None:
    wire = [
        {"role": "system", "content": "Main.\n\n[Start a new Chat]"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Hello.\n\n[Author's note: rain.]"},
        {"role": "assistant", "content": "Reply."},
        {"role": "user", "content": "Question?"},
    ]
    parsed = ADAPTER.parse(json.dumps({"messages": wire}).encode())
    assert parsed.layout is not None and parsed.layout.merges
    at = [m.text for m in parsed.messages].index("Hello.\n\n[Author's note: rain.]")
    note = ChatMessage("system", "[Author's note: rain.]")
    taken_apart(parsed, {at: [ChatMessage("user", "Hello."), note]})
    assert [m.text for m in parsed.messages][at : at + 2] == ["Hello.", note.text]
    sent = messages_of(ADAPTER.apply(parsed, (Insertion(at + 1, Role.SYSTEM, "MEM", 1),)))
    assert sent[2] == {"role": "user", "content": "Hello.\n\nMEM\n\n[Author's note: rain.]"}
    # The note's paragraph left out with the message: only the note stays.
    sent = messages_of(ADAPTER.apply(parsed, (), drop=[at]))
    assert sent[2] == {"role": "user", "content": "[Author's note: rain.]"}


def test_st_merge_joins_only_text_and_keeps_empty_messages_apart() -> None:
    image = [{"type": "image_url", "image_url": {"url": "data:,"}}]
    listed: list[dict[str, Any]] = [
        {"role": "system", "content": "A"},
        {"role": "system", "content": "B"},
        {"role": "user", "content": "C"},
        {"role": "user", "content": ""},
        {"role": "user", "content": image},
        {"role": "system", "content": "D"},
    ]
    assert merged(listed, "semi") == [
        {"role": "system", "content": "A\n\nB"},
        {"role": "user", "content": "C"},
        {"role": "user", "content": ""},
        {"role": "user", "content": image},
        {"role": "user", "content": "D"},
    ]
    assert merged(listed, "merge")[-1] == {"role": "system", "content": "D"}


def test_a_chat_that_came_with_the_users_message_first_keeps_one_first() -> None:
    wire = [
        {"role": "system", "content": "Main.\n\n[Start a new Chat]"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "U2"},
        {"role": "assistant", "content": "A2"},
        {"role": "user", "content": "U3"},
    ]
    parsed = ADAPTER.parse(json.dumps({"messages": wire}).encode())
    at = {m.text: i for i, m in enumerate(parsed.messages)}
    u1, a1, u2 = at["U1"], at["A1"], at["U2"]
    # A reply would be first: the user's message before it stays.
    assert ADAPTER.leaves_out(parsed, [u1]) == ()
    assert ADAPTER.leaves_out(parsed, [u1, a1, u2]) == (u1, a1)
    assert ADAPTER.leaves_out(parsed, [u1, a1]) == (u1, a1)
    sent = messages_of(ADAPTER.apply(parsed, drop=ADAPTER.leaves_out(parsed, [u1, a1, u2])))
    assert [m["content"] for m in sent[1:]] == ["U2", "A2", "U3"]
    # A chat that starts with a reply (the greeting) may go on with one.
    greeted = [wire[0], {"role": "assistant", "content": "Hi."}, *wire[1:]]
    parsed = ADAPTER.parse(json.dumps({"messages": greeted}).encode())
    hi = [m.text for m in parsed.messages].index("Hi.")
    assert ADAPTER.leaves_out(parsed, [hi, hi + 1]) == (hi, hi + 1)
