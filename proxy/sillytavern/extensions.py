"""What memory extensions left in a chat file, read into one compact form.

Three extensions keep their work inside ST's chat files:

- ST-Auto-Recap (`extra.auto_recap_memory`): scene breaks on a scene's last message, with
  recap versions (plain text, or the JSON string of its four-stage pipeline), the
  detection's `auto_scene_break_checked`, and legacy per-message `memory`/`exclude`; its
  running recap versions live in the header's `chat_metadata`.
- qvink's MessageSummarize (`extra.qvink_memory`): one `memory` per message, `exclude`.
- ST's built-in Summarize (`extra.memory`): the newest one stands for the whole story up
  to its message.

`message_extension` runs at indexing, for changed lines only, and keeps just what the
proxy imports (a few hundred bytes where a four-stage version is tens of kilobytes), as
compact JSON in the message's row; `proxy.memory.edits.importing` applies it. Everything here
is pure, and a malformed field is skipped, never raised: an extension's data must not
cost the user their chat's mirror.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

AUTO_RECAP = "auto_recap_memory"
QVINK = "qvink_memory"
RUNNING_KEY = "auto_recap_running_scene_recaps"


def _text(value: object) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _lines(title: str, items: object) -> list[str]:
    if isinstance(items, str) and items.strip():
        return [f"{title}:", items.strip()]
    if not isinstance(items, list):
        return []
    kept = [str(item).strip() for item in items if isinstance(item, str | int | float)]
    kept = [item for item in kept if item]
    return [f"{title}:", *(f"- {item}" for item in kept)] if kept else []


def _sections(parts: Mapping[str, object], titles: Mapping[str, str]) -> str | None:
    blocks = [
        "\n".join(lines)
        for key, title in titles.items()
        if (lines := _lines(title, parts.get(key)))
    ]
    return "\n\n".join(blocks) or None


_STAGE3 = {"developments": "Developments", "open": "Open", "state": "State", "resolved": "Resolved"}
_STAGE2 = {"outcomes": "Outcomes", "threads": "Threads", "state": "State"}
_RUNNING = {"developments": "DEVELOPMENTS", "open": "OPEN", "state": "STATE"}


def _object(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def recap_text(value: object) -> tuple[str | None, str | None]:
    """(recap text, scene name) of one stored scene recap version.

    A version is plain text, or the JSON string the four-stage pipeline saves
    (`{scene_name, stage1..stage4}`): its filtered recap (stage 3) is the scene's recap,
    else the organised one (stage 2), else the extracted facts (stage 1)."""
    if isinstance(value, dict):
        data: object = value
    else:
        text = _text(value)
        if text is None:
            return None, None
        if not text.startswith("{"):
            return text, None
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text, None  # a recap that merely starts with a brace
    if not isinstance(data, dict):
        return None, None
    stage1 = _object(data.get("stage1"))
    stage2 = _object(data.get("stage2"))
    name = _text(data.get("scene_name")) or _text(stage1.get("sn")) or _text(stage2.get("sn"))
    stage3 = data.get("stage3")
    found = _sections(stage3, _STAGE3) if isinstance(stage3, dict) else None
    recap = stage2.get("recap")
    if found is None and isinstance(recap, dict):
        found = _sections(recap, _STAGE2)
    found = found or _text(recap) or _text(data.get("recap"))
    if found is None:
        extracted = _lines("Facts", stage1.get("extracted"))
        found = "\n".join(extracted[1:]) or None
    return found, name


def running_text(value: object) -> str | None:
    """A running recap version's content: text, or the combine's JSON object."""
    if isinstance(value, dict):
        inner = value.get("recap")
        return _sections(inner if isinstance(inner, dict) else value, _RUNNING)
    text = _text(value)
    if text is not None and text.startswith("{"):
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            return text
        return running_text(data) if isinstance(data, dict) else text
    return text


def _flag(data: Mapping[str, Any], key: str) -> bool:
    return data.get(key) is True


def _memory(extra: object) -> tuple[str | None, bool, bool]:
    """(memory, edited, excluded) of one message's or swipe's `extra`: qvink's, else
    ST-Auto-Recap's legacy per-message memory."""
    if not isinstance(extra, dict):
        return None, False, False
    excluded = False
    for key in (QVINK, AUTO_RECAP):
        data = extra.get(key)
        if isinstance(data, dict):
            excluded = excluded or _flag(data, "exclude")
            memory = _text(data.get("memory"))
            if memory is not None:
                return memory, _flag(data, "edited"), excluded
    return None, False, excluded


