"""`config.example.toml` is the one `python -m proxy.settings` writes, and it loads."""

from __future__ import annotations

import tomllib
from pathlib import Path

from proxy.settings import Settings, example_toml, load_settings

ROOT = Path(__file__).resolve().parent.parent.parent


def test_example_file_is_current_and_loads() -> None:
    committed = (ROOT / "config.example.toml").read_text(encoding="utf-8")
    assert committed == example_toml(), "run: python -m proxy.settings > config.example.toml"
    assert load_settings(ROOT / "config.example.toml", env={}) == Settings()
    assert set(tomllib.loads(committed)) == set(Settings.model_fields)
