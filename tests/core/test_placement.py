"""Placement follows ST's extension-prompt rules (DESIGN.md, reference §6.2).

Each case lists a message list by short tags and where a memory message must land:
`main` main prompt, `desc` card text, `start` [Start a new Chat], `gstart` the group
variant, `ex_u`/`ex_a` example dialogue, `u`/`a` chat turns, `phi` post-history
instructions, `nudge` group nudge, `cont` continue nudge, `inj` one of ST's own injections,
`pre` an assistant prefill, `open` the user's open turn a text-completion impersonation
ends with.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.models import ChatMessage, Placement, Position, Role
from proxy.core.placement import find_history, insertion_index, known_history
from tests.core.st_requests import st_messages

MARKERS = ("[Start a new Chat]", "[Start a new group chat")

TAGS = {
    "main": ChatMessage("system", "Write Seraphina's next reply."),
    "desc": ChatMessage("system", "Seraphina is a guardian of the glade."),
    "start": ChatMessage("system", "[Start a new Chat]"),
    "gstart": ChatMessage("system", "[Start a new group chat. Group members: Orin, Seraphina]"),
    "exchat": ChatMessage("system", "[Example Chat]"),
    "ex_u": ChatMessage("system", "User: hello", name="example_user"),
    "ex_a": ChatMessage("system", "Orin: hm.", name="example_assistant"),
    "u": ChatMessage("user", "a user turn"),
    "a": ChatMessage("assistant", "a character turn"),
    "phi": ChatMessage("system", "[Stay in character.]"),
    "nudge": ChatMessage("system", "[Write the next reply only as Orin.]"),
    "cont": ChatMessage("system", "[Continue the following message.]"),
    "inj": ChatMessage("system", "[Author's note: it is raining.]"),
    "pre": ChatMessage("assistant", "Seraphina:"),
    "open": ChatMessage("user", ""),
}


def msgs(spec: str) -> list[ChatMessage]:
    return [TAGS[tag] for tag in spec.split()]


def place(spec: str, position: Position, depth: int = 0, role: Role = Role.SYSTEM) -> int | None:
    messages = msgs(spec)
    span = find_history(messages, MARKERS)
    return insertion_index(messages, Placement(position, depth, role), span)


SOLO = "main desc start a u a u"  # indices: 0 main, 3 a, 4 u, 5 a, 6 u


@pytest.mark.parametrize(
    ("spec", "position", "depth", "expected"),
    [
        # before_prompt: index 0, before the main prompt.
        (SOLO, Position.BEFORE_PROMPT, 0, 0),
        # in_prompt: right after the main prompt (the first system message).
        (SOLO, Position.IN_PROMPT, 0, 1),
        ("u a u", Position.IN_PROMPT, 0, 0),
        # in_chat: exactly `depth` chat messages follow.
        (SOLO, Position.IN_CHAT, 0, 7),
        (SOLO, Position.IN_CHAT, 1, 6),
        (SOLO, Position.IN_CHAT, 2, 5),
        (SOLO, Position.IN_CHAT, 4, 3),
        # deeper than the history: top of the history, just after [Start a new Chat].
        (SOLO, Position.IN_CHAT, 5, 3),
        (SOLO, Position.IN_CHAT, 10000, 3),
        # none: not inserted.
        (SOLO, Position.NONE, 2, None),
        # post-history instructions are not history: depth 0 goes before them.
        (SOLO + " phi", Position.IN_CHAT, 0, 7),
        (SOLO + " phi", Position.IN_CHAT, 1, 6),
        # group chats: the group marker opens the history, the nudge trails it.
        ("main desc gstart a a u nudge", Position.IN_CHAT, 0, 6),
        ("main desc gstart a a u nudge", Position.IN_CHAT, 1, 5),
        ("main desc gstart a a u nudge", Position.IN_CHAT, 9, 3),
        # an assistant prefill that ends the request is not history.
        (SOLO + " pre", Position.IN_CHAT, 0, 7),
        (SOLO + " phi pre", Position.IN_CHAT, 0, 7),
        (SOLO + " phi pre", Position.IN_CHAT, 1, 6),
        # a text-completion impersonation's open user turn is not history.
        (SOLO + " open", Position.IN_CHAT, 0, 7),
        (SOLO + " open", Position.IN_CHAT, 1, 6),
        # continue without prefill: the partial reply is history, its nudge is not.
        (SOLO + " a cont", Position.IN_CHAT, 0, 8),
        (SOLO + " a cont", Position.IN_CHAT, 1, 7),
        # no marker: the history starts after the last example message...
        ("main exchat ex_u ex_a a u", Position.IN_CHAT, 9, 4),
        # ...or, without examples, after the leading system block.
        ("main desc a u a u", Position.IN_CHAT, 3, 3),
        # no history at all (a quiet prompt): after everything.
        ("main desc", Position.IN_CHAT, 0, 2),
        ("main start", Position.IN_CHAT, 3, 2),
    ],
)
def test_placement_rules(spec: str, position: Position, depth: int, expected: int | None) -> None:
    assert place(spec, position, depth) == expected


@pytest.mark.parametrize("role", [Role.USER, Role.ASSISTANT])
def test_role_does_not_move_request_only_placement(role: Role) -> None:
    assert place(SOLO, Position.IN_CHAT, 2, role) == 5


def test_known_history_skips_st_injections_when_counting_depth() -> None:
    # ST put its Author's Note at depth 1 (before the last message); the chat file tells
    # the proxy that index 4 is not a chat message.
    messages = msgs("main start a u inj u")
    span = known_history(messages, MARKERS, [2, 3, 5])

    def at(depth: int, role: Role) -> int | None:
        return insertion_index(messages, Placement(Position.IN_CHAT, depth, role), span)

    # Depth 1 = before the last chat message; ST orders a depth's messages
    # assistant, user, system: a system memory goes after ST's note, a user one before it.
    assert at(1, Role.SYSTEM) == 5
    assert at(1, Role.USER) == 4
    assert at(1, Role.ASSISTANT) == 4
    # Depth 2 counts chat messages only: the note does not count.
    assert at(2, Role.SYSTEM) == 3
    assert at(0, Role.SYSTEM) == 6
    assert at(7, Role.SYSTEM) == 2


def test_known_history_with_no_messages_goes_to_the_history_start() -> None:
    messages = msgs("main start")
    span = known_history(messages, MARKERS, [])
    assert insertion_index(messages, Placement(Position.IN_CHAT, 0), span) == 2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=12))
def test_known_history_takes_any_indices(indices: list[int]) -> None:
    """Rising indices in range (an identification's) are taken as they are; any others
    are put in order, repeats and those outside the request left out."""
    messages = msgs("main start a u a u a u a u")
    span = known_history(messages, MARKERS, indices)
    assert span.indices == tuple(sorted({i for i in indices if 0 <= i < len(messages)}))


# Real requests captured from ST 1.12.6 (tests/cassettes/st-1.12.6).
@pytest.mark.parametrize(
    ("step", "position", "depth", "expected"),
    [
        # 0 main, 1 WI, 2 card, 3 [Start a new Chat], 4 a, 5 u, 6 a, 7 u, 8 a, 9 u
        ("stream-04-05_send_03", Position.IN_CHAT, 2, 8),
        ("stream-04-05_send_03", Position.IN_CHAT, 0, 10),
        ("stream-04-05_send_03", Position.IN_PROMPT, 0, 1),
        # ... 16 partial assistant reply, 17 [Continue the following message ...]
        ("stream-10-13_continue", Position.IN_CHAT, 0, 17),
        ("stream-10-13_continue", Position.IN_CHAT, 1, 16),
        # 0-6 prompt and examples, 7 group marker, 8 a, 9 a, 10 u, 11 group nudge
        ("stream-12-17_group_send_01", Position.IN_CHAT, 0, 11),
        ("stream-12-17_group_send_01", Position.IN_CHAT, 1, 10),
        ("stream-12-17_group_send_01", Position.IN_CHAT, 5, 8),
        ("stream-12-17_group_send_01", Position.BEFORE_PROMPT, 5, 0),
    ],
)
def test_placement_in_real_st_requests(
    step: str, position: Position, depth: int, expected: int
) -> None:
    messages = st_messages(step)
    span = find_history(messages, MARKERS)
    assert insertion_index(messages, Placement(position, depth), span) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("before_prompt", Position.BEFORE_PROMPT),
        (2, Position.BEFORE_PROMPT),
        ("0", Position.IN_PROMPT),
        (1, Position.IN_CHAT),
        ("IN_CHAT", Position.IN_CHAT),
        (-1, Position.NONE),
        ("-1", Position.NONE),
        ("none", Position.NONE),
    ],
)
def test_position_accepts_names_and_st_numbers(value: object, expected: Position) -> None:
    assert Position.parse(value) is expected


@pytest.mark.parametrize("value", [3, "top", True, None, 1.5])
def test_position_rejects_the_rest(value: object) -> None:
    with pytest.raises(ValueError, match="before_prompt"):
        Position.parse(value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("system", Role.SYSTEM),
        (0, Role.SYSTEM),
        ("1", Role.USER),
        (2, Role.ASSISTANT),
        ("Assistant", Role.ASSISTANT),
    ],
)
def test_role_accepts_names_and_st_numbers(value: object, expected: Role) -> None:
    assert Role.parse(value) is expected


def test_depth_is_bounded_like_st() -> None:
    with pytest.raises(ValueError):
        Placement(Position.IN_CHAT, 10001)
