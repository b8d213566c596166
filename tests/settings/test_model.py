"""The settings model: its defaults, and a description for every field."""

from __future__ import annotations

from proxy.core.models import Position, Role
from proxy.settings import Settings


def test_defaults_are_loopback_and_8765() -> None:
    settings = Settings()
    assert settings.server.host == "127.0.0.1"
    assert settings.server.port == 8765
    assert settings.injection.position is Position.BEFORE_PROMPT
    assert settings.injection.role is Role.SYSTEM


def test_every_field_is_described() -> None:
    # The descriptions are the example file's comments and the reference's text.
    for section in Settings.model_fields.values():
        assert section.description
        assert isinstance(section.annotation, type)
        for name, field in section.annotation.model_fields.items():
            assert field.description, name
