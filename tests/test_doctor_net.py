"""doctor's checks over the network: what a running proxy saw, and the proxy found where
its store's lock says it listens when the settings name another port (as the memory
commands find it)."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from proxy.cli import main
from proxy.doctor_net import history_checks
from tests.conftest import FakeLLM
from tests.test_doctor import _doctor, setup
from tests.test_serve_e2e import free_port, launch, stop, wait_for_port


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
