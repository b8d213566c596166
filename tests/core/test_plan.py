"""The on/off rules (ST-Auto-Recap's chat_enabled) and the whole decision."""

from __future__ import annotations

import pytest

from proxy.core.models import ChatMessage, Memory, Placement, Position, Role
from proxy.core.plan import InjectionPolicy, chat_enabled, plan_insertion
from proxy.core.render import Template

MESSAGES = [
    ChatMessage("system", "main"),
    ChatMessage("system", "[Start a new Chat]"),
    ChatMessage("assistant", "greeting"),
    ChatMessage("user", "hi"),
]
TEMPLATE = Template("[Recap: {{running_recap}}]")


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


def plan(memory: Memory | None, policy: InjectionPolicy | None = None):  # type: ignore[no-untyped-def]
    return plan_insertion(MESSAGES, memory, policy or InjectionPolicy(), TEMPLATE, len)


def test_insertion_carries_rendered_text_role_and_tokens() -> None:
    policy = InjectionPolicy(placement=Placement(Position.IN_CHAT, 1, Role.USER))
    insertion = plan(Memory(values={"running_recap": "wolves"}), policy)
    assert insertion is not None
    assert (insertion.index, insertion.role, insertion.text) == (3, Role.USER, "[Recap: wolves]")
    assert insertion.tokens == len("[Recap: wolves]")


def test_nothing_to_insert() -> None:
    assert plan(None) is None
    assert plan(Memory(values={})) is None
    assert plan(Memory(values={"running_recap": ""})) is None
    assert plan(Memory(values={"running_recap": "x"}, chat_enabled=False)) is None
    none = InjectionPolicy(placement=Placement(Position.NONE))
    assert plan(Memory(values={"running_recap": "x"}), none) is None


def test_known_history_is_used_when_given() -> None:
    policy = InjectionPolicy(placement=Placement(Position.IN_CHAT, 1))
    # Only index 3 is a chat message: depth 1 puts the memory before it.
    insertion = plan(Memory(values={"running_recap": "x"}, history=[3]), policy)
    assert insertion is not None and insertion.index == 3