def _scene(data: Mapping[str, Any]) -> dict[str, Any] | None:
    if not _flag(data, "scene_break"):
        return None
    versions: list[dict[str, str | None]] = []
    stored = data.get("scene_recap_versions")
    for item in stored if isinstance(stored, list) else []:
        recap, name = recap_text(item)
        if recap is not None:
            versions.append({"recap": recap, "name": name})
    if not versions:
        recap, name = recap_text(data.get("scene_recap_memory"))
        if recap is not None:
            versions.append({"recap": recap, "name": name})
    current = data.get("scene_recap_current_index")
    if not isinstance(current, int) or isinstance(current, bool):
        current = len(versions) - 1
    return {
        # A break the extension never marked is shown: it sets both flags together.
        "visible": data.get("scene_break_visible") is not False,
        "name": _text(data.get("scene_break_name")),
        "versions": versions,
        "current": min(max(current, 0), len(versions) - 1) if versions else None,
    }


def message_extension(data: Mapping[str, Any]) -> str | None:
    """The memory-extension data of one chat message, as compact JSON, or None."""
    extra = data.get("extra")
    if not isinstance(extra, dict):
        return None
    found: dict[str, Any] = {}
    ours = extra.get(AUTO_RECAP)
    if isinstance(ours, dict):
        scene = _scene(ours)
        if scene is not None:
            found["break"] = scene
        if _flag(ours, "auto_scene_break_checked"):
            found["checked"] = True
    memory, edited, excluded = _memory(extra)
    if memory is not None:
        found["recap"] = memory
        if edited:
            found["edited"] = True
    if excluded:
        found["exclude"] = True
    summary = _text(extra.get("memory"))
    if summary is not None:
        found["summary"] = summary
    swipe_id = data.get("swipe_id")
    infos = data.get("swipe_info")
    if isinstance(infos, list):
        swipes = {}
        for i, info in enumerate(infos):
            if i == swipe_id or not isinstance(info, dict):
                continue
            memory, edited, _ = _memory(info.get("extra"))
            if memory is not None:
                swipes[str(i)] = {"recap": memory, "edited": edited}
        if swipes:
            found["swipes"] = swipes
    return orjson.dumps(found).decode() if found else None


@dataclass(frozen=True, slots=True)
class ImportedScene:
    visible: bool
    name: str | None
    versions: tuple[tuple[str, str | None], ...]  # (recap, scene name)
    current: int | None


@dataclass(frozen=True, slots=True)
class ImportedMessage:
    """One message's imported data (`message_extension`, read back)."""

    scene: ImportedScene | None = None
    checked: bool = False
    recap: str | None = None
    edited: bool = False
    excluded: bool = False
    summary: str | None = None
    swipes: dict[int, tuple[str, bool]] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> ImportedMessage:
        data = orjson.loads(text)
        scene = data.get("break")
        return cls(
            scene=ImportedScene(
                visible=bool(scene["visible"]),
                name=scene.get("name"),
                versions=tuple((v["recap"], v.get("name")) for v in scene["versions"]),
                current=scene.get("current"),
            )
            if scene
            else None,
            checked=bool(data.get("checked")),
            recap=data.get("recap"),
            edited=bool(data.get("edited")),
            excluded=bool(data.get("exclude")),
            summary=data.get("summary"),
            swipes={
                int(k): (v["recap"], bool(v.get("edited")))
                for k, v in data.get("swipes", {}).items()
            },
        )


@dataclass(frozen=True, slots=True)
class ImportedRunning:
    """One of ST-Auto-Recap's running recap versions."""

    version: int
    content: str
    scene_count: int
    prev_scene_index: int | None
    new_scene_index: int
    timestamp: float | None


def _index(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _seconds(stamp: object) -> float | None:
    if not isinstance(stamp, int | float) or isinstance(stamp, bool) or stamp <= 0:
        return None
    return stamp / 1000 if stamp > 1e11 else float(stamp)  # the extension writes epoch ms


def running_versions(metadata: Mapping[str, Any]) -> tuple[list[ImportedRunning], int | None]:
    """ST-Auto-Recap's running recap versions in a chat's metadata, and the selected one."""
    data = metadata.get(RUNNING_KEY)
    if not isinstance(data, dict):
        return [], None
    found: list[ImportedRunning] = []
    versions = data.get("versions")
    for item in versions if isinstance(versions, list) else []:
        if not isinstance(item, dict):
            continue
        content = running_text(item.get("content"))
        at = _index(item.get("new_scene_index"))
        if content is None or at is None:
            continue
        version = _index(item.get("version"))
        count = _index(item.get("scene_count"))
        stamp = item.get("timestamp")
        found.append(
            ImportedRunning(
                version=len(found) if version is None else version,
                content=content,
                scene_count=count or 0,
                prev_scene_index=_index(item.get("prev_scene_index")),
                new_scene_index=at,
                timestamp=_seconds(stamp),
            )
        )
    current = _index(data.get("current_version"))
    return found, current
