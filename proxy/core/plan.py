"""The chat-path decision: should memory go into this request, what text, and where.

Pure: the caller gathers the parsed messages, the memory of the chat and the settings, and
carries out the returned insertions (or forwards the request untouched when there are
none).

The memory is inserted in two parts, each with its own template and placement. The
stable part (the running recap) changes only when a scene is folded in; the changing part
(recent message recaps, relevant older scenes) changes with every request. Providers
cache the longest unchanged start of a prompt, so by default the stable part sits before
the main prompt and the changing one deep in the chat (depth 2), after everything that
stays the same from one request to the next.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from proxy.core.models import ChatMessage, Insertion, Memory, Placement, Position
from proxy.core.placement import find_history, insertion_index, known_history
from proxy.core.render import Template

STABLE, CHANGING = "stable", "changing"
# The macro whose text covers the history left out of a request.
COVERING_MACRO = "running_recap"


@dataclass(frozen=True, slots=True)
class InjectionPolicy:
    """The injection settings the core needs, detached from the settings model."""

    placement: Placement = field(default_factory=Placement)
    enabled: bool = True
    use_global_toggle_state: bool = False
    default_chat_enabled: bool = True
    chats_enabled: Mapping[str, bool] = field(default_factory=dict)
    history_start_markers: Sequence[str] = ("[Start a new Chat]", "[Start a new group chat")
    changing: Placement = field(
        default_factory=lambda: Placement(position=Position.IN_CHAT, depth=2)
    )


@dataclass(frozen=True, slots=True)
class MemoryTemplates:
    """The templates of the two parts. A macro goes into the first part whose template
    uses it (one template holding every macro makes the memory one message, as before
    the split)."""

    stable: Template
    changing: Template = field(default_factory=lambda: Template(""))

    @property
    def macros(self) -> frozenset[str]:
        return self.stable.macros | self.changing.macros

    def own_text(self) -> list[str]:
        """The templates' own text (every macro empty): what the memory costs besides."""
        return [t.render(dict.fromkeys(t.macros, "")).text for t in (self.stable, self.changing)]


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


def plan_insertions(
    messages: Sequence[ChatMessage],
    memory: Memory | None,
    policy: InjectionPolicy,
    templates: MemoryTemplates,
    count_tokens: Callable[[str], int],
) -> tuple[Insertion, ...]:
    """The memory's parts for one request, by index (the stable part first where both go
    to the same place); empty means "send it as it came"."""
    if memory is None or not chat_enabled(policy, memory.chat_id, memory.chat_enabled):
        return ()
    markers = policy.history_start_markers
    if memory.history is not None:
        span = known_history(messages, markers, memory.history, memory.span)
    else:
        span = memory.span or find_history(messages, markers)
    found: list[Insertion] = []
    stable, changing = _render_parts(templates, tuple(memory.values.items()), count_tokens)
    # Written out, not `zip(strict=True)` and `sort(key=...)`: on 3.11 each parses its
    # keywords in C on every call, and this runs on every chat request.
    for (part, text, tokens, filled), placement in (
        (stable, policy.placement),
        (changing, policy.changing),
    ):
        if not text:
            continue
        index = insertion_index(messages, placement, span)
        if index is None:
            continue
        found.append(Insertion(index, placement.role, text, tokens, part, filled))
    if len(found) == 2 and found[1].index < found[0].index:
        found.reverse()  # by index; the stable part first where both go to one place
    return tuple(found)


@lru_cache(maxsize=64)
def _render_parts(
    templates: MemoryTemplates,
    items: tuple[tuple[str, str], ...],
    count_tokens: Callable[[str], int],
) -> tuple[tuple[str, str, int, frozenset[str]], ...]:
    """Each part's text ("" when it has nothing to say), its tokens and the macros that
    filled it, for these macro values. Memoised: every request of a scene renders the same
    running recap, and a swipe or regeneration the same everything."""
    values = {key.lower(): value for key, value in items}
    taken: frozenset[str] = frozenset()
    parts = []
    for part, template in ((STABLE, templates.stable), (CHANGING, templates.changing)):
        # What an earlier part used is empty here, not left as `{{macro}}`.
        own = tuple(
            (k, "" if k in taken else values[k]) for k in sorted(template.macros) if k in values
        )
        taken |= template.macros
        parts.append(_render_part(part, template, own, count_tokens))
    return tuple(parts)


@lru_cache(maxsize=128)
def _render_part(
    part: str,
    template: Template,
    own: tuple[tuple[str, str], ...],
    count_tokens: Callable[[str], int],
) -> tuple[str, str, int, frozenset[str]]:
    """One part, memoised by its own values: when only the changing part's values moved
    (every new turn), the stable part (the running recap) is neither rendered nor counted
    again."""
    values = dict(own)
    rendered = template.render(values)
    text = rendered.text if rendered.has_content else ""
    filled = frozenset(m for m in template.macros if values.get(m, "").strip())
    return part, text, count_tokens(text) if text else 0, filled


def left_out(memory: Memory | None, insertions: Sequence[Insertion]) -> tuple[int, ...]:
    """The request indices to leave out: the history the memory covers, and only when the
    part that covers it goes in (`covers_history`)."""
    if memory is None or not memory.drop or not covers_history(insertions):
        return ()
    return memory.drop


def covers_history(insertions: Sequence[Insertion]) -> bool:
    """Whether the memory that covers left-out history goes in: only then may it go."""
    # A list (two parts at most), not a generator: one that `any` stops early costs a
    # thrown GeneratorExit, on every chat request.
    return any([COVERING_MACRO in insertion.filled for insertion in insertions])
