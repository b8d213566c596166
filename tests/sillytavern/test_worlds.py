from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from proxy.sillytavern.worlds import read_card, read_lore_settings, read_world
from tests.lore_data import entry, png_card, write_settings, write_world


def test_world_file_with_missing_unknown_and_broken_entries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = write_world(
        tmp_path,
        "Eldoria",
        {  # a broken entry among good ones
            "0": entry(0, "The glade.", key=["glade", "forest"], sticky=3, role=None, extra="x"),
            "1": {"content": "Only content."},
            "2": "not an entry",
            "3": entry(3, "Off.", disable=True, order="high", depth=None),
        },
    )
    with caplog.at_level(logging.WARNING):
        world = read_world(path)
    assert world is not None and world.name == "Eldoria"
    first, second, third = world.entries
    assert (first.uid, first.key, first.sticky, first.role) == (0, ("glade", "forest"), 3, 0)
    assert (second.uid, second.order, second.constant, second.sticky) == (1, 100, False, None)
    assert third.disable and third.order == 100 and third.depth == 4
    assert world.bad_entries == 1
    assert "skipped 1 malformed" in caplog.text


@pytest.mark.parametrize("text", ["{broken", "[]", '{"no_entries": 1}'])
def test_unreadable_world_files(tmp_path: Path, text: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert read_world(path) is None
    assert read_world(tmp_path / "missing.json") is None


def test_cards_png_and_json(tmp_path: Path) -> None:
    png = tmp_path / "Seraphina.png"
    png.write_bytes(png_card("Seraphina", "Eldoria"))
    card = read_card(png)
    assert card is not None and (card.name, card.world) == ("Seraphina", "Eldoria")
    plain = tmp_path / "Orin.json"
    plain.write_text(json.dumps({"name": "Orin", "data": {"name": "Orin", "extensions": {}}}))
    card = read_card(plain)
    assert card is not None and (card.name, card.world) == ("Orin", None)
    broken = tmp_path / "x.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 20)
    assert read_card(broken) is None


def test_settings(tmp_path: Path) -> None:
    write_settings(tmp_path, global_books=["Common", "Eldoria"])
    settings = read_lore_settings(tmp_path)
    assert settings.global_books == ("Common", "Eldoria")
    assert settings.persona_book is None
    assert read_lore_settings(tmp_path / "nope").global_books == ()
