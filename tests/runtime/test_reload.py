"""Live reload: the config and the templates read again while the proxy serves."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from proxy.cli.main import _reload_now
from proxy.errors import ConfigError
from proxy.settings import Settings
from proxy.web.keys import RUNTIME
from tests.conftest import ProxyFactory
from tests.memory.story import CHAT_ID
from tests.memory_env import MemoryFactory
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port


async def test_a_changed_template_is_used_from_the_next_request_on_while_a_stream_completes(
    memory_proxy: MemoryFactory, tmp_path: Path
) -> None:
    template = tmp_path / "injection.md"
    template.write_text("[OLD MEMORY: {{running_recap}}]", encoding="utf-8")
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    memory = await memory_proxy(
        16, {8}, **{"injection.template_file": str(template), "memory.templates_dir": str(prompts)}
    )
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    # A stream is under way, held after its first event.
    memory.fake.state.gate = asyncio.Event()
    streaming = asyncio.ensure_future(
        memory.client.post("/v1/chat/completions", json=memory.story.request(stream=True))
    )
    response = await streaming
    first = await response.content.readany()
    assert first.startswith(b"data: ")
    template.write_text("[NEW MEMORY: {{running_recap}}]", encoding="utf-8")
    (prompts / "scene_recap.md").write_text(
        "RELOADED PROMPT. Recap this scene.\n<SCENE>\n{{scene_messages}}\n</SCENE>\n"
        'Answer {"scene_name": "...", "recap": "..."}.',
        encoding="utf-8",
    )
    answer = await memory.client.post("/recap/api/reload", json={})
    assert answer.status == 200 and await answer.json() == {"changed": [], "restart": []}
    memory.fake.state.gate.set()
    rest = await response.read()
    assert rest.rstrip().endswith(b"data: [DONE]")  # the stream in flight completed
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    assert memory.forwarded()[-1]["messages"][0]["content"].startswith("[NEW MEMORY: ")
    # The memory's own prompts too: the next scene's recap asks with the new one.
    memory.story.ends.add(18)
    memory.story.grow(10)
    memory.story.save()
    await memory.until(lambda db: len(db.messages(CHAT_ID)) == 26)
    await memory.client.post("/v1/chat/completions", json=memory.story.request())
    await memory.engine.settle()
    recaps = [
        json.loads(s.body)["messages"][-1]["content"]
        for s in memory.fake.state.seen
        if s.headers.get("X-Recap-Proxy-Operation") == "scene_recap"
    ]
    assert recaps and recaps[-1].startswith("RELOADED PROMPT.")


async def test_what_changed_live_what_waits_for_a_restart_and_a_bad_config(
    memory_proxy: MemoryFactory, caplog: pytest.LogCaptureFixture
) -> None:
    memory = await memory_proxy(4, set())
    reloader = memory.app[RUNTIME].reloader
    started = reloader.current
    changed = started.model_copy(
        update={
            "injection": started.injection.model_copy(update={"depth": 7}),
            "server": started.server.model_copy(update={"port": 9999}),
        }
    )
    reloader.load = lambda: changed
    answer = await memory.client.post("/recap/api/reload", json={})
    assert await answer.json() == {"changed": ["injection.depth"], "restart": ["server.port"]}
    assert memory.app[RUNTIME].reloader.injector.policy.placement.depth == 7
    assert "take effect after a restart: server.port" in caplog.text

    def broken() -> Settings:
        raise ConfigError("invalid settings:\n  injection.position: expected one of ...")

    reloader.load = broken
    answer = await memory.client.post("/recap/api/reload", json={})
    assert answer.status == 400
    assert "nothing was reloaded" in (await answer.json())["error"]["message"]
    assert memory.app[RUNTIME].reloader.injector.policy.placement.depth == 7  # as it was
    # A change must come as JSON, as every write.
    assert (await memory.client.post("/recap/api/reload", data="x")).status == 415


async def test_a_model_set_by_a_reload_runs_the_jobs_that_waited_for_one_at_once(
    memory_proxy: MemoryFactory,
) -> None:
    # A backfilled chat with no request yet, and no [memory.llm] model: its job waits, and
    # is looked at again only after `backoff_cap_seconds` (here the default, 300 s).
    memory = await memory_proxy(40, {12})
    chat = f"/recap/api/chats/{quote(CHAT_ID, safe='')}"
    assert (await memory.client.post(chat + "/backfill", json={})).status == 200
    await memory.until(
        lambda db: any(j.waiting_for == "model" for j in db.jobs.list(CHAT_ID)), settle=False
    )
    reloader = memory.app[RUNTIME].reloader
    started = reloader.current
    with_model = started.model_copy(
        update={
            "memory": started.memory.model_copy(
                update={"llm": started.memory.llm.model_copy(update={"model": "fake-model"})}
            )
        }
    )
    reloader.load = lambda: with_model
    answer = await memory.client.post("/recap/api/reload", json={})
    assert (await answer.json())["changed"] == ["memory.llm.model"]
    # Within seconds, not minutes: the scene is found, recapped and folded in.
    await memory.until(lambda db: db.memory.running_recaps(CHAT_ID), timeout=10)


def test_sighup_reads_the_config_file_again(tmp_path: Path) -> None:
    port = free_port()
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nport = {port}\n[sillytavern]\ndata_dir = "{tmp_path / "none"}"\n',
        encoding="utf-8",
    )
    log = tmp_path / "serve.log"

    def logged(text: str) -> None:
        """Wait until the log says it (a loaded machine may take a while)."""
        deadline = time.monotonic() + 15
        while text not in log.read_text(encoding="utf-8"):
            assert time.monotonic() < deadline, f"never logged: {text}"
            time.sleep(0.05)

    with log.open("wb") as sink:
        proc = launch(tmp_path, "proxy", "serve", "--config", str(config), stderr=sink)
        try:
            wait_for_port(port, proc)
            config.write_text(
                f'[server]\nport = {port}\nlog_level = "debug"\n[injection]\ndepth = 5\n'
                f'[sillytavern]\ndata_dir = "{tmp_path / "elsewhere"}"\n',
                encoding="utf-8",
            )
            proc.send_signal(signal.SIGHUP)
            logged("changed: injection.depth, server.log_level")
            logged("take effect after a restart: sillytavern.data_dir")
            config.write_text("[injection]\nposition = 'top'\n", encoding="utf-8")
            proc.send_signal(signal.SIGHUP)
            logged("reload failed, nothing changed")
            assert proc.poll() is None  # still serving
        finally:
            stop(proc)
    assert "injection.position" in log.read_text(encoding="utf-8")


async def test_sighup_while_a_stream_runs_the_next_request_gets_the_new_template(
    tmp_path: Path,
) -> None:
    """`serve` and the fake model in their own processes, as a service runs them."""
    import aiohttp

    from tests.memory.story import Story

    data = tmp_path / "st" / "data"
    story = Story(data, {8})
    story.grow(16)
    story.save()
    llm_port, port = free_port(), free_port()
    template = tmp_path / "injection.md"
    template.write_text("[OLD MEMORY: {{running_recap}}]", encoding="utf-8")
    config = tmp_path / "config.toml"
    config.write_text(
        f'[server]\nport = {port}\n[upstream]\nbase_url = "http://127.0.0.1:{llm_port}/v1"\n'
        f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n[sillytavern]\ndata_dir = "{data}"\n'
        f'[injection]\ntemplate_file = "{template}"\n'
        "[memory]\nminimum_scene_length = 4\nscene_break_offset = 2\nscene_break_every = 1\n",
        encoding="utf-8",
    )
    llm = launch(tmp_path, "tests.fakes.fake_llm", "--port", str(llm_port), "--chunk-delay", "0.1")
    proc = launch(tmp_path, "proxy", "serve", "--config", str(config))
    base = f"http://127.0.0.1:{port}"
    chat = CHAT_ID.replace(" ", "%20")
    try:
        wait_for_port(llm_port, llm)
        wait_for_port(port, proc)
        async with aiohttp.ClientSession() as http:

            async def injected() -> str:
                async with http.get(f"{base}/recap/api/chats/{chat}/preview") as r:
                    shown = await r.json()
                return str((shown.get("injected") or {}).get("text", ""))

            deadline = time.monotonic() + 20
            while not (await injected()).startswith("[OLD MEMORY: "):
                assert time.monotonic() < deadline, "the memory was never built"
                async with http.post(f"{base}/v1/chat/completions", json=story.request()) as r:
                    await r.read()
                await asyncio.sleep(0.2)
            async with http.post(
                f"{base}/v1/chat/completions", json=story.request(stream=True)
            ) as streaming:
                first = await streaming.content.readany()
                template.write_text("[NEW MEMORY: {{running_recap}}]", encoding="utf-8")
                proc.send_signal(signal.SIGHUP)
                rest = await streaming.read()
            assert first.startswith(b"data: ") and rest.rstrip().endswith(b"data: [DONE]")
            deadline = time.monotonic() + 10
            while not (await injected()).startswith("[NEW MEMORY: "):
                assert time.monotonic() < deadline, "the new template was not taken"
                await asyncio.sleep(0.1)
    finally:
        output = stop(proc)
        stop(llm)
    assert "reloaded the config and the templates" in output


async def test_a_reload_never_drops_the_key_of_a_proxy_others_can_reach(
    proxy: ProxyFactory, caplog: pytest.LogCaptureFixture
) -> None:
    """A config without the key, reloaded into a proxy bound to all interfaces, changes
    nothing: keyless requests stay refused (it let them in, with the user's API key)."""
    client = await proxy(**{"server.host": "0.0.0.0", "server.access_key": "door-key-12345"})
    reloader = client.app[RUNTIME].reloader
    keyless = reloader.current.model_copy(
        update={"server": reloader.current.server.model_copy(update={"access_key": None})}
    )
    reloader.load = lambda: keyless
    answer = await client.post(
        "/recap/api/reload", json={}, headers={"X-Recap-Key": "door-key-12345"}
    )
    assert answer.status == 400
    message = (await answer.json())["error"]["message"]
    assert "nothing was reloaded" in message and "server.access_key is not set" in message
    assert (await client.get("/v1/models")).status == 401
    assert (await client.get("/v1/models", headers={"X-Recap-Key": "door-key-12345"})).status == 200
    # SIGHUP's way: logged, nothing changed.
    _reload_now(reloader)
    assert "reload failed, nothing changed" in caplog.text
    # Moving the proxy to loopback in the same reload does not help: the socket keeps its
    # address until a restart.
    reloader.load = lambda: keyless.model_copy(
        update={"server": keyless.server.model_copy(update={"host": "127.0.0.1"})}
    )
    answer = await client.post(
        "/recap/api/reload", json={}, headers={"X-Recap-Key": "door-key-12345"}
    )
    assert answer.status == 400 and (await client.get("/v1/models")).status == 401
