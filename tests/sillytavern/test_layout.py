"""Finding ST's data folder: the usual places, and the folders people give for it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.sillytavern.layout import (
    before_first_start,
    data_dir_for,
    data_dir_near,
    find_data_dir,
    is_install_folder,
    read_groups,
    served_data_dir,
)


def install(root: Path) -> Path:
    """An ST install as its folders are: `data/<user>/chats`, beside its code."""
    (root / "data" / "default-user" / "chats" / "Seraphina").mkdir(parents=True)
    (root / "public").mkdir()
    return root / "data"


def test_the_install_folder_or_a_user_folder_stands_for_the_data_folder(tmp_path: Path) -> None:
    data = install(tmp_path / "SillyTavern")
    assert data_dir_near(tmp_path / "SillyTavern") == data
    assert data_dir_near(data / "default-user") == data
    assert data_dir_near(data) is None  # the data folder itself: nothing to correct
    assert data_dir_near(tmp_path) is None  # unrelated
    assert data_dir_near(data / "default-user" / "chats") is None


def test_the_usual_places(tmp_path: Path) -> None:
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    elsewhere.mkdir()
    assert find_data_dir(home, elsewhere, {}) is None
    data = install(home / "SillyTavern")
    assert find_data_dir(home, elsewhere, {}) == data
    other = install(tmp_path / "custom")
    assert find_data_dir(home, elsewhere, {"SILLYTAVERN_DATAROOT": str(other)}) == other


def test_every_command_takes_the_data_folder_one_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = install(tmp_path / "home" / "SillyTavern")
    assert data_dir_for(data) == data
    assert data_dir_for(data.parent) == data  # the install folder
    assert data_dir_for(tmp_path / "nowhere") is None  # configured, not there: no guess
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    assert data_dir_for(None) == data  # nothing configured: the usual places
    # The folder the store mirrors (it was served with) comes before the usual places,
    # and after the one configured; gone, it is no answer.
    served = install(tmp_path / "served")
    assert data_dir_for(None, str(served)) == served
    assert data_dir_for(data, str(served)) == data
    assert data_dir_for(None, str(tmp_path / "gone")) == data


def test_a_group_file_names_each_chat_and_where_a_branch_came_from(tmp_path: Path) -> None:
    """Before ST 1.15, a group chat's metadata lived in the group's file: the open chat's in
    `chat_metadata`, the others' in `past_metadata` (stale for the open one)."""
    groups = tmp_path / "groups"
    groups.mkdir()
    group = {
        "id": "1795362670890",
        "name": "Harness Group",
        "members": ["Orin.png", "default_Seraphina.png"],
        "disabled_members": ["Orin.png"],
        "chat_id": "Branch #5 - b",
        "chats": ["main", "Branch #3 - a", "Branch #5 - b"],
        "chat_metadata": {"integrity": "x", "main_chat": "main"},
        "past_metadata": {
            "main": {"integrity": "y"},
            "Branch #3 - a": {"main_chat": "main"},
            "Branch #5 - b": {"main_chat": "stale"},
        },
    }
    (groups / "1795362670890.json").write_text(json.dumps(group))
    (groups / "broken.json").write_text("{")
    found = read_groups(tmp_path)
    assert set(found) == {"main", "Branch #3 - a", "Branch #5 - b"}
    info = found["main"]
    assert (info.group_id, info.name, info.disabled) == (
        "1795362670890",
        "Harness Group",
        ("Orin.png",),
    )
    assert info.main_chats == {"Branch #3 - a": "main", "Branch #5 - b": "main"}


def test_serve_takes_a_folder_not_there_yet_and_st_own_folder_before_st_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.sillytavern.layout.find_data_dir", lambda *args: None)
    data = install(tmp_path / "SillyTavern")
    assert served_data_dir(data.parent) == data  # as every command takes it
    fresh = tmp_path / "clone"  # ST not started once: no data/ yet, or an empty one
    (fresh / "public").mkdir(parents=True)
    (fresh / "server.js").write_text("// ST's server\n", encoding="utf-8")
    assert served_data_dir(fresh) == fresh / "data"
    assert before_first_start(fresh / "data") and not before_first_start(tmp_path / "data")
    (fresh / "data").mkdir()
    assert not before_first_start(fresh / "data")
    assert served_data_dir(fresh) == fresh / "data"
    assert is_install_folder(fresh) and not is_install_folder(fresh / "data")
    # Not there (yet): the one configured, else the one the store mirrors, waited for.
    assert served_data_dir(tmp_path / "nowhere", str(data)) == tmp_path / "nowhere"
    assert served_data_dir(None, str(tmp_path / "gone")) == tmp_path / "gone"
    assert served_data_dir(None) is None  # nothing given, nothing found
    empty = tmp_path / "empty"  # a data folder before ST made its user: as it is
    empty.mkdir()
    assert served_data_dir(empty) == empty
