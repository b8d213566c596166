"""Chats as memory extensions leave them, in each extension's own format (field lists from
ST-Auto-Recap's `messageData.js`/`runningSceneRecap.js`, qvink's `index.js` and ST's
`extensions/memory/index.js`): what a user who switches to the proxy brings along."""

from __future__ import annotations

import json
from typing import Any

from tests.memory.story import Story

# ST-Auto-Recap: six scenes ending here; auto-hide left the first five hidden.
AR_BREAKS = (29, 59, 89, 119, 149, 179)
AR_HIDDEN_THROUGH = 149
AR_CHECKED_THROUGH = 185
AR_RUNNING = ((59, None, 2), (119, 59, 4), (179, 119, 6))  # (new, prev, scene count)


def scene_recap(position: int) -> str:
    return f"Ava and Tom reach the scene ending at {position}; the lantern {position} is lit."


def four_stage(position: int) -> str:
    """A version as the four-stage pipeline saves it: one JSON string."""
    return json.dumps(
        {
            "scene_name": f"Lantern {position}",
            "stage1": {"sn": f"Lantern {position}", "extracted": ["Tom waits", "Ava points"]},
            "stage2": {
                "sn": f"Lantern {position}",
                "recap": {"outcomes": "They walk.", "threads": "The mill.", "state": "Dusk."},
                "entities": [],
            },
            "stage3": {
                "developments": [f"[Lantern] lantern {position} lit by Ava"],
                "open": ["who lived at the mill"],
                "state": ["[Ava] tired"],
                "resolved": [],
            },
            "stage4": {"entities": []},
        }
    )


def four_stage_recap(position: int) -> str:
    """The text the proxy takes from `four_stage(position)`."""
    return (
        f"Developments:\n- [Lantern] lantern {position} lit by Ava\n\n"
        "Open:\n- who lived at the mill\n\nState:\n- [Ava] tired"
    )


def running_content(position: int) -> str:
    return f"DEVELOPMENTS:\n[Story] everything through message {position}\n\nOPEN:\nthe mill"


def _with_swipe_copy(message: dict[str, Any], key: str, data: dict[str, Any]) -> None:
    """Store extension data the way the extensions do: on the message and on its
    current swipe's `swipe_info` entry."""
    message["extra"][key] = data
    message["swipe_info"] = [
        {"send_date": message["send_date"], "extra": {key: json.loads(json.dumps(data))}}
    ]


def auto_recap_chat(story: Story, messages: int = 200) -> Story:
    """200 messages with ST-Auto-Recap's data: six scene recaps (a four-stage JSON
    version, plain ones, one break with two versions where the first is selected), three
    running recap versions, detection checks, auto-hide of the first 150 messages, and a
    legacy per-message memory."""
    story.grow(messages)
    for position, message in enumerate(story.messages):
        data: dict[str, Any] = {}
        if position <= AR_CHECKED_THROUGH:
            data["auto_scene_break_checked"] = True
        if position in AR_BREAKS:
            versions = (
                [four_stage(position)]
                if position % 60 == 29
                else [scene_recap(position)]
                if position != 59
                else [scene_recap(position), "An older, rejected recap of the ford."]
            )
            data.update(
                scene_break=True,
                scene_break_visible=True,
                scene_break_name=f"Lantern {position} {position - 29}-{position}",
                scene_break_collapsed=True,
                scene_recap_versions=versions,
                scene_recap_current_index=0 if position == 59 else len(versions) - 1,
                scene_recap_memory=versions[0],
                scene_recap_hash="1x2y3z",
                scene_recap_metadata={"0": {"timestamp": 1763800000000, "allEntries": []}},
            )
        if position == 188:
            data.update(memory="Tom asked about the cave.", include="short", edited=True)
        if data:
            _with_swipe_copy(message, "auto_recap_memory", data)
        if position <= AR_HIDDEN_THROUGH:
            message["is_system"] = True
    story.metadata["auto_recap_running_scene_recaps"] = {
        "chat_id": story.path.stem,
        "current_version": 2,
        "versions": [
            {
                "version": i,
                "timestamp": 1763800000000 + i * 60000,
                "content": running_content(new),
                "scene_count": count,
                "excluded_count": 0,
                "prev_scene_index": prev,
                "new_scene_index": new,
                "event_keys": [],
            }
            for i, (new, prev, count) in enumerate(AR_RUNNING)
        ],
    }
    story.save()
    return story


QVINK_EXCLUDED = (6, 12)


def qvink_memory(position: int) -> str:
    return f"Message {position} happened near the lantern."


def qvink_chat(story: Story, messages: int = 30) -> Story:
    """qvink's MessageSummarize: a memory on every message but the excluded ones (short-
    and long-term, one remembered, one edited), and a memory on another swipe."""
    story.grow(messages)
    for position, message in enumerate(story.messages):
        data: dict[str, Any] = {
            "include": "short" if position > messages - 10 else "long",
            "remember": position == 4,
            "exclude": position in QVINK_EXCLUDED,
            "lagging": False,
            "hash": 1234567 + position,
        }
        if position not in QVINK_EXCLUDED:
            data["memory"] = qvink_memory(position)
        if position == 10:
            data.update(memory="Tom's own words for message 10.", edited=True)
        _with_swipe_copy(message, "qvink_memory", data)
    swiped = story.messages[messages - 2]
    swiped["swipes"] = [swiped["mes"], "Another answer."]
    swiped["swipe_info"].append(
        {"send_date": swiped["send_date"], "extra": {"qvink_memory": {"memory": "Swipe one."}}}
    )
    story.save()
    return story


SUMMARIES = {19: "Ava met Tom at the mill.", 39: "Ava met Tom at the mill; they crossed the ford."}


def summarize_chat(story: Story, messages: int = 50) -> Story:
    """ST's Summarize: summaries written at messages 19 and 39; the newest stands."""
    story.grow(messages)
    for position, summary in SUMMARIES.items():
        story.messages[position]["extra"]["memory"] = summary
    story.save()
    return story
