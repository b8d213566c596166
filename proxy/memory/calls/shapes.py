"""The shape of each operation's answer, as a JSON schema, and how each kind of server is
asked to keep to it.

A small model left free rambles, copies the prompt back or cuts off mid-answer; most
servers can force the answer into a shape instead (`[memory.llm] structured_output`):

- chat completions: `response_format` with a JSON schema (OpenAI, vLLM, SGLang, LM
  Studio, Ollama's `/v1`, llama.cpp's server), or llama.cpp's `json_object` with a
  `schema`, or a GBNF `grammar` (KoboldCpp, llama.cpp);
- Claude: the answer is started for it (`{` as the assistant's turn);
- a text completion server: its own field (llama.cpp `/completion`: `json_schema`,
  Ollama `/api/generate`: `format`, KoboldCpp's `/api/v1/generate`: `grammar`).

A server that refuses the parameter (a 400 naming it) is asked again without it
(`proxy.memory.calls.llm`). The answer is still read and checked as any answer is: the shape
is help, never trust.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from yarl import URL

from proxy.core.headers import safe_url
from proxy.core.operations import Operation
from proxy.errors import UpstreamError
from proxy.settings.memory import StructuredOutput
from proxy.upstream.upstreams import Upstream

log = logging.getLogger("proxy.memory.calls.llm")  # said as the LLM client's

Schema = dict[str, Any]

_TEXT: Final[Schema] = {"type": "string"}


def _object(**properties: Schema) -> Schema:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


SCHEMAS: Final[dict[Operation, Schema]] = {
    Operation.MESSAGE_RECAP: _object(
        recaps={"type": "array", "items": _object(message={"type": "integer"}, recap=_TEXT)}
    ),
    # `false` for "no break", else the message's number (the template's two answers).
    Operation.DETECT_SCENE_BREAK: _object(
        sceneBreakAt={"type": ["integer", "boolean"]}, rationale=_TEXT
    ),
    # Every property required, as OpenAI's strict schemas want: a scene with no entity
    # worth keeping answers an empty list.
    Operation.SCENE_RECAP: _object(
        scene_name=_TEXT,
        recap=_TEXT,
        entities={
            "type": "array",
            "items": _object(
                name=_TEXT,
                type=_TEXT,
                aliases={"type": "array", "items": _TEXT},
                facts={"type": "array", "items": _TEXT},
            ),
        },
    ),
    Operation.RUNNING_RECAP: _object(recap=_TEXT),
    Operation.CONDENSE_RUNNING_RECAP: _object(recap=_TEXT),
    Operation.CONDENSE_ENTITY: _object(facts={"type": "array", "items": _TEXT}),
}

ASK_SECONDS: Final = 5.0  # for a server to say what it is
# What a server's refusal of the parameter names (a 400 or 422 body).
REFUSAL_WORDS: Final = ("response_format", "json_schema", "grammar", "format", "schema")


# A scene recap template that does not ask for entities (yours, or one imported from an
# extension) gets the shape without them: a grammar would force a list it never asked for.
_PLAIN_SCENE: Final[Schema] = _object(scene_name=_TEXT, recap=_TEXT)


def schema_of(operation: Operation, prompt: Sequence[Mapping[str, Any]] = ()) -> Schema:
    """The shape of `operation`'s answer to `prompt` (its messages)."""
    if operation is not Operation.SCENE_RECAP or not prompt:
        return SCHEMAS[operation]
    asked = any('"entities"' in str(m.get("content", "")) for m in prompt)
    return SCHEMAS[operation] if asked else _PLAIN_SCENE


