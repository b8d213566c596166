"""The operation prompts: bundled, or the user's from their templates folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.operations import OPERATIONS, Operation
from proxy.memory.calls.prompts import Prompts
from proxy.settings.memory import MemorySettings


def test_bundled_prompts_state_their_json() -> None:
    prompts = Prompts.load(MemorySettings(templates_dir=Path("/nonexistent")))
    expected = {
        "message_recap": '{"recaps": [{"message"',
        "detect_scene_break": '{"sceneBreakAt"',
        "scene_recap": '{"scene_name"',
        "running_recap": '{"recap"',
        "condense_running_recap": '{"recap"',
        "condense_entity": '{"facts"',
    }
    for operation in OPERATIONS:
        assert expected[operation] in prompts.templates[operation].source
    # The running recap's two prompts are told its budget.
    told = (Operation.RUNNING_RECAP, Operation.CONDENSE_RUNNING_RECAP, Operation.CONDENSE_ENTITY)
    for operation in told:
        assert {"max_words", "max_tokens"} <= prompts.templates[operation].macros


def test_user_override_and_unreadable_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "scene_recap.md").write_text("Recap {{scene_messages}} for {{char}}.")
    (tmp_path / "running_recap.md").write_bytes(b"\xff\xfe not utf-8")
    prompts = Prompts.load(MemorySettings(templates_dir=tmp_path))
    assert prompts.sources[Operation.SCENE_RECAP] == tmp_path / "scene_recap.md"
    assert prompts.messages(Operation.SCENE_RECAP, {"scene_messages": "S", "char": "Ava"}) == [
        {"role": "user", "content": "Recap S for Ava."}
    ]
    assert prompts.sources[Operation.RUNNING_RECAP].parent.name == "templates"  # bundled
    assert "cannot read" in caplog.text
