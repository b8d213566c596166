"""`recap-proxy service`: the systemd unit and the launchd agent, written or printed."""

from __future__ import annotations

import plistlib
import sys
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.service import install, service_file, uninstall

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


def test_install_dry_run_then_install_then_uninstall(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    unit = tmp_path / "cfg" / "systemd" / "user" / "recap-proxy.service"
    assert main(["service", "install", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"would write {unit}:") and "ExecStart=" in out
    assert "journalctl --user -u recap-proxy -f" in out and not unit.exists()
    assert "note: there is no config file" in out and "[upstream] base_url" in out
    assert main(["service", "install"]) == 0
    assert unit.read_text().startswith("[Unit]")
    assert capsys.readouterr().out.startswith(f"wrote {unit}")
    assert main(["service", "install"]) == 0
    assert capsys.readouterr().out.startswith(f"replaced {unit}")
    assert main(["service", "uninstall", "--dry-run"]) == 0 and unit.exists()
    assert main(["service", "uninstall"]) == 0 and not unit.exists()
    assert "systemctl --user stop recap-proxy" in capsys.readouterr().out
    monkeypatch.setattr(sys, "platform", "darwin")
    assert main(["service", "install", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "LaunchAgents/io.github.recap-proxy.plist" in out and "<plist" in out
