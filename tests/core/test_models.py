"""The canonical models: ST's numbered settings by name or number, placement bounds."""

from __future__ import annotations

import pytest

from proxy.core.models import Placement, Position, Role


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("in_chat", Position.IN_CHAT),
        (" IN_PROMPT ", Position.IN_PROMPT),
        (1, Position.IN_CHAT),
        ("2", Position.BEFORE_PROMPT),
        (-1, Position.NONE),
        ("-1", Position.NONE),
        (Position.NONE, Position.NONE),
    ],
)
def test_positions_by_name_or_st_number(given: object, expected: Position) -> None:
    assert Position.parse(given) is expected


def test_roles_by_name_or_st_number() -> None:
    assert [Role.parse(n) for n in (0, 1, 2)] == [Role.SYSTEM, Role.USER, Role.ASSISTANT]
    assert Role.parse("Assistant") is Role.ASSISTANT


@pytest.mark.parametrize("bad", [3, "middle", True, None, 1.5])
def test_an_unknown_value_names_the_choices(bad: object) -> None:
    with pytest.raises(ValueError, match=r"in_chat \(1\)"):
        Position.parse(bad)


def test_depth_is_bounded_like_st() -> None:
    assert Placement(depth=0).depth == 0
    with pytest.raises(ValueError, match="MAX_INJECTION_DEPTH"):
        Placement(depth=10001)
