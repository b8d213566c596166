"""`recap-proxy service install|uninstall` as a user runs it (`doctor`'s runs are in
`tests/test_doctor.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proxy.cli import main


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
