"""`[memory]`: how the memory is written (the LLM, recaps, scenes, trimming)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from proxy.core.operations import Operation
from proxy.core.recaps import RecapRules
from proxy.core.scenes import DetectionRules
from proxy.settings.embeddings import EmbeddingSettings
from proxy.settings.section import Section, UserPath

# How the memory's calls ask a server to keep to their answer's shape (`proxy.memory.calls.shapes`).
StructuredOutput = Literal["auto", "json_schema", "json_object", "grammar", "off"]


class LLMOverride(Section):
    model: str | None = Field(None, description="Model for this operation.")
    temperature: float | None = Field(None, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int | None = Field(None, ge=1, description="Answer length limit.")
    prefill: str | None = Field(
        None,
        description="Text the answer starts with, sent as the start of the model's turn "
        '(chat completions and Claude), e.g. `{` or `{"recap": "`; the answer is read '
        "with it in front.",
        examples=["{"],
    )
    stop: list[str] = Field(
        default_factory=list,
        description="Strings that end the answer where the model writes them (`stop`, "
        "Claude's `stop_sequences`, a text completion server's own stops besides its "
        "template's).",
        examples=[["\n\nUser:"]],
    )


class LLMSettings(Section):
    base_url: str | None = Field(
        None,
        description="OpenAI-compatible API for the proxy's own calls (recaps, scene "
        "detection). Unset: the chat's own upstream.",
        examples=["https://openrouter.ai/api/v1"],
    )
    api_key: SecretStr | None = Field(
        None,
        description="Key for `base_url`, sent as `Authorization: Bearer <api_key>`; used only "
        "with `base_url`. Unset: the calls to `base_url` carry no key (a local server needs "
        "none), since the chat's own key is never sent to another API. Without `base_url` the "
        "calls go to the chat's API with `upstream.api_key`, else the chat's own key.",
        examples=["sk-..."],
    )
    model: str | None = Field(
        None,
        description="Model for the proxy's own calls. Unset: the model of the chat's latest "
        "request.",
        examples=["deepseek/deepseek-chat"],
    )
    temperature: float = Field(0.3, ge=0, le=2, description="Sampling temperature.")
    max_tokens: int = Field(1024, ge=1, description="Answer length limit.")
    max_tokens_cap: int = Field(
        4096,
        ge=1,
        description="An answer cut off at its length limit (`finish_reason: length`) is "
        "asked for again once, with the limit doubled, at most this many tokens.",
    )
    timeout_seconds: float = Field(
        180.0, gt=0, description="Seconds one of the proxy's own LLM calls may take."
    )
    structured_output: StructuredOutput = Field(
        "auto",
        description="How the server is asked to keep each answer to its JSON shape: "
        "`json_schema` (`response_format` with a schema: OpenAI, vLLM, SGLang, LM Studio, "
        "Ollama, llama.cpp), `json_object` (llama.cpp's, with the schema), `grammar` (a GBNF "
        "grammar: KoboldCpp, llama.cpp), `off`. `auto`: `json_schema` for chat completions, "
        "the answer started with `{` for Claude, a text completion server's own field. A "
        "server that refuses it (a 400 naming it) is asked again without, from then on.",
    )
    operations: dict[str, LLMOverride] = Field(
        default_factory=dict,
        description="Per-operation overrides, keyed by `message_recap`, "
        "`detect_scene_break`, `scene_recap`, `running_recap`, `condense_running_recap` or "
        "`condense_entity`.",
        examples=[{"scene_recap": {"model": "gpt-4o-mini", "max_tokens": 2048}}],
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("expected an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @field_validator("operations")
    @classmethod
    def _known_operations(cls, value: dict[str, LLMOverride]) -> dict[str, LLMOverride]:
        known = [o.value for o in Operation]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown operation(s) {unknown}; expected some of {known}")
        return value


MessageTypes = Literal["both", "user", "character"]


class MemorySettings(Section):
    enabled: bool = Field(
        True,
        description="Build memory in the background for chats used through the proxy "
        "(the chat's on/off state in `[injection]` and the API still applies).",
    )
    templates_dir: UserPath | None = Field(
        None,
        description="Folder whose `message_recap.md`, `detect_scene_break.md`, "
        "`scene_recap.md`, `running_recap.md` replace the bundled prompts. Unset: "
        "`templates/` in the user's config dir, when it exists.",
        examples=["~/.config/recap-proxy/templates"],
    )
    message_recaps: Literal["needed", "always", "off"] = Field(
        "needed",
        description="Short recaps of messages (in batches), which go into `{{recent_recaps}}` "
        "for messages ST no longer sends and the running recap does not cover. `needed`: "
        "only for those, once ST starts cutting the chat (and those within "
        "`message_recap_ahead` of being left out); `always`: every eligible message of the "
        "open scene, as ST-Auto-Recap and qvink do; `off`. `true`/`false` read as "
        "`always`/`off`.",
    )
    message_recap_ahead: int = Field(
        3,
        ge=0,
        description="With `needed`: recap a message once it is this close (in messages) to "
        "being left out of requests, by ST's cut or the stepped start, so that its recap is "
        "ready when it goes (two go per exchange, three when a long reply comes in). 0: only "
        "once it is left out.",
    )
    message_recap_batch_size: int = Field(
        10,
        ge=1,
        le=50,
        description="Messages recapped per LLM call. A batch that is due goes at once, "
        "filled up with the messages after it, so a larger one also recaps further ahead.",
    )
    message_recap_lookback: int = Field(
        100,
        ge=1,
        description="Only the newest this many messages are recapped automatically "
        "(`recap-proxy backfill` recaps them all).",
    )
    include_user_messages: bool = Field(False, description="Recap the user's messages too.")
    include_system_messages: bool = Field(False, description="Recap hidden messages too.")
    include_narrator_messages: bool = Field(False, description="Recap narrator messages too.")
    include_thought_messages: bool = Field(False, description="Recap thought messages too.")
    message_length_threshold: int = Field(
        10, ge=0, description="Messages shorter than this many tokens get no recap."
    )
    disabled_group_members: list[str] = Field(
        default_factory=list,
        description="Group members (by name) whose messages get no recap.",
        examples=[["Narrator Bot"]],
    )
    message_recap_context_limit: float = Field(
        10,
        gt=0,
        description="Budget of the injected message recaps: a percent of the context size, "
        "or tokens (see `message_recap_context_type`).",
    )
    message_recap_context_type: Literal["percent", "absolute"] = Field(
        "percent", description="`percent` of the model's context size, or `absolute` tokens."
    )
    context_size: int = Field(
        16384, ge=512, description="Context size (tokens) of models not in `context_sizes`."
    )
    context_sizes: dict[str, int] = Field(
        default_factory=dict,
        description="Context size (tokens) per model name.",
        examples=[{"deepseek-chat": 65536}],
    )
    auto_scene_break: bool = Field(True, description="Detect scene breaks with the LLM.")
    scene_break_offset: int = Field(
        8,
        ge=0,
        description="The newest this many messages are shown as context only, never chosen "
        "as a break (they may still be swiped or edited).",
    )
    minimum_scene_length: int = Field(
        10, ge=1, description="Messages a scene has at least before a break may end it."
    )
    scene_break_check_which: MessageTypes = Field(
        "both", description="Messages shown to detection: `both`, `user` or `character`."
    )
    scene_break_every: int = Field(
        20,
        ge=1,
        description="Check for a scene break once this many messages can be chosen that no "
        "check looked at yet (a scene's first check too): fewer, larger checks find the same "
        "breaks for a third of the calls, a few exchanges later (1 = after every message, "
        "as ST-Auto-Recap does).",
    )
    scene_break_window: int = Field(
        40, ge=5, description="Most messages one detection call may choose from."
    )
    scene_break_retries: int = Field(
        2, ge=0, le=10, description="Re-asks after an invalid detection answer, then no break."
    )
    scene_recap_message_types: MessageTypes = Field(
        "both", description="Messages a scene recap reads: `both`, `user` or `character`."
    )
    scene_name_append_range: bool = Field(
        True, description="Append the scene's message range to its generated name."
    )
    running_recap: bool = Field(
        True, description="Fold each new scene recap into the running recap automatically."
    )
    running_recap_max_tokens: int = Field(
        1200,
        ge=100,
        description="Budget of the running recap (cl100k tokens). The fold prompt is told "
        "it; a version over it (or a fold cut off at its answer limit) is condensed into a "
        "new version within it (source `condensed`; older versions stay selectable).",
    )
    relevant_scenes_max_tokens: int = Field(
        800,
        ge=0,
        description="Budget of `{{relevant_scenes}}`: older scene recaps that match what is "
        "happening now (the last messages of the request), in story order. 0: none.",
    )
    relevant_scenes_context: int = Field(
        4,
        ge=1,
        le=20,
        description="Chat messages at the end of a request (the last user message and those "
        "before it) that older scenes are matched against.",
    )
    entities_max_tokens: int = Field(
        600,
        ge=0,
        description="Budget of `{{entities}}`: the cards of the story's people, places, "
        "items and groups (each with what the scene recaps established about it) that the "
        "last messages of the request name, the most recently named first. 0: none.",
    )
    entity_max_tokens: int = Field(
        150,
        ge=0,
        description="Budget of one entity's card: when the facts the scenes gathered about "
        "it pass it, `condense_entity` rewrites them shorter, keeping what is current (a "
        "later fact overrides an earlier one). 0: never condensed.",
    )
    entities_context: int = Field(
        4,
        ge=1,
        le=20,
        description="Chat messages at the end of a request (the last user message and those "
        "before it) whose names bring an entity's card in.",
    )
    max_memory_tokens: int = Field(
        2500,
        ge=100,
        description="Budget of the whole inserted memory (cl100k tokens, the template's own "
        "text included): relevant scenes give way first, then the entities' cards, then "
        "the oldest message recaps, then the running recap's last lines.",
    )
    strip_patterns: list[str] = Field(
        default_factory=list,
        description="Regular expressions (Python's) whose matches are taken out of every "
        "message before it goes into one of the memory's prompts, after your ST regex "
        "scripts that alter the outgoing prompt: a status block, an image tag, an HTML "
        "panel the story does not need.",
        examples=[["<status>[\\s\\S]*?</status>", "<img[^>]*>"]],
    )

    @field_validator("strip_patterns")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        for pattern in value:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from None
        return value

    include_hidden_messages: bool = Field(
        True,
        description="Messages hidden in ST (`/hide`, ST-Auto-Recap's auto-hide) take part in "
        "scene detection and scene recaps, as in ST-Auto-Recap. They never come back into "
        "a request either way. ST's own notices (a group chat's first line) never count.",
    )
    import_extensions: bool = Field(
        True,
        description="Take over what ST-Auto-Recap, qvink's MessageSummarize and ST's "
        "Summarize stored in a chat file (scene breaks and recaps, running recap versions, "
        "message memories, exclusions) when the chat's memory starts, and what they write "
        "later. The proxy's own work always wins over imported data.",
    )
    auto_hide_scene_count: int = Field(
        1,
        ge=-1,
        description="Leave out of requests the chat messages before the last N scenes, "
        "when the running recap covers them (-1: never leave anything out).",
    )
    history_cut_step: int = Field(
        6,
        ge=1,
        description="When ST's context is full and it cuts the chat's oldest messages "
        "itself, the history's start moves in steps of this many messages (counted from the "
        "first one trimming keeps): up to this many minus one more of the oldest ones are "
        "left out (their message recaps stand in; one that has none yet is not), so that the "
        "prompt's start changes every few exchanges instead of at each one and a provider's "
        "prompt cache (or llama.cpp's) can reuse it. 1: start exactly where ST cuts (as with "
        "`auto_hide_scene_count = -1`).",
    )
    recall_wait_ms: int = Field(
        0,
        ge=0,
        le=2000,
        description="With `[memory.embeddings]`: how long a request may wait for its "
        "question's vector when it is not ready yet (it is made when ST saves the message, "
        "before the request). 0: never wait; recall by words alone for that request.",
    )
    llm: LLMSettings = Field(
        default_factory=LLMSettings, description="The LLM that writes the memory."
    )
    embeddings: EmbeddingSettings = Field(
        default_factory=EmbeddingSettings,
        description="Recall by meaning: the embeddings API that turns scene recaps, entity "
        "cards and the user's question into vectors.",
    )

    @field_validator("message_recaps", mode="before")
    @classmethod
    def _recap_policy(cls, value: object) -> object:
        # Before the policies, this was a switch: on meant every message.
        if value is True:
            return "always"
        if value is False:
            return "off"
        return value

    @model_validator(mode="after")
    def _budgets_fit(self) -> MemorySettings:
        if self.running_recap_max_tokens > self.llm.max_tokens_cap:
            raise ValueError(
                f"running_recap_max_tokens ({self.running_recap_max_tokens}) is larger than "
                f"llm.max_tokens_cap ({self.llm.max_tokens_cap}): the model could never "
                "answer with a whole running recap"
            )
        return self

    def context_for(self, model: str | None) -> int:
        return self.context_sizes.get(model or "", self.context_size)

    @property
    def stepped_history(self) -> bool:
        """Whether the history's start may be stepped past ST's cut (`history_cut_step`):
        not with a step of 1, nor with trimming off."""
        return self.history_cut_step > 1 and self.auto_hide_scene_count >= 0

    def detection_rules(self) -> DetectionRules:
        """When a scene-break check is made."""
        return DetectionRules(
            minimum=self.minimum_scene_length,
            offset=self.scene_break_offset,
            every=self.scene_break_every,
            size=self.scene_break_window,
        )

    def recap_rules(self) -> RecapRules:
        """Which messages get a message recap."""
        return RecapRules(
            include_user=self.include_user_messages,
            include_system=self.include_system_messages,
            include_narrator=self.include_narrator_messages,
            include_thought=self.include_thought_messages,
            length_threshold=self.message_length_threshold,
            disabled_members=frozenset(self.disabled_group_members),
        )
