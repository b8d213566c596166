"""`recap-proxy import-settings`: print, dry-run and write an extension's settings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from proxy.cli.main import main
from proxy.core.models import Position, Role
from proxy.settings import load_settings
from tests.memory.story import CHAT_ID, Story
from tests.sillytavern.test_ext_settings import SETTINGS


def data_folder(tmp_path: Path) -> Path:
    data = tmp_path / "st" / "data"
    Story(data, set()).grow(4)
    shutil.copy(SETTINGS, data / "default-user" / "settings.json")
    return data


def test_prints_the_sections_and_what_has_no_equivalent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = data_folder(tmp_path)
    config = tmp_path / "config.toml"
    assert main(["import-settings", "--st-data", str(data), "--config", str(config)]) == 0
    out = capsys.readouterr()
    assert "[injection]" in out.out and 'position = "in_chat"' in out.out
    assert f'"{CHAT_ID}" = true' in out.out
    assert "# Not imported, or worth a look:" in out.out and "running_scene_recap_scan" in out.out
    assert "auto_recap_memory, qvink_memory" in out.err
    assert not config.exists()


def test_writes_into_the_config_keeping_what_is_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = data_folder(tmp_path)
    config = tmp_path / "config.toml"
    mine = (
        '# my proxy\n[upstream]\nbase_url = "http://127.0.0.1:5001/v1"  # KoboldCpp\n\n'
        '[injection]\ndepth = 9\n\n[injection.changing]\ntemplate = "[Lately: {{recent_recaps}}]"\n'
    )
    config.write_text(mine, encoding="utf-8")
    args = ["import-settings", "--st-data", str(data), "--config", str(config), "--write"]
    assert main([*args, "--dry-run"]) == 0
    assert config.read_text(encoding="utf-8") == mine
    assert "depth = 4" in capsys.readouterr().out
    assert main(args) == 0
    text = config.read_text(encoding="utf-8")
    assert "# my proxy" in text and "# KoboldCpp" in text
    settings = load_settings(config, env={})
    assert settings.injection.position == Position.IN_CHAT and settings.injection.depth == 4
    assert settings.injection.role == Role.USER
    assert settings.injection.chats_enabled == {CHAT_ID: True}
    # qvink's short-term placement is the changing part's; the user's own key there stays.
    changing = settings.injection.changing
    assert changing.position == Position.IN_PROMPT and changing.depth == 2
    assert changing.template == "[Lately: {{recent_recaps}}]"
    assert settings.memory.minimum_scene_length == 8
    assert "note:" in capsys.readouterr().err
    assert main(args) == 0  # again: the same file
    assert load_settings(config, env={}) == settings


def test_clear_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = ["--config", str(tmp_path / "none.toml")]
    assert main(["import-settings", "--st-data", str(tmp_path / "nowhere"), *config]) == 1
    assert "--st-data" in capsys.readouterr().err
    data = data_folder(tmp_path)
    (data / "default-user" / "settings.json").write_text(json.dumps({"main_api": "openai"}))
    assert main(["import-settings", "--st-data", str(data), *config]) == 1
    assert "nothing to import" in capsys.readouterr().err
    (data / "default-user" / "settings.json").write_text("{broken")
    assert main(["import-settings", "--st-data", str(data), *config]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["import-settings", "--st-data", str(data), "--user", "bob", *config]) == 1
    assert "is --user right?" in capsys.readouterr().err
