"""A memory extension's settings, as the proxy's settings (pure).

ST keeps every extension's settings in the user's `settings.json`, under
`extension_settings`: ST-Auto-Recap's under `auto_recap_memory` (the values of the
profile in use; the saved profiles under `profiles`), qvink's MessageSummarize's under
`qvink_memory`. ST-Auto-Recap decides where and how the memory goes and how scenes are
found; qvink how message recaps are made. What has no equivalent is said, with why.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy.sillytavern.layout import ChatLocation

AUTO_RECAP = "auto_recap_memory"
QVINK = "qvink_memory"
_POSITIONS = {-1: "none", 0: "in_prompt", 1: "in_chat", 2: "before_prompt"}
_ROLES = {0: "system", 1: "user", 2: "assistant"}
_TYPES = ("both", "user", "character")
_EXTENSION_DEFAULT_TEMPLATE_MARK = "<ROLEPLAY_RECAP>"

# extension key -> (section, key) with the same meaning and values
_SAME = {
    AUTO_RECAP: {
        "running_scene_recap_depth": ("injection", "depth"),
        "default_chat_enabled": ("injection", "default_chat_enabled"),
        "use_global_toggle_state": ("injection", "use_global_toggle_state"),
        "running_scene_recap_auto_generate": ("memory", "running_recap"),
        "auto_scene_break_on_new_message": ("memory", "auto_scene_break"),
        "auto_scene_break_message_offset": ("memory", "scene_break_offset"),
        "auto_scene_break_minimum_scene_length": ("memory", "minimum_scene_length"),
        "scene_name_append_range": ("memory", "scene_name_append_range"),
        "auto_hide_scene_count": ("memory", "auto_hide_scene_count"),
    },
    QVINK: {
        "auto_summarize": ("memory", "message_recaps"),
        "include_user_messages": ("memory", "include_user_messages"),
        "include_system_messages": ("memory", "include_system_messages"),
        "include_narrator_messages": ("memory", "include_narrator_messages"),
        "include_thought_messages": ("memory", "include_thought_messages"),
        "message_length_threshold": ("memory", "message_length_threshold"),
        "auto_summarize_batch_size": ("memory", "message_recap_batch_size"),
        "auto_summarize_message_limit": ("memory", "message_recap_lookback"),
    },
}

_FLAGS = {
    "default_chat_enabled",
    "use_global_toggle_state",
    "running_scene_recap_auto_generate",
    "auto_scene_break_on_new_message",
    "scene_name_append_range",
    "auto_summarize",
    "include_user_messages",
    "include_system_messages",
    "include_narrator_messages",
    "include_thought_messages",
}

# extension key -> why the proxy has no such setting
_NO_EQUIVALENT = {
    AUTO_RECAP: {
        "running_scene_recap_scan": "ST scans World Info before the request leaves; the "
        "proxy inserts the memory after that scan",
        "auto_scene_break_on_load": "the proxy checks every looked-after chat as it is saved",
        "auto_scene_break_generate_recap": "every scene the proxy finds gets its recap",
        "scene_recap_history_count": "a scene recap reads its own scene",
        "tokenizer_correction_factor": "the proxy counts tokens itself",
        "max_retries": "failed jobs are retried (`[queue] max_attempts`), then made again "
        "after `[queue] failed_retry_minutes`",
        "suppress_other_lorebooks": "the proxy does not write lorebooks",
        "auto_lorebooks_compaction_threshold": "the proxy does not write lorebooks",
        "operation_artifacts": "the proxy's prompts are its own templates (copy them into "
        "`[memory] templates_dir` to change them)",
        "profiles": "one settings file; the profile in use was imported",
    },
    QVINK: {
        "short_template": "message recaps go in `[injection.changing]` as `{{recent_recaps}}`",
        "long_template": "no long-term memory: the running recap holds the story",
        "summary_injection_threshold": "message recaps are used for messages the request left out",
        "prompt": "the proxy's prompts are its own templates",
    },
}


@dataclass(slots=True)
class SettingsImport:
    """What an import found: settings by section, per-chat states, and notes."""

    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    chats_enabled: dict[str, bool] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    found: list[str] = field(default_factory=list)  # the extensions whose settings were read

    def put(self, section: str, key: str, value: Any) -> None:
        """One setting; `section` may name a subsection (`injection.changing`)."""
        table = self.sections
        for name in section.split("."):
            table = table.setdefault(name, {})
        table[key] = value


def _extension(settings: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    extensions = settings.get("extension_settings")
    data = extensions.get(name) if isinstance(extensions, dict) else None
    if not isinstance(data, dict):
        return None
    values = dict(data)
    # The extension copies the profile in use to the top level; a key missing there
    # (an older save) is taken from that profile.
    profiles = data.get("profiles")
    profile = profiles.get(data.get("profile")) if isinstance(profiles, dict) else None
    if isinstance(profile, dict):
        for key, value in profile.items():
            values.setdefault(key, value)
    return values


def _number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return None


def import_settings(settings: Mapping[str, Any], chats: Iterable[ChatLocation]) -> SettingsImport:
    """The proxy settings equivalent to the extensions' settings in one user's
    `settings.json`; `chats`: that user's chats, to map per-chat states to chat ids."""
    out = SettingsImport()
    recap = _extension(settings, AUTO_RECAP)
    qvink = _extension(settings, QVINK)
    for name, values in ((AUTO_RECAP, recap), (QVINK, qvink)):
        if values is None:
            continue
        out.found.append(name)
        for key, (section, target) in _SAME[name].items():
            value = values.get(key)
            if isinstance(value, bool) == (key in _FLAGS) and isinstance(value, int):
                out.put(section, target, value)
        for key, why in _NO_EQUIVALENT[name].items():
            if values.get(key) not in (None, "", {}, [], False):
                out.notes.append(f"{name}.{key}: no equivalent ({why})")
    if recap is not None:
        _auto_recap(recap, out)
    if qvink is not None:
        _qvink(qvink, out)
    toggles = recap if recap is not None else qvink
    if toggles is not None:
        _chats(toggles, list(chats), out)
    return out


