"""Scenes: when to ask for a scene break, what to show, how to check the answer, and how
a scene and its name are written for the recap prompts. Pure.

ST-Auto-Recap's detection (its report §8), with its flaws fixed: the open scene is
checked only when a break can be accepted (enough messages since the last break, past
the offset zone) and only once `scene_break_every` messages can be chosen that no earlier
check looked at (the first check of a scene too), the choice is limited to a window, and
an invalid answer is re-asked a bounded number of times by the caller.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, field_validator

from proxy.core.recaps import Said, speaker
from proxy.core.replies import ReplyError, read_reply

CONTEXT_BEFORE = 4  # messages before the first choosable one, shown as context
# Lines that only decorate: `---`, `***`, `* * *`, `===`, "Scene break", "Chapter 3".
_DECORATION = re.compile(
    r"^\s*(?:[-*_=~#•·\s]{3,}|(?:scene\s*break|chapter\s+\w+|\[?\s*time\s*skip\s*\]?)[\s.:!-]*)\s*$",
    re.IGNORECASE | re.MULTILINE,
)
_BLANKS = re.compile(r"\n{3,}")
_FORMATTING_WORDS = re.compile(
    r"\b(separator|divider|horizontal rule|formatting|markdown|asterisks|dashes)\b",
    re.IGNORECASE,
)


def strip_decoration(text: str) -> str:
    return _BLANKS.sub("\n\n", _DECORATION.sub("", text)).strip()


def shown(message: Said, which: str, *, hidden: bool = False) -> bool:
    """Whether detection (or a scene recap) reads this message at all. `hidden`: messages
    hidden in ST are part of the story too (its `/hide`, ST-Auto-Recap's auto-hide); ST's
    own notices never are."""
    if message.hidden and not hidden:
        return False
    if message.narrator or message.notice or message.aside:
        return False
    if not strip_decoration(message.mes):
        return False
    if which == "user":
        return message.is_user
    if which == "character":
        return not message.is_user
    return True


@dataclass(frozen=True, slots=True)
class Window:
    """One detection call: the messages shown and the ones that may be chosen."""

    shown: tuple[int, ...]  # positions, oldest first
    choosable: tuple[int, ...]
    minimum: int

    @property
    def first(self) -> int:
        return self.choosable[0]

    @property
    def last(self) -> int:
        return self.choosable[-1]


@dataclass(frozen=True, slots=True)
class DetectionRules:
    """When a scene-break check is made (`[memory]`'s settings of the same meaning)."""

    minimum: int  # messages a scene has at least before a break may end it
    offset: int  # the newest messages, context only
    every: int  # new messages a check waits for
    size: int  # most messages one check may choose from


def detection_window(
    scene: Sequence[int], *, checked: int | None, rules: DetectionRules
) -> Window | None:
    """The next detection over an open scene, or None when none can succeed yet.

    `scene` holds the positions of the open scene's shown messages, oldest first;
    `checked` the newest position an earlier check found no break up to. A break needs
    `minimum` messages in its scene, and the newest `offset` messages are context only.
    """
    minimum, offset, every, size = rules.minimum, rules.offset, rules.every, rules.size
    if len(scene) <= offset:
        return None
    last_choosable = len(scene) - 1 - offset
    earliest = minimum - 1  # the scene's minimum-th message may end it
    start = earliest
    if checked is not None:
        unchecked = [i for i, position in enumerate(scene) if position > checked]
        if len(unchecked) < offset + every:
            return None  # too few new messages since the last check found nothing
        start = max(start, unchecked[0])
    if start > last_choosable:
        return None
    if checked is None and last_choosable - start + 1 < min(every, size):
        # The first check of a scene waits for a full stride of choosable messages too:
        # most scenes run well past their minimum, and a check of one or two messages
        # that finds nothing is a call spent for nothing.
        return None
    end = min(last_choosable, start + size - 1)
    first_shown = max(0, start - CONTEXT_BEFORE)
    last_shown = min(len(scene) - 1, end + offset)
    return Window(
        shown=tuple(scene[first_shown : last_shown + 1]),
        choosable=tuple(scene[start : end + 1]),
        minimum=minimum,
    )


def messages_until_window(
    scene: Sequence[int], *, checked: int | None, rules: DetectionRules
) -> int:
    """How many more shown messages the open scene needs before `detection_window` gives
    a window (0: it gives one now), its arguments as there. What `memory` and the
    dashboard tell a person who wonders why a short chat has no scenes yet.

    Found by asking `detection_window` itself about the scene grown one message at a
    time, so that the answer cannot drift from the rule it describes."""
    grown = list(scene)
    after = max(grown[-1] if grown else -1, checked if checked is not None else -1)
    # Past this many new messages every rule is met (each counts messages).
    bound = rules.minimum + rules.offset + rules.every + rules.size + 1
    for more in range(bound + 1):
        if more:
            grown.append(after + more)
        if detection_window(grown, checked=checked, rules=rules) is not None:
            return more
    return bound


def detection_messages(window: Window, messages: Mapping[int, Said]) -> str:
    """`{{messages}}`: the window, where only choosable messages carry their number."""
    blocks = []
    choosable = set(window.choosable)
    for position in window.shown:
        message = messages[position]
        number = f"#{position}" if position in choosable else "#invalid choice"
        text = strip_decoration(message.mes)
        blocks.append(f"Message {number} [{speaker(message).split(':')[0]}]: {text}")
    return "\n\n".join(blocks)


class BreakAnswer(BaseModel):
    sceneBreakAt: int | None
    rationale: str = ""

    @field_validator("sceneBreakAt", mode="before")
    @classmethod
    def _false_means_none(cls, value: object) -> object:
        if value is False or value is None or value in ("false", "null", "none", ""):
            return None
        if isinstance(value, str) and value.strip().lstrip("#").isdigit():
            return int(value.strip().lstrip("#"))
        return value


def read_break(text: str, window: Window) -> tuple[int | None, str, str]:
    """(position or None for "no break", rationale, reasoning). Raises `ReplyError` for an
    answer that cannot be accepted: not JSON, a number outside the choosable ones, or a
    break justified by formatting (separators are not scene breaks)."""
    answer, reasoning = read_reply(text, BreakAnswer)
    position = answer.sceneBreakAt
    if position is None:
        return None, answer.rationale, reasoning
    if position not in window.choosable:
        raise ReplyError(
            f"sceneBreakAt {position} is not one of the eligible messages "
            f"#{window.first}..#{window.last}"
        )
    if _FORMATTING_WORDS.search(answer.rationale):
        raise ReplyError("the break is justified by formatting, not by the story")
    return position, answer.rationale, reasoning


def scene_text(messages: Sequence[Said]) -> str:
    """`{{scene_messages}}`: `[USER: name]` / `[CHARACTER: name]` blocks."""
    return "\n\n".join(f"[{speaker(m)}]\n{strip_decoration(m.mes)}" for m in messages)


class SceneAnswer(BaseModel):
    scene_name: str = ""
    recap: str
    # The scene's entities as the model listed them, read leniently by
    # `proxy.core.entities.entities_of` (an answer without them is a whole recap).
    entities: object = None

    @field_validator("recap")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the recap is empty")
        return value.strip()


class RunningAnswer(BaseModel):
    recap: str

    @field_validator("recap")
    @classmethod
    def _not_empty(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the running recap is empty")
        return value.strip()


def scene_name(raw: str, first: int, last: int, *, append_range: bool) -> str:
    """ST-Auto-Recap's naming: trimmed, unquoted, cut at 50 characters, range appended."""
    name = raw.strip().strip("\"'“”").strip()
    if len(name) > 50:
        name = name[:47].rstrip() + "…"
    if not name:
        name = "Scene"
    return f"{name} {first}-{last}" if append_range else name
