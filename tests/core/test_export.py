"""A chat's memory as Markdown, JSON and an ST World Info book."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.core.export import (
    Exported,
    ExportedEntity,
    ExportedRunning,
    ExportedScene,
    scene_keys,
    to_json,
    to_markdown,
    to_world,
)
from proxy.sillytavern.worlds import read_world

MEMORY = Exported(
    chat_id="default-user/chats/Ava/Ava - 2026-11-22@10h00m00s",
    title="Ava",
    scenes=[
        ExportedScene(0, 8, "The Old Mill 0-8", "Ava hid the brass key.", 1, "llm"),
        ExportedScene(9, 17, "Storm at the Ford 9-17", "Tom lost his compass.", 2, "edit"),
    ],
    running=ExportedRunning(3, "DEVELOPMENTS: the key, the storm.", 2, 17, "condensed"),
    entities=[
        ExportedEntity(
            "Brother Aldric",
            "character",
            ["Aldric", "the monk"],
            ["Keeps the guild ledger.", "Was exiled."],
        ),
    ],
)


def test_json_names_every_part() -> None:
    data = to_json(MEMORY)
    assert data["running_recap"] == {
        "version": 3,
        "content": "DEVELOPMENTS: the key, the storm.",
        "scene_count": 2,
        "new_scene_index": 17,
        "source": "condensed",
    }
    assert data["scenes"] == [
        {"first": 0, "index": 8, "name": "The Old Mill 0-8", "recap": "Ava hid the brass key.",
         "version": 1, "source": "llm"},
        {"first": 9, "index": 17, "name": "Storm at the Ford 9-17",
         "recap": "Tom lost his compass.", "version": 2, "source": "edit"},
    ]  # fmt: skip
    assert data["entities"] == [
        {"name": "Brother Aldric", "type": "character", "aliases": ["Aldric", "the monk"],
         "facts": ["Keeps the guild ledger.", "Was exiled."]},
    ]  # fmt: skip


def test_markdown_reads_as_a_document() -> None:
    text = to_markdown(MEMORY)
    assert text.startswith("# Ava\n")
    assert "## The story so far (version 3, through message 17)" in text
    assert "### The Old Mill 0-8 (messages 0-8)\n\nAva hid the brass key." in text
    assert "### Brother Aldric (character; also Aldric, the monk)\n\n- Was" not in text
    assert "### Brother Aldric (character; also Aldric, the monk)\n\n- Keeps" in text
    empty = Exported("c", "Mira", [], None)
    assert "No memory yet." in to_markdown(empty)


def test_scene_keys_are_the_names_words() -> None:
    assert scene_keys("The Old Mill 0-8") == ["Old", "Mill"]
    assert scene_keys("Storm at the Ford 9-17") == ["Storm", "Ford"]
    assert scene_keys("Room 101 at Dawn 3-4") == ["Room", "Dawn"]
    assert scene_keys("") == []


def test_the_world_book_loads_as_st_lore(tmp_path: Path) -> None:
    book = tmp_path / "Ava memory.json"
    book.write_text(json.dumps(to_world(MEMORY), indent=4), encoding="utf-8")
    world = read_world(book)
    assert world is not None and world.bad_entries == 0
    running, mill, storm, aldric = world.entries
    assert running.constant and running.content == "DEVELOPMENTS: the key, the storm."
    assert running.key == ()
    assert (mill.key, mill.content, mill.constant) == (
        ("Old", "Mill"),
        "Ava hid the brass key.",
        False,
    )
    assert storm.comment == "Storm at the Ford 9-17" and storm.order > mill.order
    # An entity: called by its names, what is known of it, one fact a line.
    assert aldric.comment == "character-Brother Aldric"
    assert aldric.key == ("Brother Aldric", "Aldric", "the monk") and not aldric.constant
    assert aldric.content == "Keeps the guild ledger.\nWas exiled."
    # Every entry carries the fields ST's editor expects.
    raw = json.loads(book.read_text())["entries"]
    for entry in raw.values():
        assert {"uid", "key", "keysecondary", "comment", "content", "constant", "selective",
                "order", "position", "disable", "probability", "useProbability", "depth",
                "displayIndex"} <= entry.keys()  # fmt: skip
