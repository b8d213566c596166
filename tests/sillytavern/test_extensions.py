"""Reading what memory extensions stored on chat messages and in chat metadata."""

from __future__ import annotations

import json
from typing import Any

import pytest

from proxy.sillytavern.chatfile import STMessage
from proxy.sillytavern.extensions import (
    ImportedMessage,
    message_extension,
    recap_text,
    running_text,
    running_versions,
)
from tests.memory.extension_chats import four_stage, four_stage_recap


def read(message: dict[str, Any]) -> ImportedMessage:
    found = message_extension(message)
    assert found is not None
    return ImportedMessage.parse(found)


def test_a_scene_recap_version_is_text_or_the_four_stage_json() -> None:
    assert recap_text("  They crossed the ford.  ") == ("They crossed the ford.", None)
    assert recap_text(four_stage(29)) == (four_stage_recap(29), "Lantern 29")
    organised = json.dumps({"stage2": {"sn": "Mill", "recap": {"outcomes": "Won.", "state": "Ok"}}})
    assert recap_text(organised) == ("Outcomes:\nWon.\n\nState:\nOk", "Mill")
    extracted = json.dumps({"stage1": {"sn": "Mill", "extracted": ["a", "b"]}})
    assert recap_text(extracted) == ("- a\n- b", "Mill")
    assert recap_text("{not json, just a brace}") == ("{not json, just a brace}", None)
    assert recap_text("") == (None, None)
    assert recap_text(None) == (None, None)
    assert recap_text(json.dumps({"stage1": {}})) == (None, None)


def test_a_running_version_is_text_or_the_combine_json() -> None:
    assert running_text("DEVELOPMENTS:\nx") == "DEVELOPMENTS:\nx"
    combined = {"recap": {"developments": ["a"], "open": ["b"], "state": []}, "entities": []}
    assert running_text(combined) == "DEVELOPMENTS:\n- a\n\nOPEN:\n- b"
    assert running_text(json.dumps(combined)) == "DEVELOPMENTS:\n- a\n\nOPEN:\n- b"
    assert running_text(3) is None


def test_auto_recap_scene_data() -> None:
    data = {
        "scene_break": True,
        "scene_break_name": "The ford 0-29",
        "scene_recap_versions": ["First.", four_stage(29), ""],
        "scene_recap_current_index": 0,
        "auto_scene_break_checked": True,
        "scene_recap_metadata": {"0": {"allEntries": [{"content": "x" * 10_000}]}},
    }
    found = read({"mes": "x", "extra": {"auto_recap_memory": data}})
    assert found.scene is not None and found.checked
    assert found.scene.visible and found.scene.name == "The ford 0-29"
    assert found.scene.versions == (("First.", None), (four_stage_recap(29), "Lantern 29"))
    assert found.scene.current == 0
    # Only what is imported is kept: not the lorebook snapshots of the metadata.
    assert len(message_extension({"extra": {"auto_recap_memory": data}}) or "") < 500


def test_a_hidden_break_and_a_break_without_versions() -> None:
    hidden = read({"extra": {"auto_recap_memory": {"scene_break": True,
                                                    "scene_break_visible": False}}})  # fmt: skip
    assert hidden.scene is not None and not hidden.scene.visible
    assert hidden.scene.versions == () and hidden.scene.current is None
    memory_only = read(
        {"extra": {"auto_recap_memory": {"scene_break": True, "scene_recap_memory": "Old."}}}
    )
    assert memory_only.scene is not None and memory_only.scene.versions == (("Old.", None),)
    assert message_extension({"extra": {"auto_recap_memory": {"scene_break": False}}}) is None


def test_per_message_memories_of_each_extension() -> None:
    qvink = read({"extra": {"qvink_memory": {"memory": "Tom left.", "edited": True,
                                             "include": "short", "remember": True}}})  # fmt: skip
    assert (qvink.recap, qvink.edited, qvink.excluded) == ("Tom left.", True, False)
    excluded = read({"extra": {"qvink_memory": {"exclude": True}}})
    assert excluded.recap is None and excluded.excluded
    legacy = read({"extra": {"auto_recap_memory": {"memory": "Old way.", "exclude": True}}})
    assert (legacy.recap, legacy.excluded) == ("Old way.", True)
    summary = read({"extra": {"memory": "The story so far."}})
    assert summary.summary == "The story so far." and summary.recap is None


def test_memories_of_other_swipes() -> None:
    message = {
        "swipe_id": 1,
        "swipes": ["a", "b", "c"],
        "extra": {"qvink_memory": {"memory": "B."}},
        "swipe_info": [
            {"extra": {"qvink_memory": {"memory": "A."}}},
            {"extra": {"qvink_memory": {"memory": "B."}}},
            {"extra": {}},
            "not a swipe",
        ],
    }
    found = read(message)
    assert found.recap == "B." and found.swipes == {0: ("A.", False)}


@pytest.mark.parametrize(
    "extra",
    [
        None,
        "text",
        {},
        {"auto_recap_memory": "x"},
        {
            "auto_recap_memory": {
                "scene_break": True,
                "scene_recap_versions": "nope",
                "scene_recap_current_index": "2",
            }
        },
        {"qvink_memory": {"memory": 5}},
        {"memory": ["a"]},
    ],
)
def test_malformed_extension_data_never_raises(extra: object) -> None:
    found = message_extension({"extra": extra, "swipe_info": [None, {"extra": 3}]})
    if found is not None:
        ImportedMessage.parse(found)
    STMessage.from_json({"mes": "x", "extra": extra})


def test_a_message_keeps_its_extension_data() -> None:
    message = STMessage.from_json({"mes": "x", "extra": {"qvink_memory": {"memory": "M."}}})
    assert message.extension is not None and json.loads(message.extension) == {"recap": "M."}
    assert STMessage.from_json({"mes": "x", "extra": {"api": "openai"}}).extension is None


def test_running_versions_from_chat_metadata() -> None:
    metadata = {
        "auto_recap_running_scene_recaps": {
            "chat_id": "c",
            "current_version": 1,
            "versions": [
                {"version": 0, "timestamp": 1763800000000, "content": "A", "scene_count": 1,
                 "prev_scene_index": None, "new_scene_index": 9},
                {"version": 1, "content": "B", "scene_count": 2, "prev_scene_index": 9,
                 "new_scene_index": 19},
                {"version": 2, "content": "", "new_scene_index": 29},
                {"version": 3, "content": "C", "new_scene_index": -1},
                "junk",
            ],
        }
    }  # fmt: skip
    versions, current = running_versions(metadata)
    assert current == 1
    assert [(v.version, v.content, v.new_scene_index) for v in versions] == [
        (0, "A", 9),
        (1, "B", 19),
    ]
    assert versions[0].timestamp == 1763800000.0 and versions[1].timestamp is None
    assert versions[1].prev_scene_index == 9
    assert running_versions({}) == ([], None)
    assert running_versions({"auto_recap_running_scene_recaps": []}) == ([], None)
