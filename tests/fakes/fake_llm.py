"""A deterministic fake OpenAI-compatible LLM server, for tests and benchmarks.

Runs in-process (`make_fake_llm()` with pytest-aiohttp's `aiohttp_server`) or as its own
process (`python -m tests.fakes.fake_llm --port N`). Its behaviour is steered by the
`X-Fake` request header so that one server serves every case:

    (none)      a normal answer; SSE when the body says `"stream": true`
    status=N    answer status N with an OpenAI-style error body
    slow        wait (up to 30 s) before answering: for disconnect tests
    gzip        gzip-compressed answer (when the client accepts gzip)
    break       stream two chunks, then drop the connection
    reasoning   stream reasoning and tool-call deltas too

Claude's `/v1/messages` and the text completion routes (`tests.fakes.fake_text`) answer
in their own wire formats.

The proxy's own calls (`X-Recap-Proxy-Operation`) get answers made from their prompt, as
a well-behaved model would give them (see `memory_answer`): recaps naming each message
asked about, a scene break on the first eligible message that holds `[END SCENE]`, scene
recaps that keep the scene's notable sentences (names, places, numbers), a running recap
that grows by a line per scene whatever its budget, and a condenser that keeps only the
newest lines within the budget its prompt states. `FakeState.faults[operation]` lists
modes (`garbage`, `status=N`, `slow`, `hold`: wait for `release`, `long`: an answer far
over any limit; as a small or base model answers: `echo`, the prompt copied back, its
example answer included; `placeholders`, the prompt's example answer with its `<...>`
placeholders as they stand; `unrelated`, a well-formed answer about something else;
`answer=TEXT`, TEXT) used up by that operation's next calls.

Like a real model, it honours `max_tokens` (counted as 4 characters a token): a longer
answer is cut there and ends with `finish_reason: "length"`.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
from collections import deque
from collections.abc import MutableSequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from proxy.core.tokens import TokenCounter

REPLY = "[fake-llm reply] The forest is quiet tonight."
COUNTER = TokenCounter()


@dataclass
class Seen:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass
class FakeState:
    # Every request, for in-process tests to read. A server of its own (`main`: benchmarks,
    # end-to-end tests) keeps the last few only: no one reads them there, and a benchmark
    # sends it gigabytes that would stay in its heap.
    seen: MutableSequence[Seen] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    started: asyncio.Event = field(default_factory=asyncio.Event)
    chunk_delay: float = 0.0
    gate: asyncio.Event | None = None  # when set: hold the stream after its first event
    # When set: hold the stream before its first event, its headers sent (a slow first token).
    first_token: asyncio.Event | None = None
    faults: dict[str, list[str]] = field(default_factory=dict)
    held: asyncio.Event = field(default_factory=asyncio.Event)  # a `hold` call arrived
    release: asyncio.Event = field(default_factory=asyncio.Event)  # lets `hold` calls answer
    operations: list[str] = field(default_factory=list)  # the proxy's own calls, in order
    # operation -> [calls, prompt tokens, answer tokens] (cl100k), for benchmarks
    usage: dict[str, list[int]] = field(default_factory=dict)
    chat_route: bool = True  # False: `/v1/chat/completions` is a 404 (text-only server)
    # As a small model behaves: left free it copies the prompt back and rambles on past
    # any limit; asked for a shape (`response_format`, `grammar`), it answers in it.
    rambles_unless_shaped: bool = False
    # As a server without structured output: a 400 naming `response_format`.
    refuses_shape: bool = False
    # As llama-cpp-python's server: a JSON schema's `response_format` is a 500 naming it;
    # `json_object` with a schema is taken.
    json_object_only: bool = False
    # The reasoning a thinking model gives before its answers to the proxy's own calls.
    thinking: str | None = None
    # Says it is KoboldCpp (`/api/extra/version`); else that path is a 404, as elsewhere.
    koboldcpp: bool = False


STATE = web.AppKey("state", FakeState)


def sse_chunks(
    reply: str, *, model: str, reasoning: bool = False, finish: str = "stop"
) -> list[bytes]:
    """OpenAI-style SSE events for `reply`, a few words per event."""
    base = {"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model}

    def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return b"data: " + json.dumps({**base, "choices": [choice]}).encode() + b"\n\n"

    chunks = [event({"role": "assistant", "content": ""})]
    if reasoning:
        chunks.append(event({"reasoning_content": "Thinking about the forest… "}))
        call = {"index": 0, "id": "call_1", "type": "function"}
        call["function"] = {"name": "roll_dice", "arguments": '{"sides": 20}'}
        chunks.append(event({"tool_calls": [call]}))
    words = reply.split(" ")
    for i in range(0, len(words), 3):
        piece = " ".join(words[i : i + 3]) + (" " if i + 3 < len(words) else "")
        chunks.append(event({"content": piece}))
    chunks.append(event({}, finish))
    chunks.append(b"data: [DONE]\n\n")
    return chunks


CHARS_PER_TOKEN = 4


def limited(reply: str, max_tokens: object) -> tuple[str, str]:
    """(the reply cut at `max_tokens`, its finish_reason)."""
    if isinstance(max_tokens, int) and len(reply) > max_tokens * CHARS_PER_TOKEN:
        return reply[: max_tokens * CHARS_PER_TOKEN], "length"
    return reply, "stop"


def completion(
    reply: str, *, model: str, finish: str = "stop", usage: tuple[int, int] = (1, 1)
) -> dict[str, Any]:
    """A chat completion; `usage`: the prompt's and the answer's tokens, as an API says
    them (the proxy's own calls get their real counts, a chat's reply a token each)."""
    prompt, answer = usage
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": reply},
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": answer,
            "total_tokens": prompt + answer,
        },
    }


END_SCENE = "[END SCENE]"
# The closure of each scene of `recap-proxy eval`'s story, as a real model reads it.
CLOSURE = "that was the end of the day there"
_NUMBERED = re.compile(
    r"^Message #(\d+|invalid choice) \[([^\]]*)\]:\s*(.*?)(?=^Message #|\Z)", re.M | re.S
)


def _between(prompt: str, tag: str) -> str:
    found = re.search(f"<{tag}>(.*?)</{tag}>", prompt, re.S)
    return found.group(1).strip() if found else ""


_SENTENCE = re.compile(r"[^.!?\n]+[.!?]")
# Notable: a name or place inside a sentence (a capital after its first word), or a number.
_NOTABLE = re.compile(r"\S\s+[A-Z][a-z]|\d")
_MAX_WORDS = re.compile(r"at most (\d+) words", re.IGNORECASE)


def notable(text: str) -> list[str]:
    """The sentences a recap keeps: the ones with names, places or numbers."""
    found = []
    for sentence in _SENTENCE.findall(text):
        sentence = " ".join(sentence.split())
        if _NOTABLE.search(sentence) and sentence not in found and END_SCENE not in sentence:
            found.append(sentence)
    return found


# An entity a test story names, with what the scene says of it: `[[Name: a fact]]`.
_ENTITY = re.compile(r"\[\[([^:\]]+): ([^\]]+)\]\]")


def entities_in(text: str) -> list[dict[str, object]]:
    """The entities a scene's messages name (`[[Name: a fact]]`), as a model lists them."""
    found: dict[str, dict[str, object]] = {}
    for name, fact in _ENTITY.findall(text):
        entry = found.setdefault(name, {"name": name, "type": "character", "aliases": [],
                                        "facts": []})  # fmt: skip
        facts = entry["facts"]
        assert isinstance(facts, list)
        facts.append(fact)
    return list(found.values())