def chat_fields(
    operation: Operation, mode: StructuredOutput, prompt: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """What a chat completion request adds to keep the answer in shape (`auto`: a JSON
    schema, which most servers take)."""
    schema = schema_of(operation, prompt)
    if mode in ("auto", "json_schema"):
        named = {"name": operation.value, "schema": schema, "strict": False}
        return {"response_format": {"type": "json_schema", "json_schema": named}}
    if mode == "json_object":
        return {"response_format": {"type": "json_object", "schema": schema}}
    if mode == "grammar":
        return {"grammar": grammar(schema)}
    return {}


def completion_fields(
    path: str, operation: Operation, prompt: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """What a text completion server's own request adds (nothing for one that has no
    such field, or whose field the proxy does not know)."""
    schema = schema_of(operation, prompt)
    if path == "/completion":  # llama.cpp
        return {"json_schema": schema}
    if path == "/api/generate":  # Ollama
        return {"format": schema}
    if path.startswith("/api/"):  # KoboldCpp's Kobold routes
        return {"grammar": grammar(schema)}
    return {}


def refused(status: int, raw: bytes) -> bool:
    """Whether an answer is a server refusing the shape's parameter: a 400 or 422 that
    names it, or a 500 that names the parameter itself (llama-cpp-python's server answers
    an unknown `response_format` type so)."""
    said = raw[:2000].decode("utf-8", "replace").lower()
    if status in (400, 422):
        return any(word in said for word in REFUSAL_WORDS)
    return status == 500 and any(word in said for word in REFUSAL_WORDS[:3])


def weaker(form: StructuredOutput, configured: StructuredOutput, chat: bool) -> StructuredOutput:
    """The form to ask a server for once it refused `form`: with `auto`, a chat
    completion server that refuses a JSON schema is asked for llama.cpp's `json_object`
    with the schema (llama-cpp-python's server takes only that); else nothing."""
    if chat and configured == "auto" and form in ("auto", "json_schema"):
        return "json_object"
    return "off"


class Forms:
    """The form each server is asked in: what it says it is (`ask`), or what it took
    after it refused the configured one (`refused`)."""

    def __init__(self) -> None:
        self._forms: dict[str, StructuredOutput] = {}
        self._asked: set[str] = set()

    def form(self, server: str, configured: StructuredOutput) -> StructuredOutput:
        return self._forms.get(server, configured)

    def unasked(self, server: str, configured: StructuredOutput) -> bool:
        """Whether, with `auto`, the server is still to be asked what it is."""
        return configured == "auto" and server not in self._asked

    async def ask(self, upstream: Upstream, url: URL, server: str) -> None:
        """Ask a chat completion server what it is, once: KoboldCpp (its
        `/api/extra/version` says so) keeps to a shape by its own `grammar`, not by a JSON
        schema. Anything else, or no answer, leaves `auto`'s JSON schema."""
        self._asked.add(server)
        try:
            async with asyncio.timeout(ASK_SECONDS):
                answer = await upstream.send_to("GET", url.origin() / "api/extra/version", (), None)
                raw = await answer.read()
            answer.release()
            said = json.loads(raw) if answer.status == 200 else None
        except (UpstreamError, TimeoutError, ValueError):
            return
        if isinstance(said, dict) and str(said.get("result", "")).lower() == "koboldcpp":
            self._forms[server] = "grammar"
            log.info("%s is KoboldCpp: the memory's calls keep to their shape by a grammar",
                     safe_url(server))  # fmt: skip

    def refused(
        self,
        server: str,
        form: StructuredOutput,
        configured: StructuredOutput,
        chat: bool,
        status: int,
        raw: bytes,
    ) -> StructuredOutput:
        """The server refused `form` (`refused`): the weaker one it is asked in from now
        on, said once."""
        fallback = self._forms[server] = weaker(form, configured, chat)
        said = " ".join(raw[:300].decode("utf-8", "replace").split())
        log.warning(
            "%s refuses structured answers as %s (%s: %s); the memory's calls to it go %s "
            "([memory.llm] structured_output)",
            safe_url(server),
            "a JSON schema" if form in ("auto", "json_schema") else form,
            status,
            said,
            "without" if fallback == "off" else f"as {fallback}",
        )
        return fallback


# GBNF (llama.cpp's grammar format, which KoboldCpp reads too) for the schemas above:
# objects with their keys in order, strings, integers, booleans and arrays of those.
_RULES: Final = (
    "ws ::= [ \\t\\n]{0,8}\n"
    'string ::= "\\"" ( [^"\\\\\\x7F\\x00-\\x1F] '
    '| "\\\\" ( ["\\\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""\n'
    'integer ::= "-"? [0-9]{1,10}\n'
    'boolean ::= "true" | "false"\n'
)


def grammar(schema: Schema) -> str:
    """A GBNF grammar that admits the JSON `schema` describes (the subset used here)."""
    return f"root ::= ws {_rule(schema)} ws\n{_RULES}"


def _rule(schema: Schema) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        return "( " + " | ".join(_rule({"type": k}) for k in kind) + " )"
    if kind == "object":
        pairs = [
            f'"\\"{name}\\"" ws ":" ws {_rule(value)}'
            for name, value in schema["properties"].items()
        ]
        body = ' ws "," ws '.join(pairs)
        return f'"{{" ws {body} ws "}}"'
    if kind == "array":
        item = _rule(schema["items"])
        return f'"[" ws ( {item} ( ws "," ws {item} )* )? ws "]"'
    if kind in ("string", "integer", "boolean"):
        return str(kind)
    raise ValueError(f"no grammar for {json.dumps(schema)}")
