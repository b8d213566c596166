"""The on/off rules (ST-Auto-Recap's chat_enabled) and the whole decision."""

from __future__ import annotations

import pytest

from proxy.core.models import ChatMessage, HistorySpan, Insertion, Memory, Placement, Position, Role
from proxy.core.plan import (
    InjectionPolicy,
    MemoryTemplates,
    chat_enabled,
    covers_history,
    left_out,
    plan_insertions,
)
from proxy.core.render import Template

MESSAGES = [
    ChatMessage("system", "main"),
    ChatMessage("system", "[Start a new Chat]"),
    ChatMessage("assistant", "greeting"),
    ChatMessage("user", "hi"),
]
TEMPLATE = Template("[Recap: {{running_recap}}]")
CHANGING_TEMPLATE = Template("[Lately: {{recent_recaps}} | {{relevant_scenes}}]")
TEMPLATES = MemoryTemplates(TEMPLATE, CHANGING_TEMPLATE)


@pytest.mark.parametrize(
    ("policy", "chat", "own", "expected"),
    [
        (InjectionPolicy(), None, None, True),
        (InjectionPolicy(default_chat_enabled=False), None, None, False),
        (InjectionPolicy(default_chat_enabled=False), "c", True, True),
        (InjectionPolicy(), "c", False, False),
        (InjectionPolicy(chats_enabled={"c": False}), "c", None, False),
        (InjectionPolicy(chats_enabled={"c": False}), "d", None, True),
        # the chat's own state (from the store) wins over the settings map
        (InjectionPolicy(chats_enabled={"c": False}), "c", True, True),
        # the global toggle overrides per-chat states
        (InjectionPolicy(use_global_toggle_state=True), "c", False, True),
        (InjectionPolicy(enabled=False, use_global_toggle_state=True), "c", True, False),
        # the master switch turns everything off
        (InjectionPolicy(enabled=False), "c", True, False),
    ],
)
def test_chat_enabled(
    policy: InjectionPolicy, chat: str | None, own: bool | None, expected: bool
) -> None:
    assert chat_enabled(policy, chat, own) is expected


def plan(
    memory: Memory | None,
    policy: InjectionPolicy | None = None,
    templates: MemoryTemplates = TEMPLATES,
) -> tuple[Insertion, ...]:
    return plan_insertions(MESSAGES, memory, policy or InjectionPolicy(), templates, len)


def test_insertion_carries_rendered_text_role_and_tokens() -> None:
    policy = InjectionPolicy(placement=Placement(Position.IN_CHAT, 1, Role.USER))
    (insertion,) = plan(Memory(values={"running_recap": "wolves"}), policy)
    assert (insertion.index, insertion.role, insertion.text) == (3, Role.USER, "[Recap: wolves]")
    assert insertion.tokens == len("[Recap: wolves]")
    assert (insertion.part, insertion.filled) == ("stable", frozenset({"running_recap"}))
    assert covers_history([insertion])


def test_nothing_to_insert() -> None:
    assert plan(None) == ()
    assert plan(Memory(values={})) == ()
    assert plan(Memory(values={"running_recap": ""})) == ()
    assert plan(Memory(values={"running_recap": "x"}, chat_enabled=False)) == ()
    none = InjectionPolicy(placement=Placement(Position.NONE))
    assert plan(Memory(values={"running_recap": "x"}), none) == ()


def test_known_history_is_used_when_given() -> None:
    policy = InjectionPolicy(placement=Placement(Position.IN_CHAT, 1))
    # Only index 3 is a chat message: depth 1 puts the memory before it.
    (insertion,) = plan(Memory(values={"running_recap": "x"}, history=[3]), policy)
    assert insertion.index == 3


def test_the_providers_history_search_is_taken_as_it_is() -> None:
    """A provider that found the history already (with the policy's markers) hands it on:
    the request is not searched again."""
    at_end = Placement(Position.IN_CHAT, 0, Role.SYSTEM)
    policy = InjectionPolicy(placement=at_end)
    # As if the provider had found the history to end before "hi": depth 0 puts the
    # memory after it.
    given = HistorySpan(start=2, end=3, indices=(2,))
    assert [i.index for i in plan(Memory(values={"running_recap": "x"}, span=given), policy)] == [3]
    # Searched here, "hi" is history too.
    assert [i.index for i in plan(Memory(values={"running_recap": "x"}), policy)] == [4]


LONG = [
    ChatMessage("system", "main"),
    ChatMessage("system", "[Start a new Chat]"),
    *(ChatMessage("user" if i % 2 else "assistant", f"m{i}") for i in range(6)),
]
VALUES = {"running_recap": "story", "recent_recaps": "lately", "relevant_scenes": "once"}