def condensed(recap: str, max_words: int) -> str:
    """The newest lines that fit in two thirds of `max_words` (room for what the next
    scenes add): recent detail stays, old detail goes."""
    max_words = max_words * 2 // 3
    kept: list[str] = []
    used = 0
    for line in reversed([line for line in recap.splitlines() if line.strip()]):
        # Words, or a token's four characters for long made-up words: a model keeps to
        # the prompt's "about N tokens" as well as to its words.
        size = max(len(line.split()), len(line) // 4)
        if used + size > max_words:
            break
        kept.append(line)
        used += size
    if not kept and recap.strip():  # the newest line alone is over the budget: its start
        kept.append(" ".join(recap.strip().splitlines()[-1].split()[:max_words]))
    return "\n".join(reversed(kept))


def memory_answer(operation: str, prompt: str) -> str:
    """What a cooperative model answers to one of the proxy's own prompts."""
    if operation == "message_recap":
        recaps = [
            {"message": int(n), "recap": f"#{n}: " + " ".join(text.split()[:8])}
            for n, _, text in _NUMBERED.findall(_between(prompt, "MESSAGES"))
        ]
        return "```json\n" + json.dumps({"recaps": recaps}) + "\n```"
    if operation == "detect_scene_break":
        for n, _, text in _NUMBERED.findall(_between(prompt, "SOURCE_TEXT")):
            if n != "invalid choice" and (END_SCENE in text or CLOSURE in text):
                return json.dumps({"sceneBreakAt": int(n), "rationale": "the scene ends"})
        return json.dumps({"sceneBreakAt": False, "rationale": "No scene break"})
    if operation == "scene_recap":
        blocks = [b for b in _between(prompt, "SCENE").split("\n\n") if b.strip()]
        first = blocks[0].splitlines()[-1] if blocks else "?"
        lore = _between(prompt, "ACTIVE_LORE")
        recap = f"{len(blocks)} messages, from: {' '.join(first.split()[:6])}"
        if lore:
            recap += f" (lore: {lore.splitlines()[0][:40]})"
        facts = notable(_between(prompt, "SCENE"))
        if facts:
            recap += ". " + " ".join(facts)
        limit = _MAX_WORDS.search(prompt)  # the prompt's "At most 250 words"
        if limit:
            recap = " ".join(recap.split(" ")[: int(limit.group(1))])
        answer: dict[str, object] = {"scene_name": " ".join(first.split()[:3]), "recap": recap}
        if '"entities"' in prompt:  # the template asks for them
            answer["entities"] = entities_in(_between(prompt, "SCENE"))
        return json.dumps(answer)
    if operation == "running_recap":
        before = _between(prompt, "RUNNING_RECAP")
        scene = " ".join(_between(prompt, "NEW_SCENE").split())
        return json.dumps({"recap": (before + "\n" if before else "") + f"- {scene}"})
    if operation == "condense_running_recap":
        budget = _MAX_WORDS.search(prompt)
        before = _between(prompt, "RUNNING_RECAP")
        return json.dumps({"recap": condensed(before, int(budget.group(1)) if budget else 200)})
    if operation == "condense_entity":
        budget = _MAX_WORDS.search(prompt)
        told = [line[2:] for line in _between(prompt, "FACTS").splitlines() if line[:2] == "- "]
        # What is current: the newest facts, as many as fit (a later one overrides).
        kept = condensed("\n".join(told), int(budget.group(1)) if budget else 100)
        return json.dumps({"facts": kept.splitlines()})
    return json.dumps({"error": f"unknown operation {operation}"})


async def models(request: web.Request) -> web.Response:
    request.app[STATE].seen.append(await seen_of(request))
    return web.json_response({"object": "list", "data": [{"id": "fake-model"}]})


async def chat(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    seen = await seen_of(request)
    state.seen.append(seen)
    if not state.chat_route:
        raise web.HTTPNotFound(text="Not Found")
    state.started.set()
    # The steering word comes from the X-Fake header, or from the model name for callers
    # that cannot add headers (the proxy's own LLM client).
    try:
        payload = json.loads(seen.body)
    except ValueError:
        payload = None
    mode = request.headers.get("X-Fake", "")
    operation = request.headers.get("X-Recap-Proxy-Operation")
    if operation is not None:
        state.operations.append(operation)
        pending = state.faults.get(operation)
        mode = pending.pop(0) if pending else mode
    if not mode and isinstance(payload, dict) and str(payload.get("model")).startswith("status="):
        mode = str(payload["model"])
    if mode.startswith("status="):
        status = int(mode.split("=", 1)[1])
        body = {"error": {"message": f"fake error {status}", "type": "fake", "code": status}}
        return web.json_response(body, status=status, headers={"X-Fake-Error": "yes"})
    if mode == "hold":
        state.held.set()
        await state.release.wait()
    if mode == "slow":
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            state.cancelled.set()
            raise
    if not isinstance(payload, dict):
        return web.json_response({"error": {"message": "bad json"}}, status=400)
    shaped = bool(SHAPE_FIELDS & payload.keys())
    if operation is not None and state.refuses_shape and shaped:
        message = "Unrecognized request argument supplied: response_format"
        return web.json_response({"error": {"message": message, "type": "invalid_request_error"}},
                                 status=400)  # fmt: skip
    form = payload.get("response_format")
    schema_form = isinstance(form, dict) and form.get("type") != "json_object"
    if operation is not None and state.json_object_only and schema_form:
        message = ("1 validation error: {'type': 'literal_error', 'loc': ('body', "
                   "'response_format', 'type'), 'msg': \"Input should be 'text' or "
                   "'json_object'\"}")  # fmt: skip
        return web.json_response({"error": {"message": message}}, status=500)
    model = str(payload.get("model", "fake-model"))
    limit = payload.get("max_tokens")
    if operation is not None:
        # The prompt is the first user message (a re-ask appends to the conversation).
        prompt = str(next(m for m in payload["messages"] if m["role"] == "user")["content"])
        if mode == "garbage":
            answer = "Sure! {{{ not json"
        elif mode == "echo":
            answer = f"{prompt}\n\nMessage #99: and then the story went on."
        elif mode == "placeholders":
            answer = next(
                line for line in prompt.splitlines() if line.startswith("{") and "<" in line
            )
        elif mode == "unrelated":
            answer = json.dumps(UNRELATED.get(operation, {"recap": UNRELATED_TEXT}))
        elif mode == "long":
            answer = json.dumps({"recap": "and then " * 4000})
        elif mode.startswith("answer="):
            answer = mode.removeprefix("answer=")
        elif state.rambles_unless_shaped and not shaped:
            answer = f"{prompt}\n\n" * 20  # far past any limit: cut off
        else:
            answer = memory_answer(operation, prompt)
        last = payload["messages"][-1]
        if last.get("role") == "assistant" and answer.startswith(str(last.get("content"))):
            # A prefilled turn: the answer goes on from it, as a local server's does.
            answer = answer[len(str(last["content"])) :]
        answer, finish = limited(answer, limit)
        contents = [str(m.get("content", "")) for m in payload["messages"]]
        usage = count_call(state, operation, contents, answer)
        done = completion(answer, model=model, finish=finish, usage=usage)
        if state.thinking:
            done["choices"][0]["message"]["reasoning_content"] = state.thinking
        return web.json_response(done)
    reply, finish = limited(REPLY, limit)
    if not payload.get("stream"):
        raw = json.dumps(completion(reply, model=model, finish=finish)).encode()
        if mode == "gzip":
            return web.Response(
                body=gzip.compress(raw),
                headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
            )
        return web.Response(body=raw, content_type="application/json")
    chunks = sse_chunks(reply, model=model, reasoning=mode == "reasoning", finish=finish)
    return await stream(request, chunks, drop_at=2 if mode == "break" else None)


# The request fields that ask a server for an answer in shape (`proxy.memory.calls.shapes`).
SHAPE_FIELDS = frozenset({"response_format", "grammar", "json_schema", "format"})

# A well-formed answer about something else than its prompt (a model that lost the thread).
UNRELATED_TEXT = "Quarterly shipping volumes rose sharply across northern harbours overall."
UNRELATED: dict[str, dict[str, Any]] = {
    "scene_recap": {"scene_name": "Logistics", "recap": UNRELATED_TEXT},
    "message_recap": {"recaps": [{"message": n, "recap": UNRELATED_TEXT} for n in range(30)]},
}


def anthropic_message(
    text: str, *, model: str, stop: str = "end_turn", usage: tuple[int, int] = (1, 1)
) -> dict[str, Any]:
    return {
        "id": "msg_fake",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": stop,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


def anthropic_events(text: str, *, model: str, stop: str = "end_turn") -> list[bytes]:
    """Anthropic's SSE sequence, as the Messages API streams an answer."""
    start = {**anthropic_message("", model=model), "content": []}
    block = {"type": "text", "text": ""}
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
        ("ping", {"type": "ping"}),
    ]
    for word in text.split(" "):
        delta = {"type": "text_delta", "text": word + " "}
        events.append(
            ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop}}),
        ("message_stop", {"type": "message_stop"}),
    ]
    return [f"event: {name}\ndata: {json.dumps(data)}\n\n".encode() for name, data in events]


