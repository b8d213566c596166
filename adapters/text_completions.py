"""Text completion: one `prompt` string that ST built from an instruct template.

The same body key on every route ST uses for it: `/v1/completions` (text-generation-webui,
KoboldCpp, LM Studio, vLLM, ...), llama.cpp's `/completion`, Ollama's `/api/generate`,
KoboldAI Classic's `/api/v1/generate` and `/api/extra/generate/stream`.

The prompt is split into its turns with the template it was written in, recognised from
the prompt itself (`adapters.instruct`: ChatML, Llama 3, Gemma, Mistral, Alpaca, Vicuna,
ST's own, or instruct off: `Name: text` lines after the story string). Each turn is one
canonical message; the story string before the first turn is the system prompt; the open
turn at the end (`<|im_start|>assistant\\nSeraphina:`, or the partial reply of a continue)
is a trailing assistant message, as a prefill is in a chat request. Memory goes in as a
block in the template's own system format (its user format where it has none) at the
place the core decides; left-out turns are cut from the string. A prompt in no known
template is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from adapters.base import Layout, ParsedRequest
from adapters.instruct import (
    MISTRAL_CLOSE,
    MISTRAL_END,
    MISTRAL_OPEN,
    Template,
    Turn,
    chat_start,
    split_prompt,
    spoken,
)
from adapters.openai_chat import decode_object, encode_json, reencode
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.errors import UnknownPromptFormat

NAME = "text_completions"
PLACEHOLDER_MODEL = "local-model"  # local servers take any model name on their chat route


class TextCompletionAdapter:
    name = NAME

    def __init__(self, settings: Callable[[], Iterable[Mapping[str, Any]]] | None = None) -> None:
        """`settings`: how ST writes prompts, per user (`{"instruct", "context"}`: its
        `power_user` templates), read by whoever watches ST's data folder; its instruct
        templates and chat starts are tried first."""
        self.settings = settings
        self._read: list[Mapping[str, Any]] = []
        self._active: tuple[list[Template], list[str]] = ([], [])

    def active(self) -> tuple[list[Template], list[str]]:
        """ST's instruct templates and chat starts, converted again only when its
        settings were read anew (the reader hands out the same objects until then)."""
        current = list(self.settings()) if self.settings else []
        if len(current) != len(self._read) or any(
            a is not b for a, b in zip(current, self._read, strict=True)
        ):
            self._read = current
            templates = [t for f in current if (t := Template.from_st(f.get("instruct") or {}))]
            starts = [s for f in current if (s := chat_start(f.get("context") or {}))]
            self._active = (templates, list(dict.fromkeys(starts)))
        return self._active

    def parse(self, raw: bytes, previous: ParsedRequest | None = None) -> ParsedRequest:
        body = decode_object(raw, "prompt", str)
        found = split_prompt(body, body["prompt"], *self.active())
        if found is None:
            raise UnknownPromptFormat(
                "the prompt is in no instruct template the proxy knows (ChatML, Llama 3, "
                "Gemma, Mistral, Alpaca, Vicuna, or instruct off)"
            )
        template, turns = found
        # KoboldCpp, llama.cpp and text-generation-webui are not told a model: the proxy's
        # own calls name a placeholder, which they ignore (Ollama's body names its model).
        model = body.get("model") or PLACEHOLDER_MODEL
        return ParsedRequest(
            raw=raw,
            body=body,
            messages=[ChatMessage(t.role, t.text, t.name) for t in turns],
            stream=body.get("stream") is True,
            model=model if isinstance(model, str) else None,
            api=self.name,
            layout=PromptLayout(template, tuple(turns)),
            writer=partial(write_prompt, template),
            merged_with="\n",
        )

    def leaves_out(self, parsed: ParsedRequest, drop: Collection[int]) -> tuple[int, ...]:
        return tuple(drop)

    def apply(
        self,
        parsed: ParsedRequest,
        insertions: Sequence[Insertion] = (),
        replacements: Mapping[int, str] | None = None,
        drop: Collection[int] = (),
    ) -> bytes:
        source, fast = reencode(parsed.raw, parsed.body)
        layout = parsed.layout
        assert isinstance(layout, PromptLayout), "parsed by another adapter"
        template, turns = layout.template, layout.turns
        prompt: str = source["prompt"]
        # Every change as (start, end, new text) in the prompt; they never overlap, and a
        # memory block (zero width) sorts before a turn left out at the same place.
        gone = {i for i in drop if 0 <= i < len(turns)}
        edits = [(turns[i].start, turns[i].end, "") for i in gone]
        for index, text in (replacements or {}).items():
            turn = turns[index]
            at = prompt.find(turn.text, turn.start, turn.end) if turn.text else -1
            if index not in gone and at >= 0:  # e.g. an `<ST_METADATA>` block taken out
                edits.append((at, at + len(turn.text), text))
        for insertion in insertions:  # in order: at one place, they keep it (stable sort)
            place = turns[insertion.index].start if insertion.index < len(turns) else len(prompt)
            edits.append((place, place, _memory_block(template, insertion)))
        pieces: list[str] = []
        at = 0
        for start, end, text in sorted(edits, key=lambda edit: edit[:2]):
            pieces += (prompt[at:start], text)
            at = end
        pieces.append(prompt[at:])
        body = dict(source)
        body["prompt"] = "".join(pieces)
        return encode_json(body, fast=fast)


@dataclass(frozen=True, slots=True)
class PromptLayout(Layout):
    """The template the prompt is written in, and each canonical message's turn: where it
    is in the prompt."""

    template: Template | str  # "plain": instruct off
    turns: tuple[Turn, ...]

    @property
    def merges(self) -> bool:
        # With instruct off, a line without a name (ST's Author's Note, world info at a
        # depth, a narrator message) reads as one more line of the turn before it. (A
        # template whose system turn is the user's writes those as a user turn of their
        # own: identification takes the last one for ST's prompt by itself.)
        return self.template == "plain"

    def take_apart(
        self, parsed: ParsedRequest, parts: Mapping[int, Sequence[ChatMessage]]
    ) -> tuple[list[ChatMessage], Layout]:
        """Each part of a turn that holds several messages gets its own stretch of the
        turn's place in the prompt, so that it can be left out or have memory put before
        it alone. A turn whose parts are not found there stays whole."""
        prompt: str = parsed.body["prompt"]
        users = {t.name for t in self.turns if t.role == "user" and t.name}
        messages: list[ChatMessage] = []
        placed: list[Turn] = []
        for i, (message, turn) in enumerate(zip(parsed.messages, self.turns, strict=True)):
            spans = _spans(prompt, turn, parts[i]) if i in parts else None
            if spans is None:
                messages.append(message)
                placed.append(turn)
                continue
            for j, (part, (start, end)) in enumerate(zip(parts[i], spans, strict=True)):
                if j and part.role != "system":
                    part = _spoken(part, users)
                messages.append(part)
                placed.append(Turn(part.role, start, end, part.text, part.name))
        return messages, PromptLayout(self.template, tuple(placed))


def _spoken(part: ChatMessage, users: Collection[str]) -> ChatMessage:
    """A later part of a turn, which starts with its speaker's `Name:`: that speaker's
    message, the user's or a reply. (A group member whose name starts only one line of
    the prompt is not told apart as a speaker when it is split: their line reads as more
    of the turn before it, a continue of their reply as a continue of that turn.)"""
    found = spoken(part.text) if users else None
    if found is None or found[0].strip() != found[0]:
        return part
    name, text = found
    return ChatMessage("user" if name in users else "assistant", text, name)


def _spans(prompt: str, turn: Turn, parts: Sequence[ChatMessage]) -> list[tuple[int, int]] | None:
    """Where each part of `turn` starts and ends in the prompt (the first at the turn's
    start, its speaker's name with it), or None when one is not found in order."""
    starts = [turn.start]
    at = turn.start
    for i, part in enumerate(parts):
        found = prompt.find(part.text, at, turn.end)
        if found < 0:
            return None
        if i:
            starts.append(found)
        at = found + len(part.text)
    return list(zip(starts, [*starts[1:], turn.end], strict=True))


def _memory_block(template: Template | str, insertion: Insertion) -> str:
    role = insertion.role.value if insertion.role is not Role.SYSTEM else "system"
    if template == "plain":
        return insertion.text + "\n"
    if template == "mistral":
        if role == "assistant":
            return insertion.text + MISTRAL_END
        return f"{MISTRAL_OPEN}{insertion.text}{MISTRAL_CLOSE}"
    assert isinstance(template, Template)
    return template.block(role, insertion.text)


def write_prompt(
    template: Template | str, messages: Sequence[Mapping[str, str]]
) -> tuple[str, list[str]]:
    """OpenAI-style messages as one prompt in `template`, open for the assistant's turn,
    with the stop strings that end that turn: the proxy's own prompts for a server that
    only completes text."""
    if template == "mistral":
        parts = [
            m.get("content", "") + MISTRAL_END
            if m.get("role") == "assistant"
            else f"{MISTRAL_OPEN}{m.get('content', '')}{MISTRAL_CLOSE}"
            for m in messages
        ]
        return "".join(parts), [MISTRAL_OPEN.strip(), MISTRAL_END]
    if not isinstance(template, Template):  # instruct off: no turn markers to write
        return "\n\n".join(m.get("content", "") for m in messages) + "\n\n", []
    prompt = "".join(template.block(m.get("role", "user"), m.get("content", "")) for m in messages)
    stops = [s for s in (template.end.strip(), template.user.strip()) if s]
    return prompt + template.assistant, list(dict.fromkeys(stops))
