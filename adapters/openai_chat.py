"""OpenAI `POST /chat/completions`: the format ST's Chat Completion "Custom" source speaks.

Only `messages` is read closely. When memory is inserted, the body is put together from
its own bytes with the new messages spliced in (`adapters.spans`), or, for a body laid out
otherwise than ST's compact JSON, re-encoded from the decoded JSON; either way every other
key keeps its value and order (unknown keys, `name` fields, content arrays with images,
tool calls).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

import orjson

from adapters import single
from adapters.base import Layout, ParsedRequest
from adapters.post_processed import (
    MergedLayout,
    canonical,
    leaves_out,
    post_processing,
    rewritten,
)
from adapters.single import SingleLayout, single_message
from adapters.spans import HEAD, MAP_FROM, Spans, decode, measure, splice
from proxy.core.models import ChatMessage, Insertion
from proxy.errors import AdapterError

# orjson reads integers past 64 bits as floats. A body holding a number that large is
# re-read by the exact, slower standard library before it is re-encoded.
_FLOAT_FROM_BIG_INT = float(2**63)
# A ChatMessage built without its Python-level __new__: a quarter of the message loop.
_message = tuple.__new__


def decode_json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        try:
            return json.loads(raw)
        except RecursionError:
            raise AdapterError("body is not valid JSON: nested too deeply") from None
        except ValueError as exc:
            raise AdapterError(f"body is not valid JSON: {exc}") from None


def decode_object(raw: bytes, key: str, kind: type) -> dict[str, Any]:
    """A request body: a JSON object whose `key` holds a `kind` (its format's core)."""
    body = decode_json(raw)
    if not isinstance(body, dict):
        raise AdapterError("body is not a JSON object")
    if not isinstance(body.get(key), kind):
        raise AdapterError(f"body has no `{key}` {kind.__name__}")
    return body


def _has_huge_number(value: Any) -> bool:
    # Plain loops and exact type checks, strings skipped first: this walks every request
    # that gets memory, and generator expressions cost ten times more here.
    if type(value) is dict:
        value = value.values()
    elif type(value) is not list:
        return type(value) is float and abs(value) >= _FLOAT_FROM_BIG_INT
    for item in value:
        kind = type(item)
        if kind is str:
            continue
        if kind is dict or kind is list:
            if _has_huge_number(item):
                return True
        elif kind is float and abs(item) >= _FLOAT_FROM_BIG_INT:
            return True
    return False


def reencode(
    raw: bytes, body: dict[str, Any], numeric: Sequence[int] | None = None
) -> tuple[dict[str, Any], bool]:
    """The body to re-encode, and whether orjson can do it without changing a number.

    `numeric`: when the adapter's parse saw which of `messages` hold anything but
    strings, those messages' indices; only they and the other keys are walked (the whole
    history would cost a 300-message request a sixth of its memory step)."""
    if _too_big_for_orjson(body, numeric):
        exact: dict[str, Any] = json.loads(raw)
        return exact, False
    return body, True


def _model_of(body: dict[str, Any]) -> str | None:
    # The model the chat's upkeep calls.
    model = body.get("model")
    return model if type(model) is str else None


def _too_big_for_orjson(body: dict[str, Any], numeric: Sequence[int] | None) -> bool:
    """Whether `body` holds a number orjson read as a float (past 64 bits); `numeric` as
    for `reencode`."""
    if numeric is None:
        return _has_huge_number(body)
    # Lists walked once, not `any` over generators (a generator stopped early costs a
    # thrown GeneratorExit): this runs for every small request that gets memory.
    wire = body["messages"]
    others = [value for key, value in body.items() if key != "messages"]
    if _has_huge_number(others):
        return True
    return bool(numeric) and _has_huge_number([wire[i] for i in numeric])


def encode_json(value: Any, *, fast: bool = True) -> bytes:
    if fast:
        return orjson.dumps(value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def content_text(content: Any) -> str:
    """The text of a message's `content`: a string, or the text parts of a content array."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return "\n".join(t for t in texts if isinstance(t, str))
    return ""


def _run_edges(indices: Collection[int]) -> set[int]:
    """Where runs of consecutive `indices` start and end (one past their last)."""
    if not indices:
        return set()
    ordered = sorted(indices)
    if ordered[-1] - ordered[0] + 1 == len(ordered):
        return {ordered[0], ordered[-1] + 1}  # one run: every trimmed chat's case
    edges = {ordered[0], ordered[-1] + 1}
    for before, after in pairwise(ordered):
        if after != before + 1:
            edges |= {before + 1, after}
    return edges


# Not frozen: built for every chat request (see proxy.core.models).
@dataclass(slots=True)
class _Layout(Layout):
    """What `parse` saw that `apply` needs: the messages holding more than strings (see
    `reencode`), and where each message is in the bytes (`adapters.spans`), if mapped."""

    numeric: tuple[int, ...]
    spans: Spans | None


def _read(wire: Sequence[Any], first: int) -> tuple[list[ChatMessage], list[int]]:
    """The canonical messages of `wire`, the request's messages from index `first` on, and
    the indices of those holding more than strings."""
    # The common message (string role and content) read at C speed: `+ ""` is a type
    # check that costs next to nothing (a string plus "" is itself). Anything unusual is
    # read again by `_read_each`, the checked loop, a third slower.
    try:
        messages = [
            _message(ChatMessage, (m["role"] + "", m["content"] + "", m.get("name"))) for m in wire
        ]
    except (TypeError, KeyError, AttributeError):
        return _read_each(wire, first)
    sizes = list(map(len, wire))
    if sizes.count(2) == len(sizes):
        return messages, []
    numeric: list[int] = []
    for i, keys in enumerate(sizes, first):
        if keys != 2:
            name = messages[i - first].name
            if name is not None and type(name) is not str:
                return _read_each(wire, first)
            # A string `name` beside role and content: such a message holds only strings.
            if keys != 3 or name is None:
                numeric.append(i)
    return messages, numeric


def _read_each(wire: Sequence[Any], first: int) -> tuple[list[ChatMessage], list[int]]:
    """`_read`, message by message: content arrays, missing keys, and the error that
    names a malformed message."""
    messages: list[ChatMessage] = []
    numeric: list[int] = []
    for i, msg in enumerate(wire, first):
        role = msg.get("role") if type(msg) is dict else None
        if type(role) is not str:
            raise AdapterError(f"messages[{i}] is not an object with a string `role`")
        content = msg.get("content")
        name = msg.get("name")
        if type(content) is str:
            keys = len(msg)
            if keys != 2 and (keys != 3 or type(name) is not str):
                numeric.append(i)
        else:
            content = content_text(content)
            numeric.append(i)
        messages.append(_message(ChatMessage, (role, content, name if type(name) is str else None)))
    return messages, numeric


class OpenAIChatAdapter:
    name = "openai_chat"

    def parse(self, raw: bytes, previous: ParsedRequest | None = None) -> ParsedRequest:
        """`previous`: the last request parsed; the messages this one shares with it
        byte for byte are taken from it, not decoded again."""
        mapped = len(raw) >= MAP_FROM
        before = previous.layout if previous is not None else None
        decoded = None
        if mapped and previous is not None and type(before) is _Layout and before.spans is not None:
            decoded = decode(raw, previous.raw, previous.body["messages"], before.spans)
        if decoded is None:
            body = decode_object(raw, "messages", list)
            messages, numeric = _read(body["messages"], 0)
            found = measure(raw, body["messages"]) if mapped and raw.startswith(HEAD) else None
            taken: list[int] = []
        else:
            assert previous is not None and type(before) is _Layout  # as `decode` was called
            body, found, taken = decoded.body, decoded.spans, decoded.taken
            messages, numeric = _read(body["messages"][len(taken) :], len(taken))
            messages[:0] = [previous.messages[i] for i in taken]
            if before.numeric:
                was = set(before.numeric)
                numeric[:0] = [n for n, i in enumerate(taken) if i in was]
        parsed = ParsedRequest(
            raw=raw,
            body=body,
            messages=messages,
            stream=body.get("stream") is True,
            model=_model_of(body),
            layout=_Layout(tuple(numeric), found),
            carried=len(taken),
        )
        mode = post_processing(messages)
        if mode is not None:  # its messages are read again as ST had them: none carried
            parsed.messages, parsed.layout = canonical(messages, mode)
            parsed.carried, parsed.prompts_in_replies = 0, False
        elif single_message(messages):
            parsed.messages, parsed.layout = single.canonical(messages[0].text)
            parsed.carried = 0
        return parsed

    def leaves_out(self, parsed: ParsedRequest, drop: Collection[int]) -> tuple[int, ...]:
        if type(parsed.layout) is MergedLayout:
            return leaves_out(parsed, drop)
        return tuple(drop)

    def apply(
        self,
        parsed: ParsedRequest,
        insertions: Sequence[Insertion] = (),
        replacements: Mapping[int, str] | None = None,
        drop: Collection[int] = (),
    ) -> bytes:
        layout = parsed.layout
        replaced = replacements or {}
        if type(layout) is MergedLayout:
            source, fast = reencode(parsed.raw, parsed.body)
            return encode_json(rewritten(parsed, source, insertions, replaced, drop), fast=fast)
        if type(layout) is SingleLayout:
            source, fast = reencode(parsed.raw, parsed.body)
            sent = single.rewritten(parsed.messages, source, insertions, replaced, drop)
            return encode_json(sent, fast=fast)
        assert type(layout) is _Layout, "parsed by another adapter"
        wire = parsed.body["messages"]
        if replaced and any(not 0 <= i < len(wire) for i in replaced):
            raise AdapterError("a replacement names a message the request does not have")
        spans = layout.spans
        if spans is not None:
            runs = _new_messages(wire, insertions, replaced, drop)
            # The request's own messages stay the bytes they came as; only what is new is
            # encoded (exact: a mapped message is one that orjson wrote back to its bytes).
            return splice(
                parsed.raw, spans, [r if isinstance(r, tuple) else orjson.dumps(r) for r in runs]
            )
        source, fast = reencode(parsed.raw, parsed.body, layout.numeric)
        return _rewritten(source, insertions, replaced, drop, fast=fast)


def _new_messages(
    wire: Sequence[Any],
    insertions: Sequence[Insertion],
    replaced: Mapping[int, str],
    drop: Collection[int],
) -> list[dict[str, Any] | tuple[int, int]]:
    """`_runs` for these edits of `wire`."""
    at: dict[int, list[dict[str, str]]] = {}  # index -> the parts before it, in order
    for insertion in insertions:
        # `_value_`: `.value` is a Python-level descriptor call on 3.11.
        new = {"role": insertion.role._value_, "content": insertion.text}
        at.setdefault(insertion.index, []).append(new)
    gone = set(drop)
    cuts = sorted({0, len(wire), *[i for i in at if i <= len(wire)], *replaced, *_run_edges(gone)})
    return _runs(wire, cuts, at, replaced, gone)


def _rewritten(
    body: dict[str, Any],
    insertions: Sequence[Insertion],
    replaced: Mapping[int, str],
    drop: Collection[int],
    *,
    fast: bool = True,
) -> bytes:
    """`body` with its messages edited, encoded whole (`fast`: by orjson)."""
    wire = body["messages"]
    out: list[Any] = []
    for run in _new_messages(wire, insertions, replaced, drop):
        if isinstance(run, tuple):
            out.extend(wire[run[0] : run[1]])
        else:
            out.append(run)
    sent = dict(body)
    sent["messages"] = out
    return encode_json(sent, fast=fast)


def _runs(
    wire: Sequence[Any],
    cuts: Sequence[int],
    at: Mapping[int, list[dict[str, str]]],
    replaced: Mapping[int, str],
    gone: Collection[int],
) -> list[dict[str, Any] | tuple[int, int]]:
    """The new `messages`, in order: new messages (the parts, replaced messages) as dicts,
    and runs of the request's own as (first, end). Runs go between the places where
    something changes (an insertion, a replacement, the edges of a left-out run), so a
    long history goes in one step, not message by message; each is wholly left out or
    wholly kept."""
    n = len(wire)
    out: list[dict[str, Any] | tuple[int, int]] = []
    for k, start in enumerate(cuts):
        out.extend(at.get(start, ()))
        if start >= n:
            break
        end = cuts[k + 1]
        if start in gone:
            continue
        first = wire[start]
        if start in replaced and isinstance(first.get("content"), str):
            out.append({**first, "content": replaced[start]})
            start += 1
        if start < end:
            out.append((start, end))
    return out