async def messages(request: web.Request) -> web.StreamResponse:
    """Anthropic's `POST /v1/messages`: ST's Claude requests and the proxy's own calls for
    Claude chats (the prompt is the first user turn; `system` holds the rest)."""
    state = request.app[STATE]
    seen = await seen_of(request)
    state.seen.append(seen)
    payload = json.loads(seen.body)
    model = str(payload.get("model", "claude-fake"))
    limit = payload.get("max_tokens")
    operation = request.headers.get("X-Recap-Proxy-Operation")
    if operation is not None:
        prompt = [str(payload.get("system", "")), str(payload["messages"][0]["content"])]
        answer, finish, usage = own_answer(state, operation, prompt, limit)
        last = payload["messages"][-1]
        if last["role"] == "assistant" and answer.startswith(last["content"]):
            # As Claude does, the answer goes on from the turn started for it.
            answer = answer[len(last["content"]) :]
        stop = "max_tokens" if finish == "length" else "end_turn"
        return web.json_response(anthropic_message(answer, model=model, stop=stop, usage=usage))
    reply, finish = limited(REPLY, limit)
    stop = "max_tokens" if finish == "length" else "end_turn"
    if not payload.get("stream"):
        return web.json_response(anthropic_message(reply, model=model, stop=stop))
    return await stream(request, anthropic_events(reply, model=model, stop=stop))


