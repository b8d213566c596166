"""One running proxy per store; a crashed one leaves nothing that blocks the next."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiohttp import web

from proxy.errors import StoreBusy
from proxy.store.lock import StoreLock
from proxy.web import make_app
from tests.conftest import FakeLLM, make_settings


def test_a_second_holder_is_told_who_holds_the_store(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    busy = rf"pid {os.getpid()}, serving http://127.0.0.1:8765"
    with (
        StoreLock(store, "http://127.0.0.1:8765"),
        pytest.raises(StoreBusy, match=busy),
        StoreLock(store, "http://127.0.0.1:9999"),
    ):
        pass
    with StoreLock(store, "http://127.0.0.1:9999"):  # released with its holder
        pass


def test_a_stale_lock_file_does_not_block(tmp_path: Path) -> None:
    store = tmp_path / "s.sqlite3"
    Path(f"{store}.lock").write_text('{"pid": 999999, "serving": "http://gone", "since": 0}')
    with StoreLock(store, "http://127.0.0.1:8765") as lock:
        assert '"serving": "http://127.0.0.1:8765"' in lock.path.read_text()


async def test_a_second_proxy_on_the_same_store_does_not_start(
    tmp_path: Path, fake_llm: FakeLLM
) -> None:
    (tmp_path / "data" / "default-user" / "chats").mkdir(parents=True)
    settings = make_settings(
        **{
            "upstream.base_url": fake_llm.base_url,
            "sillytavern.data_dir": str(tmp_path / "data"),
            "store.path": str(tmp_path / "store.sqlite3"),
        }
    )
    first = web.AppRunner(make_app(settings))
    await first.setup()
    second = web.AppRunner(make_app(settings))
    try:
        with pytest.raises(StoreBusy, match="another recap-proxy"):
            await second.setup()
    finally:
        await second.cleanup()
        await first.cleanup()
    again = web.AppRunner(make_app(settings))  # the first has stopped: free again
    await again.setup()
    await again.cleanup()
