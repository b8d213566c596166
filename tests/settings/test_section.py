"""What every settings section shares: unknown keys named, defaults validated, `~` read
as the user's home."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field, ValidationError

from proxy.settings.section import Section, UserPath


class Folder(Section):
    path: UserPath = Field(Path("~/notes"), description="A folder.")
    size: int = Field(3, ge=1, description="How many.")


def test_an_unknown_key_is_an_error_that_names_it() -> None:
    with pytest.raises(ValidationError, match="colour"):
        Folder.model_validate({"colour": "red"})


def test_a_home_relative_path_is_the_users_home() -> None:
    assert Folder().path == Path.home() / "notes"
    assert Folder(path=Path("~/x")).path == Path.home() / "x"
    assert Folder(path=Path("/srv/x")).path == Path("/srv/x")


def test_a_bad_default_is_caught_when_the_section_is_made() -> None:
    class Broken(Section):
        size: int = Field(0, ge=1, description="How many.")

    with pytest.raises(ValidationError, match="size"):
        Broken()