def count_call(state: FakeState, operation: str, prompt: list[str], answer: str) -> tuple[int, int]:
    """One of the proxy's own calls, counted for `/_fake/stats` (cl100k tokens); returns
    its prompt's and answer's tokens, for the answer's `usage`."""
    counted = state.usage.setdefault(operation, [0, 0, 0])
    prompt_tokens = sum(COUNTER.count(part) for part in prompt)
    answer_tokens = COUNTER.count(answer)
    counted[0] += 1
    counted[1] += prompt_tokens
    counted[2] += answer_tokens
    return prompt_tokens, answer_tokens


def own_answer(
    state: FakeState, operation: str, prompt: list[str], limit: object
) -> tuple[str, str, tuple[int, int]]:
    """The answer to one of the proxy's own calls (its prompt's last part is the one the
    operation wrote), cut at `limit`, its finish reason, and its usage (counted)."""
    state.operations.append(operation)
    answer, finish = limited(memory_answer(operation, prompt[-1]), limit)
    return answer, finish, count_call(state, operation, prompt, answer)


async def stream(
    request: web.Request,
    chunks: list[bytes],
    kind: str = "text/event-stream",
    *,
    drop_at: int | None = None,
) -> web.StreamResponse:
    """The chunks as they would come over the network, one write each (held before the
    first by the state's `first_token`, after it by its `gate`, paced by its
    `chunk_delay`); `drop_at`: the connection drops before that chunk. A client that
    goes away marks `cancelled`."""
    state = request.app[STATE]
    response = web.StreamResponse(headers={"Content-Type": kind})
    try:
        await response.prepare(request)
        if state.first_token is not None:
            await state.first_token.wait()
        for i, chunk in enumerate(chunks):
            if i == drop_at:
                assert request.transport is not None
                request.transport.close()
                return response
            await response.write(chunk)
            if i == 0 and state.gate is not None:
                await state.gate.wait()
            if state.chunk_delay:
                await asyncio.sleep(state.chunk_delay)
        await response.write_eof()
    except asyncio.CancelledError:
        state.cancelled.set()
        raise
    return response


