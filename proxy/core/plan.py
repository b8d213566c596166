"""The chat-path decision: should memory go into this request, what text, and where.

Pure: the caller gathers the parsed messages, the memory of the chat and the settings, and
carries out the returned `Insertion` (or forwards the request untouched on `None`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from proxy.core.models import ChatMessage, Insertion, Memory, Placement
from proxy.core.placement import find_history, insertion_index, known_history
from proxy.core.render import Template


@dataclass(frozen=True, slots=True)
class InjectionPolicy:
    """The injection settings the core needs, detached from the settings model."""

    placement: Placement = field(default_factory=Placement)
    enabled: bool = True
    use_global_toggle_state: bool = False
    default_chat_enabled: bool = True
    chats_enabled: Mapping[str, bool] = field(default_factory=dict)
    history_start_markers: Sequence[str] = ("[Start a new Chat]", "[Start a new group chat")


def chat_enabled(policy: InjectionPolicy, chat_id: str | None, own_state: bool | None) -> bool:
    """ST-Auto-Recap's `chat_enabled()`, under a master switch.

    `enabled` off turns memory off everywhere. With `use_global_toggle_state` every chat
    follows `enabled`; otherwise a chat's own state (from the store, else `chats_enabled`)
    decides, and `default_chat_enabled` covers chats with no state and unknown chats.
    """
    if not policy.enabled:
        return False
    if policy.use_global_toggle_state:
        return True
    if own_state is not None:
        return own_state
    if chat_id is not None and chat_id in policy.chats_enabled:
        return policy.chats_enabled[chat_id]
    return policy.default_chat_enabled


def plan_insertion(
    messages: Sequence[ChatMessage],
    memory: Memory | None,
    policy: InjectionPolicy,
    template: Template,
    count_tokens: Callable[[str], int],
) -> Insertion | None:
    """Decide the insertion for one request; `None` means "send it as it came"."""
    if memory is None or not chat_enabled(policy, memory.chat_id, memory.chat_enabled):
        return None
    rendered = template.render(memory.values)
    if not rendered.has_content or not rendered.text:
        return None
    markers = policy.history_start_markers
    if memory.history is not None:
        span = known_history(messages, markers, memory.history)
    else:
        span = find_history(messages, markers)
    index = insertion_index(messages, policy.placement, span)
    if index is None:
        return None
    return Insertion(
        index=index,
        role=policy.placement.role,
        text=rendered.text,
        tokens=count_tokens(rendered.text),
    )
