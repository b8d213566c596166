"""The real thing: `recap-proxy serve` in its own process, a fake LLM in another.

This is what a user runs; it checks start-up, the `/v1` mapping, streaming, the Stop
button, a bad config, and a clean shutdown, over real sockets on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.fakes.fake_llm import REPLY, sse_chunks

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            raise RuntimeError(f"process exited early: {output}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on {port}")


def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("RECAP_PROXY_")}
    out["XDG_CONFIG_HOME"] = str(tmp_path)
    out["PYTHONPATH"] = str(ROOT)
    return out


def serve_config(tmp_path: Path, port: int, name: str = "config.toml", server: str = "") -> Path:
    """A config for `serve` on `port`: its store in `tmp_path`, an upstream nothing
    answers at, and `server`'s lines added under `[server]`."""
    path = tmp_path / name
    path.write_text(
        f'[store]\npath = "{tmp_path / "s.sqlite3"}"\n'
        f'[upstream]\nbase_url = "http://127.0.0.1:{free_port()}/v1"\n'
        f"[server]\nport = {port}\n{server}",
        encoding="utf-8",
    )
    return path


def launch(
    tmp_path: Path, module: str, *args: str, stderr: Any = subprocess.PIPE
) -> subprocess.Popen[bytes]:
    """`python -m MODULE ARGS` from the checkout, with a clean environment (a server:
    wait for its port, then `stop` it)."""
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env=env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[int, int, subprocess.Popen[bytes]]]:
    llm_port, proxy_port = free_port(), free_port()
    llm = launch(tmp_path, "tests.fakes.fake_llm", "--port", str(llm_port))
    upstream = f"http://127.0.0.1:{llm_port}/v1/"
    proxy = launch(tmp_path, "proxy", "serve", "--port", str(proxy_port), "--upstream", upstream)
    try:
        wait_for_port(llm_port, llm)
        wait_for_port(proxy_port, proxy)
        yield llm_port, proxy_port, proxy
    finally:
        for proc in (proxy, llm):
            stop(proc)


def stop(proc: subprocess.Popen[bytes], timeout: float = 10) -> str:
    """Stop a server as a service manager would (SIGTERM, then kill); its stderr."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stderr is None:
        return ""
    if proc.stderr.closed:
        return ""
    text = proc.stderr.read().decode(errors="replace")
    proc.stderr.close()
    return text


async def test_serve_proxies_like_the_upstream(
    servers: tuple[int, int, subprocess.Popen[bytes]],
) -> None:
    _llm_port, proxy_port, proxy = servers
    body = {"messages": [{"role": "user", "content": "hi"}], "model": "fake-model", "stream": True}
    async with aiohttp.ClientSession() as session:
        # ST's URL with a trailing slash produces `/v1//chat/completions`.
        url = f"http://127.0.0.1:{proxy_port}/v1//chat/completions"
        async with session.post(url, json=body) as response:
            assert response.status == 200
            assert await response.read() == b"".join(sse_chunks(REPLY, model="fake-model"))
            assert response.headers["X-Recap-Injected"] == "0"
        async with session.get(f"http://127.0.0.1:{proxy_port}/v1/models") as response:
            assert (await response.json())["data"][0]["id"] == "fake-model"
        # Stop button: the client goes away mid-request; the proxy keeps serving.
        slow = session.post(url, data=json.dumps(body), headers={"X-Fake": "slow"})
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(slow, timeout=0.5)
        async with session.post(url, json={**body, "stream": False}) as response:
            assert (await response.json())["choices"][0]["message"]["content"] == REPLY

    proxy.send_signal(signal.SIGTERM)
    assert proxy.wait(10) == 0
    log = proxy.stderr.read().decode() if proxy.stderr else ""
    assert f"listening on http://127.0.0.1:{proxy_port}/v1" in log
    assert "Traceback" not in log


def run_serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`recap-proxy serve ARGS` that is expected to stop at once."""
    return subprocess.run(
        [sys.executable, "-m", "proxy", "serve", *args],
        cwd=ROOT,
        env=env(tmp_path),
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_bad_config_stops_startup_naming_the_key(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[upstream]\nbase_url = "localhost:5001"\n[server]\nprot = 1\n')
    result = run_serve(tmp_path, "--config", str(config))
    assert result.returncode == 2
    assert "upstream.base_url" in result.stderr and "http://" in result.stderr
    assert "server.prot: unknown key" in result.stderr


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run_serve(tmp_path, "--port", str(port))
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
