"""Anthropic `POST /v1/messages`: what ST sends to Claude through its reverse proxy.

ST builds the same OpenAI-style list as for any chat completion, then converts it: with
"use system prompt" off (its default) every system message becomes `user` and same-role
neighbours are merged with a blank line, so the main prompt, the card and ST's
`[Start a new Chat]` arrive as one `user` message at the head; with it on, the leading
system messages are joined into `system`. The canonical list the core sees undoes that
merge where it matters: `system` and the head message are split at their blank lines
into system messages (so the history-start marker is found as in an OpenAI request), the
chat turns follow one per message, and ST's continue nudge is a system message again.

Memory goes in with ST's semantics for this format: `before_prompt` and `in_prompt` into
`system` (made when absent; a string stays a string, a block list gets a text block and
its other blocks, `cache_control` included, stay as they were), `in_chat` between the
turns, merged into a same-role neighbour with a blank line as ST would merge it, so that
user and assistant keep alternating. Left-out turns are merged the same way.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from adapters.base import ParsedRequest, Places, gone_turns
from adapters.openai_chat import content_text, decode_object, encode_json, reencode
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.errors import AdapterError

IN_SYSTEM = -1  # a canonical message that is a part of `system`
IN_HEAD = -2  # a part of the first message (ST's merged prompt)
SEPARATOR = "\n\n"  # what ST merges same-role messages with
CONTINUE_NUDGE = "[Continue the following message"


def _parts(text: str) -> list[str]:
    return [part for part in text.split(SEPARATOR) if part.strip()] or [text]


def _append(message: dict[str, Any], text: str, *, before: bool) -> dict[str, Any]:
    """`message` with `text` merged in (before or after its content), as ST merges."""
    content = message.get("content")
    if isinstance(content, list):
        block = {"type": "text", "text": text}
        blocks = [block, *content] if before else [*content, block]
        return {**message, "content": blocks}
    old = content if isinstance(content, str) else ""
    return {**message, "content": text + SEPARATOR + old if before else old + SEPARATOR + text}


def _merge_neighbours(wire: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Same-role neighbours merged into one message, as ST sends them to Claude."""
    out: list[dict[str, Any]] = []
    for message in wire:
        if out and out[-1].get("role") == message.get("role"):
            content = message.get("content")
            if isinstance(content, str):
                out[-1] = _append(out[-1], content, before=False)
                continue
            previous = out[-1].get("content")
            blocks = (
                previous
                if isinstance(previous, list)
                else [{"type": "text", "text": previous or ""}]
            )
            out[-1] = {**out[-1], "content": [*blocks, *(content or [])]}
            continue
        out.append(message)
    return out


def _gap(where: tuple[int, ...], insertion: Insertion, turns: int) -> int | None:
    """The turn a memory part goes before (`turns`: after the last), or None for `system`:
    its place is at the top or inside the prompt."""
    if insertion.index == 0:
        return None
    rest = where[insertion.index :]
    if not rest:
        return turns
    return rest[0] if rest[0] >= 0 else None


class AnthropicMessagesAdapter:
    name = "anthropic_messages"

    def parse(self, raw: bytes, previous: ParsedRequest | None = None) -> ParsedRequest:
        body = decode_object(raw, "messages", list)
        wire = body["messages"]
        if not wire:
            raise AdapterError("body has an empty `messages` list")
        messages: list[ChatMessage] = []
        where: list[int] = []
        system = body.get("system")
        if system is not None:
            for part in _parts(content_text(system)):
                messages.append(ChatMessage("system", part, None))
                where.append(IN_SYSTEM)
        for i, msg in enumerate(wire):
            role = msg.get("role") if type(msg) is dict else None
            if role not in ("user", "assistant"):
                raise AdapterError(f"messages[{i}] is not a user or assistant message")
            text = content_text(msg.get("content"))
            if i == 0 and role == "user" and len(wire) > 1 and SEPARATOR in text:
                for part in _parts(text):
                    messages.append(ChatMessage("system", part, None))
                    where.append(IN_HEAD)
                continue
            last = i == len(wire) - 1
            nudge = last and role == "user" and text.lstrip().startswith(CONTINUE_NUDGE)
            messages.append(ChatMessage("system" if nudge else role, text, None))
            where.append(i)
        model = body.get("model")
        return ParsedRequest(
            raw=raw,
            body=body,
            messages=messages,
            stream=body.get("stream") is True,
            model=model if isinstance(model, str) else None,
            layout=Places(tuple(where)),
            api=self.name,
            prompts_in_replies=False,
        )

    def leaves_out(self, parsed: ParsedRequest, drop: Collection[int]) -> tuple[int, ...]:
        where = _where(parsed)
        gone = gone_turns(parsed.body["messages"], where, drop)
        return tuple(i for i in drop if 0 <= i < len(where) and where[i] in gone)

    def apply(
        self,
        parsed: ParsedRequest,
        insertions: Sequence[Insertion] = (),
        replacements: Mapping[int, str] | None = None,
        drop: Collection[int] = (),
    ) -> bytes:
        source, fast = reencode(parsed.raw, parsed.body)
        body = dict(source)
        turns: list[dict[str, Any]] = list(source["messages"])
        where = _where(parsed)
        for index, text in (replacements or {}).items():
            at = where[index]
            if at >= 0 and isinstance(turns[at].get("content"), str):
                turns[at] = {**turns[at], "content": text}
        before: dict[int, list[Insertion]] = {}
        into_system: list[Insertion] = []
        for insertion in insertions:
            gap = _gap(where, insertion, len(turns))
            if gap is None:
                into_system.append(insertion)
            else:
                before.setdefault(gap, []).append(insertion)
        # Parts at the top go in last first, so that they keep their order there.
        heads = [i for i in into_system if i.index == 0]
        for insertion in [*reversed(heads), *(i for i in into_system if i.index != 0)]:
            body["system"] = self._system(body.get("system"), insertion)
        gone = gone_turns(turns, where, drop)
        kept: list[dict[str, Any]] = []
        for i in range(len(turns) + 1):
            kept.extend(self._turn(insertion) for insertion in before.get(i, ()))
            if i < len(turns) and i not in gone:
                kept.append(turns[i])
        body["messages"] = _merge_neighbours(kept) if before or gone else kept
        return encode_json(body, fast=fast)

    @staticmethod
    def _turn(insertion: Insertion) -> dict[str, Any]:
        # Claude has no system turns: ST sends an in-chat system prompt as the user's.
        role = "assistant" if insertion.role is Role.ASSISTANT else "user"
        return {"role": role, "content": insertion.text}

    @staticmethod
    def _system(system: Any, insertion: Insertion) -> Any:
        """`system` with a memory part: first for `before_prompt` (index 0), else last."""
        first = insertion.index == 0
        if system is None or system == "":
            return insertion.text
        if isinstance(system, list):
            block = {"type": "text", "text": insertion.text}
            return [block, *system] if first else [*system, block]
        text = str(system)
        return insertion.text + SEPARATOR + text if first else text + SEPARATOR + insertion.text


def _where(parsed: ParsedRequest) -> tuple[int, ...]:
    """Each canonical message's turn in the body (negative: the system prompt's)."""
    layout = parsed.layout
    assert isinstance(layout, Places), "parsed by another adapter"
    return layout.where
