"""Message recaps: which messages get one, how a batch is asked for and read, and which
recaps go into a request within their token budget. Pure.

Eligibility follows ST-Auto-Recap's ancestor (qvink) with the same defaults: hidden,
narrator, thought and user messages are left out unless included by a setting, as are
disabled group members, messages under `message_length_threshold` tokens, and messages
the user excluded.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import BaseModel, Field

from proxy.core.replies import ReplyError, read_reply

THOUGHT_TYPES = frozenset({"thoughts", "thought", "reasoning"})


class Said(Protocol):
    """A chat message as recaps and scene detection read it. ST's file format
    (`proxy.sillytavern.chatfile.Said`) is one: the pure core names what it reads,
    not the layer above that parses it."""

    @property
    def name(self) -> str: ...
    @property
    def mes(self) -> str: ...
    @property
    def is_user(self) -> bool: ...
    @property
    def hidden(self) -> bool: ...
    @property
    def notice(self) -> bool: ...
    @property
    def aside(self) -> bool: ...
    @property
    def narrator(self) -> bool: ...
    @property
    def extra_type(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class RecapRules:
    include_user: bool = False
    include_system: bool = False
    include_narrator: bool = False
    include_thought: bool = False
    length_threshold: int = 10
    disabled_members: frozenset[str] = frozenset()


def exclusion(
    message: Said, tokens: int, rules: RecapRules, *, user_excluded: bool = False
) -> str | None:
    """Why a message gets no recap, or None when it gets one."""
    if user_excluded:
        return "excluded by the user"
    if not message.mes.strip():
        return "empty"
    if message.notice:
        return "an ST notice"
    if message.aside:
        return "not the story (a thought, or a memory extension's own message)"
    if message.hidden and not rules.include_system:
        return "hidden"
    if message.narrator and not rules.include_narrator:
        return "narrator"
    if message.extra_type in THOUGHT_TYPES and not rules.include_thought:
        return "thought"
    if message.is_user and not rules.include_user:
        return "user message"
    if not message.is_user and message.name in rules.disabled_members:
        return "disabled group member"
    if tokens < rules.length_threshold:
        return "shorter than message_length_threshold"
    return None


def speaker(message: Said) -> str:
    return f"{'USER' if message.is_user else 'CHARACTER'}: {message.name or '?'}"


def numbered(items: Iterable[tuple[int, Said]]) -> str:
    """`Message #<index> [CHARACTER: name]:` blocks, as the message-recap prompt shows them."""
    return "\n\n".join(f"Message #{index} [{speaker(m)}]:\n{m.mes.strip()}" for index, m in items)


class RecapItem(BaseModel):
    message: int = Field(description="The number the message was shown with.")
    recap: str


class MessageRecapsAnswer(BaseModel):
    recaps: list[RecapItem]


def read_message_recaps(text: str, asked: Collection[int]) -> tuple[dict[int, str], str]:
    """The recaps a batch answer gives for the messages asked about (others are ignored),
    and the reasoning. Raises `ReplyError` when it gives none of them."""
    answer, reasoning = read_reply(text, MessageRecapsAnswer)
    found: dict[int, str] = {}
    for item in answer.recaps:
        recap = item.recap.strip()
        if item.message in asked and recap and item.message not in found:
            found[item.message] = recap
    if not found:
        numbers = sorted(asked)
        raise ReplyError(f"the answer recaps none of the messages asked about ({numbers})")
    return found, reasoning


def budget_tokens(limit: float, kind: str, context_size: int) -> int:
    """`message_recap_context_limit` in tokens: a percent of the context, or absolute."""
    if kind == "percent":
        return int(context_size * limit / 100)
    return int(limit)


@dataclass(frozen=True, slots=True)
class Candidate:
    position: int
    tokens: int
    text: str


SEPARATOR_TOKENS = 2  # "\n- " between two recaps


RECAPS_HEADING = "Recent events, oldest first:"


@dataclass(frozen=True, slots=True)
class RecapShelf:
    """Candidates (oldest first) ready for the chat path: the ones a request gets, chosen
    by bisection over what is worked out once per memory view (positions, the running sum
    of their costs, their lines), not by a walk over every recap on every request."""

    positions: tuple[int, ...] = ()
    sums: tuple[int, ...] = (0,)  # sums[i]: the cost of the first i, separators included
    lines: tuple[str, ...] = ()
    # The last answer, by its range: the same text object while ST's cut stays, so that
    # what is keyed by it (the template's render, the token count) finds it at once.
    _last: dict[tuple[int, int], str] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, candidates: Sequence[Candidate]) -> RecapShelf:
        sums = [0]
        for candidate in candidates:
            sums.append(sums[-1] + candidate.tokens + SEPARATOR_TOKENS)
        return cls(
            tuple(c.position for c in candidates),
            tuple(sums),
            tuple(f"- {c.text}" for c in candidates),
        )

    def moved(self, new: Callable[[int], int | None]) -> RecapShelf:
        """The same recaps at the positions `new` gives them (a re-read moved their
        messages), less those it gives none (deleted, or changed since recapped)."""
        positions: list[int] = []
        sums = [0]
        lines: list[str] = []
        for i, position in enumerate(self.positions):
            now = new(position)
            if now is not None:
                positions.append(now)
                sums.append(sums[-1] + self.sums[i + 1] - self.sums[i])
                lines.append(self.lines[i])
        return RecapShelf(tuple(positions), tuple(sums), tuple(lines))

    def left_out_of(self, positions: Iterable[int], before: int | None, budget: int) -> set[int]:
        """Which of `positions` have a recap here that `newest(before, budget)` leaves out
        (its budget too small): messages that may not leave a request, nothing standing
        in for them."""
        end = len(self.positions) if before is None else bisect_left(self.positions, before)
        first = bisect_left(self.sums, self.sums[end] - (budget - 1), 0, end)
        found: set[int] = set()
        for position in positions:
            i = bisect_left(self.positions, position)
            if i < len(self.positions) and self.positions[i] == position and not first <= i < end:
                found.add(position)
        return found

    def newest(self, before: int | None, budget: int) -> tuple[str, int]:
        """`{{recent_recaps}}` from the recaps of messages before position `before` ("" when
        none fits), and the tokens they take, their separators included.

        They are chosen newest to oldest (qvink's inclusion walk) and the walk stops at the
        first that does not fit in `budget` (one token of it is the frame's): what goes in
        is always the most recent stretch, without holes, oldest first."""
        end = len(self.positions) if before is None else bisect_left(self.positions, before)
        sums = self.sums
        # That walk's answer: the longest run ending at `end` whose cost, plus 1, fits.
        first = bisect_left(sums, sums[end] - (budget - 1), 0, end)
        if first >= end:
            return "", 0
        text = self._last.get((first, end))
        if text is None:
            text = RECAPS_HEADING + "\n" + "\n".join(self.lines[first:end])
            self._last.clear()
            self._last[first, end] = text
        return text, sums[end] - sums[first]
