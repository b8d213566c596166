"""`[injection]` and `[injection.changing]`: where and how the memory's two parts go into
a request (ST's extension-prompt placement: position, depth, role), and their templates."""

from __future__ import annotations

from pydantic import Field, field_validator

from proxy.core.models import Placement, Position, Role
from proxy.core.placement import START_MARKERS
from proxy.settings.section import Section, UserPath


class _Placed(Section):
    """A memory part's place: its `position`, `depth` and `role` (fields of each subclass,
    in its own order and words), given as names or ST's numbers."""

    @field_validator("position", mode="before", check_fields=False)
    @classmethod
    def _position(cls, value: object) -> Position:
        return Position.parse(value)

    @field_validator("role", mode="before", check_fields=False)
    @classmethod
    def _role(cls, value: object) -> Role:
        return Role.parse(value)

    def placement(self) -> Placement:
        fields = self.__dict__
        return Placement(position=fields["position"], depth=fields["depth"], role=fields["role"])


class ChangingInjectionSettings(_Placed):
    position: Position = Field(
        Position.IN_CHAT,
        description="Where the changing part goes (`{{recent_recaps}}`, `{{relevant_scenes}}`: "
        "new text with every request): `in_chat` (1), `before_prompt` (2), `in_prompt` (0) or "
        "`none` (-1, left out). Deep in the chat, after everything that stays the same, the "
        "start of the prompt is the same from one request to the next and the provider's "
        "prompt cache keeps working.",
    )
    depth: int = Field(
        2,
        ge=0,
        le=10000,
        description="For `in_chat`: how many chat messages follow the changing part.",
    )
    role: Role = Field(
        Role.SYSTEM,
        description="Role of the changing part's message: `system`, `user` or `assistant`.",
    )
    template: str | None = Field(
        None,
        description="Inline template of the changing part; overrides `template_file`. A macro "
        "the main template already uses stays empty here.",
        examples=["[Lately: {{recent_recaps}}]"],
    )
    template_file: UserPath | None = Field(
        None,
        description="Path of the changing part's template. Unset: the bundled "
        "`templates/injection_changing.md`.",
        examples=["~/.config/recap-proxy/injection_changing.md"],
    )


class InjectionSettings(_Placed):
    enabled: bool = Field(
        True,
        description="Master switch: when false, no memory is inserted into any request.",
    )
    use_global_toggle_state: bool = Field(
        False,
        description="When true, every chat follows `enabled` and per-chat states are ignored "
        "(ST-Auto-Recap's `use_global_toggle_state`).",
    )
    default_chat_enabled: bool = Field(
        True,
        description="Whether a chat with no state of its own gets memory "
        "(ST-Auto-Recap's `default_chat_enabled`). Also used while the chat is unknown.",
    )
    chats_enabled: dict[str, bool] = Field(
        default_factory=dict,
        description="Per-chat on/off, keyed by chat id (ST-Auto-Recap's `chats_enabled`).",
        examples=[{"default-user/chats/Seraphina/Seraphina - 2026-05-01@14h03m22s123ms": False}],
    )
    position: Position = Field(
        Position.BEFORE_PROMPT,
        description="Where the memory's stable part goes (`{{running_recap}}`, which changes "
        "only when a scene is folded in): `before_prompt` (2), `in_prompt` (0), `in_chat` (1) "
        "or `none` (-1); ST's numbers are accepted too. The changing part has its own place: "
        "`[injection.changing]`.",
    )
    depth: int = Field(
        2,
        ge=0,
        le=10000,
        description="For `in_chat`: how many chat messages follow the memory (0 = after the last).",
    )
    role: Role = Field(
        Role.SYSTEM,
        description="Role of the inserted message: `system` (0), `user` (1) or `assistant` (2).",
    )
    template: str | None = Field(
        None,
        description="Inline template of the stable part; overrides `template_file` when set. "
        "`{{running_recap}}` and the other macros are replaced; a macro used here stays out "
        "of the changing part (put all three here for one message, as before the split).",
        examples=["[Story so far: {{running_recap}}]"],
    )
    template_file: UserPath | None = Field(
        None,
        description="Path of the stable part's template. Unset: the bundled "
        "`templates/injection.md`.",
        examples=["~/.config/recap-proxy/injection.md"],
    )
    history_start_markers: list[str] = Field(
        default_factory=lambda: list(START_MARKERS),
        description="Text at the start of ST's `new_chat_prompt` system message(s); chat "
        "history begins after the last one. Add yours if you changed it in ST.",
    )
    changing: ChangingInjectionSettings = Field(
        default_factory=ChangingInjectionSettings,
        description="The memory's changing part: recent message recaps and relevant older scenes.",
    )
