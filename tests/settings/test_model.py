"""The settings model: its defaults, and a description for every field."""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.core.models import Position, Role
from proxy.errors import ConfigError
from proxy.settings import ServerSettings, Settings, load_settings


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


@pytest.mark.parametrize("key", ["", "   "])
def test_an_empty_access_key_is_an_error_that_names_it(tmp_path: Path, key: str) -> None:
    """An empty key read as "no key" opened a proxy bound to all interfaces to anyone."""
    config = tmp_path / "config.toml"
    config.write_text(f'[server]\nhost = "0.0.0.0"\naccess_key = "{key}"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"server\.access_key.*is empty"):
        load_settings(config)
    env = {"RECAP_PROXY_SERVER__HOST": "0.0.0.0", "RECAP_PROXY_SERVER__ACCESS_KEY": key}
    if key:
        with pytest.raises(ConfigError, match=r"server\.access_key"):
            load_settings(env=env)
    else:  # an empty variable is an unset one (compose writes an unset `${VAR}` so)
        server = load_settings(env=env).server
        assert server.access_key is None and server.unguarded() is not None


def test_a_reachable_address_needs_a_key() -> None:
    assert Settings().server.unguarded() is None
    exposed = ServerSettings(host="0.0.0.0")
    problem = exposed.unguarded()
    assert problem is not None and "server.access_key is not set" in problem
    assert ServerSettings(host="0.0.0.0", access_key="k" * 20).unguarded() is None
    assert ServerSettings(host="::1").unguarded() is None
    # The address asked about, not the one configured (a reload keeps the running one).
    assert Settings().server.unguarded("192.168.1.5") is not None
