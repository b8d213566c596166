"""`config.example.toml`, generated from the settings model (`python -m proxy.settings`):
every setting with its description and default, so the file never drifts from the code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from proxy.core.models import Position, Role
from proxy.settings.loading import ENV_NESTING, ENV_PREFIX
from proxy.settings.model import Settings


def example_toml() -> str:
    """`config.example.toml`: every setting with its description and default.

    The committed file is generated from here (`python -m proxy.settings > config.example.toml`)
    and a test keeps the two equal, so the example cannot fall behind the model.
    """
    lines = [
        "# recap-proxy settings. Every key is optional; the values shown are the defaults.",
        "# Default location: the user's config dir, e.g. ~/.config/recap-proxy/config.toml on",
        "# Linux (`recap-proxy serve --help` shows yours), or pass --config FILE.",
        f"# Environment overrides: {ENV_PREFIX}<SECTION>{ENV_NESTING}<KEY>, "
        f"e.g. {ENV_PREFIX}UPSTREAM{ENV_NESTING}BASE_URL.",
    ]
    defaults = Settings()
    for section_name, section_field in Settings.model_fields.items():
        _section_lines(
            lines, section_name, section_field.description, getattr(defaults, section_name)
        )
    return "\n".join(lines) + "\n"


def _section_lines(lines: list[str], path: str, description: str | None, section: Any) -> None:
    """One `[section]` with its keys; sub-sections (`[memory.llm]`) follow it."""
    lines += ["", f"# {description}", f"[{path}]"]
    nested = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            nested.append((f"{path}.{name}", field.description, value))
            continue
        lines.append("")
        lines += [f"# {line}" for line in _wrap(field.description or "")]
        rendered = _toml_value(value)
        if rendered is None:  # unset by default: show an example, commented out
            example = (field.examples or [""])[0]
            lines.append(f"# {name} = {_toml_value(example)}")
        else:
            lines.append(f"{name} = {rendered}")
    for sub_path, sub_description, sub_section in nested:
        _section_lines(lines, sub_path, sub_description, sub_section)


def _wrap(text: str, width: int = 88) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width=width) or [""]


def _toml_value(value: object) -> str | None:
    """A TOML literal, or None for "unset" (written as a commented-out key)."""
    if value is None:
        return None
    if isinstance(value, Position | Role):
        return json.dumps(value.value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) or '""' for v in value) + "]"
    if isinstance(value, dict):
        if not value:
            return None  # an empty table is shown as a commented example
        pairs = (f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    raise TypeError(f"no TOML form for {value!r}")
