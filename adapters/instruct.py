"""A text-completion prompt read back into its turns: the instruct templates the proxy
knows (ChatML, Llama 3, Gemma, Alpaca, Vicuna, Mistral's `[INST]`), the one active in ST
(read from its settings), and instruct off (`Name: text` lines after ST's chat start).

`split_prompt` finds the template a prompt was written in from the prompt itself and
gives each turn's place in it, so that `adapters.text_completions` can insert memory
between turns and cut turns out without rewriting the rest.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Template:
    """An instruct template, as far as splitting and writing a turn need it."""

    name: str
    user: str
    assistant: str
    system: str | None  # None: the template has no system turn (its user turn is used)
    end: str  # what closes a turn (stripped from its text); "" when nothing does
    # ST's own closers of a user, an assistant and a system turn, where its settings say
    # them: they differ in some (Mistral's user turn has none, its assistant's is `</s>`).
    closers: tuple[str, str, str] | None = None

    def opener(self, role: str) -> str:
        if role == "assistant":
            return self.assistant
        if role == "system" and self.system is not None:
            return self.system
        return self.user

    def closer(self, role: str) -> str:
        if self.closers is None:
            return self.end or "\n"
        user, assistant, system = self.closers
        if role == "assistant":
            return assistant
        return system if role == "system" and self.system is not None else user

    def block(self, role: str, text: str) -> str:
        return f"{self.opener(role)}{text}{self.closer(role)}"

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

        def closer(key: str) -> str:
            # As ST closes a turn (`formatInstructModeChat`): a newline when it wraps and
            # the suffix is empty. Settings from before ST had a suffix per role (1.12)
            # have not the key: their one closer is used.
            value = instruct.get(key)
            if not isinstance(value, str):
                return suffix or wrap
            return value or wrap

        closers = (closer("input_suffix"), closer("output_suffix"), closer("system_suffix"))
        name = instruct.get("preset")
        return cls(f"st:{name}" if isinstance(name, str) else "st", user, assistant,
                   None if same else system, suffix, closers)  # fmt: skip


TEMPLATES = (
    Template("chatml", "<|im_start|>user\n", "<|im_start|>assistant\n", "<|im_start|>system\n",
             "<|im_end|>\n"),
    Template("llama3", "<|start_header_id|>user<|end_header_id|>\n\n",
             "<|start_header_id|>assistant<|end_header_id|>\n\n",
             "<|start_header_id|>system<|end_header_id|>\n\n", "<|eot_id|>"),
    Template("gemma", "<start_of_turn>user\n", "<start_of_turn>model\n", None,
             "<end_of_turn>\n"),
    Template("alpaca", "### Instruction:\n", "### Response:\n", "### Input:\n", "\n\n"),
    Template("vicuna", "USER: ", "ASSISTANT: ", None, "\n"),
)  # fmt: skip
MISTRAL_OPEN, MISTRAL_CLOSE, MISTRAL_END = "[INST] ", " [/INST]", "</s>"
# Its markers as a template, to find turns by (its turns are written by the adapter).
MISTRAL = Template("mistral", MISTRAL_OPEN, MISTRAL_CLOSE.strip() + " ", None, MISTRAL_END)
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


def _opened(template: Template, prompt: str) -> bool:
    """Whether a prompt holds the template's user turn, its system turn, two replies, or
    one on a line of its own after the story: a prompt with only the chat's first reply (the
    greeting, a group's first member) has no user turn, whether that reply is continued or
    followed by one that no message of the user's asked for (a group's next member, an
    empty send); and a story string written without the system turn (Alpaca's) has none
    of those either."""
    if template.user.strip() in prompt:
        return True
    if template.system is not None and template.system.strip() in prompt:
        return True
    reply = template.assistant.strip()
    at = prompt.find(reply)
    return prompt.count(reply) >= 2 or (
        at > 0 and prompt[at - 1] == "\n" and bool(prompt[:at].strip())
    )


def _turns_with(template: Template, prompt: str) -> list[Turn] | None:
    openers = {template.user: "user", template.assistant: "assistant"}
    if template.system is not None:
        openers[template.system] = "system"
    found = _openers(prompt, openers)
    head = prompt[: found[0][0]].strip() if found else ""
    if len(found) < 2 and not head:
        return None  # a reply after the story (`_opened`) is the least a prompt has
    turns: list[Turn] = []
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
    """Mistral's `[INST] user [/INST] assistant</s>`, read by its markers, not as pairs:
    ST writes two user messages in a row as two `[INST]` with no `[/INST]` between, and
    ends an impersonation's prompt with an open `[INST] Name:`."""
    if prompt.count(MISTRAL_OPEN.strip()) < 2:
        return None
    turns = _turns_with(MISTRAL, prompt)
    if turns is None:
        return None
    return [Turn(t.role, t.start, t.end, t.text.replace(MISTRAL_END, "").strip()) for t in turns]


def _plain(
    prompt: str,
    known: tuple[str | None, str | None],
    members: Sequence[str],
    separators: Sequence[str],
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
    # the other members (`split_prompt`) and any other name that starts two lines or more.
    lines = prompt[body:].split("\n")
    names = _speakers(known, lines, plain=True, members=members)
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


def spoken(text: str) -> tuple[str, str] | None:
    """The speaker a turn's text starts with as ST names one in a prompt (`Name:`), and
    the text after it; None when it starts with no such name."""
    match = _SPEAKER.match(text)
    if match is None:
        return None
    return match.group(1), text[match.end() :].strip()


def _names(named: Sequence[str], prompt: str) -> tuple[str | None, str | None]:
    """(user, character): the user's from the stop strings' names (`named`), the
    character's from the prompt's open turn (`Seraphina:`); in an impersonation the other
    way round."""
    last = prompt[-100:].rstrip().rsplit("\n", 1)[-1]
    tail = last[:-1].strip() if last.endswith(":") and len(last) < 80 else None
    if tail is not None and tail in named[1:]:
        # An impersonation: ST stops at the character's name first, then the user's, and
        # the open turn is the user's.
        return tail, named[0]
    return (named[0] if named else None), tail


def _stop_names(body: Mapping[str, Any]) -> list[str]:
    """The names in the stop strings that stop at a speaker's line (`\nName:`), in order."""
    stops = body.get("stop") or body.get("stopping_strings") or body.get("stop_sequence") or []
    if isinstance(body.get("options"), dict):
        stops = body["options"].get("stop") or stops
    return [
        s.strip()[:-1] for s in stops if isinstance(s, str) and s.startswith("\n")
        and s.strip().endswith(":") and "<" not in s
    ]  # fmt: skip


def _speakers(
    known: tuple[str | None, str | None],
    starts: Iterable[str],
    *,
    plain: bool = False,
    members: Sequence[str] = (),
) -> tuple[str, ...]:
    """The known names, the user's first, the group's other `members`, and any other
    name that starts two turns or more. `plain` (instruct off, where every message starts
    with its speaker's name) and no open turn that names the character (a continue):
    when only the user is known (the chat's only message of its speaker: the greeting, a
    group's first reply), the first other name a turn starts with (the message's own,
    not a line inside it); in a group whose every speaker known but the user is one the
    stop strings name (so not the member ST continues), the first other name after the
    last line of a known speaker (the continued message's own)."""
    lines = list(starts)
    counted: dict[str, int] = {}
    heads: list[str | None] = []
    for text in lines:
        found = spoken(text)
        heads.append(found[0] if found is not None else None)
        if found is not None:
            counted[found[0]] = counted.get(found[0], 0) + 1
    others = [n for n, c in counted.items() if c >= 2 and n not in known]
    names = tuple(dict.fromkeys(n for n in (*known, *members, *others) if n))
    if not plain or known[1]:
        return names
    if len(names) == 1:
        return names + tuple(n for n in counted if n not in names)[:1]
    if members and all(n in members for n in names[1:]):
        last = max((i for i, head in enumerate(heads) if head in names), default=-1)
        return names + tuple(h for h in heads[last + 1 :] if h is not None)[:1]
    return names


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
    stopped = _stop_names(body)
    known = _names(stopped, prompt)
    # A group's other members: ST stops at every member's name but the one it writes for
    # (its `names_as_stop_strings`, on by default), so that a member whose message is the
    # only one of theirs in the prompt is still told a speaker.
    members = tuple(n for n in stopped if n not in known)
    found = _split(prompt, known, members, first, separators)
    if found is None:
        return None
    template, turns = found
    texts = (t.text for t in turns if t.role != "system")
    names = _speakers(known, texts, plain=template == "plain", members=members)
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
    members: Sequence[str],
    first: Sequence[Template],
    separators: Sequence[str],
) -> tuple[Template | str, list[Turn]] | None:
    for template in (*first, *TEMPLATES):
        if template.assistant.strip() in prompt and _opened(template, prompt):
            turns = _turns_with(template, prompt)
            if turns:
                return template, turns
    if MISTRAL_CLOSE.strip() in prompt:
        turns = _mistral(prompt)
        if turns:
            return "mistral", turns
    plain = _plain(prompt, known, members, separators)
    return ("plain", plain) if plain else None
