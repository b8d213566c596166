"""`[injection]` and `[injection.changing]`: each part's place, in names or ST's numbers."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from proxy.core.models import Position
from proxy.settings import Settings
from proxy.settings.injection import ChangingInjectionSettings


def test_the_changing_part_has_its_own_place_in_names_or_st_numbers() -> None:
    settings = Settings.model_validate(
        {"injection": {"position": 0, "changing": {"position": 2, "depth": 5, "role": "user"}}}
    )
    assert settings.injection.placement().position is Position.IN_PROMPT
    changing = settings.injection.changing.placement()
    assert (changing.position, changing.depth, changing.role.value) == (
        Position.BEFORE_PROMPT,
        5,
        "user",
    )
    default = Settings().injection.changing.placement()
    assert (default.position, default.depth) == (Position.IN_CHAT, 2)


def test_a_bad_place_is_refused_with_st_words() -> None:
    with pytest.raises(ValidationError, match="before_prompt"):
        ChangingInjectionSettings.model_validate({"position": "top"})
    with pytest.raises(ValidationError):
        ChangingInjectionSettings.model_validate({"depth": -1})
