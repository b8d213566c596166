"""Shared fixtures: a fake LLM upstream and a proxy wired to it, all in-process on loopback."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trustme
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from proxy.chat.providers import MemoryProvider, StaticMemory
from proxy.core.models import Memory
from proxy.library.chats import ChatLibrary
from proxy.runtime.runtime import build_runtime
from proxy.settings import Settings
from proxy.settings.loading import _set_dotted
from proxy.store import Store
from proxy.web import make_app
from tests.fakes.fake_llm import FakeState, make_fake_llm

# What a `raw_server` connection runs: it reads the request and writes the answer's bytes.
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--hunt-seeds",
        type=seed_list,
        default=None,
        metavar="A-B[,N...]",
        help="play the random story (tests/memory/test_random_story.py) on these seeds (a "
        "range A-B, single seeds, or both, comma-separated), each with a scenario drawn "
        "from it, instead of the pinned seeds",
    )


def seed_list(text: str) -> list[int]:
    """The seeds `--hunt-seeds` names: ranges `A-B` and single seeds, comma-separated, in
    the order given, each once."""
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.strip().partition("-")
        try:
            found = range(int(first), int(last or first) + 1)
        except ValueError:
            raise pytest.UsageError(
                f"--hunt-seeds takes A-B, N or a comma-separated list of them, not {text!r}"
            ) from None
        if not found:
            raise pytest.UsageError(f"--hunt-seeds {part.strip()}: no seed in that range")
        seeds += [seed for seed in found if seed not in seeds]
    return seeds


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Each hunted seed that failed, with the command that plays it again, and one that
    plays them all again."""
    hunted = [
        report.nodeid
        for report in terminalreporter.stats.get("failed", [])
        if "[hunt-" in report.nodeid
    ]
    if not hunted:
        return
    terminalreporter.section("hunted seeds that failed")
    seeds = [nodeid.rsplit("[hunt-", 1)[1].rstrip("]") for nodeid in hunted]
    path = hunted[0].split("::", 1)[0]
    for seed in seeds:
        terminalreporter.write_line(
            f"seed {seed}: python -m pytest {path} --hunt-seeds {seed} -n 0"
        )
    if len(seeds) > 1:
        terminalreporter.write_line(
            f"all of them: python -m pytest {path} --hunt-seeds {','.join(seeds)}"
        )


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port that nothing answers on for the whole test: bound and never
    listening, so a connection is refused and no other test's server can take it (a port
    found free and let go can be, by the tests running beside it)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


def make_settings(**dotted: Any) -> Settings:
    """Settings from dotted keys (`make_settings(**{"injection.depth": 4})`), no files, no env."""
    data: dict[str, Any] = {}
    for key, value in dotted.items():
        _set_dotted(data, key, value)
    return Settings.model_validate(data)


@pytest.fixture(autouse=True)
def _no_user_config(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tests never read the developer's own config, data or RECAP_PROXY_* variables, nor
    the machine's proxy variables (a CI behind a proxy): a test sets those it needs."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    monkeypatch.delenv("SILLYTAVERN_DATAROOT", raising=False)
    for name in list(os.environ):
        proxy = name.lower() in ("http_proxy", "https_proxy", "all_proxy", "no_proxy")
        if name.startswith("RECAP_PROXY_") or proxy:
            monkeypatch.delenv(name)


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """A CLI command run by a test sets up the process's logging (as it should when run
    for real); the next test starts with the logging pytest set up."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@dataclass
class FakeLLM:
    state: FakeState
    server: TestServer

    @property
    def base_url(self) -> str:
        return str(self.server.make_url("/v1"))


@pytest.fixture
async def fake_llm(aiohttp_server: Callable[..., Awaitable[TestServer]]) -> FakeLLM:
    state = FakeState()
    server = await aiohttp_server(make_fake_llm(state))
    return FakeLLM(state, server)


ProxyFactory = Callable[..., Awaitable[TestClient[Any, Any]]]


@pytest.fixture
def proxy(aiohttp_client: Any, fake_llm: FakeLLM) -> ProxyFactory:
    """`await proxy(memory=..., **{"injection.position": "in_chat"})` -> a client of the proxy."""

    async def make(
        memory: Memory | None = None,
        provider: MemoryProvider | None = None,
        **dotted: Any,
    ) -> TestClient[Any, Any]:
        dotted.setdefault("upstream.base_url", fake_llm.base_url)
        settings = make_settings(**dotted)
        if provider is None and memory is not None:
            provider = StaticMemory(memory)
        client: TestClient[Any, Any] = await aiohttp_client(
            make_app(build_runtime(settings, provider=provider)), auto_decompress=False
        )
        return client

    return make


from tests.memory_env import memory_proxy  # noqa: E402, F401 - a shared fixture


@pytest.fixture
async def library(tmp_path: Path) -> ChatLibrary:
    """A library of an empty data folder (`default-user/` only), indexed."""
    data = tmp_path / "data"
    (data / "default-user").mkdir(parents=True)
    lib = ChatLibrary(data, Store(tmp_path / "store.sqlite3"))
    await lib.index_all()
    return lib


@pytest.fixture
def https_server(
    aiohttp_server: Callable[..., Awaitable[TestServer]], tmp_path: Path
) -> Callable[[web.Application], Awaitable[tuple[TestServer, Path]]]:
    """`await https_server(app)`: the app served over TLS with a certificate of a CA made
    for the test (no system authority signed it), and that CA's PEM file."""

    async def start(app: web.Application) -> tuple[TestServer, Path]:
        authority = trustme.CA()
        served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        authority.issue_cert("127.0.0.1").configure_cert(served)
        server = await aiohttp_server(app, ssl=served)
        ca = tmp_path / "ca.pem"
        authority.cert_pem.write_to_path(str(ca))
        return server, ca

    return start


HttpsServer = Callable[[web.Application], Awaitable[tuple[TestServer, Path]]]


@pytest.fixture
async def raw_server() -> AsyncIterator[Callable[[Handler], Awaitable[URL]]]:
    """A socket server that answers with whatever bytes a test writes."""
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> URL:
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        servers.append(server)
        port = server.sockets[0].getsockname()[1]
        return URL(f"http://127.0.0.1:{port}")

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()
