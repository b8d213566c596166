"""The bodies of the proxy's own calls that are not OpenAI chat completions: Claude's
Messages API (the prompt converted as ST converts it), and a text completion server that
has no chat route.

KoboldCpp, llama.cpp, Ollama and text-generation-webui all answer OpenAI chat completions,
and that is tried first; a server that answers it 404 (KoboldAI Classic, an old build) gets
the prompt written in the chat's own instruct template and sent to the completion endpoint
its chat uses, in that endpoint's own body. Pure: bodies in, answers out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import orjson

# A status that says "no such route here" (not "your request was wrong").
NO_ROUTE = frozenset({404, 405, 501})

# ST's streaming route of KoboldAI Classic answers in SSE; its plain twin answers JSON.
_PLAIN = {"/api/extra/generate/stream": "/api/v1/generate"}


class Completion(NamedTuple):
    text: str
    finish_reason: str | None


def completion_path(path: str) -> str:
    """The endpoint for an unstreamed completion, from the path the chat's requests use."""
    return _PLAIN.get(path, path)


def completion_body(
    path: str, prompt: str, stops: list[str], model: str, limit: int, temperature: float
) -> dict[str, Any]:
    """A non-streamed completion request in the body `path`'s server reads."""
    if path == "/api/generate":  # Ollama: raw, so that it adds no template of its own
        options = {"num_predict": limit, "temperature": temperature, "stop": stops}
        return {"model": model, "prompt": prompt, "raw": True, "stream": False, "options": options}
    if path == "/completion":  # llama.cpp
        return {"prompt": prompt, "n_predict": limit, "temperature": temperature,
                "stop": stops, "stream": False}  # fmt: skip
    if path.startswith("/api/"):  # KoboldAI Classic and KoboldCpp's Kobold routes
        return {"prompt": prompt, "max_length": limit, "temperature": temperature,
                "stop_sequence": stops}  # fmt: skip
    return {"model": model, "prompt": prompt, "max_tokens": limit, "temperature": temperature,
            "stop": stops, "stream": False}  # fmt: skip


def read_completion(path: str, raw: bytes) -> Completion | None:
    """The answer's text and why it ended (`length` when cut at the limit), or None when
    it is not the answer `path`'s server gives."""
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict):
        return None
    if path == "/api/generate":
        text, done = data.get("response"), data.get("done_reason")
        return _answer(text, "length" if done == "length" else done)
    if path == "/completion":
        limited = data.get("stopped_limit") is True or data.get("stop_type") == "limit"
        return _answer(data.get("content"), "length" if limited else "stop")
    results = data.get("results")
    if isinstance(results, list) and results and isinstance(results[0], Mapping):
        return _answer(results[0].get("text"), results[0].get("finish_reason"))
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
        return _answer(choices[0].get("text"), choices[0].get("finish_reason"))
    return None


def _answer(text: object, finish: object) -> Completion | None:
    if not isinstance(text, str):
        return None
    return Completion(text, str(finish) if finish is not None else None)


def anthropic_messages(
    messages: Sequence[Mapping[str, str]],
) -> tuple[str, list[dict[str, str]]]:
    """An OpenAI-style prompt as Claude takes it, converted as ST converts: the leading
    system messages become `system`, later ones the user's, and same-role neighbours
    are merged with a blank line; the turns start with the user's."""
    system: list[str] = []
    turns: list[dict[str, str]] = []
    for message in messages:
        role, content = message.get("role", "user"), message.get("content", "")
        if role == "system" and not turns:
            system.append(content)
            continue
        role = "assistant" if role == "assistant" else "user"
        if turns and turns[-1]["role"] == role:
            turns[-1] = {"role": role, "content": turns[-1]["content"] + "\n\n" + content}
        else:
            turns.append({"role": role, "content": content})
    if not turns or turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": "Continue."})
    return "\n\n".join(system), turns
