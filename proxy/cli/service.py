"""The service commands: `recap-proxy doctor` and `recap-proxy service install|uninstall`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.errors import RecapProxyError
from proxy.observe.logs import setup_logging
from proxy.settings import default_config_path, load_settings
from proxy.sillytavern.layout import before_first_start

ST_DATA_HELP = "SillyTavern's data/ folder (default: sillytavern.data_dir, else auto-detect)"
# serve's options for where it listens, forwards and reads, each with its settings key:
# `doctor` checks what serve run with them would use, `service install` runs serve with
# them. (flag, settings key, argparse keywords)
SERVE_OPTIONS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("--host", "server.host", {"help": "listen address (default 127.0.0.1)"}),
    ("--port", "server.port", {"type": int, "help": "listen port (default 8765)"}),
    ("--upstream", "upstream.base_url",
     {"help": "the real API's base URL, e.g. http://127.0.0.1:5001/v1"}),
    ("--st-data", "sillytavern.data_dir", {"type": Path, "metavar": "DIR", "help": ST_DATA_HELP}),
)  # fmt: skip


def add_serve_options(parser: argparse.ArgumentParser) -> None:
    for flag, _, keywords in SERVE_OPTIONS:
        parser.add_argument(flag, **keywords)


def serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings `SERVE_OPTIONS` given on the command line set (None: not given)."""
    overrides: dict[str, Any] = {}
    for flag, key, _ in SERVE_OPTIONS:
        value = getattr(args, flag[2:].replace("-", "_"))
        overrides[key] = str(value) if isinstance(value, Path) else value
    return overrides


def add_service_commands(sub: Any, config_arg: Callable[[argparse.ArgumentParser], None]) -> None:
    doctor = sub.add_parser(
        "doctor", help="check the whole setup: config, store, port, ST's settings, the APIs"
    )
    config_arg(doctor)
    add_serve_options(doctor)  # what `serve` run with them would use is what is checked
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    service = sub.add_parser("service", help="run serve in the background: install, uninstall")
    actions = service.add_subparsers(dest="action", required=True)
    for action, what in (
        ("install", "write a systemd user unit (Linux) or launchd agent (macOS) for serve"),
        ("uninstall", "remove it"),
    ):
        one = actions.add_parser(action, help=what)
        config_arg(one)
        one.add_argument(
            "--dry-run", action="store_true", help="print what would be written or removed"
        )
        if action == "install":
            add_serve_options(one)  # the README's first command's, for the service to run with


def run_service(args: argparse.Namespace) -> int:
    from proxy.cli import install as service

    config = args.config
    if config is None and default_config_path().exists():
        config = default_config_path()
    options = _serve_options(args, config) if args.action == "install" else []
    try:
        found = service.service_file(
            sys.platform, Path.home(), sys.executable, config, options=options
        )
    except ValueError as exc:
        raise RecapProxyError(str(exc)) from None
    if args.action == "install":
        print(service.install(found, args.dry_run), end="")
        if config is None and args.upstream is None:
            print(
                f"note: there is no config file ({default_config_path()}): the service runs with "
                "the defaults. Put your [upstream] base_url and [sillytavern] data_dir there "
                "(what you gave serve as --upstream and --st-data), or install with those "
                "options (install --upstream URL --st-data DIR) or with --config F."
            )
    else:
        print(service.uninstall(found, args.dry_run), end="")
    return 0


def _serve_options(args: argparse.Namespace, config: Path | None) -> list[str]:
    """serve's options given to `install`, checked as serve would check them (a service
    that cannot start says so only in its log), paths made absolute for the service."""
    overrides = serve_overrides(args)
    if args.st_data is not None:
        given = args.st_data.expanduser()
        if not given.is_dir():
            # A typo is refused here, where serve would wait for the folder. ST's own folder
            # is the way to install before ST first ran: serve reads its data/ once made.
            hint = (
                f" yet: start SillyTavern once (it makes it), or give its own folder {given.parent}"
                if before_first_start(given)
                else ""
            )
            raise RecapProxyError(f"--st-data {args.st_data}: no such folder{hint}")
        overrides["sillytavern.data_dir"] = str(args.st_data.expanduser().resolve())
    load_settings(config, overrides=overrides)
    options: list[str] = []
    for flag, key, _ in SERVE_OPTIONS:
        if overrides[key] is not None:
            options += [flag, str(overrides[key])]
    return options


async def run_doctor(args: argparse.Namespace) -> int:
    from proxy.doctor.checks import render, run_checks

    setup_logging("error")  # the checks say what matters; a library's warning is noise here
    checks = await run_checks(args.config, overrides=serve_overrides(args))
    print(render(checks, args.json))
    return 0 if all(c.ok is not False for c in checks) else 1
