"""Text completion: one `prompt` string that ST built from an instruct template.

The same body key on every route ST uses for it: `/v1/completions` (text-generation-webui,
KoboldCpp, LM Studio, vLLM, ...), llama.cpp's `/completion`, Ollama's `/api/generate`,
KoboldAI Classic's `/api/v1/generate` and `/api/extra/generate/stream`.

The prompt is split into its turns with the template it was written in, recognised from
the prompt itself (ChatML, Llama 3, Gemma, Mistral, Alpaca, Vicuna, or instruct off:
`Name: text` lines after the story string). Each turn is one canonical message; the
story string before the first turn is the system prompt; the open turn at the end (`<|im_
start|>assistant\\nSeraphina:`, or the partial reply of a continue) is a trailing assistant
message, as a prefill is in a chat request. Memory goes in as a block in the template's
own system format (its user format where it has none) at the place the core decides;
left-out turns are cut from the string. A prompt in no known template is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from adapters.base import ParsedRequest
from adapters.openai_chat import decode_object, encode_json, reencode
from proxy.core.models import ChatMessage, Insertion, Role
from proxy.errors import UnknownPromptFormat

NAME = "text_completions"
PLACEHOLDER_MODEL = "local-model"  # local servers take any model name on their chat route


@dataclass(frozen=True, slots=True)
class Template:
    """An instruct template, as far as splitting and writing a turn need it."""

    name: str
    user: str
    assistant: str
    system: str | None  # None: the template has no system turn (its user turn is used)
    end: str  # what closes a turn (stripped from its text); "" when nothing does

    def opener(self, role: str) -> str:
        if role == "assistant":
            return self.assistant
        if role == "system" and self.system is not None:
            return self.system
        return self.user

    def block(self, role: str, text: str) -> str:
        return f"{self.opener(role)}{text}{self.end or chr(10)}"

    @classmethod
    def from_st(cls, instruct: Mapping[str, Any]) -> Template | None:
        """The instruct template active in ST (`power_user.instruct` of its settings.json),
        or None when instruct mode is off or the template has no sequences to split by."""
        if instruct.get("enabled") is not True:
            return None
        wrap = "\n" if instruct.get("wrap") is not False else ""

        def sequence(key: str) -> str:
            value = instruct.get(key)
            return f"{value}{wrap}" if isinstance(value, str) and value.strip() else ""

        user, assistant = sequence("input_sequence"), sequence("output_sequence")
        system = sequence("system_sequence")
        if not user.strip() or not assistant.strip() or user == assistant:
            return None
        same = instruct.get("system_same_as_user") is True or not system.strip()
        suffix = next(
            (v for k in ("input_suffix", "output_suffix", "stop_sequence")
             if isinstance(v := instruct.get(k), str) and v),
            "",
        )  # fmt: skip
        name = instruct.get("preset")
        return cls(f"st:{name}" if isinstance(name, str) else "st", user, assistant,
                   None if same else system, suffix)  # fmt: skip


TEMPLATES = (
    Template("chatml", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_start|>system\n",
             "<|im_end|>\n"),
    Template("llama3", "<|start_header_id|>user<|end_header_id|>\n\n",
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>"),
    Template("gemma", "<start_of_turn>user\n", "<start_of_turn>model\n", None,
             "<end_of_turn>\n"),
    Template("alpaca", "### Instruction:\n", "### Response:\n", None, "\n\n"),
    Template("vicuna", "USER: ", "ASSISTANT: ", None, "\n"),
)  # fmt: skip
MISTRAL_OPEN, MISTRAL_CLOSE, MISTRAL_END = "[INST] ", " [/INST]", "</s>"
SEPARATOR = "\n***\n"  # ST's chat start with instruct off (the "Default" context)


def chat_start(context: Mapping[str, Any]) -> str | None:
    """The line ST writes between the story string and the chat with instruct off (its
    context template's `chat_start`), as it stands in the prompt; None when it has none."""
    start = context.get("chat_start")
    if isinstance(start, str) and start.strip():
        return f"\n{start.strip()}\n"
    return None


@dataclass(frozen=True, slots=True)
class Turn:
    role: str
    start: int  # where its block starts in the prompt (its opener included)
    end: int  # where it ends (its closer included)
    text: str
    name: str | None = None


def _openers(prompt: str, openers: Mapping[str, str]) -> list[tuple[int, int, str]]:
    """(start, end, role) of every opener in the prompt, in order. `str.find` per opener:
    a regex alternation of them reads a 400 KiB prompt twenty times slower. An opener's
    trailing space may be missing where the prompt ends (`ASSISTANT:`)."""
    found: list[tuple[int, int, str]] = []
    for opener, role in openers.items():
        needle = opener.rstrip(" ")
        at = prompt.find(needle)
        while at >= 0:
            end = at + len(needle)
            if needle != opener and prompt.startswith(" ", end):
                end += 1
            found.append((at, end, role))
            at = prompt.find(needle, end)
    found.sort(key=lambda f: (f[0], f[0] - f[1]))  # the longest opener at a place wins
    kept: list[tuple[int, int, str]] = []
    for item in found:
        if not kept or item[0] >= kept[-1][1]:
            kept.append(item)
    return kept


def _turns_with(template: Template, prompt: str) -> list[Turn] | None:
    openers = {template.user: "user", template.assistant: "assistant"}
    if template.system is not None:
        openers[template.system] = "system"
    found = _openers(prompt, openers)
    if len(found) < 2:
        return None
    turns: list[Turn] = []
    head = prompt[: found[0][0]].strip()
    if head and head not in ("<|begin_of_text|>", "<s>", "<bos>"):
        turns.append(Turn("system", 0, found[0][0], head))
    for i, (start, opened, role) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(prompt)
        text = prompt[opened:end]
        if template.end and text.endswith(template.end):
            text = text[: -len(template.end)]
        elif template.end.strip() and text.rstrip().endswith(template.end.strip()):
            text = text.rstrip()[: -len(template.end.strip())]
        turns.append(Turn(role, start, end, text.strip("\n")))
    return turns


def _mistral(prompt: str) -> list[Turn] | None:
    if prompt.count(MISTRAL_OPEN.strip()) < 2:
        return None
    turns: list[Turn] = []
    at = prompt.find(MISTRAL_OPEN.strip())
    if prompt[:at].strip() not in ("", "<s>"):
        turns.append(Turn("system", 0, at, prompt[:at].strip()))
    while at >= 0:
        close = prompt.find(MISTRAL_CLOSE.strip(), at)
        if close < 0:
            return None
        after = close + len(MISTRAL_CLOSE.strip())
        turns.append(
            Turn("user", at, after, prompt[at + len(MISTRAL_OPEN.strip()) : close].strip())
        )
        following = prompt.find(MISTRAL_OPEN.strip(), after)
        end = len(prompt) if following < 0 else following
        reply = prompt[after:end]
        turns.append(Turn("assistant", after, end, reply.replace(MISTRAL_END, "").strip()))
        at = following
    return turns


def _plain(
    prompt: str, known: tuple[str | None, str | None], separators: Sequence[str]
) -> list[Turn] | None:
    """Instruct off: the story string, the chat start (`***`), then one `Name: text` line
    (or more) per message, ending with the character's name and a colon."""
    for separator in (*separators, SEPARATOR):
        split = prompt.find(separator)
        if split >= 0:
            break
    if split < 0 or known[0] is None:
        return None
    body = split + len(separator)
    # Lines start with their speaker's name: the user, the character, and in a group
    # any other name that starts two lines or more.
    lines = prompt[body:].split("\n")
    names = _speakers(known, lines)
    if len(names) < 2:
        return None
    heads = tuple(n + ":" for n in names)
    found: list[tuple[int, str]] = []  # (where a message starts, its speaker)
    at = body
    for line in lines:
        if line.startswith(heads):
            found.append((at, next(n for n in names if line.startswith(n + ":"))))
        at += len(line) + 1
    turns = [Turn("system", 0, body, prompt[:split])]
    for i, (start, name) in enumerate(found):
        end = found[i + 1][0] if i + 1 < len(found) else len(prompt)
        role = "user" if name == names[0] else "assistant"
        turns.append(Turn(role, start, end, prompt[start:end].strip()))
    return turns if found else None


_SPEAKER = re.compile(r"(?:<[^>\n]{1,40}>)*([^\n:*\"\[\]<>]{1,40}):")


def _names(body: Mapping[str, Any], prompt: str) -> tuple[str | None, str | None]:
    """(user, character): the user's from the stop strings (`\nUser:`), the character's
    from the prompt's open turn (`Seraphina:`)."""
    stops = body.get("stop") or body.get("stopping_strings") or body.get("stop_sequence") or []
    if isinstance(body.get("options"), dict):
        stops = body["options"].get("stop") or stops
    user = next(
        (s.strip()[:-1] for s in stops if isinstance(s, str) and s.startswith("\n")
         and s.strip().endswith(":") and "<" not in s),
        None,
    )  # fmt: skip
    last = prompt[-100:].rstrip().rsplit("\n", 1)[-1]
    tail = last[:-1].strip() if last.endswith(":") and len(last) < 80 else None
    return user, tail


def _speakers(known: tuple[str | None, str | None], starts: Iterable[str]) -> tuple[str, ...]:
    """The known names, the user's first, and any other that starts two turns or more."""
    counted: dict[str, int] = {}
    for text in starts:
        match = _SPEAKER.match(text)
        if match is not None:
            counted[match.group(1)] = counted.get(match.group(1), 0) + 1
    others = [n for n, c in counted.items() if c >= 2 and n not in known]
    return tuple(n for n in (*known, *others) if n)


def split_prompt(
    body: Mapping[str, Any],
    prompt: str,
    first: Sequence[Template] = (),
    separators: Sequence[str] = (),
) -> tuple[Template | str, list[Turn]] | None:
    """The template a prompt was written in and its turns, or None when it is in none;
    the templates in `first` (ST's own) are tried before the known ones, and ST's chat
    starts in `separators` before `***` for a prompt with instruct off. A turn that
    starts with a known speaker's `Name:` (ST's names in the prompt) has it as its name,
    and its text without it: as the chat file has the message."""
    known = _names(body, prompt)
    found = _split(prompt, known, first, separators)
    if found is None:
        return None
    template, turns = found
    names = _speakers(known, (t.text for t in turns if t.role != "system"))
    named = []
    for turn in turns:
        speaker = next((n for n in names if turn.text.startswith(n + ":")), None)
        if speaker is not None and turn.role != "system":
            text = turn.text[len(speaker) + 1 :].strip()
            turn = Turn(turn.role, turn.start, turn.end, text, speaker)
        named.append(turn)
    return template, named


def _split(
    prompt: str,
    known: tuple[str | None, str | None],
    first: Sequence[Template],
    separators: Sequence[str],
) -> tuple[Template | str, list[Turn]] | None:
    for template in (*first, *TEMPLATES):
        if template.user.strip() in prompt and template.assistant.strip() in prompt:
            turns = _turns_with(template, prompt)
            if turns:
                return template, turns
    if MISTRAL_CLOSE.strip() in prompt:
        turns = _mistral(prompt)
        if turns:
            return "mistral", turns
    plain = _plain(prompt, known, separators)
    return ("plain", plain) if plain else None


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
            layout=(template, tuple(turns)),
            writer=partial(write_prompt, template),
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
        template, turns = parsed.layout
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
