"""A fake embeddings API beside the fake LLM: OpenAI's `/v1/embeddings` and Ollama's
`/api/embed`, answering vectors made from a small table of concepts and their synonyms.

A text's vector holds each concept its words name (a synonym counts as its concept:
"stashed the lamp" is near "hid the lantern"), and every other word, weakly, in one of a
few hashed dimensions, so that unrelated texts are far apart and a paraphrase is
near what it paraphrases, as with a real embedding model. `FakeState.faults["embed"]`
takes the same modes as the LLM's operations (`status=N`, `slow`, `hold`, `garbage`).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import zlib

from aiohttp import web

# Each group is one concept; its first word names it. Multi-word synonyms are phrases.
CONCEPTS: tuple[tuple[str, ...], ...] = (
    ("hide", "hid", "hidden", "hiding", "stash", "stashed", "buried", "bury", "concealed",
     "tucked", "lies hidden"),
    ("key", "keys", "opener"),
    ("ledger", "account book", "accounts", "books"),
    ("monk", "brother", "friar"),
    ("ferry", "boat", "barge"),
    ("chapel", "church"),
    ("exiled", "banished", "cast out", "exile"),
    ("stole", "stolen", "took", "thief", "pinched"),
    ("mill", "millhouse"),
    ("silver", "argent"),
    ("guild", "brotherhood", "company"),
    ("stone", "rock", "flagstone"),
    # The long story's hidden things (bench/long_story.py), each with the word a
    # question uses instead.
    ("lantern", "lamp"), ("compass", "needle"), ("locket", "pendant"), ("dagger", "knife"),
    ("chalice", "goblet"), ("mask", "disguise"), ("ring", "band"), ("map", "chart"),
    ("horn", "bugle"), ("seal", "signet"), ("crown", "diadem"), ("mirror", "looking glass"),
    ("flute", "pipe"), ("feather", "plume"), ("coin", "piece of money"),
    ("scroll", "parchment"), ("bell", "chime"), ("idol", "statuette"), ("shield", "buckler"),
    ("torc", "necklet"), ("quill", "pen"), ("sextant", "octant"),
    ("astrolabe", "planisphere"),
)  # fmt: skip
_STOP = (
    "a an the and or of to in on at by for with from as is was were be been it its this "
    "that these those there here he she they we you i me my your our their his her them us "
    "do did does what where when who how why which not no yes so then than"
)
STOPWORDS = frozenset(_STOP.split())
HASHED = 64  # dimensions for the words no concept names
WEAK = 0.15  # their weight: a word in common counts for little against a concept
DIMENSIONS = len(CONCEPTS) + HASHED
_WORD = re.compile(r"[a-z']+")
_CONCEPT = {word: i for i, group in enumerate(CONCEPTS) for word in group}
_PHRASES = sorted((w for w in _CONCEPT if " " in w), key=len, reverse=True)


def vector(text: str) -> list[float]:
    """Each concept the text names, and each other word (weakly, hashed), counted once:
    a scene that names the lantern nine times is not about nothing else."""
    values = [0.0] * DIMENSIONS
    lowered = text.lower()
    for phrase in _PHRASES:  # "account book" is the ledger, not an account and a book
        if phrase in lowered:
            values[_CONCEPT[phrase]] = 1.0
            lowered = lowered.replace(phrase, " ")
    for word in set(_WORD.findall(lowered)):
        if word in _CONCEPT:
            values[_CONCEPT[word]] = 1.0
        elif word not in STOPWORDS and len(word) > 2:
            values[len(CONCEPTS) + zlib.crc32(word.encode()) % HASHED] += WEAK
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


async def _texts(request: web.Request) -> tuple[list[str], str] | web.Response:
    """The texts asked about, or the answer a fault mode gives instead."""
    from tests.fakes.fake_llm import STATE, count_call, seen_of

    state = request.app[STATE]
    seen = await seen_of(request)
    state.seen.append(seen)
    operation = request.headers.get("X-Recap-Proxy-Operation", "embed")
    state.operations.append(operation)
    pending = state.faults.get(operation)
    mode = pending.pop(0) if pending else ""
    if mode.startswith("status="):
        status = int(mode.split("=", 1)[1])
        return web.json_response({"error": {"message": f"fake error {status}"}}, status=status)
    if mode == "hold":
        state.held.set()
        await state.release.wait()
    if mode == "slow":
        await asyncio.sleep(30)
    payload = json.loads(seen.body)
    given = payload.get("input")
    texts = [given] if isinstance(given, str) else [str(t) for t in given or []]
    count_call(state, operation, texts, "")
    return texts, mode


async def openai_embeddings(request: web.Request) -> web.Response:
    answer = await _texts(request)
    if isinstance(answer, web.Response):
        return answer
    texts, mode = answer
    if mode == "garbage":
        return web.Response(text="Sure! {{{ not json", content_type="application/json")
    if mode.startswith("answer="):
        return web.Response(text=mode.removeprefix("answer="), content_type="application/json")
    data = [{"object": "embedding", "index": i, "embedding": vector(t)}
            for i, t in enumerate(texts)]  # fmt: skip
    used = sum(len(t.split()) for t in texts)
    usage = {"prompt_tokens": used, "total_tokens": used}
    return web.json_response(
        {"object": "list", "data": data, "model": "fake-embed", "usage": usage}
    )


async def ollama_embed(request: web.Request) -> web.Response:
    answer = await _texts(request)
    if isinstance(answer, web.Response):
        return answer
    texts, _ = answer
    return web.json_response({"model": "fake-embed", "embeddings": [vector(t) for t in texts],
                              "prompt_eval_count": sum(len(t.split()) for t in texts)})  # fmt: skip


def add_routes(app: web.Application) -> None:
    app.router.add_post("/v1/embeddings", openai_embeddings)
    app.router.add_post("/api/embed", ollama_embed)