async def stats(request: web.Request) -> web.Response:
    """`GET /_fake/stats`: the proxy's own calls so far, per operation (benchmarks)."""
    usage = request.app[STATE].usage
    return web.json_response(
        {
            op: {"calls": c, "prompt_tokens": p, "answer_tokens": a}
            for op, (c, p, a) in usage.items()
        }
    )


async def echo(request: web.Request) -> web.Response:
    """Any other path: say what arrived, so passthrough can be checked."""
    seen = await seen_of(request)
    request.app[STATE].seen.append(seen)
    return web.json_response(
        {"method": seen.method, "path": seen.path, "query": seen.query, "size": len(seen.body)},
        status=201 if request.method == "PUT" else 200,
        headers={"X-Echo": "1"},
    )


async def kobold_version(request: web.Request) -> web.Response:
    """KoboldCpp's answer, as a real one gave it (1.75.2), when the fake plays one."""
    if not request.app[STATE].koboldcpp:
        raise web.HTTPNotFound()
    return web.json_response({"result": "KoboldCpp", "version": "1.75.2", "protected": False})


async def seen_of(request: web.Request) -> Seen:
    return Seen(
        method=request.method,
        path=request.rel_url.raw_path,
        query=request.rel_url.raw_query_string,
        headers=dict(request.headers),
        body=await request.read(),
    )


