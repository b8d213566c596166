"""ST's "Single user message" post-processing: the real captures of
`openai-reverse-proxy/stream` run through ST's `mergeMessages` with `single`
(`tests.memory.st_wire.post_processed`), read back into ST's messages with the chat
index's help, identified as the unprocessed ones are, and written back as one message."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from adapters.openai_chat import OpenAIChatAdapter
from adapters.single import SingleLayout, single_message
from proxy.chat.providers import identify_parsed
from proxy.core.models import Insertion, Role
from proxy.library.chats import ChatLibrary
from proxy.store import Store
from tests.adapters.captures import MARKERS, SOURCES, STEPS, chats_before, generations
from tests.adapters.edits import layout_of
from tests.memory.st_wire import post_processed

RUN = "openai-reverse-proxy/stream"
ADAPTER = OpenAIChatAdapter()
KINDS = {"06_swipe": "swipe", "07_continue": "continue"}


def single(step: str) -> bytes:
    body = json.loads(generations(RUN)[step])
    body["messages"] = post_processed(body["messages"], "single", "User", "Seraphina")
    return json.dumps(body).encode()


def content(raw: bytes) -> str:
    [message] = json.loads(raw)["messages"]
    assert message["role"] == "user"
    text: str = message["content"]
    return text


@pytest.fixture
async def library(tmp_path: Path) -> AsyncIterator[ChatLibrary]:
    chats_before(SOURCES / RUN, "05_send_03", tmp_path / "data")
    found = ChatLibrary(tmp_path / "data", Store(tmp_path / "s.sqlite3"))
    await found.index_all()
    yield found
    await found.store.close()


@pytest.mark.parametrize("step", STEPS)
def test_a_single_user_message_is_told_by_its_shape(step: str) -> None:
    assert not single_message(ADAPTER.parse(generations(RUN)[step]).messages)
    parsed = ADAPTER.parse(single(step))
    assert layout_of(parsed, SingleLayout).unsplit
    # ST's prompts up to the start of the chat, one system message a paragraph; the rest
    # waits for the chat index.
    *head, rest = parsed.messages
    assert [m.role for m in head] == ["system"] * len(head)
    assert head[-1].text == "[Start a new Chat]" and rest.text.startswith("Seraphina: ")
    # One user message without the start of a chat is someone else's: not taken.
    other = json.dumps({"messages": [{"role": "user", "content": "Hi.\n\nThere."}]})
    assert ADAPTER.parse(other.encode()).layout.__class__ is not SingleLayout


@pytest.mark.parametrize("step", STEPS)
async def test_each_step_is_identified_as_the_unprocessed_one(step: str, tmp_path: Path) -> None:
    chats_before(SOURCES / RUN, step, tmp_path / "data")
    library = ChatLibrary(tmp_path / "data", Store(tmp_path / "s.sqlite3"))
    await library.index_all()
    try:
        plain = ADAPTER.parse(generations(RUN)[step])
        parsed = ADAPTER.parse(single(step))
        found = await identify_parsed(library, parsed, MARKERS, None)
        expected = await identify_parsed(library, plain, MARKERS, None)
    finally:
        await library.store.close()
    ident, want = found.identification, expected.identification
    assert ident is not None and want is not None and ident.confidence == 1.0
    assert ident.generation == KINDS.get(step, "normal")
    assert (ident.target_message, ident.matched) == (want.target_message, want.matched)
    # The chat messages, each the user's or a reply as in the file, named as ST named them.
    chat = [parsed.messages[i] for i in found.span.indices]
    assert [m.role for m in chat] == [plain.messages[i].role for i in expected.span.indices]
    assert chat[0].text.startswith("Seraphina: *You wake with a start")


async def test_memory_goes_in_as_a_paragraph_of_the_one_message(library: ChatLibrary) -> None:
    raw = single("05_send_03")
    parsed = ADAPTER.parse(raw)
    found = await identify_parsed(library, parsed, MARKERS, None)
    history = found.span.indices
    parts = (
        Insertion(0, Role.SYSTEM, "STABLE", 1),
        Insertion(history[-2], Role.SYSTEM, "CHANGING", 1, part="changing"),
    )
    sent = content(ADAPTER.apply(parsed, parts))
    before = content(raw)
    # Before the main prompt, and before the message at depth two, as ST would have
    # merged its own prompts there; every other paragraph as it came.
    newest = "\n\n".join(parsed.messages[i].text for i in history[-2:])
    assert sent == "STABLE\n\n" + before.replace(newest, "CHANGING\n\n" + newest)
    # Left out: its paragraphs go, the others stay joined as they were.
    gone = parsed.messages[history[1]].text
    drop = ADAPTER.leaves_out(parsed, [history[1]])
    left = content(ADAPTER.apply(parsed, (), drop=drop))
    assert gone not in left and left == before.replace(gone + "\n\n", "")
    # Nothing in, nothing out: read back, the message it was, paragraph for paragraph.
    assert json.loads(ADAPTER.apply(parsed, ())) == json.loads(raw)
