"""`recap-proxy service install | uninstall`: run `serve` in the background from this very
environment (its Python, so its packages), started at login and restarted if it stops.

Linux gets a systemd user unit, macOS a launchd agent; Windows has neither, so its
equivalent steps are printed. Nothing here starts or stops the service: the printed
commands do, so that the user sees what runs.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape

NAME = "recap-proxy"
LABEL = "io.github.recap-proxy"  # launchd wants a reverse-DNS label


@dataclass(frozen=True, slots=True)
class ServiceFile:
    """What `install` writes (or prints), and how the user drives it."""

    path: Path | None  # None: nothing to write (Windows)
    text: str
    start: str
    stop: str
    log: str
    notes: tuple[str, ...] = ()


def command(python: str, config: Path | None, options: Sequence[str] = ()) -> list[str]:
    """`serve` from this environment (its Python and packages), with the config given and
    `options` (serve's own, as `--upstream URL`)."""
    args = [python, "-m", "proxy", "serve"]
    if config is not None:
        args += ["--config", str(config.expanduser().resolve())]
    return args + list(options)


def service_file(
    platform: str,
    home: Path,
    python: str,
    config: Path | None,
    environ: dict[str, str] | None = None,
    options: Sequence[str] = (),
) -> ServiceFile:
    environ = dict(os.environ) if environ is None else environ
    args = command(python, config, options)
    if platform.startswith("linux"):
        return _systemd(home, args, environ)
    if platform == "darwin":
        return _launchd(home, args)
    if platform.startswith("win"):
        return _windows(args)
    raise ValueError(f"no service manager known for {platform!r}: run `recap-proxy serve` yourself")


def _systemd(home: Path, args: list[str], environ: dict[str, str]) -> ServiceFile:
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home / ".config")
    path = config_home / "systemd" / "user" / f"{NAME}.service"
    text = "\n".join(
        [
            "[Unit]",
            "Description=recap-proxy: long-term memory for SillyTavern",
            "After=network-online.target",
            "",
            "[Service]",
            f"ExecStart={' '.join(_systemd_quote(a) for a in args)}",
            "Restart=on-failure",
            "RestartSec=5",
            # `systemctl --user reload recap-proxy`: the config and templates, live.
            "ExecReload=/bin/kill -HUP $MAINPID",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )
    return ServiceFile(
        path,
        text,
        start=f"systemctl --user daemon-reload && systemctl --user enable --now {NAME}",
        stop=f"systemctl --user stop {NAME}",
        log=f"journalctl --user -u {NAME} -f",
        notes=("to keep it running while you are logged out: loginctl enable-linger $USER",),
    )


def _launchd(home: Path, args: list[str]) -> ServiceFile:
    path = home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    log = home / "Library" / "Logs" / f"{NAME}.log"
    arguments = "\n".join(f"        <string>{escape(a)}</string>" for a in args)
    text = f"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
    <key>Label</key>
    <string>{LABEL}</string>
    <key>ProgramArguments</key>
    <array>
{arguments}
    </array>
    <key>RunAtLoad</key>
    <true/>
    <key>KeepAlive</key>
    <dict>
        <key>SuccessfulExit</key>
        <false/>
    </dict>
    <key>StandardOutPath</key>
    <string>{escape(str(log))}</string>
    <key>StandardErrorPath</key>
    <string>{escape(str(log))}</string>
</dict>
</plist>
"""
    return ServiceFile(
        path,
        text,
        start=f"launchctl load -w {path}",
        stop=f"launchctl unload -w {path}",
        log=f"tail -f {log}",
    )


def _windows(args: list[str]) -> ServiceFile:
    line = " ".join(f'"{a}"' if " " in a else a for a in args)
    steps = (
        "Windows has no user service manager recap-proxy can write for; Task Scheduler runs it "
        "at log-on. In a terminal:\n"
        f'  schtasks /Create /TN {NAME} /SC ONLOGON /RL LIMITED /TR "{line}"\n'
        "Its window stays hidden if you make it run with pythonw.exe instead of python.exe."
    )
    return ServiceFile(
        None,
        steps,
        start=f"schtasks /Run /TN {NAME}",
        stop=f"schtasks /End /TN {NAME}",
        log="the proxy logs to its console; add --log-format json and redirect it to a file",
        notes=(f"to remove it: schtasks /Delete /TN {NAME} /F",),
    )


def _systemd_quote(arg: str) -> str:
    if arg and not any(c in arg for c in " \t\"'\\$%"):
        return arg
    return (
        '"'
        + arg.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$").replace("%", "%%")
        + '"'
    )


def install(found: ServiceFile, dry_run: bool) -> str:
    """Write the file (unless `dry_run`); what to tell the user."""
    if found.path is None:
        return _usage(found, "")
    if dry_run:
        return f"would write {found.path}:\n\n{found.text}\n" + _usage(found, "then ")
    replaced = found.path.exists()
    found.path.parent.mkdir(parents=True, exist_ok=True)
    found.path.write_text(found.text, encoding="utf-8")
    said = "replaced" if replaced else "wrote"
    return f"{said} {found.path}\n" + _usage(found, "")


def uninstall(found: ServiceFile, dry_run: bool) -> str:
    if found.path is None:
        return "\n".join(found.notes) + "\n"
    if not found.path.exists():
        return f"nothing to remove: {found.path} does not exist\n"
    if dry_run:
        return f"would remove {found.path} (stop it first: {found.stop})\n"
    found.path.unlink()
    return f"removed {found.path}; if it still runs, stop it: {found.stop}\n"


def _usage(found: ServiceFile, prefix: str) -> str:
    lines = [
        f"{prefix}start it: {found.start}" if found.path else found.text,
        f"stop it:  {found.stop}",
        f"its log:  {found.log}",
        *found.notes,
    ]
    if found.path is None:
        lines.insert(1, f"start it: {found.start}")
    return "\n".join(lines) + "\n"
