"""`recap-proxy import-settings`: a memory extension's settings as the proxy's config.

Reads ST's `settings.json` of one user (read only, as everything in ST's data folder),
prints the equivalent `config.toml` sections, and with `--write` merges them into the
proxy's config file. tomlkit does the merge: it keeps the user's comments and layout,
which rewriting the file from parsed values would lose.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.items import Table

from proxy.errors import ConfigError, RecapProxyError
from proxy.settings import Settings, default_config_path, load_settings
from proxy.sillytavern.ext_settings import SettingsImport, import_settings
from proxy.sillytavern.layout import data_dir_for, inside, scan

DEFAULT_USER = "default-user"


def add_import_command(sub: Any, config_arg: Any) -> None:
    parser = sub.add_parser(
        "import-settings",
        help="turn ST-Auto-Recap's (or MessageSummarize's) settings into recap-proxy's",
    )
    config_arg(parser)
    parser.add_argument(
        "--st-data", type=Path, metavar="DIR", help="SillyTavern's data/ folder (default: found)"
    )
    parser.add_argument(
        "--user",
        help=f"the ST user whose settings to read (default: the only one, else {DEFAULT_USER})",
    )
    parser.add_argument(
        "--write", action="store_true", help="merge the settings into the config file"
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="with --write: show what would change, change nothing",
    )


def run_import_settings(args: argparse.Namespace) -> int:
    config: Path | None = args.config
    # The file --write creates may not exist yet: its defaults apply then.
    settings = load_settings(config) if config is None or config.exists() else Settings()
    configured = args.st_data or settings.sillytavern.data_dir
    data = data_dir_for(configured)
    if data is None:
        raise RecapProxyError(
            "SillyTavern's data folder was not found"
            + (f" at {configured}" if configured is not None else "")
            + ": pass --st-data DIR (the folder that holds default-user/)"
        )
    user = args.user or _only_user(data)
    source = data / user / "settings.json"
    st_settings = _read_json(source)
    found = import_settings(st_settings, (c for c in scan(data) if c.user == user))
    if not found.found:
        print(
            f"{source} has no ST-Auto-Recap or MessageSummarize settings "
            "(extension_settings.auto_recap_memory / qvink_memory): nothing to import",
            file=sys.stderr,
        )
        return 1
    print(f"# from {source}: {', '.join(found.found)}", file=sys.stderr)
    if not args.write:
        sys.stdout.write(render(found))
        return 0
    target = (config or default_config_path()).expanduser()
    if inside(data, target):
        raise RecapProxyError(f"{target} is inside SillyTavern's data folder: never written")
    before = target.read_text(encoding="utf-8") if target.exists() else ""
    after = merge(before, found)
    if args.dry_run:
        print(f"# would write to {target}:", file=sys.stderr)
        sys.stdout.write(after)
        return 0
    _write_checked(target, after)
    print(f"wrote {target}; restart `recap-proxy serve` to use it", file=sys.stderr)
    for note in found.notes:
        print(f"  note: {note}", file=sys.stderr)
    return 0


def _only_user(data: Path) -> str:
    users = sorted(p.parent.name for p in data.glob("*/settings.json"))
    if len(users) == 1:
        return users[0]
    if DEFAULT_USER in users or not users:
        return DEFAULT_USER
    raise RecapProxyError(f"several ST users ({', '.join(users)}): pick one with --user NAME")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RecapProxyError(f"{path} not found: is --user right?") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RecapProxyError(f"cannot read {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise RecapProxyError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise RecapProxyError(f"{path} is not ST's settings (not a JSON object)")
    return value


def _into(container: tomlkit.TOMLDocument | Table, name: str, values: dict[str, Any]) -> None:
    """`values` into the table `name`, key by key: a subsection (`[injection.changing]`)
    keeps the keys the import does not set."""
    table = container.get(name)
    if not isinstance(table, Table):
        table = tomlkit.table()
        container[name] = table
    for key, value in values.items():
        if isinstance(value, dict):
            _into(table, key, value)
        else:
            table[key] = value


def _document(found: SettingsImport, document: tomlkit.TOMLDocument) -> tomlkit.TOMLDocument:
    for section, values in found.sections.items():
        _into(document, section, values)
    if found.chats_enabled:
        injection = document.get("injection")
        if not isinstance(injection, Table):
            injection = tomlkit.table()
            document["injection"] = injection
        states = tomlkit.table()
        existing = injection.get("chats_enabled")
        if isinstance(existing, dict):
            states.update(existing)
        states.update(found.chats_enabled)
        injection["chats_enabled"] = states
    return document


def render(found: SettingsImport) -> str:
    """The settings as config.toml sections, what has no equivalent as comments."""
    text = tomlkit.dumps(_document(found, tomlkit.document()))
    if found.notes:
        text += "\n# Not imported, or worth a look:\n" + "".join(
            f"# - {note}\n" for note in found.notes
        )
    return text


def merge(existing: str, found: SettingsImport) -> str:
    try:
        document = tomlkit.parse(existing)
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(f"the config file is not valid TOML ({exc}): fix it first") from None
    return tomlkit.dumps(_document(found, document))


def _write_checked(target: Path, text: str) -> None:
    """Write only a config `serve` accepts (checked from a file beside the target)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    draft = target.with_name(target.name + ".new")
    draft.write_text(text, encoding="utf-8")
    try:
        load_settings(draft, env={})
    except ConfigError:
        draft.unlink()
        raise
    draft.replace(target)
