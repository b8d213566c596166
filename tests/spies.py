"""Spying in tests: a function or method replaced, for the test, by one that keeps each
call's positional arguments and then calls it."""

from __future__ import annotations

from typing import Any

import pytest


def spy(monkeypatch: pytest.MonkeyPatch, owner: object, name: str) -> list[tuple[Any, ...]]:
    """From now on, the positional arguments of each call of `owner.name` (a method set on
    a class is called with its instance first), in order."""
    calls: list[tuple[Any, ...]] = []
    real = getattr(owner, name)

    def recording(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, recording)
    return calls
