"""`recap-proxy service install|uninstall` as a user runs it (`doctor`'s runs are in
`tests/doctor/test_checks.py`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from proxy.cli.main import main


@pytest.fixture
def unit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A Linux user's home in `tmp_path`; where the systemd unit goes."""
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    return tmp_path / "cfg" / "systemd" / "user" / "recap-proxy.service"


def test_install_dry_run_then_install_then_uninstall(
    unit: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["service", "install", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"would write {unit}:") and "ExecStart=" in out
    assert "journalctl --user -u recap-proxy -f" in out and not unit.exists()
    assert "note: there is no config file" in out and "[upstream] base_url" in out
    assert "install --upstream URL --st-data DIR" in out
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


def test_install_keeps_serves_options_for_the_service(
    unit: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The README's first command, made a service: its options go into the unit.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "st" / "data").mkdir(parents=True)
    upstream = "http://127.0.0.1:5001/v1"
    argv = ["service", "install", "--upstream", upstream, "--st-data", "st/data", "--port", "8790"]
    assert main(argv) == 0
    assert "note: there is no config file" not in capsys.readouterr().out
    [exec_start] = [line for line in unit.read_text().splitlines() if line.startswith("ExecStart")]
    data = tmp_path.resolve() / "st" / "data"  # the service does not start where we are
    assert exec_start.endswith(f"-m proxy serve --port 8790 --upstream {upstream} --st-data {data}")
    unit.unlink()
    # What serve would refuse is refused now, not in the service's log later.
    assert main(["service", "install", "--upstream", "localhost:5001"]) == 2  # as serve
    assert "upstream.base_url" in capsys.readouterr().err and not unit.exists()
    assert main(["service", "install", "--st-data", "nowhere"]) == 1
    assert "--st-data nowhere: no such folder" in capsys.readouterr().err and not unit.exists()
    # ST cloned, never started: its data/ is not made yet; its own folder is the way.
    (tmp_path / "ST" / "public").mkdir(parents=True)
    (tmp_path / "ST" / "server.js").write_text("// ST's server\n", encoding="utf-8")
    assert main(["service", "install", "--st-data", "ST/data"]) == 1
    said = capsys.readouterr().err
    assert "no such folder yet: start SillyTavern once (it makes it), or give its own" in said
    assert main(["service", "install", "--upstream", upstream, "--st-data", "ST"]) == 0
    assert f"--st-data {tmp_path.resolve() / 'ST'}" in unit.read_text()