def make_fake_llm(state: FakeState | None = None) -> web.Application:
    app = web.Application(client_max_size=512 * 1024 * 1024)
    app[STATE] = state or FakeState()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/v1/messages", messages)
    from tests.fakes.fake_text import add_routes  # its handlers use this module's

    add_routes(app)
    from tests.fakes.fake_embed import add_routes as add_embeddings

    add_embeddings(app)
    app.router.add_get("/_fake/stats", stats)
    app.router.add_get("/api/extra/version", kobold_version)
    app.router.add_route("*", "/{tail:.*}", echo)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description="fake OpenAI-compatible LLM server")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5001)
    parser.add_argument("--no-chat-route", action="store_true", help="404 on /v1/chat/completions")
    parser.add_argument(
        "--chunk-delay", type=float, default=0.0, help="seconds between a stream's chunks"
    )
    args = parser.parse_args()
    # Run as `-m`, this file is `__main__`: the imported module is the one whose app key
    # the text routes (`fake_text`) read.
    from tests.fakes import fake_llm

    web.run_app(
        fake_llm.make_fake_llm(
            fake_llm.FakeState(
                seen=deque(maxlen=16),
                chat_route=not args.no_chat_route,
                chunk_delay=args.chunk_delay,
            )
        ),
        host=args.host,
        port=args.port,
        access_log=None,
        handler_cancellation=True,
        print=lambda *_: print(f"fake-llm ready on {args.port}", flush=True),
    )


if __name__ == "__main__":
    main()