def _placement(
    values: Mapping[str, Any],
    prefix: str,
    out: SettingsImport,
    source: str,
    section: str = "injection",
) -> None:
    position = _number(values.get(f"{prefix}position"))
    if position is not None:
        if position in _POSITIONS:
            out.put(section, "position", _POSITIONS[position])
        else:
            out.notes.append(f"{source}.{prefix}position = {position}: not one of ST's positions")
    role = _number(values.get(f"{prefix}role"))
    if role in _ROLES:
        out.put(section, "role", _ROLES[role])


def _auto_recap(values: Mapping[str, Any], out: SettingsImport) -> None:
    _placement(values, "running_scene_recap_", out, AUTO_RECAP)
    template = values.get("running_scene_recap_template")
    if isinstance(template, str):
        if not template.strip():
            # As in the extension: an empty template is the running recap as it is.
            out.put("injection", "template", "{{running_recap}}")
        elif _EXTENSION_DEFAULT_TEMPLATE_MARK not in template:
            out.put("injection", "template", template)
            if "{{running_recap}}" not in template:
                out.notes.append(
                    f"{AUTO_RECAP}.running_scene_recap_template has no {{{{running_recap}}}}: "
                    "the memory would never show"
                )
        else:
            out.notes.append(
                f"{AUTO_RECAP}.running_scene_recap_template is the extension's own: the "
                "proxy's bundled template stays"
            )
    for key, target in (
        ("auto_scene_break_check_which_messages", "scene_break_check_which"),
        ("scene_recap_message_types", "scene_recap_message_types"),
    ):
        if values.get(key) in _TYPES:
            out.put("memory", target, values[key])
    global_state = values.get("global_toggle_state")
    if values.get("use_global_toggle_state") is True and isinstance(global_state, bool):
        out.put("injection", "enabled", global_state)
    delay = values.get("operation_delay_ms")
    if isinstance(delay, int | float) and not isinstance(delay, bool) and delay > 0:
        out.put("queue", "delay_seconds", round(delay / 1000, 3))


def _qvink(values: Mapping[str, Any], out: SettingsImport) -> None:
    limit = values.get("short_term_context_limit")
    kind = values.get("short_term_context_type")
    if isinstance(limit, int | float) and not isinstance(limit, bool) and limit > 0:
        if kind in ("percent", "tokens"):
            out.put("memory", "message_recap_context_limit", float(limit))
            out.put(
                "memory",
                "message_recap_context_type",
                "percent" if kind == "percent" else "absolute",
            )
        else:
            out.notes.append(
                f"{QVINK}.short_term_context_type = {kind!r}: only percent and tokens map"
            )
    # qvink's short-term memory is its message summaries: the memory's changing part.
    _placement(values, "short_term_", out, QVINK, "injection.changing")
    depth = _number(values.get("short_term_depth"))
    if depth is not None and depth >= 0:
        out.put("injection.changing", "depth", depth)
    members = values.get("disabled_group_characters")
    if isinstance(members, list) and members:
        out.put("memory", "disabled_group_members", [str(m) for m in members])


def _chats(values: Mapping[str, Any], chats: list[ChatLocation], out: SettingsImport) -> None:
    states = values.get("chats_enabled")
    if not isinstance(states, dict):
        return
    by_name: dict[str, list[ChatLocation]] = {}
    for chat in chats:
        by_name.setdefault(chat.name, []).append(chat)
    for key, state in sorted(states.items()):
        if not isinstance(state, bool):
            continue
        found = by_name.get(str(key), [])
        if not found:
            out.notes.append(f"chats_enabled[{key!r}]: no such chat in the data folder")
        for chat in found:  # one key, several characters' chats of that name: all of them
            out.chats_enabled[chat.chat_id] = state