def test_the_two_parts_go_where_each_is_placed() -> None:
    """Defaults: the stable part before the main prompt, the changing one in the chat at
    depth 2, each as ST places an extension prompt."""
    parts = plan_insertions(LONG, Memory(values=VALUES), InjectionPolicy(), TEMPLATES, len)
    stable, changing = parts
    assert (stable.part, stable.index, stable.text) == ("stable", 0, "[Recap: story]")
    assert (changing.part, changing.index) == ("changing", len(LONG) - 2)
    assert changing.text == "[Lately: lately | once]"
    assert changing.filled == {"recent_recaps", "relevant_scenes"}
    assert not covers_history([changing]) and covers_history(parts)


def test_covered_history_leaves_only_with_the_part_that_covers_it() -> None:
    """Both steps leave out what `left_out` says: the covered messages when the running
    recap goes in, none when only the changing part does or when no memory goes in."""
    memory = Memory(values=VALUES, drop=(2, 3))
    parts = plan_insertions(LONG, memory, InjectionPolicy(), TEMPLATES, len)
    assert left_out(memory, parts) == (2, 3)
    assert left_out(memory, parts[1:]) == ()
    assert left_out(memory, ()) == ()
    assert left_out(Memory(values=VALUES), parts) == ()
    assert left_out(None, parts) == ()


@pytest.mark.parametrize(
    ("changing", "expected"),
    [
        (Placement(Position.IN_CHAT, 0), len(LONG)),  # after the last message
        (Placement(Position.IN_CHAT, 4), len(LONG) - 4),
        (Placement(Position.IN_CHAT, 100), 2),  # deeper than the chat: its start
        (Placement(Position.IN_PROMPT), 1),  # after the main prompt
        (Placement(Position.BEFORE_PROMPT), 0),
    ],
)
def test_the_changing_part_follows_st_placement(changing: Placement, expected: int) -> None:
    policy = InjectionPolicy(changing=changing)
    single = InjectionPolicy(placement=changing)
    parts = plan_insertions(LONG, Memory(values=VALUES), policy, TEMPLATES, len)
    assert [p.index for p in parts if p.part == "changing"] == [expected]
    # The same rules as the one part had before the split.
    one = MemoryTemplates(TEMPLATE)
    (alone,) = plan_insertions(LONG, Memory(values=VALUES), single, one, len)
    assert alone.index == expected


def test_at_one_place_the_stable_part_comes_first() -> None:
    same = Placement(Position.IN_CHAT, 2)
    policy = InjectionPolicy(placement=same, changing=same)
    parts = plan_insertions(LONG, Memory(values=VALUES), policy, TEMPLATES, len)
    assert [(p.part, p.index) for p in parts] == [("stable", 6), ("changing", 6)]


def test_a_part_with_nothing_in_it_is_not_inserted() -> None:
    only_running = {"running_recap": "story", "recent_recaps": "", "relevant_scenes": " "}
    assert [p.part for p in plan(Memory(values=only_running))] == ["stable"]
    only_recent = {"running_recap": "", "recent_recaps": "lately"}
    (part,) = plan(Memory(values=only_recent))
    assert part.part == "changing" and not covers_history([part])
    off = InjectionPolicy(changing=Placement(Position.NONE))
    assert [p.part for p in plan(Memory(values=VALUES), off)] == ["stable"]


def test_one_template_with_every_macro_makes_one_message() -> None:
    """A macro goes to the first part that uses it: the changing part stays empty (and
    shows no `{{macro}}` left as written)."""
    one = MemoryTemplates(
        Template("{{running_recap}} / {{recent_recaps}} / {{relevant_scenes}}"),
        CHANGING_TEMPLATE,
    )
    (part,) = plan(Memory(values=VALUES), templates=one)
    assert part.text == "story / lately / once"
    assert part.filled == {"running_recap", "recent_recaps", "relevant_scenes"}


def test_a_new_turn_renders_and_counts_only_the_part_whose_values_moved() -> None:
    counted: list[str] = []

    def count(text: str) -> int:
        counted.append(text)
        return len(text)

    recap = "the wolves follow the caravan"
    for lately in ("Ava bought rope", "Tom lost the map"):
        values = {"running_recap": recap, "recent_recaps": lately}
        stable, changing = plan_insertions(
            MESSAGES, Memory(values=values), InjectionPolicy(), TEMPLATES, count
        )
        assert stable.text == f"[Recap: {recap}]" and stable.tokens == len(stable.text)
        assert lately in changing.text and changing.tokens == len(changing.text)
    assert counted.count(f"[Recap: {recap}]") == 1  # the running recap's part: once
