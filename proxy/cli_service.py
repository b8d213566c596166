"""The service commands: `recap-proxy doctor` and `recap-proxy service install|uninstall`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from proxy.errors import RecapProxyError
from proxy.logs import setup_logging
from proxy.settings import default_config_path, load_settings


def add_service_commands(
    sub: Any, config_arg: Callable[[argparse.ArgumentParser], None], st_data_help: str
) -> None:
    doctor = sub.add_parser(
        "doctor", help="check the whole setup: config, store, port, ST's settings, the APIs"
    )
    config_arg(doctor)
    # serve's own options: the checks test what `serve` run with them would use.
    doctor.add_argument("--host", help="as for serve: the listen address to check")
    doctor.add_argument("--port", type=int, help="as for serve: the listen port to check")
    doctor.add_argument("--upstream", help="as for serve: the real API's base URL to check")
    doctor.add_argument("--st-data", type=Path, metavar="DIR", help=st_data_help)
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
            # What the README's first command gives serve, kept for the service to run with.
            one.add_argument("--upstream", help="as for serve: the real API's base URL")
            one.add_argument("--st-data", type=Path, metavar="DIR", help=st_data_help)
            one.add_argument("--host", help="as for serve: the listen address")
            one.add_argument("--port", type=int, help="as for serve: the listen port")


def run_service(args: argparse.Namespace) -> int:
    from proxy import service

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
                "(what you gave serve as --upstream and --st-data), or install with --config F."
            )
    else:
        print(service.uninstall(found, args.dry_run), end="")
    return 0


def _serve_options(args: argparse.Namespace, config: Path | None) -> list[str]:
    """serve's options given to `install`, checked as serve would check them (a service
    that cannot start says so only in its log), paths made absolute for the service."""
    given = {
        "--upstream": ("upstream.base_url", args.upstream),
        "--st-data": ("sillytavern.data_dir", args.st_data),
        "--host": ("server.host", args.host),
        "--port": ("server.port", args.port),
    }
    load_settings(config, overrides={key: value for key, value in given.values()})
    if args.st_data is not None and not args.st_data.expanduser().is_dir():
        raise RecapProxyError(f"--st-data {args.st_data}: no such folder")
    options: list[str] = []
    for flag, (_, value) in given.items():
        if value is not None:
            value = value.expanduser().resolve() if isinstance(value, Path) else value
            options += [flag, str(value)]
    return options


async def run_doctor(args: argparse.Namespace) -> int:
    from proxy.doctor import render, run_checks

    setup_logging("error")  # the checks say what matters; a library's warning is noise here
    overrides = {
        "server.host": args.host,
        "server.port": args.port,
        "upstream.base_url": args.upstream,
    }
    checks = await run_checks(args.config, args.st_data, overrides=overrides)
    print(render(checks, args.json))
    return 0 if all(c.ok is not False for c in checks) else 1
