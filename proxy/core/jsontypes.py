"""JSON as a type: what the API answers, what a job's payload holds, checked by mypy
instead of hidden behind `Any`."""

from __future__ import annotations

from typing import TypeAlias

JSONValue: TypeAlias = "str | int | float | bool | list[JSONValue] | dict[str, JSONValue] | None"
JSONObject: TypeAlias = "dict[str, JSONValue]"
# What an API call answers: one object, or a list of them.
JSONAnswer: TypeAlias = "JSONObject | list[JSONObject]"


def as_int(value: JSONValue, what: str) -> int:
    """An integer read back from stored JSON; a wrong type is a clear error, not a crash."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what}: expected an integer, got {value!r}")
    return value


def as_str(value: JSONValue, what: str) -> str:
    """A string read back from stored JSON; a wrong type is a clear error, not a crash."""
    if not isinstance(value, str):
        raise ValueError(f"{what}: expected a string, got {value!r}")
    return value


def as_list(value: JSONValue, what: str) -> list[JSONValue]:
    if not isinstance(value, list):
        raise ValueError(f"{what}: expected a list, got {value!r}")
    return value
