"""doctor's checks over the network: what a running proxy saw, and the proxy found where
its store's lock says it listens when the settings name another port (as the memory
commands find it)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from proxy.cli.main import main
from proxy.doctor.net import embeddings_check, history_checks, running_proxy, upstream_check
from proxy.upstream.upstreams import Upstream
from tests.conftest import FakeLLM, HttpsServer, make_settings
from tests.doctor.test_checks import _doctor, setup
from tests.fakes.fake_embed import DIMENSIONS
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port


async def test_a_running_proxy_with_failed_jobs_is_asked_what_failed(
    aiohttp_server: Any,
) -> None:
    asked: list[str] = []

    async def answer(request: web.Request) -> web.Response:
        asked.append(request.path_qs)
        if request.headers.get("X-Recap-Key") != "k":
            return web.json_response({"error": {"message": "key"}}, status=401)
        if request.path == "/health":
            return web.json_response({"uptime_s": 1, "queue": {"failed": 2}})
        if request.path == "/":
            return web.json_response({"upstream": "http://127.0.0.1:5001/v1"})
        jobs = [
            {"id": 3, "state": "failed", "updated": 10.0, "error": "older"},
            {"id": 7, "state": "queued", "updated": 30.0},
            {"id": 5, "state": "failed", "updated": 20.0, "error": "newer"},
        ]
        return web.json_response({"paused": False, "jobs": jobs})

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    server = await aiohttp_server(app)
    origin = str(server.make_url("")).rstrip("/")
    async with aiohttp.ClientSession() as http:
        found = await running_proxy(http, origin, "k")
    assert found is not None
    assert asked == ["/health", "/", "/recap/api/queue?done=0"]
    assert [j["id"] for j in found["failed_jobs"]] == [5, 3]  # failed only, newest first
    assert "the newest, job 5" in {c.name: c for c in history_checks(found)}["memory jobs"].detail


def test_a_running_proxys_history_becomes_checks() -> None:
    health = {
        "requests": {"identified": 2, "unidentified": 7},
        "queue": {"queued": 0, "running": 0, "failed": 1},
        "upstream": {"last_error": "HTTP 502", "failures_in_a_row": 3},
    }
    checks = {c.name: c for c in history_checks(health)}
    assert checks["requests in the last hour"].ok is False
    assert "2 identified as a chat, 7 not" in checks["requests in the last hour"].detail
    assert checks["memory jobs"].ok is False and "recap-proxy queue" in checks["memory jobs"].fix
    # With what failed (the running proxy's queue, newest first): the newest, said.
    error = "JobFailure: scene_recap: not a chat completion: " + "x" * 400
    health["failed_jobs"] = [
        {"id": 9, "chat": "u/chats/Ava/Ava - 1", "operation": "scene_recap", "error": error},
        {"id": 4, "chat": "u/chats/Bea/Bea - 1", "operation": "running_recap", "error": "old"},
    ]
    jobs = {c.name: c for c in history_checks(health)}["memory jobs"]
    assert jobs.detail.startswith(
        "1 failed; the newest, job 9 scene_recap (Ava - 1): JobFailure: scene_recap: not a "
    )
    assert len(jobs.detail) < 300 and jobs.detail.endswith("x…") and "old" not in jobs.detail
    assert "`recap-proxy queue retry 9` runs it again" in jobs.fix
    del health["failed_jobs"]
    assert checks["upstream errors"].ok is False and "HTTP 502" in checks["upstream errors"].detail
    assert [c.ok for c in history_checks(None)] == [None]
    assert "jobs waiting" not in checks
    # Jobs whose chats had no request since a restart wait for a model: said, with what
    # to do, without counting as a failure (keys are kept in memory only, by design).
    health["queue"] = {"queued": 3, "running": 0, "failed": 0, "waiting_for_model": 2}
    waiting = {c.name: c for c in history_checks(health)}["jobs waiting"]
    assert waiting.ok is None
    assert waiting.detail.startswith("2 wait for a model, their chats having had no request")
    assert "set [memory.llm] model" in waiting.line()


def test_a_running_proxys_failing_store_and_lost_folder_are_said_with_what_to_do() -> None:
    health: dict[str, Any] = {"store": "ok", "watcher": "running", "requests": {}}
    assert not {"running store", "running watch"} & {c.name for c in history_checks(health)}
    health["store"] = "cannot write /s/store.sqlite3: database or disk is full"
    health["watcher"] = "missing"
    checks = {c.name: c for c in history_checks(health)}
    store = checks["running store"]
    assert store.ok is False and store.detail == health["store"]
    assert store.fix.startswith("free space on the disk that holds it")
    watch = checks["running watch"]
    assert watch.ok is False and "put the folder back" in watch.fix
    # Said by SQLite's words, not the path's ("full" here).
    health["store"] = "cannot write /home/fuller/s.sqlite3: attempt to write a readonly database"
    assert "writable" in {c.name: c for c in history_checks(health)}["running store"].fix


def without_port(config: Path) -> None:
    """The config as `setup` wrote it, its `[server] port` taken out."""
    lines = config.read_text(encoding="utf-8").splitlines()
    kept = [line for line in lines if not line.startswith(("[server]", "port ="))]
    config.write_text("\n".join(kept) + "\n", encoding="utf-8")


async def test_a_proxy_serving_on_another_port_is_found_through_its_store(
    tmp_path: Path, fake_llm: FakeLLM, capsys: pytest.CaptureFixture[str]
) -> None:
    data, config, port = setup(tmp_path, fake_llm.base_url)
    elsewhere = free_port()
    proc = launch(
        tmp_path, "proxy", "serve", "--config", str(config), "--st-data", str(data),
        "--port", str(elsewhere),
    )  # fmt: skip
    try:
        await asyncio.to_thread(wait_for_port, elsewhere, proc)
        # The config names `port`: the proxy runs elsewhere, and doctor says where.
        code, set_here = await _doctor(config, data, capsys)
        # The memory commands find it the same way.
        listed = await asyncio.to_thread(main, ["queue", "--config", str(config)])
        queue_out = capsys.readouterr().out
        without_port(config)
        with socket.socket() as sock:
            default_taken = sock.connect_ex(("127.0.0.1", 8765)) == 0
        if not default_taken:
            _, not_set = await _doctor(config, data, capsys)
    finally:
        stop(proc)
    check = set_here["port"]
    assert code == 1 and check["ok"] is False
    assert f"is running on 127.0.0.1:{elsewhere} (up " in check["detail"]
    assert f"not on 127.0.0.1:{port} as the settings say" in check["detail"]
    assert f"`doctor --port {elsewhere}` checks the one running" in check["fix"]
    assert set_here["memory jobs"]["ok"] is True  # asked of the proxy found
    assert listed == 0 and queue_out.startswith("paused: False")
    if default_taken:
        pytest.skip("something listens on 8765, the default port this part relies on")
    # Nothing names a port: the proxy running is the one checked, and said so.
    check = not_set["port"]
    assert check["ok"] is True and f"running on 127.0.0.1:{elsewhere} (up " in check["detail"]
    assert check["detail"].endswith(
        "from its command line (a serve without --port would listen on 127.0.0.1:8765; "
        "[server] port in the config keeps it)"
    )


async def test_upstreams_are_probed_as_serve_reaches_them(
    https_server: HttpsServer,
) -> None:
    """An HTTPS API with a private CA's certificate: doctor trusts what `upstream.ca_file`
    trusts (it asked with a client of its own, which said the API does not answer)."""

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    server, ca = await https_server(app)
    base = str(server.make_url("/v1").with_scheme("https"))
    for ca_file, ok in ((None, False), (ca, True)):
        settings = make_settings(**{"upstream.base_url": base, "upstream.ca_file": ca_file})
        async with Upstream(settings.upstream) as upstream:
            check = await upstream_check(upstream, settings, None)
        assert check.ok is ok, check
        if not ok:
            assert "CERTIFICATE_VERIFY_FAILED" in check.detail


async def test_embeddings_are_checked_by_embedding_one_text(
    fake_llm: FakeLLM, refused_port: int
) -> None:
    off = await embeddings_check(make_settings())
    assert off.ok is None and off.detail.startswith("off: older scenes are recalled by their words")
    works = await embeddings_check(make_settings(**{
        "memory.embeddings.base_url": fake_llm.base_url, "memory.embeddings.model": "e5",
    }))  # fmt: skip
    assert works.ok and works.detail == f"e5 at {fake_llm.base_url}: {DIMENSIONS} dimensions"
    down = await embeddings_check(make_settings(**{
        "memory.embeddings.base_url": f"http://127.0.0.1:{refused_port}",
        "memory.embeddings.api_key": "sk-never-shown",
    }))  # fmt: skip
    assert down.ok is False and "ollama" not in down.detail and "cannot reach" in down.detail
    assert "sk-never-shown" not in down.detail + down.fix
    assert "base_url, model and api_key" in down.fix
