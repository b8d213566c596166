"""Message-recap eligibility, batch answers and the injection budget."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.core.recaps import (
    Candidate,
    RecapRules,
    RecapShelf,
    budget_tokens,
    exclusion,
    numbered,
    read_message_recaps,
)
from proxy.core.replies import ReplyError
from proxy.core.scenes import shown
from proxy.sillytavern.chatfile import STMessage

RULES = RecapRules(disabled_members=frozenset({"Bot"}))


@pytest.mark.parametrize(
    ("message", "tokens", "reason"),
    [
        (STMessage(name="Ava", mes="A long enough reply."), 20, None),
        (STMessage(name="Tom", is_user=True, mes="Hello there."), 20, "user message"),
        (STMessage(name="Ava", is_system=True, mes="hidden"), 20, "hidden"),
        (STMessage(name="N", narrator=True, mes="Night falls."), 20, "narrator"),
        (STMessage(name="Ava", extra_type="thoughts", mes="Hmm."), 20, "thought"),
        (STMessage(name="Bot", mes="Beep."), 20, "disabled group member"),
        (STMessage(name="Ava", mes="Ok."), 3, "shorter than message_length_threshold"),
        (STMessage(name="Ava", mes="   "), 20, "empty"),
    ],
)
def test_exclusion_rules_follow_the_defaults(
    message: STMessage, tokens: int, reason: str | None
) -> None:
    assert exclusion(message, tokens, RULES) == reason


def test_settings_include_and_user_exclusion() -> None:
    rules = RecapRules(include_user=True, include_system=True)
    assert exclusion(STMessage(is_user=True, mes="Hi"), 20, rules) is None
    assert exclusion(STMessage(is_system=True, mes="Hi"), 20, rules) is None
    # ST's own notice (a group chat's first line) is no story, whatever is included.
    notice = STMessage.from_json(
        {"name": "SillyTavern System", "is_system": True, "extra": {"type": "group"},
         "mes": "Group chat created. Say 'Hi' to lovely people!"}
    )  # fmt: skip
    assert exclusion(notice, 20, rules) == "an ST notice"
    assert exclusion(STMessage(mes="Hi"), 20, rules, user_excluded=True) == "excluded by the user"


def test_batch_answers_name_messages_by_their_number() -> None:
    prompt = numbered([(4, STMessage(name="Ava", mes="She ran."))])
    assert prompt == "Message #4 [CHARACTER: Ava]:\nShe ran."
    text = (
        '```json\n{"recaps": [{"message": 4, "recap": "Ava ran."}, '
        '{"message": 9, "recap": "x"},]}\n```'
    )
    assert read_message_recaps(text, {4, 5}) == ({4: "Ava ran."}, "")
    with pytest.raises(ReplyError, match="none of the messages"):
        read_message_recaps('{"recaps": [{"message": 9, "recap": "x"}]}', {4})


def test_budget_fills_newest_first_and_stops_at_the_first_misfit() -> None:
    assert budget_tokens(10, "percent", 16384) == 1638
    assert budget_tokens(300, "absolute", 16384) == 300
    shelf = RecapShelf.of([Candidate(i, 10, f"r{i}") for i in range(10)])
    text, spent = shelf.newest(None, 1 + 3 * 12)
    assert text == "Recent events, oldest first:\n- r7\n- r8\n- r9"
    assert spent == 3 * 12
    assert shelf.newest(None, 1) == ("", 0)
    assert shelf.newest(0, 100) == ("", 0)  # none is older than position 0


def walk(candidates: list[Candidate], budget: int) -> list[Candidate]:
    """qvink's inclusion walk, newest to oldest, stopping at the first misfit."""
    chosen: list[Candidate] = []
    spent = 1
    for candidate in reversed(candidates):
        if spent + candidate.tokens + 2 > budget:
            break
        spent += candidate.tokens + 2
        chosen.append(candidate)
    return chosen[::-1]


@settings(max_examples=300, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 50), max_size=30),
    before=st.one_of(st.none(), st.integers(-2, 70)),
    budget=st.integers(-5, 400),
)
def test_the_shelf_chooses_as_the_walk_does(
    tokens: list[int], before: int | None, budget: int
) -> None:
    """By bisection over sums worked out once, the same recaps and text as filtering and
    walking every recap on every request."""
    candidates = [Candidate(2 * i, t, f"r{i}") for i, t in enumerate(tokens)]
    older = [c for c in candidates if before is None or c.position < before]
    chosen = walk(older, budget)
    text, spent = RecapShelf.of(candidates).newest(before, budget)
    lines = "\n".join(f"- {c.text}" for c in chosen)
    assert text == (f"Recent events, oldest first:\n{lines}" if chosen else "")
    assert spent == sum(c.tokens + 2 for c in chosen)


@pytest.mark.parametrize(
    "line",
    [
        # Stepped Thinking's thoughts, saved as messages of the chat.
        {"name": "Ava", "mes": "Ava thinks: he lies about the key.", "is_thoughts": True},
        # ST-Auto-Recap's own system message with the memory it injected.
        {"name": "Ava", "is_system": False, "mes": "[Memory] Ava met Tom at the mill.",
         "extra": {"auto_recap_memory": {"is_auto_recap_system_memory": True}}},
    ],
)  # fmt: skip
def test_what_is_not_the_story_is_neither_recapped_nor_read_for_breaks(
    line: dict[str, object],
) -> None:
    message = STMessage.from_json(line)
    rules = RecapRules(include_user=True, include_system=True, include_thought=True)
    assert message.aside and exclusion(message, 50, rules) is not None
    assert not shown(message, "both", hidden=True)
    story = STMessage.from_json({"name": "Ava", "mes": "She walks to the mill."})
    assert not story.aside and shown(story, "both")


def test_a_recap_the_budget_leaves_out_cannot_stand_in_for_its_message() -> None:
    """The stepped start leaves a message out for its recap: one whose recap the budget
    leaves out (a long running recap leaves little room) must stay in the request."""
    shelf = RecapShelf.of([Candidate(i, 10, f"r{i}") for i in range(10)])
    # Before position 8, with room for three recaps (10 tokens and a separator each): 5-7.
    text, _ = shelf.newest(8, 37)
    assert text.splitlines()[1:] == ["- r5", "- r6", "- r7"]
    assert shelf.left_out_of([3, 4, 5, 6, 7], 8, 37) == {3, 4}
    assert shelf.left_out_of([5, 7, 42], 8, 37) == set()  # 42 has no recap: not said here
    assert shelf.left_out_of([8, 9], 8, 1000) == {8, 9}  # at or after `before`: never in
