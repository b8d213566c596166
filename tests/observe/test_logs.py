"""Logs for a service: JSON lines, levels, and the access log (off by default; never a
body, a header or a key)."""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Any

import pytest

from proxy.observe.logs import JSONFormatter, as_text
from proxy.runtime.runtime import build_runtime
from proxy.web import make_app
from tests.conftest import FakeLLM, make_settings
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port

SECRET = "sk-very-secret-key"


def test_a_json_line_per_record_with_its_exception() -> None:
    try:
        raise ValueError("bad value")
    except ValueError:
        record = logging.getLogger("proxy.x").makeRecord(
            "proxy.x", logging.ERROR, __file__, 1, "failed for %s", ("chat",), sys.exc_info()
        )
    line = json.loads(JSONFormatter().format(record))
    assert line["level"] == "error" and line["logger"] == "proxy.x"
    assert line["message"] == "failed for chat" and "ValueError: bad value" in line["exception"]
    assert line["time"].endswith("+00:00")


@pytest.mark.parametrize("on", [False, True])
async def test_the_access_log_is_one_line_per_request_when_on(
    aiohttp_client: Any, fake_llm: FakeLLM, caplog: pytest.LogCaptureFixture, on: bool
) -> None:
    settings = make_settings(**{"upstream.base_url": fake_llm.base_url, "server.access_log": on})
    client = await aiohttp_client(make_app(build_runtime(settings)))
    body = {"model": "m", "messages": [{"role": "user", "content": "my private words"}]}
    with caplog.at_level(logging.INFO, logger="proxy.access"):
        response = await client.post(
            "/v1/chat/completions?key=" + SECRET,
            json=body,
            headers={"Authorization": f"Bearer {SECRET}"},
        )
        assert response.status == 200
        # Refused by the proxy itself (a name it does not answer to): logged too.
        await client.get("/v1/models", headers={"Host": "evil.example"})
    lines = [r.getMessage() for r in caplog.records if r.name == "proxy.access"]
    if not on:
        assert lines == []
        return
    assert len(lines) == 2
    assert lines[0].startswith("POST /v1/chat/completions 200 ")
    assert " ms chat=- injected=0" in lines[0]  # not identified: no data folder
    assert lines[1].startswith("GET /v1/models 421 ")
    everything = "\n".join(lines)
    assert SECRET not in everything and "private words" not in everything


def test_serve_writes_json_lines(tmp_path: Path) -> None:
    port = free_port()
    proc = launch(tmp_path, "proxy", "serve", "--port", str(port), "--log-format", "json",
                  "--log-level", "debug", "--st-data", str(tmp_path / "none"))  # fmt: skip
    try:
        wait_for_port(port, proc)
    finally:
        output = stop(proc)
    lines = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert any("listening on" in line["message"] for line in lines)
    assert any(line["level"] == "debug" for line in lines)
    assert {"time", "level", "logger", "message"} <= set(lines[0])


def test_a_chat_id_is_logged_as_text() -> None:
    """The header carries it percent-encoded; the log shows it as the user knows it."""
    header = "default-user%2Fchats%2FSeraphina%2FSeraphina%20-%202023-5-12%20%4021h44m"
    assert as_text(header) == '"default-user/chats/Seraphina/Seraphina - 2023-5-12 @21h44m"'
    assert as_text("default-user%2Fchats%2FAva%2Fone") == "default-user/chats/Ava/one"
    assert as_text("") == "-"
