"""Where a request's memory comes from: the chat it is identified as, and the engine's
values for it. A preview is asked for inside the process, never by a client's header."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from adapters import ADAPTERS
from proxy.chat.providers import ChatMemory, NoMemory, StaticMemory, identify_parsed
from proxy.core.models import Caller, ChatMessage, Identification, Memory
from proxy.library.chats import ChatLibrary
from proxy.store import Store
from tests.st_data import MARKERS, SOLO_ID, final_state, save_like_st

REQUESTS = Path(__file__).parent.parent / "data/st-1.12.6/requests.jsonl"


@dataclass(frozen=True)
class Got:
    values: Mapping[str, str]
    drop: tuple[int, ...]


@dataclass
class Engine:
    touched: list[str] = field(default_factory=list)
    active: set[str] = field(default_factory=set)  # none: every request takes the general step

    def touch(self, ident: Identification, headers: Mapping[str, str], caller: Caller) -> None:
        self.touched.append(ident.chat_id)

    def request_memory(
        self,
        ident: Identification,
        messages: Sequence[ChatMessage],
        history: Sequence[int],
        model: str | None,
    ) -> Got:
        return Got({"running_recap": f"recap of {ident.chat_id}"}, (history[0],))

    async def question_ready(self, messages: Sequence[ChatMessage]) -> None:
        return None  # no embeddings: nothing to wait for


def solo_request() -> bytes:
    records = [json.loads(line) for line in REQUESTS.read_text().splitlines()]
    return json.dumps(next(r["body"] for r in records if r["step"] == "14_send_08")).encode()


async def provider(tmp_path: Path) -> tuple[ChatMemory, Engine, Store]:
    data = tmp_path / "data"
    final_state(data / "default-user")
    store = Store(tmp_path / "s.sqlite3")
    library = ChatLibrary(data, store)
    await library.index_all()
    engine = Engine()
    return ChatMemory(library, engine=engine), engine, store


async def test_an_identified_request_gets_its_chats_memory_and_starts_upkeep(
    tmp_path: Path,
) -> None:
    chat_memory, engine, store = await provider(tmp_path)
    parsed = ADAPTERS["chat/completions"].parse(solo_request())
    memory = await chat_memory.memory_for(parsed, {}, markers=MARKERS)
    assert memory is not None and memory.chat_id == SOLO_ID
    assert memory.values == {"running_recap": f"recap of {SOLO_ID}"}
    assert memory.drop and memory.identity is not None
    assert engine.touched == [SOLO_ID]
    await store.close()


async def test_a_preview_starts_nothing_and_a_clients_header_cannot_ask_for_one(
    tmp_path: Path,
) -> None:
    chat_memory, engine, store = await provider(tmp_path)
    parsed = ADAPTERS["chat/completions"].parse(solo_request())
    previewed = await chat_memory.memory_for(parsed, {}, markers=MARKERS, preview=True)
    assert previewed is not None and previewed.chat_id == SOLO_ID
    assert engine.touched == []
    await chat_memory.memory_for(parsed, {"X-Recap-Preview": "1"}, markers=MARKERS)
    assert engine.touched == [SOLO_ID]  # an ordinary request, whatever it claims
    await store.close()


async def test_an_unknown_chat_gets_no_memory(tmp_path: Path) -> None:
    chat_memory, engine, store = await provider(tmp_path)
    raw = json.dumps({"messages": [{"role": "user", "content": "a chat nobody saved"}]})
    parsed = ADAPTERS["chat/completions"].parse(raw.encode())
    memory = await chat_memory.memory_for(parsed, {}, markers=MARKERS)
    assert memory is not None and memory.chat_id is None and not memory.values
    assert engine.touched == []
    await store.close()


def ava_chat(path: Path, *texts: str) -> None:
    """Ava's chat with Tom, the user's message every other one, saved as ST saves it."""
    lines: list[dict[str, object]] = [
        {"user_name": "Tom", "character_name": "Ava", "chat_metadata": {}}
    ]
    for i, text in enumerate(texts):
        lines.append({"name": "Tom" if i % 2 else "Ava", "is_user": bool(i % 2), "mes": text})
    save_like_st(path, "\n".join(json.dumps(line) for line in lines).encode())


async def test_a_single_user_message_is_taken_apart_again_once_its_chat_is_read(
    tmp_path: Path,
) -> None:
    """ST saves the user's message just before it sends the request, and the chat index
    takes a single user message apart (`adapters.single`) before identification reads
    that save in. When the reply before quotes the user's lines, the newest `Tom: `
    paragraphs are none the index holds then, Tom is told no speaker, and his message
    no message of his: taken apart again on the chat as it was saved, it is."""
    path = tmp_path / "data/default-user/chats/Ava/Ava - 2026-11-28@10h00m00s.jsonl"
    reply = "She listens.\n\nTom: One.\n\nShe nods.\n\nTom: Two.\n\nTom: Three.\n\nShe smiles."
    ava_chat(path, "Hello.", "Hi.", reply)
    store = Store(tmp_path / "s.sqlite3")
    library = ChatLibrary(tmp_path / "data", store)
    await library.index_all()
    ava_chat(path, "Hello.", "Hi.", reply, "Tell me more.")  # not read yet
    chat = ["Ava: Hello.", "Tom: Hi.", f"Ava: {reply}", "Tom: Tell me more."]
    text = "\n\n".join(["Write Ava's reply.", "[Start a new Chat]", *chat])
    raw = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()
    parsed = ADAPTERS["chat/completions"].parse(raw)
    found = await identify_parsed(library, parsed, MARKERS, None)
    await store.close()
    assert [(m.role, m.text) for m in parsed.messages[2:]] == [
        ("assistant", "Ava: Hello."),
        ("user", "Tom: Hi."),
        ("assistant", f"Ava: {reply}"),
        ("user", "Tom: Tell me more."),
    ]
    ident = found.identification
    assert ident is not None and ident.chat_id.endswith("Ava - 2026-11-28@10h00m00s")
    assert (ident.generation, ident.target_message, ident.confidence) == ("normal", 4, 1.0)


async def test_fixed_providers() -> None:
    parsed = ADAPTERS["chat/completions"].parse(b'{"messages": []}')
    assert await NoMemory().memory_for(parsed, {}, markers=MARKERS) is None
    fixed = Memory(values={"running_recap": "x"})
    assert await StaticMemory(fixed).memory_for(parsed, {}, markers=(), preview=True) is fixed
