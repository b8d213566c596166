"""`recap-proxy doctor`'s checks that ask over the network: a running recap-proxy (its
`/health` and `/`, and the port it holds), the upstream and the memory LLM (their model
list, status only), and what the running proxy saw in the last hour. `proxy.doctor.checks` runs
them with the checks of the local setup.

The upstreams are asked through the proxy's own client (`proxy.upstream.upstreams.Upstream`), so
that an HTTP proxy, a CA file or credentials in a base URL count as they do for `serve`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from yarl import URL

from proxy.core.guard import reachable
from proxy.core.headers import safe_url
from proxy.errors import EmbeddingFailure, UpstreamError
from proxy.memory.calls.embeddings import EmbeddingClient
from proxy.settings import Settings
from proxy.store.lock import serving
from proxy.upstream.upstreams import Upstream

PROBE_SECONDS = 5.0
# Characters of a failed job's error that the memory jobs check shows (the rest: `queue`).
FAILURE_SHOWN = 240


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


async def running_proxy(
    http: aiohttp.ClientSession, origin: str, access_key: str | None
) -> dict[str, Any] | None:
    """The `/health` of a recap-proxy listening at `origin`, if one is (asked with the
    configured access key, which it needs like every request)."""
    headers = {"X-Recap-Key": access_key} if access_key else {}
    body = await _json_at(http, origin + "/health", headers)
    if not (isinstance(body, dict) and "uptime_s" in body):
        return None
    # Where it forwards to (its `/` says), which its command line may have set.
    root = await _json_at(http, origin + "/", headers)
    if isinstance(root, dict) and isinstance(root.get("upstream"), str):
        body["forwards_to"] = root["upstream"]
    if isinstance(root, dict) and isinstance(root.get("st_data"), str):
        body["reads"] = root["st_data"]  # ST's data folder, which `--st-data` may have set
    queue = body.get("queue")
    if isinstance(queue, dict) and queue.get("failed"):
        # What failed, so that doctor can say why (the work not done, no done job).
        listed = await _json_at(http, origin + "/recap/api/queue?done=0", headers)
        if isinstance(listed, dict) and isinstance(listed.get("jobs"), list):
            failed = [
                j for j in listed["jobs"] if isinstance(j, dict) and j.get("state") == "failed"
            ]
            body["failed_jobs"] = sorted(failed, key=lambda j: j.get("updated") or 0, reverse=True)
    return body


async def _json_at(http: aiohttp.ClientSession, url: str, headers: dict[str, str]) -> Any:
    """What `url` answers, decoded; None when nothing answers or it is not JSON."""
    try:
        async with http.get(url, headers=headers) as answer:
            return await answer.json(content_type=None)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def listed_proxy(
    http: aiohttp.ClientSession, store_path: Path, access_key: str | None
) -> dict[str, Any] | None:
    """`running_proxy` for the proxy that serves the store, where its lock file says it
    listens (`serve --port` put it elsewhere than the settings say); with `origin`."""
    listening = serving(store_path)
    if listening is None:
        return None
    origin = reachable(*listening)
    found = await running_proxy(http, origin, access_key)
    if found is not None:
        found["origin"] = origin
        found["listening"] = f"{listening[0]}:{listening[1]}"
    return found


def port_check(settings: Settings, running: dict[str, Any] | None) -> Check:
    where = f"{settings.server.host}:{settings.server.port}"
    if running is not None:
        hours = float(running.get("uptime_s", 0)) / 3600
        there = running.get("listening", where)
        detail = (f"recap-proxy {running.get('version')} is running on {there} (up "
                  f"{hours:.1f} h, {running.get('status')})")  # fmt: skip
        if there == where:
            return Check("port", True, detail)
        if not {"host", "port"} & settings.server.model_fields_set:
            # `serve --port N` and no port set: the proxy in use is the one to check.
            return Check("port", True, f"{detail}, from its command line (a serve without "
                         f"--port would listen on {where}; [server] port in the config keeps "
                         "it)")  # fmt: skip
        return Check(
            "port", False, f"{detail}, not on {where} as the settings say (where ST's URL is "
            "checked against)",
            f"set [server] port (and host) to where it runs, or restart it without --port; "
            f"`doctor --port {there.rpartition(':')[2]}` checks the one running",
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


async def status_of(upstream: Upstream, url: str, headers: dict[str, str]) -> int:
    """The status `GET url` answers with, through the proxy's own client; raises
    `UpstreamError` (a timeout too) when there is none."""
    async with asyncio.timeout(PROBE_SECONDS):
        answer = await upstream.send_to("GET", URL(url), headers.items(), None)
    answer.close()  # the status is all a probe wants
    return answer.status


async def probe(
    upstream: Upstream, base_url: str, key: str | None, what: str, setting: str
) -> Check:
    url = base_url.rstrip("/") + "/models"
    headers: dict[str, str] = {}
    if key and "anthropic" in (urlsplit(base_url).hostname or ""):
        headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}  # Claude's own header
    elif key:
        headers = {"Authorization": f"Bearer {key}"}
    try:
        status = await status_of(upstream, url, headers)
    except (UpstreamError, TimeoutError) as exc:
        reason = "no answer in time" if isinstance(exc, TimeoutError) else str(exc)
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
            found = await status_of(upstream, with_v1 + "/models", headers)
        except (UpstreamError, TimeoutError):
            found = 404
        if found < 400 or found in (401, 403):
            return Check(what, True, f"{safe_url(base_url)} answers (404 at /models, but "
                         f"{safe_url(with_v1)}/models answers {found}: for ST's Chat "
                         f"Completion through the proxy, set {setting} to {safe_url(with_v1)}; "
                         "a Text Completion server's URL stays as ST has it)")  # fmt: skip
    return Check(what, True, f"{safe_url(base_url)} answers ({status})")


async def upstream_check(
    upstream: Upstream, settings: Settings, running: dict[str, Any] | None
) -> Check:
    given = settings.upstream
    key = given.api_key.get_secret_value() if given.api_key is not None else None
    setting = "[upstream] base_url (--upstream)"
    elsewhere = (running or {}).get("forwards_to")
    if not elsewhere or elsewhere.rstrip("/") == safe_url(given.base_url).rstrip("/"):
        return await probe(upstream, given.base_url, key, "upstream", setting)
    if "base_url" not in given.model_fields_set:
        # `serve --upstream URL` (the README's first command) and no upstream set here:
        # the API that proxy forwards to is the one in use, and the one to check.
        found = await probe(upstream, elsewhere, key, "upstream", setting)
        note = (f", the one the running recap-proxy forwards to (from its command line: a "
                f"serve without --upstream would forward to {safe_url(given.base_url)}; "
                "[upstream] base_url in the config keeps it)")  # fmt: skip
        return replace(found, detail=found.detail + note)
    # The config (or doctor's own --upstream) names another API than the running proxy's.
    found = await probe(upstream, given.base_url, key, "upstream", setting)
    note = (f"; the running recap-proxy forwards to {elsewhere} instead "
            f"(`doctor --upstream {elsewhere}` checks that one)")  # fmt: skip
    return replace(found, detail=found.detail + note)


async def memory_llm_check(upstream: Upstream, settings: Settings) -> Check:
    llm = settings.memory.llm
    if llm.base_url is None:
        return Check("memory LLM", True, "the chat's own upstream, with the chat's own key")
    key = llm.api_key.get_secret_value() if llm.api_key is not None else None
    return await probe(upstream, llm.base_url, key, "memory LLM", "[memory.llm] base_url")


async def embeddings_check(settings: Settings) -> Check:
    """Whether recall by meaning works: one text embedded, as `serve` would embed it."""
    embeddings = settings.memory.embeddings
    name = "embeddings"
    if embeddings.base_url is None:
        off = "off: older scenes are recalled by their words alone (set [memory.embeddings] "
        return Check(name, None, off + "base_url to recall them by meaning too)")
    own = settings.upstream.model_copy(update={"base_url": embeddings.base_url})
    try:
        async with Upstream(own) as upstream:
            vectors, _ = await EmbeddingClient(embeddings, upstream).embed(["recap-proxy doctor"])
    except EmbeddingFailure as exc:
        fix = "check [memory.embeddings] base_url, model and api_key, and that the server runs"
        return Check(name, False, f"{embeddings.kind()} API at {embeddings.base_url}: {exc}", fix)
    model = embeddings.model or "its model"
    return Check(name, True, f"{model} at {embeddings.base_url}: {vectors[0].shape[0]} dimensions")


# What to do about the running proxy's store failing, by the words of SQLite's error.
STORE_FIXES = (
    (("full",), "free space on the disk that holds it (or set [store] path on another disk "
     "and restart): the proxy writes again by itself and catches up with ST's chats"),
    (("readonly", "read-only", "cannot be written"), "make the file and its folder writable "
     "for the user the proxy runs as"),
    (("locked",), "another program holds the store (a second recap-proxy on the same file?): "
     "stop it"),
    (("malformed",), "the file is damaged: stop serve, move it aside and start again (chats "
     "are read anew; their memory is written again by the LLM)"),
    (("not a database",), "the file is not a store: stop serve, move it aside and start "
     "again"),
    (("newer",), "upgrade recap-proxy: a newer one wrote this store"),
    (("no answer",), "the store is busy with a long piece of work: ask again in a moment"),
)  # fmt: skip


def running_checks(running: dict[str, Any]) -> list[Check]:
    """The running proxy's store and watch, as its `/health` gives them."""
    checks = []
    store = running.get("store")
    if isinstance(store, str) and store not in ("ok", "none"):
        reason = store.split(": ", 1)[-1]  # past "cannot write <path>": not the path's words
        fix = next(
            (fix for words, fix in STORE_FIXES if any(w in reason for w in words)),
            "see the proxy's log",
        )
        checks.append(Check("running store", False, store, fix))
    watcher = running.get("watcher")
    if watcher == "missing":
        checks.append(Check(
            "running watch", False,
            "SillyTavern's data folder it reads is missing (not there yet, or gone)",
            "start SillyTavern once if it never ran (it makes data/), or put the folder back "
            "(it is read by itself once there), or restart serve with --st-data where ST's "
            "data is",
        ))  # fmt: skip
    elif watcher == "stopped":
        checks.append(Check("running watch", False, "the watch on SillyTavern's data folder "
                            "stopped: saves are not followed", "see the proxy's log, then "
                            "restart serve"))  # fmt: skip
    return checks


def history_checks(running: dict[str, Any] | None) -> list[Check]:
    if running is None:
        return [Check("recent history", None, "no running recap-proxy to ask")]
    checks = running_checks(running)
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
    newest = (running.get("failed_jobs") or [None])[0]
    if failed and newest is not None:
        chat = str(newest.get("chat", "")).rsplit("/", 1)[-1]
        error = " ".join(str(newest.get("error") or "no error kept").split())
        if len(error) > FAILURE_SHOWN:
            error = error[: FAILURE_SHOWN - 1] + "…"
        detail += (
            f"; the newest, job {newest.get('id')} {newest.get('operation')} ({chat}): {error}"
        )
        fix = (f"`recap-proxy queue` lists them; once the cause is mended, "
               f"`recap-proxy queue retry {newest.get('id')}` runs it again (failed jobs are "
               "made again by themselves after [queue] failed_retry_minutes)")  # fmt: skip
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
