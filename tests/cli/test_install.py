"""`recap-proxy service`: the systemd unit and the launchd agent, written or printed."""

from __future__ import annotations

import plistlib
from pathlib import Path

import pytest

from proxy.cli.install import install, service_file, uninstall

PYTHON = "/home/me/recap proxy/.venv/bin/python"


def test_a_systemd_user_unit_runs_serve_from_this_environment(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    found = service_file("linux", tmp_path, PYTHON, config, environ={})
    assert found.path == tmp_path / ".config" / "systemd" / "user" / "recap-proxy.service"
    exec_start = next(line for line in found.text.splitlines() if line.startswith("ExecStart="))
    # The path with a space is quoted as systemd reads it.
    assert exec_start == f'ExecStart="{PYTHON}" -m proxy serve --config {config.resolve()}'
    assert "Restart=on-failure" in found.text and "WantedBy=default.target" in found.text
    assert found.start.endswith("systemctl --user enable --now recap-proxy")
    assert found.log == "journalctl --user -u recap-proxy -f"
    elsewhere = service_file("linux", tmp_path, PYTHON, None, {"XDG_CONFIG_HOME": "/x"})
    assert elsewhere.path == Path("/x/systemd/user/recap-proxy.service")


def test_a_launchd_agent_is_a_valid_plist(tmp_path: Path) -> None:
    found = service_file("darwin", tmp_path, PYTHON, None)
    assert found.path == tmp_path / "Library" / "LaunchAgents" / "io.github.recap-proxy.plist"
    plist = plistlib.loads(found.text.encode())
    assert plist["ProgramArguments"] == [PYTHON, "-m", "proxy", "serve"]
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardErrorPath"].endswith("Library/Logs/recap-proxy.log")
    assert found.start == f"launchctl load -w {found.path}"


def test_windows_gets_the_steps_and_nothing_is_written(tmp_path: Path) -> None:
    found = service_file("win32", tmp_path, "C:\\Python\\python.exe", None)
    assert found.path is None
    said = install(found, dry_run=False)
    assert "schtasks /Create /TN recap-proxy /SC ONLOGON" in said
    assert "schtasks /Delete" in uninstall(found, dry_run=False)
    with pytest.raises(ValueError, match="no service manager"):
        service_file("sunos5", tmp_path, PYTHON, None)
