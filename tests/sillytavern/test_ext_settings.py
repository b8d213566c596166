"""A memory extension's settings, mapped to the proxy's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from proxy.settings import Settings
from proxy.sillytavern.ext_settings import import_settings
from proxy.sillytavern.layout import locate

SETTINGS = Path(__file__).parents[1] / "data" / "extensions" / "settings.json"
AVA = "default-user/chats/Ava/Ava - 2026-11-22@10h00m00s"


def real() -> dict[str, Any]:
    """A real ST 1.12.6 settings.json, with both extensions' settings added."""
    return dict(json.loads(SETTINGS.read_text(encoding="utf-8")))


def chats() -> list[Any]:
    return [
        locate(AVA + ".jsonl"),
        locate("default-user/chats/Bob/Ava - 2026-11-22@10h00m00s.jsonl"),
    ]


def test_auto_recap_and_qvink_settings_map_to_the_proxys() -> None:
    found = import_settings(real(), chats())
    assert found.found == ["auto_recap_memory", "qvink_memory"]
    assert found.sections["injection"] == {
        "depth": 4,
        "default_chat_enabled": False,
        "use_global_toggle_state": False,
        "position": "in_chat",
        "role": "user",
        "template": "[Story so far]\n{{running_recap}}\n[End]",
        # qvink's short-term memory (its message summaries): the changing part.
        "changing": {"position": "in_prompt", "role": "system", "depth": 2},
    }
    memory = found.sections["memory"]
    assert memory["scene_break_offset"] == 6 and memory["minimum_scene_length"] == 8
    assert memory["scene_break_check_which"] == "character"
    assert memory["auto_hide_scene_count"] == 2 and memory["scene_name_append_range"] is False
    assert memory["include_user_messages"] is True and memory["message_length_threshold"] == 20
    assert memory["message_recap_context_limit"] == 15.0
    assert found.sections["queue"] == {"delay_seconds": 2.0}
    # One chat key, two characters' chats of that name: both; an unknown key is said.
    assert found.chats_enabled == {
        AVA: True,
        "default-user/chats/Bob/Ava - 2026-11-22@10h00m00s": True,
    }
    assert any("Seraphina" in note and "no such chat" in note for note in found.notes)
    assert any("running_scene_recap_scan" in note for note in found.notes)
    # The extension's template lacks the proxy's other macros: they go in the changing
    # part, which the import leaves as it is.
    assert not any("{{relevant_scenes}}" in note for note in found.notes)
    # Everything it produces is a valid proxy setting.
    Settings.model_validate({**found.sections})


def test_an_empty_template_is_the_running_recap_as_it_is() -> None:
    st = real()
    st["extension_settings"]["auto_recap_memory"]["running_scene_recap_template"] = ""
    found = import_settings(st, [])
    assert found.sections["injection"]["template"] == "{{running_recap}}"
    st["extension_settings"]["auto_recap_memory"]["running_scene_recap_template"] = (
        "<ROLEPLAY_RECAP>\n{{running_recap}}\n</ROLEPLAY_RECAP>"
    )
    found = import_settings(st, [])
    assert "template" not in found.sections["injection"]
    assert any("the extension's own" in note for note in found.notes)


def test_qvink_places_the_changing_part_and_a_missing_key_comes_from_the_profile() -> None:
    st = real()
    del st["extension_settings"]["auto_recap_memory"]
    qvink = st["extension_settings"]["qvink_memory"]
    qvink["short_term_position"] = 1
    qvink["short_term_depth"] = 3
    qvink["short_term_context_type"] = "tokens"
    del qvink["message_length_threshold"]
    qvink["profiles"]["Default"]["message_length_threshold"] = 30
    found = import_settings(st, [])
    # Its short-term memory (message summaries) is the memory's changing part.
    assert found.sections["injection"]["changing"]["position"] == "in_chat"
    assert found.sections["injection"]["changing"]["depth"] == 3
    assert "position" not in found.sections["injection"]
    assert found.sections["memory"]["message_recap_context_type"] == "absolute"
    assert found.sections["memory"]["message_length_threshold"] == 30


def test_no_extension_and_wrong_types() -> None:
    assert import_settings({"extension_settings": {"memory": {}}}, []).found == []
    assert import_settings({}, []).found == []
    odd = {"extension_settings": {"auto_recap_memory": {
        "running_scene_recap_depth": True, "default_chat_enabled": 1,
        "running_scene_recap_position": 7, "chats_enabled": {"x": "yes"},
    }}}  # fmt: skip
    found = import_settings(odd, [])
    assert found.sections == {} and found.chats_enabled == {}
    assert any("not one of ST's positions" in note for note in found.notes)
