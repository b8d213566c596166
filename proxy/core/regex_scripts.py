"""ST's regex scripts, as they change a message on its way into a prompt. Pure.

A user's regex scripts (`extension_settings.regex` in their `settings.json`) cut a status
block, an `<img>` tag or an HTML panel out of what the model sees. The memory's prompts
must see the story as the chat's model does, so the scripts ST runs when it builds a
prompt run on each message before it goes into one.

ST runs, at prompt time, the scripts marked "Alter Outgoing Prompt" (`promptOnly`), on the
messages their placement names (1: the user's, 2: the AI's), within their depth limits
(`minDepth`, `maxDepth`; 0 is the newest message). Scripts marked neither `promptOnly` nor
`markdownOnly` ran when each message was saved: the file holds their result already, and
ST does not run them again on a prompt. Disabled ones never run (ST's `engine.js`).

A script is JavaScript's regular expression (`/pattern/flags`) and replacement (`$1`,
`{{match}}`, `trimStrings` taken off each group, `{{user}}` and `{{char}}`): both are read
into Python's. A pattern Python cannot read is left out and named (`problems`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final

USER_INPUT: Final = 1
AI_OUTPUT: Final = 2
# substituteRegex: the pattern's macros kept as they are, replaced, or replaced escaped.
SUBSTITUTE_NONE, SUBSTITUTE_RAW, SUBSTITUTE_ESCAPED = 0, 1, 2
_FLAGS: Final = {"i": re.IGNORECASE, "m": re.MULTILINE, "s": re.DOTALL}
_MACRO = re.compile(r"\{\{(user|char)\}\}", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Script:
    name: str
    find: str  # as ST keeps it: `/pattern/flags`, or a bare pattern
    replace: str
    trim: tuple[str, ...] = ()
    placement: frozenset[int] = frozenset()
    substitute: int = SUBSTITUTE_NONE
    min_depth: int | None = None
    max_depth: int | None = None

    def applies(self, is_user: bool, depth: int | None) -> bool:
        if (USER_INPUT if is_user else AI_OUTPUT) not in self.placement:
            return False
        if depth is None:
            return True
        if self.min_depth is not None and self.min_depth >= -1 and depth < self.min_depth:
            return False
        return not (self.max_depth is not None and self.max_depth >= 0 and depth > self.max_depth)


@dataclass(frozen=True, slots=True)
class PromptScripts:
    """The scripts ST runs on a prompt's messages, in ST's order."""

    scripts: tuple[Script, ...] = ()
    problems: tuple[str, ...] = field(default=(), compare=False)

    def apply(
        self, text: str, *, is_user: bool, depth: int | None, names: Mapping[str, str]
    ) -> str:
        """`text` as it goes into a prompt at `depth` (None: unknown, every depth counts)."""
        for script in self.scripts:
            if text and script.applies(is_user, depth):
                text = _run(script, text, names)
        return text


NONE: Final = PromptScripts()


def prompt_scripts(raw: object) -> PromptScripts:
    """The prompt-time scripts of `extension_settings.regex` (a list of ST's script
    objects); those that cannot run in Python are named in `problems`."""
    scripts: list[Script] = []
    problems: list[str] = []
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict) or item.get("disabled") or not item.get("promptOnly"):
            continue
        script = _script(item)
        if script is None:
            continue
        try:
            _compiled(_pattern(script, {}))
        except re.error as exc:
            problems.append(f"regex script {script.name!r}: {exc}")
            continue
        scripts.append(script)
    return PromptScripts(tuple(scripts), tuple(problems))


def _script(item: Mapping[str, Any]) -> Script | None:
    find = item.get("findRegex")
    if not isinstance(find, str) or not find:
        return None
    placement = item.get("placement")
    trim = item.get("trimStrings")
    return Script(
        name=str(item.get("scriptName") or item.get("id") or "?"),
        find=find,
        replace=str(item.get("replaceString") or ""),
        trim=tuple(t for t in trim if isinstance(t, str) and t) if isinstance(trim, list) else (),
        placement=frozenset(p for p in placement if isinstance(p, int))
        if isinstance(placement, list)
        else frozenset(),
        substitute=_number(item.get("substituteRegex")) or SUBSTITUTE_NONE,
        min_depth=_number(item.get("minDepth")),
        max_depth=_number(item.get("maxDepth")),
    )


def _number(value: object) -> int | None:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int | float):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _macros(text: str, names: Mapping[str, str], escape: bool = False) -> str:
    def name(match: re.Match[str]) -> str:
        value = names.get(match.group(1).lower(), match.group(0))
        return re.escape(value) if escape else value

    return _MACRO.sub(name, text)


def _pattern(script: Script, names: Mapping[str, str]) -> str:
    if script.substitute == SUBSTITUTE_RAW:
        return _macros(script.find, names)
    if script.substitute == SUBSTITUTE_ESCAPED:
        return _macros(script.find, names, escape=True)
    return script.find


@lru_cache(maxsize=256)
def _compiled(find: str) -> tuple[re.Pattern[str], bool]:
    """JavaScript's `/pattern/flags` as Python's pattern, and whether it is global."""
    pattern, flags = find, ""
    slashed = re.fullmatch(r"/(.+)/([a-z]*)", find, re.DOTALL)
    if slashed:
        pattern, flags = slashed.group(1), slashed.group(2)
    python = re.sub(r"\(\?<(?![=!])", "(?P<", pattern)  # named groups
    python = re.sub(r"\\k<(\w+)>", r"(?P=\1)", python)
    python = python.replace("[^]", r"[\s\S]")  # JavaScript's "any character at all"
    flag = 0
    for letter in flags:
        flag |= _FLAGS.get(letter, 0)
    return re.compile(python, flag), "g" in flags


def _run(script: Script, text: str, names: Mapping[str, str]) -> str:
    try:
        pattern, every = _compiled(_pattern(script, names))
    except re.error:
        return text  # a macro made it unreadable: ST's own would fail too, and do nothing
    replacement = re.sub(r"\{\{match\}\}", "$0", script.replace, flags=re.IGNORECASE)

    def replaced(match: re.Match[str]) -> str:
        def group(ref: re.Match[str]) -> str:
            number = int(ref.group(1))
            found = match.group(number) if number <= (pattern.groups or 0) else None
            return _trimmed(found or "", script.trim, names)

        return _macros(re.sub(r"\$(\d+)", group, replacement), names)

    return pattern.sub(replaced, text, count=0 if every else 1)


def _trimmed(text: str, trims: Iterable[str], names: Mapping[str, str]) -> str:
    for trim in trims:
        text = text.replace(_macros(trim, names), "")
    return text
